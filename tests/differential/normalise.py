"""What makes two correct answers look different, taken out: random choices, generated
names (tokens, snapshot names, request ids), times, durations and port numbers.

A :class:`Normaliser` belongs to one side (one API and its Redis). Values the sequence
captured from that side's answers (``token``, ``request_id``, ...) become ``<name>``
wherever they appear, the possible answers of a random choice ``<either>``; timestamps
become ``<time>``, today's date ``<today>``, epoch scores ``<epoch>``, hour counts of a VM
(``running``, ``remaining``) and ``uptime`` ``<hours>``, the side's own port numbers
``<port>``. Lists of plain values are sorted (set order is Redis's).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

__all__ = ["Normaliser", "flatten"]

_RUBY_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}")
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_FLOAT_FIELDS = frozenset({"running", "remaining", "uptime"})


class Normaliser:
    """The normalisation of one side; :meth:`learn` adds a generated value."""

    def __init__(self, ports: tuple[int, ...] = ()) -> None:
        self.captured: dict[str, str] = {}
        self.ports = tuple(str(p) for p in ports)
        self.alternatives: list[str] = []

    def learn(self, name: str, value: str) -> None:
        """From now on ``value`` reads ``<name>``."""
        self.captured[name] = value

    def interchangeable(self, alternatives: tuple[str, ...]) -> None:
        """From now on each of ``alternatives`` (the possible answers of a random choice)
        reads ``<either>``."""
        self.alternatives += [a for a in alternatives if a not in self.alternatives]

    def text(self, value: str) -> str:
        """``value`` with random choices, generated names, times, today's date and ports
        replaced."""
        for alternative in self.alternatives:
            value = value.replace(alternative, "<either>")
        for name, raw in sorted(self.captured.items(), key=lambda kv: -len(kv[1])):
            if raw:
                value = value.replace(raw, f"<{name}>")
        value = _RUBY_TIME.sub("<time>", value)
        value = _ISO_TIME.sub("<time>", value)
        value = value.replace(datetime.date.today().isoformat(), "<today>")
        for port in self.ports:
            value = re.sub(rf"(?<!\d){port}(?!\d)", "<port>", value)
        return value

    @staticmethod
    def score(value: float) -> str:
        """A zset score: epoch seconds become ``<epoch>``."""
        return "<epoch>" if value > 1e9 else repr(value)

    def json(self, value: Any, field: str = "") -> Any:
        """A parsed JSON value, normalised recursively (keys too)."""
        if isinstance(value, dict):
            return {self.text(k): self.json(v, k) for k, v in value.items()}
        if isinstance(value, list):
            items = [self.json(v) for v in value]
            if all(not isinstance(v, dict | list) for v in items):
                return sorted(items, key=lambda v: (type(v).__name__, str(v)))
            return items
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, float) and field in _FLOAT_FIELDS:
            return "<hours>"
        if isinstance(value, int) and not isinstance(value, bool) and str(value) in self.ports:
            return "<port>"
        return value


def flatten(value: Any, path: str = "$") -> dict[str, Any]:
    """``{json path: scalar}`` of a normalised JSON value; an empty object or list is a
    scalar of its own (``{}`` / ``[]``) so that it is not lost."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{path}.{key}"))
        return out
    if isinstance(value, list) and value:
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{path}[{index}]"))
        return out
    return {path: value}
