"""JSON log lines (``--log-format json``): one JSON object per record, one record per line.

For log pipelines (a cluster's collector reading a container's output) that want structured
records instead of vmpooler's text lines. Each line is an object with, in this order:

* ``time``: when the record was made, ISO 8601 in UTC with milliseconds
  (``2026-12-05T19:07:51.123Z``);
* ``level``: ``debug``, ``info``, ``warning``, ``error`` or ``critical``;
* ``logger``: the logger's name (``vmpooler.web.requests``, ``gunicorn.error``);
* ``message``: the formatted message, masked by :func:`~vmpooler.web.logsafe.redact_text`
  as the text format's are (a token path, secret query parameters, ``Authorization``);
* ``pid`` and ``thread``: the process id and the thread's name;
* ``exception``: the traceback, masked likewise, only when the record carries one, and
  ``stack`` when it carries ``stack_info``.

A line is ASCII only: JSON escapes every control character and every non-ASCII character of
a value (``\\n``, ``\\u001b``, ``\\u2028``, ``\\u007f``), so a message or a traceback spanning
several lines, or text a client sent, stays inside its string and can neither end the line nor
reach a terminal raw. Consumers get the text back exactly by decoding the JSON.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from vmpooler.web.logsafe import SafeGunicornLogger, redact_text

__all__ = ["JsonFormatter", "JsonGunicornLogger"]


def _utc(created: float, msecs: float) -> str:
    """``2026-12-05T19:07:51.123Z`` for a record's ``created`` and ``msecs`` (truncated,
    as ``logging`` computes ``msecs``, so the two always agree)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(msecs):03d}Z"


def _message(record: logging.LogRecord) -> str:
    """The record's message; a template its arguments do not fit is shown with them rather
    than lost (``logging`` would print an error to stderr instead of the record)."""
    try:
        return record.getMessage()
    except (TypeError, ValueError, KeyError):
        return f"{record.msg!s} (arguments that do not fit: {record.args!r})"


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (see the module). Leaves the record as logged,
    apart from caching its traceback text in ``exc_text`` as every ``logging.Formatter``
    does."""

    def format(self, record: logging.LogRecord) -> str:
        """One JSON object, without a line feed (the handler adds its terminator)."""
        entry: dict[str, Any] = {
            "time": _utc(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact_text(_message(record)),
            "pid": record.process,
            "thread": record.threadName,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = redact_text(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact_text(self.formatStack(record.stack_info))
        text = json.dumps(entry, ensure_ascii=True, separators=(",", ":"), default=str)
        return text.replace("\x7f", "\\u007f")  # the one control character JSON leaves raw


class JsonGunicornLogger(SafeGunicornLogger):
    """gunicorn's logger writing its error (and access) lines as :class:`JsonFormatter`
    lines, so ``vmpooler api``/``run --log-format json`` write nothing but JSON lines."""

    def setup(self, cfg: Any) -> None:
        """gunicorn's setup, then every handler it installed formats as JSON."""
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(JsonFormatter())
