"""The plugin's fixtures, for these tests (an installed culex loads them by itself)."""

from culex.testing.plugin import culex_server, culex_session_server

__all__ = ["culex_server", "culex_session_server"]
