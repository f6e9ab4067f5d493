"""A state kept as an enum and moved only along a table of allowed transitions.

A module that keeps something's state writes its enum and, once, its table
(``TRANSITIONS[old]`` holds the states ``old`` may become); every change goes through
:func:`check_transition`, so a move the table does not allow is loud
(:class:`IllegalTransitionError`, a bug, never an outside event) instead of silently
leaving the thing in a state nothing expects.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

__all__ = ["IllegalTransitionError", "check_transition"]

S = TypeVar("S", bound=Enum)


class IllegalTransitionError(RuntimeError):
    """A move its table does not allow. ``subject`` names what moved (its message reads
    ``"<subject>: illegal transition <old> -> <new>"``, the enums' values)."""

    def __init__(self, subject: str, old: Enum, new: Enum) -> None:
        super().__init__(f"{subject}: illegal transition {old.value} -> {new.value}")
        self.subject, self.old, self.new = subject, old, new


def check_transition(table: Mapping[S, frozenset[S]], subject: str, old: S, new: S) -> S:
    """Return ``new`` if ``table`` allows ``old -> new``; raise
    :class:`IllegalTransitionError` otherwise."""
    if new not in table[old]:
        raise IllegalTransitionError(subject, old, new)
    return new
