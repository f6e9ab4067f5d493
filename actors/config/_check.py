"""A collector of validation issues with typed getters, shared by the validation modules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from vmpooler.actors.config._data import MASK, freeze, is_masked_value
from vmpooler.actors.config._values import coerce, show
from vmpooler.actors.config.problems import Issue

__all__ = ["MISSING", "Checker", "Path"]

Path = tuple[str | int, ...]
_T = TypeVar("_T")
MISSING: Any = object()


class Checker:
    """Collects every :class:`Issue` and note instead of stopping at the first problem.

    Getters never raise: a bad value is recorded and the default is returned, so the rest of
    the document is still checked.
    """

    def __init__(self) -> None:
        self.issues: list[Issue] = []
        self.notes: list[str] = []

    def fail(self, path: Path, message: str, *, related: Path | None = None) -> None:
        """Record a problem at ``path`` (``related``: see :class:`Issue`)."""
        self.issues.append(Issue(tuple(path), message,
                                 related=None if related is None else tuple(related)))

    def note(self, message: str) -> None:
        """Record a non-fatal remark."""
        self.notes.append(message)

    def mapping(self, value: Any, path: Path, *, what: str = "a mapping") -> Mapping[str, Any]:
        """``value`` when it is a mapping, ``{}`` for null; otherwise record and return ``{}``."""
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return value
        self.fail(path, f"expected {what}, got {show(value)}")
        return {}

    def get(
        self,
        section: Mapping[str, Any],
        key: str,
        path: Path,
        kind: str,
        default: Any = None,
        **limits: Any,
    ) -> Any:
        """``section[key]`` converted to ``kind``; ``default`` when absent, null or invalid."""
        value = section.get(key)
        if value is None:
            return default
        try:
            return coerce(value, kind, **limits)
        except ValueError as exc:
            message = str(exc)
            if is_masked_value(key, value):  # never repeat a secret in a message
                message = message.replace(show(value), MASK)
            self.fail((*path, key), message)
            return default

    def require(self, section: Mapping[str, Any], key: str, path: Path, kind: str,
                **limits: Any) -> Any:
        """Like :meth:`get` but a missing or null key is a problem; returns MISSING then."""
        if section.get(key) is None:
            self.fail((*path, key), "required key is missing")
            return MISSING
        return self.get(section, key, path, kind, MISSING, **limits)

    def build(self, cls: type[_T], section: Mapping[str, Any], path: Path, **extra: Any) -> _T:
        """Build a settings dataclass whose fields are declared with ``model.setting``.

        Fields without a ``kind`` must be passed in ``extra`` or keep their default.
        """
        values: dict[str, Any] = {}
        for item in fields(cls):  # type: ignore[arg-type]
            meta = item.metadata
            if "kind" not in meta or item.name in extra:
                continue
            value = self.get(
                section,
                item.name,
                path,
                meta["kind"],
                MISSING,
                minimum=meta["minimum"],
                maximum=meta["maximum"],
                positive=meta["positive"],
            )
            if value is MISSING:
                continue
            values[item.name] = freeze(value)
        return cls(**values, **extra)
