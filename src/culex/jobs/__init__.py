"""culex.jobs."""
