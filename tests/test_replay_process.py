"""``vmpooler replay`` and ``vmpooler history export`` as the shipped command, real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import log_checkout
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
BITCOIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / \
    "bitcoin-core-gha-2025-09-04_2025-09-17.csv"
FIELDS = {"checkouts", "hits", "hit_ratio", "wait_mean_s", "wait_p95_s", "idle_vm_hours",
          "clones", "standby_vm_hours", "resumes", "cost_vm_hours"}

pytestmark = pytest.mark.integration


@pytest.mark.skipif(not BITCOIN.exists(), reason="the Bitcoin Core trace is not here")
def test_replay_of_two_hours_of_the_bitcoin_trace(repo_root: Path, tmp_path: Path) -> None:
    head = BITCOIN.read_text().splitlines()
    trace = tmp_path / "slice.csv"
    trace.write_text("\n".join(head[:120]) + "\n")  # about two hours, from the first job
    result = subprocess.run(
        [*VMPOOLER, "replay", "--trace", str(trace), "--config",
         str(repo_root / "conf" / "replay.example.yaml"), "--json", "--hours", "2",
         "--clone-time", "60", "--skip-negative-durations"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"static"}
    rows = doc["static"]
    assert "total" in rows and "linux-x64" in rows
    assert all(set(row) == FIELDS for row in rows.values())
    total = rows["total"]
    assert total["checkouts"] == sum(r["checkouts"] for n, r in rows.items() if n != "total")
    assert 0 < total["checkouts"] <= 119 and 0 < total["hits"] <= total["checkouts"]
    assert total["idle_vm_hours"] > 0 and total["clones"] >= 38  # the pools filled


def test_replay_refuses_a_bad_trace_with_exit_2(repo_root: Path, tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("queued_at,platform,duration_s\nsoon,linux-x64,10\n")
    result = subprocess.run(
        [*VMPOOLER, "replay", "--trace", str(trace), "--config",
         str(repo_root / "conf" / "replay.example.yaml")],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith(f"vmpooler replay: {trace}:2: column queued_at: bad time")
    assert "Traceback" not in result.stderr


def test_history_export_writes_the_recorded_checkouts(
        redis_server: EmbeddedRedis, redis_client: redis.Redis, tmp_path: Path) -> None:
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump({
        ":redis": {"server": "127.0.0.1", "port": redis_server.port},
        ":pools": [{"name": "a", "size": 1}, {"name": "b", "size": 1}],
    }))
    log_checkout(redis_client, "a", 1_757_000_000, vm="vm-1")
    log_checkout(redis_client, "b", 1_757_000_060)
    out = tmp_path / "history.csv"
    result = subprocess.run(
        [*VMPOOLER, "history", "export", "--config", str(config), "--since",
         "2025-09-04T15:33:20Z", "--output", str(out)],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert out.read_text().splitlines() == [
        "queued_at,pool,duration_s",
        "2025-09-04T15:33:20Z,a,",
        "2025-09-04T15:34:20Z,b,",
    ]


def test_both_policies_one_after_the_other(tmp_path: Path) -> None:
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump({":config": {"task_limit": 4}, ":pools": [
        {"name": "a", "size": 2, "size_min": 1}]}))
    trace = tmp_path / "trace.csv"
    trace.write_text("queued_at,pool,duration_s\n" + "".join(
        f"2025-09-04T1{h}:00:00Z,a,300\n" for h in range(4)))
    result = subprocess.run(
        [*VMPOOLER, "replay", "--trace", str(trace), "--config", str(config), "--json",
         "--policy", "both", "--clone-time", "30"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert list(doc) == ["static", "demand"]
    for policy in doc.values():  # each from an empty Redis: the same four checkouts
        assert policy["a"]["checkouts"] == 4 and set(policy["a"]) == FIELDS
    assert doc["static"]["a"]["hits"] == 4


def test_a_standby_tier_serves_a_burst_warm_through_the_command(tmp_path: Path) -> None:
    """Five checkouts a minute apart on two pools of one ready VM, one of them with four
    standby VMs: resumed in 20 s, they serve the whole burst warm; the other pool's 10-minute
    clones serve only the first. The cost weighs a standby VM-hour at ``--standby-cost``."""
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump({":config": {"task_limit": 10}, ":pools": [
        {"name": "tiered", "size": 1, "standby": 4},
        {"name": "plain", "size": 1}]}))
    trace = tmp_path / "burst.csv"
    trace.write_text("queued_at,pool,duration_s\n" + "".join(
        f"2025-09-04T10:0{m}:00Z,{pool},900\n" for m in range(5) for pool in ("tiered", "plain")))
    result = subprocess.run(
        [*VMPOOLER, "replay", "--trace", str(trace), "--config", str(config), "--json",
         "--clone-time", "600", "--resume-time", "20", "--standby-cost", "0.5"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["static"]
    assert all(set(row) == FIELDS for row in rows.values())
    tiered, plain, total = rows["tiered"], rows["plain"], rows["total"]
    assert (tiered["hits"], tiered["resumes"], tiered["hit_ratio"]) == (5, 4, 1.0)
    assert (plain["hits"], plain["resumes"], plain["standby_vm_hours"]) == (1, 0, 0.0)
    assert plain["cost_vm_hours"] == plain["idle_vm_hours"]
    assert tiered["standby_vm_hours"] > 0
    assert tiered["cost_vm_hours"] == pytest.approx(
        tiered["idle_vm_hours"] + 0.5 * tiered["standby_vm_hours"], abs=0.011)
    assert (total["hits"], total["resumes"]) == (6, 4)


def test_a_demand_pool_grows_before_a_daily_burst_and_shrinks_after_it(tmp_path: Path) -> None:
    """Six checkouts at 10:00 UTC on three days, through ``vmpooler replay`` (the real pool
    actors on simulated time): the demand-sized pool misses the first burst (nothing
    learned yet), is ready for the next two (it grew before them, from the day before), and
    holds a tenth of the idle VM-hours of the fixed size that serves them all (it shrank
    after each)."""
    rows = ["queued_at,pool,duration_s"]
    rows += [f"2025-09-0{day}T10:00:00Z,burst,600" for day in (1, 2, 3) for _ in range(6)]
    trace = tmp_path / "daily.csv"
    trace.write_text("\n".join(rows) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({":pools": [{"name": "burst", "size": 6}]}))
    result = subprocess.run(
        [*VMPOOLER, "replay", "--trace", str(trace), "--config", str(config), "--policy",
         "both", "--clone-time", "60", "--json"], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    static, demand = doc["static"]["burst"], doc["demand"]["burst"]
    assert static["hits"] == 18
    assert demand["hits"] == 12, demand  # the bursts of days 2 and 3 found six ready
    assert demand["idle_vm_hours"] < static["idle_vm_hours"] / 5, (demand, static)
