"""``vmpooler replay`` with a standby tier: the real pool actors suspend and resume VMs on the
simulated hypervisor (a resume takes ``--resume-time``), and the replay measures the standby
VM-hours, the resumes and the cost that weighs them.

Known answers on small synthetic traces: a pool of one ready and two standby VMs, checked out
once an hour, is short one ready VM for the resume time after each checkout and one standby VM
for the clone time less the resume time; a missed checkout waits one resume time, not a clone
time (in a pool of size 0 too: its on-demand request takes a standby VM), and takes its own
request's VM, leaving the ready refill to the next checkout; a burst spread wider than the
resume time is served warm from standby where the same ready size without it misses all but
the first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from vmpooler.actors.config import load_config
from vmpooler.actors.replay.configuration import replay_config
from vmpooler.actors.replay.report import RunResult
from vmpooler.actors.replay.run import replay
from vmpooler.actors.sizing.trace import Checkout
from vmpooler.web.cli.command import main

T0 = 1_757_000_000.0


def _config(tmp_path: Path, pools: str, settings: str = "") -> Path:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(f":config:\n  task_limit: 10\n{settings}:pools:\n{pools}")
    return path


def _replay(tmp_path: Path, client: redis.Redis, pools: str, trace: list[Checkout], *,
            clone_time: float, resume_time: float, end: float | None = None,
            policy: str = "static") -> RunResult:
    config = load_config(_config(tmp_path, pools), environ={})
    setup = replay_config(config, [c.pool for c in trace], policy, redis_port=6379)
    return replay(setup, trace, policy=policy, clone_time=clone_time, client=client, end=end,
                  resume_time=resume_time)


HOURLY = [Checkout(T0 + 3600 * i, "a", 600.0) for i in range(3)]
"""Three checkouts an hour apart, each held ten minutes."""


def test_without_standby_there_are_no_standby_vm_hours_and_the_cost_is_the_idle_time(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    pool = "  - name: a\n    size: 1\n    ready_ttl: 1440\n"
    result = _replay(tmp_path, redis_client, pool, HOURLY, clone_time=60, resume_time=15,
                     end=T0 + 3 * 3600)
    stats = result.pools["a"]
    assert (stats.hits, stats.standby_vm_seconds, stats.resumes) == (3, 0.0, 0)
    assert stats.idle_vm_seconds == pytest.approx(3 * 3600 - 3 * 60)  # refilled by clones
    doc = result.document()["a"]
    assert doc["standby_vm_hours"] == 0.0 and doc["resumes"] == 0
    assert doc["cost_vm_hours"] == doc["idle_vm_hours"] > 0


def test_a_standby_tier_refills_ready_in_the_resume_time_and_is_refilled_by_clones(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    pool = "  - name: a\n    size: 1\n    ready_ttl: 1440\n    standby: 2\n"
    result = _replay(tmp_path, redis_client, pool, HOURLY, clone_time=60, resume_time=15,
                     end=T0 + 3 * 3600)
    stats = result.pools["a"]
    assert (stats.checkouts, stats.hits, stats.waits) == (3, 3, [])
    assert stats.resumes == 3  # one standby VM resumed after each checkout
    assert stats.clones == 3 + 3  # both tiers filled, then one clone per checkout
    # ready is empty for one resume time after each checkout, not one clone time
    assert stats.idle_vm_seconds == pytest.approx(3 * 3600 - 3 * 15)
    # the refill clone starts at the checkout (the resuming VM still counts in the tier) and
    # enters standby when done: the tier is one VM short from the resume's end to the clone's
    assert stats.standby_vm_seconds == pytest.approx(2 * 3 * 3600 - 3 * (60 - 15))
    doc = result.document()["a"]
    assert doc["standby_vm_hours"] == round(stats.standby_vm_seconds / 3600, 2)
    assert doc["cost_vm_hours"] == round(
        (stats.idle_vm_seconds + 0.1 * stats.standby_vm_seconds) / 3600, 2)


@pytest.mark.parametrize(("state", "resume_time"), [("suspended", 15), ("powered_off", 40)])
def test_a_missed_checkout_waits_one_resume_time(
        tmp_path: Path, redis_client: redis.Redis, state: str, resume_time: float) -> None:
    pool = f"  - name: a\n    size: 1\n    standby: 1\n    standby_state: {state}\n"
    trace = [Checkout(T0, "a", 600.0), Checkout(T0, "a", 600.0)]
    result = _replay(tmp_path, redis_client, pool, trace, clone_time=600,
                     resume_time=resume_time)
    stats = result.pools["a"]
    assert (stats.checkouts, stats.hits, stats.waits, stats.resumes) == (2, 1, [resume_time], 1)


def test_a_pool_of_size_0_serves_a_checkout_from_standby_in_one_resume_time(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    # the missed checkout's on-demand request takes a suspended VM before it clones
    trace = [Checkout(T0, "a", 600.0)]
    result = _replay(tmp_path, redis_client, "  - name: a\n    size: 0\n    standby: 2\n",
                     trace, clone_time=600, resume_time=15)
    stats = result.pools["a"]
    assert (stats.checkouts, stats.hits, stats.waits, stats.resumes) == (1, 0, [15.0], 1)


def test_missed_checkouts_take_their_requests_vms_and_leave_the_ready_refill_to_the_next(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    # two misses: their requests take two standby VMs and the pool resumes a third for ready;
    # all three come 15 s later, and the checkout a minute on finds the ready one
    trace = [Checkout(T0, "a", 900.0)] * 3 + [Checkout(T0 + 60, "a", 900.0)]
    result = _replay(tmp_path, redis_client, "  - name: a\n    size: 1\n    standby: 3\n",
                     trace, clone_time=600, resume_time=15)
    stats = result.pools["a"]
    assert (stats.checkouts, stats.hits, stats.waits, stats.resumes) == (4, 2, [15.0, 15.0], 3)


BURST = [Checkout(T0 + 60 * i, "a", 900.0) for i in range(5)]
"""Five checkouts a minute apart: wider than a resume, well within a clone."""


def test_a_burst_is_served_warm_from_standby_where_the_same_ready_size_misses(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    plain = _replay(tmp_path, redis_client, "  - name: a\n    size: 1\n", BURST,
                    clone_time=600, resume_time=15).document()["a"]
    redis_client.flushall()
    tiered = _replay(tmp_path, redis_client, "  - name: a\n    size: 1\n    standby: 4\n",
                     BURST, clone_time=600, resume_time=15).document()["a"]
    assert (plain["hits"], plain["resumes"]) == (1, 0)
    assert (tiered["hits"], tiered["resumes"]) == (5, 4)
    assert tiered["hit_ratio"] == 1.0 > plain["hit_ratio"]
    assert tiered["standby_vm_hours"] > 0 and tiered["wait_p95_s"] == 0.0


def test_the_static_policy_keeps_a_standby_count_and_reads_auto_as_0(tmp_path: Path) -> None:
    pools = ("  - name: fixed\n    size: 1\n    standby: 3\n    standby_state: powered_off\n"
             "  - name: auto\n    size: 1\n    sizing: demand\n    standby: auto\n"
             "  - name: plain\n    size: 1\n")
    config = load_config(_config(tmp_path, pools), environ={})
    static = replay_config(config, ["fixed", "auto"], "static", redis_port=6379)
    tiers = {p.name: p.standby for p in static.config.pools}
    assert tiers["fixed"] is not None
    assert (tiers["fixed"].count, tiers["fixed"].state) == (3, "powered_off")
    assert tiers["auto"] is None and tiers["plain"] is None
    assert [n for n in static.notes if "standby" in n] == [
        "standby: auto read as 0 (no standby VMs) under the static policy: auto"]
    demand = replay_config(config, ["fixed", "auto"], "demand", redis_port=6379)
    tiers = {p.name: p.standby for p in demand.config.pools}
    assert tiers["fixed"] is not None and tiers["fixed"].count == 3
    assert tiers["auto"] is not None and tiers["auto"].count is None  # the sizer's
    assert any("standby: auto (auto): the standby target starts at 0" in n
               for n in demand.notes)


def test_a_configuration_wide_standby_auto_is_0_for_every_static_pool(
        tmp_path: Path) -> None:
    path = _config(tmp_path, "  - name: a\n    size: 1\n    sizing: demand\n",
                   settings="  standby: auto\n")
    setup = replay_config(load_config(path, environ={}), ["a"], "static", redis_port=6379)
    assert setup.config.pools[0].standby is None
    assert any("standby: auto read as 0" in n and ": a" in n for n in setup.notes)


@pytest.mark.parametrize(("option", "value"), [
    ("--resume-time", "-1"), ("--resume-time", "nan"), ("--standby-cost", "0"),
    ("--standby-cost", "1.5"),
])
def test_a_bad_resume_time_or_standby_cost_is_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("queued_at,platform,duration_s\n2025-09-04T17:25:47Z,a,10\n")
    config = _config(tmp_path, "  - name: a\n    size: 1\n")
    status = main(["replay", "--trace", str(trace), "--config", str(config), option, value])
    assert status == 2
    assert capsys.readouterr().err.startswith(f"vmpooler replay: {option}: must be")
