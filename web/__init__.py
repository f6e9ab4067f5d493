"""The REST API (Falcon, served by gunicorn); the command line that starts it is in cli/."""
