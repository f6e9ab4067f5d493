"""Matching differences against the list of expected ones.

A :class:`Known` entry names a step (or a glob of step ids), an aspect, a ``where`` glob and
the words of docs/compatibility.md that explain it. :func:`reconcile` returns the differences
no entry explains and the entries that explained nothing: both must be empty, so the list
stays true in both directions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from tests.differential.runner import Difference

__all__ = ["Known", "reconcile"]


@dataclass(frozen=True)
class Known:
    """An expected difference. ``doc`` is a phrase found verbatim in docs/compatibility.md
    (whitespace-insensitive); ``step`` and ``where`` are globs (``fnmatch``, case-sensitive)."""

    step: str
    aspect: str
    where: str
    doc: str

    def explains(self, difference: Difference) -> bool:
        return (self.aspect == difference.aspect and fnmatchcase(difference.step, self.step)
                and fnmatchcase(difference.where, self.where))


def reconcile(differences: Iterable[Difference], known: Sequence[Known],
              ) -> tuple[list[Difference], list[Known]]:
    """(differences no entry explains, entries that explain none of ``differences``)."""
    found = list(differences)
    unexplained = [d for d in found if not any(k.explains(d) for k in known)]
    unused = [k for k in known if not any(k.explains(d) for d in found)]
    return unexplained, unused
