"""Manager-wide actors: heartbeat, dashboard history, housekeeping, queue health, commands."""
