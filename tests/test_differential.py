"""The differential API suite: one scripted sequence of requests (every v3 endpoint, good and
bad input, with and without authentication) sent to vmpooler 3.9.1's API and to ours, each over
its own identically seeded redis-server; answers and Redis changes must agree except for the
differences listed in ``tests/differential/known_differences.py``, each of which must still
occur and be described in docs/compatibility.md."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.differential import keyspace, seed
from tests.differential.config import write_config
from tests.differential.known import reconcile
from tests.differential.known_differences import KNOWN_DIFFERENCES
from tests.differential.normalise import Normaliser
from tests.differential.processes import our_api, redis_server, require_ruby, ruby_api
from tests.differential.runner import Difference, Side, run
from tests.differential.sequence import sequence

pytestmark = pytest.mark.integration

COMPATIBILITY = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"
POOL2_IS_ALIAS = True


@dataclass
class Played:
    differences: list[Difference]
    steps: int


def _startup_differences(ruby: Side, ours: Side, seeded: dict[str, keyspace.Dump]
                         ) -> list[Difference]:
    """What the two APIs wrote to Redis by starting."""
    out = []
    found = {side.name: {(k, i): v for k, i, v in keyspace.changes(
        seeded[side.name], keyspace.dump(side.redis), side.norm.text, side.norm.score)}
        for side in (ruby, ours)}
    for key, item in sorted(found["ruby"].keys() | found["ours"].keys()):
        theirs = found["ruby"].get((key, item), "<unchanged>")
        mine = found["ours"].get((key, item), "<unchanged>")
        if theirs != mine:
            out.append(Difference("startup", "redis", f"{key} {item}", theirs, mine))
    return out


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    install = require_ruby()
    top = tmp_path_factory.mktemp("differential")
    with redis_server(top / "ruby-redis") as ruby_redis, \
            redis_server(top / "our-redis") as our_redis:
        seeded = {}
        for name, server in (("ruby", ruby_redis), ("ours", our_redis)):
            seed.initial(server.client)
            seeded[name] = keyspace.dump(server.client)
        ruby_config = write_config(top / "ruby", redis_port=ruby_redis.port)
        our_config = write_config(top / "ours", redis_port=our_redis.port)
        with ruby_api(install, ruby_config) as ruby_proc, our_api(our_config) as our_proc:
            ruby = Side("ruby", ruby_proc.port, ruby_redis.client,
                        Normaliser((ruby_proc.port, ruby_redis.port)))
            ours = Side("ours", our_proc.port, our_redis.client,
                        Normaliser((our_proc.port, our_redis.port)))
            differences = _startup_differences(ruby, ours, seeded)
            steps = sequence(pool2_is_alias=POOL2_IS_ALIAS)
            differences += run(steps, ruby, ours)
            yield Played(differences, len(steps))


def test_answers_and_redis_writes_agree_except_the_listed_differences(played: Played) -> None:
    unexplained, unused = reconcile(played.differences, KNOWN_DIFFERENCES)
    report = []
    if unexplained:
        report.append("differences not in known_differences.py:")
        report += [f"  {d}" for d in unexplained]
    if unused:
        report.append("listed differences that no longer occur:")
        report += [f"  {k}" for k in unused]
    assert not report, "\n".join(report)


def test_the_sequence_covered_every_step(played: Played) -> None:
    assert played.steps > 150


def test_every_listed_difference_is_described_in_the_compatibility_page() -> None:
    page = re.sub(r"\s+", " ", COMPATIBILITY.read_text())
    missing = [k for k in KNOWN_DIFFERENCES if re.sub(r"\s+", " ", k.doc) not in page]
    assert not missing, missing
