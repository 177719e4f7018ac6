"""The server culex talks to, above the Redis layer (culex._redis): which server the settings
name and its drivers per process and loop (configured.py), the embedded default that starts
one when no URL is given (embedded.py, binary.py), the procedures that every read and state
change is written as, driven sync or async (procedures.py), and what culex does with runners
of an older culex (compatibility.py). See docs/architecture.md.
"""
