"""The differential API suite: one scripted sequence of requests (every v3 endpoint, good and
bad input, with and without authentication) sent to vmpooler 3.9.1's API and to ours, each over
its own identically seeded redis-server. What each API writes by starting, each step's answer
and Redis changes, and the whole key space at the end must agree except for the differences
listed in ``tests/differential/known_differences.py`` (steps ``startup``, the step ids of
``tests/differential/sequence.py``, ``final``), each of which must still occur and be
described in docs/compatibility.md. Two shorter sequences run in their own configurations:
without auth (``noauth-``) and with the rate limiter on (``ratelimit-``, ``ratelimit-keys-``)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.differential import keyspace, seed
from tests.differential.config import write_config
from tests.differential.known import reconcile
from tests.differential.known_differences import KNOWN_DIFFERENCES
from tests.differential.normalise import Normaliser
from tests.differential.processes import our_api, redis_server, require_ruby, ruby_api
from tests.differential.runner import Difference, Outcome, Side, compare_keyspaces, run
from tests.differential.sequence import sequence
from tests.differential.sequence_noauth import sequence_without_auth
from tests.differential.sequence_ratelimit import (
    HEADERS,
    KEYED_RATE_LIMITS,
    REFUSED,
    rate_limits_yaml,
    sequence_ratelimit,
    sequence_ratelimit_keys,
)
from tests.differential.step import Step

pytestmark = pytest.mark.integration

COMPATIBILITY = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"
OPENAPI = Path(__file__).resolve().parent.parent / "web" / "openapi.json"


@dataclass
class Played:
    """Every difference the run found, and each step's (ruby, ours) outcomes by step id."""

    differences: list[Difference]
    outcomes: dict[str, tuple[Outcome, Outcome]]


def _play(top: Path, install: Path, steps: list[Step], prefix: str, *,
          forget: str | None = None,
          outcomes: dict[str, tuple[Outcome, Outcome]] | None = None,
          **config: bool | str) -> list[Difference]:
    """Both APIs (ours: one gunicorn worker) over their own Redis, seeded alike, configured
    by ``config`` (see :func:`write_config`); what starting wrote (step ``<prefix>startup``),
    the steps, and the whole key space at the end (``<prefix>final``) compared. Keys matching
    the pattern ``forget`` are deleted once both APIs answer (what the readiness polls
    counted). ``outcomes`` receives each step's outcomes."""
    with redis_server(top / "ruby-redis") as ruby_redis, \
            redis_server(top / "our-redis") as our_redis:
        seeded = {}
        for name, server in (("ruby", ruby_redis), ("ours", our_redis)):
            seed.initial(server.client)
            seeded[name] = keyspace.dump(server.client)
        ruby_config = write_config(top / "ruby", redis_port=ruby_redis.port, **config)
        our_config = write_config(top / "ours", redis_port=our_redis.port, **config)
        with ruby_api(install, ruby_config) as ruby_proc, our_api(our_config) as our_proc:
            if forget is not None:
                for server in (ruby_redis, our_redis):
                    for key in list(server.client.scan_iter(match=forget)):
                        server.client.delete(key)
            ruby = Side("ruby", ruby_proc.port, ruby_redis.client,
                        Normaliser((ruby_proc.port, ruby_redis.port)))
            ours = Side("ours", our_proc.port, our_redis.client,
                        Normaliser((our_proc.port, our_redis.port)))
            differences = compare_keyspaces(f"{prefix}startup", ruby, ours, seeded["ruby"],
                                            seeded["ours"])
            differences += run(steps, ruby, ours, outcomes)
            return differences + compare_keyspaces(f"{prefix}final", ruby, ours, {}, {})


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Played:
    """The main sequence with the dummy auth provider and experimental features on, the
    short one without auth and with them off, and the rate limiter's with it on (small
    limits, then a ``:rate_limits:`` section vmpooler misreads). The main sequence takes
    longest: the short ones run meanwhile, one after the other."""
    install = require_ruby()
    top = tmp_path_factory.mktemp("differential")
    forget, limiter_on = "vmpooler__ratelimit__*", "  rate_limiting_enabled: true\n"
    plays: list[tuple[str, list[Step], str, dict[str, Any]]] = [
        ("auth", sequence(), "", {}),
        ("noauth", sequence_without_auth(), "noauth-", {"auth": False, "experimental": False}),
        ("ratelimit", sequence_ratelimit(), "ratelimit-",
         {"forget": forget, "extra": limiter_on, "top_level": rate_limits_yaml()}),
        ("ratelimit-keys", sequence_ratelimit_keys(), "ratelimit-keys-",
         {"forget": forget, "extra": limiter_on, "top_level": KEYED_RATE_LIMITS}),
    ]
    outcomes: list[dict[str, tuple[Outcome, Outcome]]] = [{} for _ in plays]

    def play(index: int) -> list[Difference]:
        name, steps, prefix, config = plays[index]
        return _play(top / name, install, steps, prefix, outcomes=outcomes[index], **config)

    def play_short() -> list[Difference]:
        return [d for index in range(1, len(plays)) for d in play(index)]

    with ThreadPoolExecutor(max_workers=2) as pool:
        main, short = pool.submit(play, 0), pool.submit(play_short)
        differences = main.result() + short.result()
    return Played(differences, {k: v for each in outcomes for k, v in each.items()})


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


def test_the_rate_limit_sequence_reaches_every_limit(played: Played) -> None:
    """vmpooler refuses exactly the steps listed in ``REFUSED``, each with every rate-limit
    header, and adds none to what it accepts: the comparison is not vacuous."""
    steps = [s.id for s in sequence_ratelimit()]
    refused = {i for i in steps if played.outcomes[i][0].status == 429}
    assert refused == REFUSED
    for i in steps:
        headers = played.outcomes[i][0].raw.headers
        present = [h for h in HEADERS if h.lower() in headers]
        assert present == (list(HEADERS) if i in REFUSED else []), i


def test_the_sequence_calls_every_documented_operation() -> None:
    """Every method and path of web/openapi.json but our own ``/api/v3/openapi.json``."""
    document = json.loads(OPENAPI.read_text())
    called = {(s.method, s.path.split("?")[0].rstrip("/") or "/")
              for s in sequence() + sequence_without_auth()}
    missing = []
    for template, operations in document["paths"].items():
        pattern = re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)) + "$")
        for method in operations.keys() & {"get", "post", "put", "delete"}:
            if template != "/api/v3/openapi.json" and not any(
                    m == method.upper() and pattern.match(p) for m, p in called):
                missing.append(f"{method.upper()} {template}")
    assert missing == []


def test_every_listed_difference_is_described_in_the_compatibility_page() -> None:
    page = re.sub(r"\s+", " ", COMPATIBILITY.read_text())
    missing = [k for k in KNOWN_DIFFERENCES if re.sub(r"\s+", " ", k.doc) not in page]
    assert not missing, missing
