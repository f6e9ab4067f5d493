"""The Falcon API and the command line."""
