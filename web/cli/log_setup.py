"""Logging configuration for the command line: vmpooler's line format (or JSON), stdout and
a file.

vmpooler writes ``[YYYY-MM-DD HH:MM:SS] message``; we keep that shape so existing log
parsers work, and add nothing else to the line. Every handler formats with
:class:`~vmpooler.web.logsafe.SafeFormatter`: a record's first line is the only one starting
at column 0 (further lines, such as a traceback's, are indented by two spaces), control
characters from requests are escaped and secrets in request text are masked. With
``fmt="json"`` every handler formats with :class:`~vmpooler.web.cli.log_json.JsonFormatter`
instead: one JSON object per line, masked the same way.
"""

from __future__ import annotations

import logging.config
import sys
from typing import Any

from vmpooler.web.cli.log_json import JsonFormatter
from vmpooler.web.logsafe import SafeFormatter

__all__ = ["LOG_FORMATS", "configure_logging", "refuse_to_start"]

FORMAT = "[%(asctime)s] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
LOG_FORMATS = ("text", "json")
"""``text``: vmpooler's lines (the default); ``json``: one JSON object per line."""


def configure_logging(level: str = "info", logfile: str | None = None, fmt: str = "text") -> None:
    """Send log records at ``level`` and above to stdout and, when given, to ``logfile``
    (appended), both in format ``fmt`` (one of :data:`LOG_FORMATS`; ValueError otherwise).
    With ``json``, Python warnings are logged too (logger ``py.warnings``) instead of
    written to stderr as text. Replaces any earlier configuration."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (one of {', '.join(LOG_FORMATS)})")
    formatter: dict[str, Any] = (
        {"()": JsonFormatter} if fmt == "json"
        else {"()": SafeFormatter, "fmt": FORMAT, "datefmt": DATE_FORMAT})
    handlers: dict[str, Any] = {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": "vmpooler",
        }
    }
    if logfile:
        handlers["file"] = {
            "class": "logging.FileHandler",
            "filename": logfile,
            "mode": "a",
            "encoding": "utf-8",
            "formatter": "vmpooler",
        }
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vmpooler": formatter},
        "handlers": handlers,
        "root": {"level": level.upper(), "handlers": list(handlers)},
        "loggers": {"pykka": {"level": "WARNING"}},
    })
    logging.captureWarnings(fmt == "json")


def refuse_to_start(reason: Exception) -> None:
    """Say why the manager will not start: logged (stdout, the logfile) and one line on
    stderr, ``vmpooler: refusing to start: <reason>``, without a traceback."""
    logging.getLogger("vmpooler").error("[!] [manager] refusing to start: %s", reason)
    print(f"vmpooler: refusing to start: {reason}", file=sys.stderr, flush=True)
