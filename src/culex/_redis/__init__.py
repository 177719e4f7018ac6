"""Everything that speaks to Redis: key names, Lua scripts, the calls that run them (as
data) and the drivers that send them.

Nothing outside this package builds a key or sends a command (docs/architecture.md).
"""
