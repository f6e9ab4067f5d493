"""VM name generation (reference §4.5): ``<prefix><adjective>-<noun>``.

vmpooler draws names from the spicy-proton corpus: a noun of at most 10 letters first, then
an adjective of at most ``14 - len(noun)`` letters, so ``adjective-noun`` is at most 15
characters before the pool's ``prefix`` is prepended.  This module does the same with its
own bundled word lists (``words_adjectives.txt``, ``words_nouns.txt``).

A candidate is accepted when the caller's ``is_taken`` says no ``vmpooler__vm__<name>``
exists and, when DNS checking is on, ``<name>.<domain>`` does not resolve.  vmpooler gives
up after 3 attempts.  As in vmpooler, the uniqueness check is not atomic with the caller's
later write; the caller must tolerate (or detect) the rare race.

What callers may rely on: every name is ``prefix`` + ``[a-z]+-[a-z]+`` with the part after
the prefix at most 15 characters, so it is a valid DNS label whenever the prefix is.
"""

from __future__ import annotations

import bisect
import functools
import random
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.resources import files

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_NOUN_LENGTH",
    "GeneratedName",
    "HostnameExhaustedError",
    "HostnameGenerator",
    "WordList",
    "dns_resolves",
]

MAX_NAME_LENGTH = 15
"""Longest ``adjective-noun`` (without prefix)."""
MAX_NOUN_LENGTH = 10
"""Longest noun drawn, as vmpooler's ``noun(max: 10)``."""
DNS_TIMEOUT = 2.0
"""Default overall limit, in seconds, on one stale-DNS lookup."""

_WORD = re.compile(r"^[a-z]+$")


def _read_words(resource: str) -> tuple[str, ...]:
    text = files("vmpooler.actors").joinpath(resource).read_text(encoding="utf-8")
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


@dataclass(frozen=True)
class GeneratedName:
    """An accepted name, and the ``(candidate, reason)`` pairs rejected before it.

    ``reason`` is ``"duplicate"`` (emit ``vmpooler_errors.duplicatehostname``) or
    ``"staledns"`` (emit ``vmpooler_errors.staledns``).
    """

    name: str
    rejected: tuple[tuple[str, str], ...] = ()


class HostnameExhaustedError(Exception):
    """Every attempt was rejected; ``rejected`` lists ``(candidate, reason)`` pairs."""

    def __init__(self, rejected: tuple[tuple[str, str], ...]) -> None:
        listed = ", ".join(f"{name} ({reason})" for name, reason in rejected)
        super().__init__(f"no usable hostname after {len(rejected)} attempts: {listed}")
        self.rejected = rejected


def dns_resolves(fqdn: str, timeout: float = DNS_TIMEOUT) -> bool:
    """True if ``fqdn`` resolves now.

    Lookup errors (``gaierror``, bad names) and lookups that take longer than ``timeout``
    seconds count as *not* resolving, as vmpooler's resolver errors did.  The lookup runs in
    a daemon thread so a hung resolver cannot hold the caller past ``timeout``.
    """
    outcome: list[bool] = []

    def lookup() -> None:
        try:
            socket.getaddrinfo(fqdn, None)
        except (OSError, UnicodeError):
            outcome.append(False)
        else:
            outcome.append(True)

    worker = threading.Thread(target=lookup, name=f"dns-check:{fqdn}", daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(outcome and outcome[0])


class HostnameGenerator:
    """Draws ``adjective-noun`` names and checks them.

    ``rng`` defaults to a fresh ``random.Random()``; ``resolver(fqdn) -> bool`` defaults to
    :func:`dns_resolves`.  Not thread-safe when ``rng`` is shared (use one per actor).
    """

    def __init__(
        self,
        *,
        words: WordList | None = None,
        rng: random.Random | None = None,
        resolver: Callable[[str], bool] | None = None,
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
        self._resolver = resolver if resolver is not None else dns_resolves

    def candidate(self, prefix: str = "") -> str:
        """One random ``prefix + adjective-noun``, unchecked."""
        noun = self._rng.choice(self._nouns)
        fitting = bisect.bisect_right(self._adjective_lengths, MAX_NAME_LENGTH - 1 - len(noun))
        adjective = self._adjectives[self._rng.randrange(fitting)]
        return f"{prefix}{adjective}-{noun}"

    def generate(
        self,
        *,
        prefix: str,
        domain: str | None,
        is_taken: Callable[[str], bool],
        check_dns: bool,
        attempts: int = 3,
    ) -> GeneratedName:
        """Find an unused name in at most ``attempts`` draws.

        ``is_taken(name)`` gets the full name (prefix included) and should say whether
        ``vmpooler__vm__<name>`` exists; its exceptions propagate.  When ``check_dns`` is
        true and ``domain`` is set, a name whose ``<name>.<domain>`` resolves is rejected as
        stale DNS.  Raises ``HostnameExhaustedError`` when every attempt was rejected.
        """
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        rejected: list[tuple[str, str]] = []
        for _ in range(attempts):
            name = self.candidate(prefix)
            if is_taken(name):
                rejected.append((name, "duplicate"))
            elif check_dns and domain and self._resolver(f"{name}.{domain}"):
                rejected.append((name, "staledns"))
            else:
                return GeneratedName(name=name, rejected=tuple(rejected))
        raise HostnameExhaustedError(tuple(rejected))
