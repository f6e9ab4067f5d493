"""VM name generation: vmpooler's adjective-noun shape, duplicate and stale-DNS rejection."""

from __future__ import annotations

import random
import re
import socket
import threading

import pytest

from vmpooler.actors import hostnames
from vmpooler.actors.hostnames import (
    GeneratedName,
    HostnameExhaustedError,
    HostnameGenerator,
    WordList,
    dns_resolves,
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


def test_generate_accepts_first_free_name() -> None:
    asked: list[str] = []
    generator = HostnameGenerator(
        rng=random.Random(5), resolver=lambda fqdn: asked.append(fqdn) or False
    )
    result = generator.generate(prefix="ci-", domain="example.com", is_taken=never, check_dns=True)
    assert isinstance(result, GeneratedName)
    assert result.rejected == ()
    assert result.name.startswith("ci-")
    assert asked == [f"{result.name}.example.com"]


def test_generate_rejects_duplicates() -> None:
    taken: list[str] = []

    def is_taken(name: str) -> bool:
        taken.append(name)
        return len(taken) <= 2

    generator = HostnameGenerator(rng=random.Random(9), resolver=always)
    result = generator.generate(
        prefix="p", domain="example.com", is_taken=is_taken, check_dns=False
    )
    assert result.rejected == ((taken[0], "duplicate"), (taken[1], "duplicate"))
    assert result.name == taken[2]


def test_generate_rejects_stale_dns() -> None:
    lookups: list[str] = []

    def resolver(fqdn: str) -> bool:
        lookups.append(fqdn)
        return len(lookups) == 1

    generator = HostnameGenerator(rng=random.Random(11), resolver=resolver)
    result = generator.generate(prefix="", domain="corp.test", is_taken=never, check_dns=True)
    stale = lookups[0].removesuffix(".corp.test")
    assert result.rejected == ((stale, "staledns"),)
    assert lookups[1] == f"{result.name}.corp.test"


def test_dns_check_skipped_without_domain_or_flag() -> None:
    generator = HostnameGenerator(rng=random.Random(1), resolver=always)
    assert generator.generate(prefix="", domain=None, is_taken=never, check_dns=True).rejected == ()
    assert (
        generator.generate(prefix="", domain="x.y", is_taken=never, check_dns=False).rejected == ()
    )


def test_exhaustion_lists_rejected_candidates() -> None:
    generator = HostnameGenerator(rng=random.Random(2), resolver=always)
    with pytest.raises(HostnameExhaustedError) as info:
        generator.generate(prefix="", domain="d.test", is_taken=lambda n: n.startswith("a"),
                           check_dns=True, attempts=4)  # fmt: skip
    rejected = info.value.rejected
    assert len(rejected) == 4
    for name, reason in rejected:
        assert reason == ("duplicate" if name.startswith("a") else "staledns")
        assert name in str(info.value)
    with pytest.raises(ValueError):
        generator.generate(prefix="", domain=None, is_taken=never, check_dns=False, attempts=0)


def test_is_taken_errors_propagate() -> None:
    def broken(_: str) -> bool:
        raise ConnectionError("redis down")

    with pytest.raises(ConnectionError):
        HostnameGenerator().generate(prefix="", domain=None, is_taken=broken, check_dns=False)


def test_default_resolver() -> None:
    assert dns_resolves("localhost")
    assert not dns_resolves("no-such-host.invalid")
    assert not dns_resolves("bad..name")


def test_default_resolver_gives_up_on_hung_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hung(*_: object, **__: object) -> list[object]:
        release.wait(10)
        return []

    monkeypatch.setattr(socket, "getaddrinfo", hung)
    try:
        assert dns_resolves("slow.example", timeout=0.05) is False
    finally:
        release.set()
