"""Middleware: code that runs at every enqueue and around every attempt (docs/middleware.md).
The base class and the headers (hooks.py), ContextMiddleware (context.py) and
EncryptedParams (encryption.py). A band of its own below the settings (which list the
middleware) and the jobs: it imports nothing of culex but the errors.
"""
