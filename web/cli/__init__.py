"""The ``vmpooler`` command line: starts managers and the API's gunicorn; not HTTP itself."""

from vmpooler.web.cli.command import main

__all__ = ["main"]
