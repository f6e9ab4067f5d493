"""vmpooler's input rules for the ``/vm`` endpoints (reference §1.2) and Ruby coercions.

Each ``check_*`` function returns the accepted value or raises :class:`InputError` carrying
vmpooler's exact message; ``*_problems`` functions return a list of messages (empty when
fine) for PUT ``/vm/:hostname``, which collects every failure. Nothing here touches Redis.

Divergences from vmpooler 3.9.1 (on purpose):

* pool names may contain dots (``[A-Za-z0-9_.-]``), so ``ubuntu-22.04-x86_64`` can be
  checked out through the JSON body of POST ``/vm``;
* tag values may contain ``=`` and ``,`` (Jenkins build URLs);
* a tag value that is not a string (number, boolean, object) is a failure
  ``Tag value must be a string``, not a 500;
* a lifetime equal to ``max_lifetime_upper_limit`` is accepted; only a larger one is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vmpooler.actors.config.overrides import bounded_int, saturate

__all__ = [
    "InputError",
    "check_disk_size",
    "check_hostname",
    "check_pool_name",
    "check_vm_count",
    "filter_tags",
    "lifetime_problems",
    "ruby_to_i",
    "ruby_to_s",
    "shorten",
    "tag_problem",
    "tags_problems",
]

MAX_HOSTNAME = 253
MAX_POOL_NAME = 100
MAX_TAG_KEY = 50
MAX_TAG_VALUE = 255

_HOSTNAME = re.compile(
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*",
    re.IGNORECASE | re.ASCII)
_POOL_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_TAG_KEY = re.compile(r"[A-Za-z0-9_.-]+")
_TAG_VALUE = re.compile(r"[\w \t\r\n\f\v\-.@:/=,]*", re.ASCII)
_DIGITS = re.compile(r"[0-9]+")
_INT_PREFIX = re.compile(r"[ \t\r\n\f\v]*([+-]?[0-9]+(?:_[0-9]+)*)")


class InputError(ValueError):
    """An input broke a rule; ``message`` is vmpooler's text for it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def check_hostname(hostname: str | None) -> str:
    """A hostname or FQDN: ≤253 chars of dot-separated DNS labels, case-insensitive."""
    if not hostname:
        raise InputError("Hostname is required")
    if len(hostname) > MAX_HOSTNAME:
        raise InputError("Hostname too long")
    if not _HOSTNAME.fullmatch(hostname):
        raise InputError("Invalid hostname format")
    return hostname


def shorten(hostname: str) -> str:
    """The first run of non-dot characters (vmpooler's ``hostname[/[^.]+/]``); '' if none."""
    match = re.search(r"[^.]+", hostname)
    return match.group(0) if match else ""


def check_pool_name(name: Any) -> str:
    """A key of the POST ``/vm`` body: 1..100 chars of ``[A-Za-z0-9_.-]``."""
    if not isinstance(name, str) or not name:
        raise InputError("Pool name is required")
    if len(name) > MAX_POOL_NAME:
        raise InputError("Pool name too long")
    if not _POOL_NAME.fullmatch(name):
        raise InputError("Invalid pool name format")
    return name


def _integer(value: Any, name: str, low: int, high: int) -> int:
    """vmpooler's ``validate_integer``: digits only (an int or a digit string), in range."""
    if value is None:
        raise InputError(f"{name} is required")
    if not _DIGITS.fullmatch(ruby_to_s(value)):
        raise InputError(f"{name} must be a valid integer")
    number = bounded_int(ruby_to_s(value))
    if number < low:
        raise InputError(f"{name} must be at least {low}")
    if number > high:
        raise InputError(f"{name} must be at most {high}")
    return number


def check_vm_count(value: Any) -> int:
    """A value of the POST ``/vm`` body: 1..100."""
    return _integer(value, "VM count", 1, 100)


def check_disk_size(value: Any) -> int:
    """The size of POST ``/vm/:hostname/disk/:size``: 1..2048 (GB)."""
    return _integer(value, "Disk size", 1, 2048)


def tag_problem(key: str, value: Any) -> str | None:
    """vmpooler's tag rule for one pair (None = fine; a null value is fine)."""
    if not key:
        return "Tag key is required"
    if len(key) > MAX_TAG_KEY:
        return "Tag key too long"
    if not _TAG_KEY.fullmatch(key):
        return "Invalid tag key format"
    if value is None:
        return None
    if not isinstance(value, str):
        return "Tag value must be a string"
    if len(value) > MAX_TAG_VALUE:
        return "Tag value too long"
    if not _TAG_VALUE.fullmatch(value):
        return "Tag value contains invalid characters"
    return None


def tags_problems(tags: Any, allowed: Sequence[str] | None) -> list[str]:
    """Failures of the ``tags`` argument of PUT ``/vm/:hostname``, in vmpooler's order."""
    if not isinstance(tags, dict):
        return [f"You provided tags ({ruby_to_s(tags)}) as something other than a hash."]
    problems = [p for p in (tag_problem(k, v) for k, v in tags.items()) if p]
    if allowed is not None and set(tags) - set(allowed):
        problems.append(f"You provided unsuppored tags ({ruby_to_s(tags)}).")
    return problems


def lifetime_problems(value: Any, upper_limit: int | None) -> list[str]:
    """Failures of the ``lifetime`` argument (hours, Ruby ``to_i`` coercion)."""
    hours = ruby_to_i(value)
    if hours <= 0:
        return [f"Lifetime must be a positive integer (got {ruby_to_s(value)})"]
    if upper_limit is not None and hours > upper_limit:
        return [f"You provided a lifetime ({ruby_to_s(value)}) that exceeds the configured "
                f"maximum of {upper_limit}."]
    return []


def filter_tags(tags: Mapping[str, Any], tagfilter: Mapping[str, str]) -> dict[str, Any]:
    """``:tagfilter:``: a value matching its tag's regex becomes its joined capture groups.

    A regex that does not compile leaves the value unchanged.
    """
    result = dict(tags)
    for tag, value in tags.items():
        pattern = tagfilter.get(tag)
        if pattern is None or not isinstance(value, str):
            continue
        try:
            match = re.search(pattern, value)
        except re.error:
            continue
        if match:
            result[tag] = "".join(match.groups(default=""))
    return result


def ruby_to_i(value: Any) -> int:
    """Ruby's ``to_i``: the integer prefix of a string (``"2abc"`` → 2, ``"abc"`` → 0), the
    truncation of a number; 0 for anything else. Magnitudes from ``HUGE`` (10**18) up read
    as ``±HUGE`` (:func:`~vmpooler.actors.config.overrides.bounded_int`), so a 5,000-digit
    string costs no more than a short one."""
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return saturate(value)
    if isinstance(value, float):
        return saturate(int(value)) if value == value and abs(value) != float("inf") else 0
    if isinstance(value, str):
        match = _INT_PREFIX.match(value)
        if not match:
            return 0
        digits = match.group(1).replace("_", "")
        sign = -1 if digits.startswith("-") else 1
        return sign * bounded_int(digits.lstrip("+-"))
    return 0


def _inspect(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "nil"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_inspect(k)}=>{_inspect(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inspect(v) for v in value) + "]"
    return ruby_to_s(value)


def ruby_to_s(value: Any) -> str:
    """How Ruby interpolates a parsed JSON value into a message (``"#{value}"``)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return _inspect(value)
    return str(value)
