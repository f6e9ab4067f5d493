"""Demand sizing against a client who asks for what it knows is not there: ``POST
/vm/dp+dp+…`` on an empty demand-sized pool is a 503 that logs one miss, one requester's
misses are bounded, misses never push served checkouts out of the log, and ``vmpooler
history export`` (then ``vmpooler replay``) sees the same bounded demand.

The first tests go through Falcon's test client with the pool's owner on a fake clock (the
sizing policy's target is read as the owner publishes it); the last through ``vmpooler run``
and the shipped ``history export`` and ``replay`` commands.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.api_harness import Api, api
from tests.harness import Harness, make_config, pool, started, wait_until
from tests.hostile.service import start_service
from vmpooler.actors.config.model import DemandSizing
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.demand_export import DemandLog
from vmpooler.actors.storage.demand_store import DemandStore

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
NAMES = 1000  # the most names a path may join (vm_checkout.MAX_PATH_NAMES)
FLOOD = "/api/v3/vm/" + "+".join(["dp"] * NAMES)
CEILING = 30
ATTACKER = "203.0.113.7"
REAL = 500  # served checkouts in the log before the attack


def _demand_config() -> Any:
    return make_config([pool("dp", CEILING, check_loop_delay_min=5, check_loop_delay_max=5,
                             demand=DemandSizing(size_min=0, size_max=CEILING,
                                                 target_warm_hit=0.99))])


def _target(client: redis.Redis) -> int:
    return int(DemandStore(client).published(["dp"])["dp"]["target"])


def _misses(client: redis.Redis) -> int:
    return int(client.zcard(schema.demand_misses("dp"))) + sum(
        1 for m in client.zrange(schema.demand("dp"), 0, -1) if ":-" in m)


def _flood(web: Api, h: Harness, times: int, address: str = ATTACKER) -> list[int]:
    codes = []
    for _ in range(times):
        web.clock.advance(h.clock.now() - web.clock.now())
        codes.append(web.client.simulate_post(FLOOD, remote_addr=address).status_code)
    return codes


def test_a_thousand_names_on_an_empty_demand_pool_are_one_miss_and_the_target_stays_low(
    redis_client: redis.Redis,
) -> None:
    config = _demand_config()
    with started(redis_client, config) as h:
        web = api(redis_client, config)
        h.advance(30)
        assert _target(redis_client) == 0  # nothing learned, size_min 0: empty
        assert _flood(web, h, 1) == [503]
        logged = _misses(redis_client)
        h.advance(30)
        figures = {"misses": logged, "target": _target(redis_client)}
        assert figures["misses"] == 1 and figures["target"] <= 1, figures
        # the same client again and again: at most its budget of misses per window
        assert set(_flood(web, h, 55)) == {503}
        logged = _misses(redis_client)
        assert logged == schema.DEMAND_MISS_BUDGET, f"{logged} misses from one client"
        h.advance(30)
        target = _target(redis_client)
        assert target <= schema.DEMAND_MISS_BUDGET, f"the target after 56 requests: {target}"
        assert redis_client.scard(schema.ready("dp")) + redis_client.scard(
            schema.pending("dp")) <= schema.DEMAND_MISS_BUDGET
        # the history export reads the same bounded count
        rows = DemandLog(redis_client).rows(["dp"])
        assert [r.vm for r in rows] == [None] * schema.DEMAND_MISS_BUDGET


def test_a_flood_of_misses_never_pushes_served_checkouts_out_of_the_log(
    redis_client: redis.Redis,
) -> None:
    config = _demand_config()
    with started(redis_client, config) as h:
        web = api(redis_client, config)
        start = h.clock.now() - 3600
        real = {f"{start + n:.3f}:vm-{n}": start + n for n in range(REAL)}
        redis_client.zadd(schema.demand("dp"), real)
        # the miss log already full (as many distinct clients could make it over time)
        old = {f"{start + n:.3f}:-{n + 1}": start + n for n in range(schema.DEMAND_MISSES_MAX)}
        redis_client.zadd(schema.demand_misses("dp"), old)
        assert set(_flood(web, h, 55)) == {503}  # one client
        for n in range(100):  # and a hundred more, one request each
            assert _flood(web, h, 1, f"198.51.100.{n}") == [503]
        kept = set(redis_client.zrange(schema.demand("dp"), 0, -1))
        evicted = len(set(real) - kept)
        assert evicted == 0, f"{evicted} served checkouts evicted by misses"
        assert redis_client.zcard(schema.demand_misses("dp")) <= schema.DEMAND_MISSES_MAX


def _export(config: Path, out: Path) -> list[dict[str, str]]:
    result = subprocess.run([*VMPOOLER, "history", "export", "--config", str(config),
                             "--pool", "dp", "--output", str(out)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "VMPOOLER_DEBUG": "1"})  # the dummy auth
    assert result.returncode == 0, result.stderr
    with out.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _replay(tmp_path: Path, trace: Path) -> dict[str, Any]:
    config = tmp_path / "replay.yaml"
    config.write_text(yaml.safe_dump({":config": {"task_limit": 4}, ":pools": [
        {"name": "dp", "size": CEILING, "size_min": 0, "sizing": "demand"}]}))
    result = subprocess.run([*VMPOOLER, "replay", "--trace", str(trace), "--config",
                             str(config), "--json", "--policy", "demand", "--clone-time",
                             "60"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.mark.integration
def test_vmpooler_run_a_thousand_name_flood_and_what_history_export_and_replay_see(
    tmp_path: Path,
) -> None:
    service = start_service(tmp_path / "svc", "run", {":pools": [
        {"name": "dp", "size": CEILING, "sizing": "demand", "size_min": 0,
         "provider": "dummy", "dns_plugin": "local"}]})
    try:
        client = service.redis_client()

        def sizing() -> dict[str, Any]:
            entry: dict[str, Any] = service.request("GET", "/api/v3/status").json["pools"]["dp"]
            return entry["sizing"]

        wait_until(lambda: sizing()["target"] == 0, 30, "the empty pool's target")
        assert service.request("POST", FLOOD).status == 503
        # the owner observed the refusal (warm hit 0 now) and published its target with it
        seen = wait_until(lambda: (s := sizing())["warm_hit"] == 0 and s, 30,
                          "the miss observed", explain=service.log_text)
        figures = {"misses": _misses(client), "target": seen["target"]}
        assert figures["misses"] == 1 and figures["target"] <= 1, figures
        for _ in range(55):
            assert service.request("POST", FLOOD).status == 503
        assert _misses(client) == schema.DEMAND_MISS_BUDGET
        rows = _export(service.config_path, tmp_path / "history.csv")
        assert [(r["pool"], r["duration_s"]) for r in rows] == [
            ("dp", "")] * schema.DEMAND_MISS_BUDGET
        replayed = _replay(tmp_path, tmp_path / "history.csv")
        assert replayed["demand"]["dp"]["checkouts"] == schema.DEMAND_MISS_BUDGET
        assert sizing()["target"] <= schema.DEMAND_MISS_BUDGET
    finally:
        service.stop()
