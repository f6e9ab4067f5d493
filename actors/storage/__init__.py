"""The Redis layer: key names and Lua scripts, and the stores the actors and the API use."""
