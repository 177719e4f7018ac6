"""culex.operations."""
