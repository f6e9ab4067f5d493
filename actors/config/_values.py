"""Strict conversion of YAML values and environment strings to typed settings.

Every function raises ``ValueError`` whose message is ready to show an operator
("expected an integer >= 0, got 'five'"); callers add the key path and the source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["coerce", "parse_bool", "parse_int", "parse_number", "show"]

_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})
_INT = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def show(value: Any) -> str:
    """Render a value the way it would be written in YAML, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return str(value)


def parse_bool(text: str) -> bool:
    """``true/yes/1/on`` → True, ``false/no/0/off`` → False (any case); else ValueError."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"expected true or false (yes/no, 1/0, on/off), got {show(text)}")


def parse_int(text: str) -> int:
    """Parse a whole decimal integer (surrounding blanks allowed); else ValueError."""
    if not _INT.fullmatch(text.strip()):
        raise ValueError(f"expected an integer, got {show(text)}")
    return int(text.strip())


def parse_number(text: str) -> float:
    """Parse a decimal number such as ``5``, ``2.5`` or ``1e3``; else ValueError."""
    if not _NUMBER.fullmatch(text.strip()):
        raise ValueError(f"expected a number, got {show(text)}")
    return float(text.strip())


_PERCENT = re.compile(r"\s*([+-]?(\d+(\.\d*)?|\.\d+))\s*%\s*")


def _share(value: Any) -> float:
    """A share between 0 and 1: a fraction (``0.4``) or a percentage (``"40%"``)."""
    expected = f"expected a share: a percentage such as '40%' or a fraction between 0 and 1 " \
               f"such as 0.4, got {show(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(expected)
    if isinstance(value, str):
        match = _PERCENT.fullmatch(value)
        if match:
            number = float(match.group(1)) / 100.0
        elif _NUMBER.fullmatch(value.strip()):
            number = float(value.strip())
        else:
            raise ValueError(expected)
    else:
        number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(expected)
    return number


def _range_text(noun: str, minimum: float | None, maximum: float | None, positive: bool) -> str:
    if positive:
        return f"{noun} > 0" if maximum is None else f"{noun} > 0 and <= {_num(maximum)}"
    if minimum is not None and maximum is not None:
        return f"{noun} between {_num(minimum)} and {_num(maximum)}"
    if minimum is not None:
        return f"{noun} >= {_num(minimum)}"
    if maximum is not None:
        return f"{noun} <= {_num(maximum)}"
    return noun


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _in_range(
    value: float, minimum: float | None, maximum: float | None, positive: bool
) -> bool:
    if positive and value <= 0:
        return False
    if minimum is not None and value < minimum:
        return False
    return maximum is None or value <= maximum


def _attempts(value: Any) -> int:
    """Reconnection attempts: a count, or vmpooler 3.x's list of delays (redis-rb's
    ``reconnect_attempts``, from YAML or JSON text such as ``[0, 0.25, 0.5]``), which counts
    as its length (the delays between attempts are ours)."""
    expected = ("expected a number of attempts or a list of delays in seconds such as "
                f"[0, 0.25, 0.5], got {show(value)}")
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(expected) from None
    if isinstance(value, list | tuple):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
                   for v in value):
            raise ValueError(expected)
        return len(value)
    try:
        return int(coerce(value, "int", minimum=0))
    except ValueError:
        raise ValueError(expected) from None


def _count_or_auto(value: Any) -> int | str:
    """A number of VMs (0 or more) or the word ``auto`` (the sizer chooses)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return int(coerce(value, "int", minimum=0))
    except ValueError:
        raise ValueError(f"expected a number of VMs (0 or more) or auto, got {show(value)}"
                         ) from None


def coerce(
    value: Any,
    kind: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
) -> Any:
    """Convert ``value`` to ``kind`` (see ``model.setting``) or raise ValueError.

    Integer and number kinds also accept strings that parse strictly (``"10"``) — pools
    read back from Redis carry strings — but never booleans or, for integers, fractions.
    Booleans accept real booleans and the words understood by :func:`parse_bool`.
    """
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    if kind in ("int", "number"):
        noun = "an integer" if kind == "int" else "a number"
        expected = f"expected {_range_text(noun, minimum, maximum, positive)}, got {show(value)}"
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(expected)
        try:
            if isinstance(value, str):
                number: float = parse_int(value) if kind == "int" else parse_number(value)
            elif kind == "int" and not isinstance(value, int):
                raise ValueError(expected)
            else:
                number = value if kind == "int" else float(value)
        except ValueError:
            raise ValueError(expected) from None
        if not _in_range(number, minimum, maximum, positive):
            raise ValueError(expected)
        return number
    if kind == "share":
        return _share(value)
    if kind == "count_or_auto":
        return _count_or_auto(value)
    if kind == "attempts":
        return _attempts(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return parse_bool(value)
        raise ValueError(f"expected true or false, got {show(value)}")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise ValueError(f"expected a string, got {show(value)} (quote it)")
    if kind == "strs":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"expected a string or a list of strings, got {show(value)}")
        return tuple(items)
    if kind == "weights":
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a mapping of name to weight, got {show(value)}")
        weights: dict[str, int] = {}
        for key, item in value.items():
            weights[str(key)] = coerce(item, "int", minimum=0)
        return weights
    raise AssertionError(f"unknown setting kind {kind!r}")
