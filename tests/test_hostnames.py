"""VM name generation: vmpooler's adjective-noun shape, duplicate and stale-DNS rejection."""

from __future__ import annotations

import random
import re

import pytest

from vmpooler.actors.pool import hostnames
from vmpooler.actors.pool.hostnames import (
    HostnameGenerator,
    WordList,
)

NAME = re.compile(r"^[a-z]+-[a-z]+$")
# Not exhaustive: a tripwire so a careless edit of the lists gets noticed.
UNWANTED = {
    "bloody", "bomb", "crap", "damn", "dead", "death", "drug", "drunk", "dumb", "fat", "gun",
    "hate", "hell", "kill", "killer", "murder", "naked", "nazi", "porn", "poop", "sexy",
    "slave", "stupid", "ugly", "weapon",
}  # fmt: skip


def never(_: str) -> bool:
    return False


def always(_: str) -> bool:
    return True


def test_bundled_word_lists_are_sane() -> None:
    words = WordList.bundled()
    assert words is WordList.bundled()
    for kind in (words.adjectives, words.nouns):
        assert len(kind) >= 600
        assert len(set(kind)) == len(kind)
        assert all(re.fullmatch(r"[a-z]+", w) for w in kind)
        assert not UNWANTED & set(kind)
    assert all(len(n) <= hostnames.MAX_NOUN_LENGTH for n in words.nouns)
    # Even the longest noun leaves room for some adjective.
    longest = max(map(len, words.nouns))
    assert any(len(a) <= 14 - longest for a in words.adjectives)


def test_names_fit_vmpooler_limits_over_many_draws() -> None:
    generator = HostnameGenerator(rng=random.Random(1234))
    words = WordList.bundled()
    adjectives, nouns = set(words.adjectives), set(words.nouns)
    seen = set()
    for _ in range(10_000):
        name = generator.candidate("pfx-")
        assert name.startswith("pfx-")
        bare = name[len("pfx-") :]
        assert NAME.match(bare), bare
        assert len(bare) <= 15
        adjective, noun = bare.split("-")
        assert adjective in adjectives
        assert noun in nouns
        assert len(noun) <= 10
        seen.add(bare)
    assert len(seen) > 9_000  # plenty of variety


def test_seeded_rng_is_reproducible() -> None:
    first = HostnameGenerator(rng=random.Random(7))
    second = HostnameGenerator(rng=random.Random(7))
    assert [first.candidate() for _ in range(20)] == [second.candidate() for _ in range(20)]


def test_long_nouns_get_short_adjectives() -> None:
    words = WordList(adjectives=("red", "enormous"), nouns=("lighthouse", "ox"))
    generator = HostnameGenerator(words=words, rng=random.Random(3))
    drawn = {generator.candidate() for _ in range(200)}
    assert drawn == {"red-lighthouse", "red-ox", "enormous-ox"}


def test_nouns_too_long_are_never_drawn() -> None:
    words = WordList(adjectives=("odd",), nouns=("elevenchars", "cat"))
    generator = HostnameGenerator(words=words, rng=random.Random(0))
    assert {generator.candidate() for _ in range(50)} == {"odd-cat"}
    with pytest.raises(ValueError):
        HostnameGenerator(words=WordList(adjectives=("odd",), nouns=("elevenchars",)))


def test_word_list_validation() -> None:
    with pytest.raises(ValueError):
        WordList(adjectives=(), nouns=("cat",))
    with pytest.raises(ValueError):
        WordList(adjectives=("Bad",), nouns=("cat",))
    with pytest.raises(ValueError):
        WordList.of(["good"], ["two words"])
    assert WordList.of(["good"], iter(["cat"])).nouns == ("cat",)


def test_spawned_generators_are_independent_and_reproducible() -> None:
    parent = HostnameGenerator(rng=random.Random(3))
    first, second = parent.spawn(), parent.spawn()
    assert first._rng is not second._rng is not parent._rng
    names = [[g.candidate() for _ in range(20)] for g in (first, second)]
    assert names[0] != names[1]
    again = HostnameGenerator(rng=random.Random(3))
    assert [again.spawn().candidate() for _ in range(1)] == names[0][:1]

