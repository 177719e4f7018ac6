"""culex.server."""
