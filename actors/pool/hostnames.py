"""VM name generation (reference §4.5): ``<prefix><adjective>-<noun>``.

vmpooler draws names from the spicy-proton corpus: a noun of at most 10 letters first, then
an adjective of at most ``14 - len(noun)`` letters, so ``adjective-noun`` is at most 15
characters before the pool's ``prefix`` is prepended.  This module does the same with its
own bundled word lists (``words_adjectives.txt``, ``words_nouns.txt``).

A candidate is unchecked: the pool actor reserves it with one script that refuses a name
whose ``vmpooler__vm__<name>`` exists (``vmpooler_errors.duplicatehostname``) and draws
again, at most 3 times, as vmpooler; the stale-DNS check runs in the provider's clone work.

What callers may rely on: every name is ``prefix`` + ``[a-z]+-[a-z]+`` with the part after
the prefix at most 15 characters, so it is a valid DNS label whenever the prefix is.
"""

from __future__ import annotations

import bisect
import copy
import functools
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources import files

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_NOUN_LENGTH",
    "HostnameGenerator",
    "WordList",
]

MAX_NAME_LENGTH = 15
"""Longest ``adjective-noun`` (without prefix)."""
MAX_NOUN_LENGTH = 10
"""Longest noun drawn, as vmpooler's ``noun(max: 10)``."""

_WORD = re.compile(r"^[a-z]+$")


def _read_words(resource: str) -> tuple[str, ...]:
    text = files(__package__).joinpath(resource).read_text(encoding="utf-8")
    lines = (line.strip() for line in text.splitlines())
    return tuple(line for line in lines if line and not line.startswith("#"))


@functools.cache
def _bundled_words() -> WordList:
    return WordList(
        adjectives=_read_words("words_adjectives.txt"), nouns=_read_words("words_nouns.txt")
    )


@dataclass(frozen=True)
class WordList:
    """Adjectives and nouns to build names from; every word must be lower-case ``a-z`` only."""

    adjectives: tuple[str, ...]
    nouns: tuple[str, ...]

    def __post_init__(self) -> None:
        for kind, words in (("adjective", self.adjectives), ("noun", self.nouns)):
            if not words:
                raise ValueError(f"no {kind}s given")
            bad = [w for w in words if not _WORD.match(w)]
            if bad:
                raise ValueError(f"{kind}s must be lower-case letters only: {bad[:5]!r}")

    @classmethod
    def bundled(cls) -> WordList:
        """The word lists shipped with the package (loaded once per process)."""
        return _bundled_words()

    @classmethod
    def of(cls, adjectives: Iterable[str], nouns: Iterable[str]) -> WordList:
        """Build from any iterables."""
        return cls(adjectives=tuple(adjectives), nouns=tuple(nouns))


class HostnameGenerator:
    """Draws ``adjective-noun`` names.

    ``rng`` defaults to a fresh ``random.Random()``.  Not thread-safe: give each actor its
    own (:meth:`spawn`).
    """

    def __init__(
        self,
        *,
        words: WordList | None = None,
        rng: random.Random | None = None,
    ) -> None:
        words = words if words is not None else WordList.bundled()
        self._adjectives = tuple(sorted(set(words.adjectives), key=lambda w: (len(w), w)))
        self._adjective_lengths = [len(w) for w in self._adjectives]
        shortest = self._adjective_lengths[0]
        self._nouns = tuple(
            sorted(
                n
                for n in set(words.nouns)
                if len(n) <= MAX_NOUN_LENGTH and len(n) + 1 + shortest <= MAX_NAME_LENGTH
            )
        )
        if not self._nouns:
            raise ValueError("no noun fits the 15-character name limit with these adjectives")
        self._rng = rng if rng is not None else random.Random()

    def spawn(self) -> HostnameGenerator:
        """A generator with the same words and a ``random.Random`` of its own, seeded from
        this one (so a seeded parent gives reproducible children): one per actor, since a
        ``Random`` must not be shared between threads."""
        child = copy.copy(self)
        child._rng = random.Random(self._rng.getrandbits(64))
        return child

    def candidate(self, prefix: str = "") -> str:
        """One random ``prefix + adjective-noun``, unchecked."""
        noun = self._rng.choice(self._nouns)
        fitting = bisect.bisect_right(self._adjective_lengths, MAX_NAME_LENGTH - 1 - len(noun))
        adjective = self._adjectives[self._rng.randrange(fitting)]
        return f"{prefix}{adjective}-{noun}"
