"""Everything that speaks to Redis: key names, Lua scripts, operations and their drivers.

Nothing outside this package builds a key or sends a command.
"""
