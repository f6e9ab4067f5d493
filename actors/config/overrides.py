"""How a pool's size override in Redis (``vmpooler__config__poolsize``) is read: one rule for
the manager that applies it, ``/status``, ``/poolstat`` and ``/config`` that show it.

The value is read as Ruby's ``Integer()`` reads it (what vmpooler's manager did with it); a
negative size counts as 0; a value that is no integer is ignored, so the configured size
stays in effect; a size above the pool's limit (``max_pool_size``) counts as the limit.

Numbers are read in bounded time and memory: any integer whose magnitude reaches
:data:`HUGE` (a 4,000-digit string, ``1e300``) reads as ``±HUGE``, beyond every limit, instead
of being converted digit by digit (Python refuses decimal strings over 4,300 digits).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["HUGE", "MAX_TEXT", "bounded_int", "effective_size", "ruby_integer", "saturate",
           "size_override"]

HUGE = 10**18
"""The magnitude at which integers read here saturate: larger than any count or size a
setting allows, small enough to print and to store."""
MAX_TEXT = 10240
"""Longer strings are no integer here (no body the API reads is longer)."""
_MAX_DIGITS = 64

_RUBY_INT = re.compile(
    r"[+-]?(?:0[xX][0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|0[bB][01]+(?:_[01]+)*"
    r"|0[oO]?[0-7]+(?:_[0-7]+)*|0[dD]\d+(?:_\d+)*|[1-9]\d*(?:_\d+)*|0)"
)


def ruby_integer(value: Any) -> int | None:
    """``value`` as Ruby's ``Integer()`` reads it (vmpooler's size check), or None where
    Ruby raises.

    Integral JSON numbers pass; booleans, null and fractional numbers do not. Strings may
    carry blanks around a sign and a ``0x``, ``0b``, ``0o``/``0`` (octal) or ``0d`` prefix,
    with single ``_`` between digits. Magnitudes from :data:`HUGE` up read as ``±HUGE``; a
    string longer than :data:`MAX_TEXT` is no integer.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, int):
        return saturate(value)
    if isinstance(value, float):
        return saturate(int(value)) if value.is_integer() else None
    text = value.strip(" \t\n\v\f\r")
    if len(text) > MAX_TEXT or not _RUBY_INT.fullmatch(text):
        return None
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-").replace("_", "").lower()
    if digits.startswith(("0x", "0b", "0o", "0d")):
        return sign * bounded_int(digits[2:], {"x": 16, "b": 2, "o": 8, "d": 10}[digits[1]])
    return sign * bounded_int(digits, 8 if len(digits) > 1 and digits.startswith("0") else 10)


def saturate(number: int) -> int:
    """``number`` clamped to ``[-HUGE, HUGE]``."""
    return max(-HUGE, min(HUGE, number))


def bounded_int(digits: str, base: int = 10) -> int:
    """``int(digits, base)`` of an unsigned digit string, saturated at :data:`HUGE` without
    converting more than 64 significant digits."""
    significant = digits.lstrip("0")
    if len(significant) > _MAX_DIGITS:
        return HUGE
    return min(HUGE, int(significant or "0", base))


def size_override(value: Any) -> int | None:
    """The size an override sets (negative → 0), or None when there is none or it is no
    integer."""
    size = ruby_integer(value) if value is not None else None
    return None if size is None else max(0, size)


def effective_size(configured: int, value: Any, limit: int | None = None) -> int:
    """The pool's size in effect: its override when it sets one, else ``configured``; at
    most ``limit`` (the pool's ``max_pool_size``) when given."""
    size = size_override(value)
    size = configured if size is None else size
    return size if limit is None else min(size, limit)
