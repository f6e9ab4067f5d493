"""Log lines a client cannot forge, and secrets they never carry.

Anything a request carries (its path, a pool name, a hostname, a request id, a user name) may
hold control characters: ``%0A`` in a path decodes to a line feed, which would start a second,
forged log line, and an escape sequence would drive an operator's terminal. Two mechanisms
keep the log honest:

* :class:`SafeFormatter`, installed on every handler by
  :func:`vmpooler.web.cli.log_setup.configure_logging` (and on gunicorn's own handlers by
  :class:`SafeGunicornLogger`), formats each record so that **its first line is the only one
  that starts at column 0**: control characters (C0 including CR, LF and TAB, DEL, C1 and the
  Unicode separators U+2028/U+2029) in the record's arguments are written as escapes
  (``\\n``, ``\\r``, ``\\t``, ``\\x1b``, ``\\u2028``); in the rest of the text (the message
  template, a traceback) every further line is indented by two spaces and any other control
  character is escaped. Tracebacks and multi-line diagnostics therefore stay readable, and no
  line of the log can be mistaken for a record of its own. It also applies :func:`redact_text`.
* explicit redaction where request text is logged: :func:`redact_path` (the token in
  ``/api/v3/token/<token>``) and :func:`redact_text` (secret query parameters,
  ``Authorization`` and ``X-AUTH-TOKEN`` values).

Backslashes are not escaped: a path holding a literal ``\\n`` logs like an escaped line feed,
which is ambiguous to read but cannot split a line.
"""

from __future__ import annotations

import logging
import numbers
import re
from collections.abc import Mapping
from typing import Any

from gunicorn import glogging

__all__ = [
    "MASK",
    "SafeFormatter",
    "SafeGunicornLogger",
    "escape_controls",
    "fold_lines",
    "redact_path",
    "redact_text",
]

MASK = "********"
"""What a redacted secret is replaced with (the same mask as masked configuration)."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_LF = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # TAB and LF kept
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_INDENT = "  "

_TOKEN_PATH = re.compile(r"(/api/v\d+/token/)[^/\s?#'\",;]+", re.IGNORECASE)
_SECRET_PARAM = re.compile(
    r"([?&;][^=&\s#'\"]*(?:token|passw|secret|credential|passphrase|api_?key|auth)"
    r"[^=&\s#'\"]*=)[^&;\s#'\"]*", re.IGNORECASE)
_AUTH_HEADER = re.compile(r"\b((?:authorization|x-auth-token)['\"]?\s*[:=]\s*['\"]?)[^'\"\r\n]*",
                          re.IGNORECASE)


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character written as an escape: the result is one line
    and holds no C0/C1 character, DEL, U+2028 or U+2029."""
    return _CONTROL.sub(_escape_one, text)


def fold_lines(text: str) -> str:
    """``text`` with control characters other than LF and TAB escaped and every line after
    the first indented by two spaces: only the first line starts at column 0."""
    return _CONTROL_BUT_LF.sub(_escape_one, text).replace("\n", "\n" + _INDENT)


def redact_path(path: str) -> str:
    """``path`` with the token of ``/api/v3/token/<token>`` replaced by :data:`MASK`."""
    return _TOKEN_PATH.sub(lambda m: m.group(1) + MASK, path)


def redact_text(text: str) -> str:
    """``text`` with every secret a request may carry masked: the token of a token path, the
    value of a query parameter whose name says token, password, secret, credential,
    passphrase, api key or auth, and what follows ``Authorization:`` or ``X-AUTH-TOKEN:``."""
    lowered = text.lower()  # cheap tests first: most lines hold none of these
    if "/token/" in lowered:
        text = redact_path(text)
    if "=" in text and ("?" in text or "&" in text or ";" in text):
        text = _SECRET_PARAM.sub(lambda m: m.group(1) + MASK, text)
    if "authorization" in lowered or "x-auth-token" in lowered:
        text = _AUTH_HEADER.sub(lambda m: m.group(1) + MASK, text)
    return text


class _Escaped:
    """A log argument that renders escaped, whichever of ``%s``/``%r`` formats it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return escape_controls(str(self.value))

    def __repr__(self) -> str:
        return escape_controls(repr(self.value))


def _escaped(value: Any) -> Any:
    """Numbers stay themselves (for ``%d``, ``%.1f``); anything else renders escaped."""
    return value if isinstance(value, numbers.Number) else _Escaped(value)


def safe_message(record: logging.LogRecord) -> str:
    """The record's message with every argument escaped (see :func:`escape_controls`); the
    template is left as written. Falls back to the whole message escaped if the template
    does not accept the escaped arguments."""
    if not record.args:
        return str(record.msg)
    args = record.args
    try:
        if isinstance(args, Mapping):
            return str(record.msg) % {key: _escaped(value) for key, value in args.items()}
        return str(record.msg) % tuple(_escaped(value) for value in args)
    except (TypeError, ValueError, KeyError):
        return escape_controls(record.getMessage())


class SafeFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose output cannot forge a log line (see the module):
    arguments escaped by :func:`safe_message`, the whole text passed through
    :func:`redact_text` and :func:`fold_lines`. The record's message and arguments are left
    as logged, so other handlers see them unchanged."""

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record`` with its escaped message, then fold and redact. The record's
        ``msg`` and ``args`` are put back before returning (handlers of one record run one
        after the other, in the logging thread)."""
        msg, args = record.msg, record.args
        record.msg, record.args = safe_message(record), None
        try:
            return fold_lines(redact_text(super().format(record)))
        finally:
            record.msg, record.args = msg, args


class SafeGunicornLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger with :class:`SafeFormatter` on its error and access handlers:
    gunicorn logs text from requests it could not parse (``Invalid request from ip=...``)."""

    def setup(self, cfg: Any) -> None:
        """gunicorn's setup, then every handler it installed formats safely (same format)."""
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                current = handler.formatter or logging.Formatter()
                handler.setFormatter(SafeFormatter(current._fmt, current.datefmt))
