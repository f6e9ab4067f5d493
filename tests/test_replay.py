"""``vmpooler replay``: the real pool actors on a fake clock against a trace of checkouts.

Known answers on small synthetic traces (a size-0 pool: every checkout misses and waits one
clone time; a big static pool: every checkout hits and the idle VM-time is the pool's size
times the window, less one clone time per refill), the JSON shape, and the command's
answer to a trace or configuration it cannot replay (exit 2, one line, no traceback).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from vmpooler.actors.config import load_config
from vmpooler.actors.replay.configuration import ReplayInputError, replay_config
from vmpooler.actors.replay.report import RunResult, as_json, as_table
from vmpooler.actors.replay.run import replay
from vmpooler.actors.sizing.trace import Checkout
from vmpooler.actors.storage import schema
from vmpooler.web.cli.command import main

T0 = 1_757_000_000.0


def _config(tmp_path: Path, pools: str, settings: str = "") -> Path:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(f":config:\n  task_limit: 10\n{settings}:pools:\n{pools}" if pools
                    else f":config:\n  task_limit: 10\n{settings}")
    return path


def _replay(tmp_path: Path, client: redis.Redis, pools: str, trace: list[Checkout], *,
            clone_time: float, end: float | None = None) -> RunResult:
    config = load_config(_config(tmp_path, pools), environ={})
    setup = replay_config(config, [c.pool for c in trace], "static", redis_port=6379)
    return replay(setup, trace, policy="static", clone_time=clone_time, client=client, end=end)


def test_every_checkout_of_a_size_0_pool_misses_and_waits_one_clone_time(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    trace = [Checkout(T0 + 600 * i, "empty", 120.0) for i in range(3)]
    result = _replay(tmp_path, redis_client, "  - name: empty\n    size: 0\n", trace,
                     clone_time=90)
    stats = result.pools["empty"]
    assert (stats.checkouts, stats.hits) == (3, 0)
    assert stats.waits == [90.0, 90.0, 90.0]
    assert stats.clones == 3  # one on-demand clone per miss
    assert stats.idle_vm_seconds == 0.0
    assert result.unserved == 0
    series = result.series.series["empty"]  # the page's series: three misses, no ready VM
    assert (sum(series.checkouts), sum(series.misses), sum(series.ready_seconds)) == (3, 3, 0)
    # each checkout is in the pool's checkout log once, as a miss (its later VM is not)
    assert redis_client.zcard(schema.demand("empty")) == 0
    logged = redis_client.zrange(schema.demand_misses("empty"), 0, -1)
    assert len(logged) == 3 and all(m.split(":")[1].startswith("-") for m in logged)


def test_a_missed_checkout_takes_the_first_vm_to_become_ready_in_its_pool(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    # no on-demand clones at all: the second checkout can only get the pool's refill
    path = _config(tmp_path, "  - name: one\n    size: 1\n",
                   settings="  ondemand_clone_limit: 0\n")
    trace = [Checkout(T0, "one", 600.0), Checkout(T0, "one", 600.0)]
    setup = replay_config(load_config(path, environ={}), ["one"], "static", redis_port=6379)
    result = replay(setup, trace, policy="static", clone_time=45, client=redis_client)
    stats = result.pools["one"]
    assert (stats.checkouts, stats.hits, stats.waits) == (2, 1, [45.0])
    logged = (redis_client.zrange(schema.demand("one"), 0, -1)
              + redis_client.zrange(schema.demand_misses("one"), 0, -1))
    assert len(logged) == 2  # one served, one miss: its later VM is not logged again
    assert sum(m.split(":")[1].startswith("-") for m in logged) == 1


def test_a_big_static_pool_serves_every_checkout_warm(
        tmp_path: Path, redis_client: redis.Redis) -> None:
    trace = [Checkout(T0 + 900 * i, "big", 300.0) for i in range(4)]
    end = T0 + 3600
    pool = "  - name: big\n    size: 5\n    ready_ttl: 1440\n"  # no VM recycled meanwhile
    result = _replay(tmp_path, redis_client, pool, trace, clone_time=60, end=end)
    stats = result.pools["big"]
    assert (stats.checkouts, stats.hits, stats.waits) == (4, 4, [])
    # five ready VMs all along, but for one clone time after each checkout (the refill)
    assert stats.idle_vm_seconds == pytest.approx(5 * 3600 - 4 * 60)
    assert stats.clones == 5 + 4
    # the page's series hold the same ready VM-seconds, one checkout a quarter hour
    series = result.series.series["big"]
    assert sum(series.ready_seconds) == pytest.approx(stats.idle_vm_seconds)
    assert (sum(series.checkouts), sum(series.misses), max(series.ready_max)) == (4, 0, 5)
    assert series.target == [None] * result.series.count  # static: no demand target
    doc = result.document()
    assert doc["big"]["hit_ratio"] == 1.0
    assert doc["total"]["idle_vm_hours"] == round((5 * 3600 - 4 * 60) / 3600, 2)


def test_an_alias_is_served_by_its_pools(tmp_path: Path, redis_client: redis.Redis) -> None:
    trace = [Checkout(T0, "linux", 60.0), Checkout(T0 + 1, "linux", 60.0)]
    pools = ("  - name: a\n    size: 1\n    alias: [linux]\n"
             "  - name: b\n    size: 1\n    alias: [linux]\n")
    result = _replay(tmp_path, redis_client, pools, trace, clone_time=30)
    assert sum(s.hits for s in result.pools.values()) == 2
    assert {n: s.checkouts for n, s in result.pools.items()} == {"a": 1, "b": 1}


def test_a_platform_without_a_pool_is_named(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "  - name: a\n    size: 1\n"), environ={})
    with pytest.raises(ReplayInputError, match="'windows'"):
        replay_config(config, ["a", "windows"], "static", redis_port=6379)


def test_pools_are_made_up_from_the_platforms_when_the_configuration_has_none(
        tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, ""), environ={})
    setup = replay_config(config, ["x", "y", "x"], "static", redis_port=6379)
    assert [(p.name, p.size) for p in setup.config.pools] == [("x", 1), ("y", 1)]
    assert any("no pools" in note for note in setup.notes)


def test_the_replay_keeps_the_pools_loop_delays(tmp_path: Path) -> None:
    path = _config(tmp_path, "  - name: a\n    size: 1\n",
                   settings="  check_loop_delay_min: 7\n  check_loop_delay_max: 70\n")
    setup = replay_config(load_config(path, environ={}), ["a"], "static", redis_port=6379)
    pool = setup.config.pools[0]
    assert pool.loop_delays(setup.config.settings)[:2] == (7, 70)
    assert pool.provider == "dummy"


def test_the_json_document_is_keyed_by_policy_then_pool_and_total() -> None:
    from vmpooler.actors.replay.report import PoolStats
    result = RunResult("static", {"a": PoolStats(4, 3, [10.0], 7200.0, 5, 36000.0, 2),
                                  "b": PoolStats(1, 1, [], 3600.0, 1)}, 3600.0, 1.0,
                       standby_cost=0.25)
    doc = json.loads(as_json([result]))
    fields = {"checkouts", "hits", "hit_ratio", "wait_mean_s", "wait_p95_s",
              "idle_vm_hours", "clones", "standby_vm_hours", "resumes", "cost_vm_hours"}
    assert set(doc) == {"static"}
    assert set(doc["static"]) == {"a", "b", "total"}
    assert set(doc["static"]["a"]) == fields
    assert doc["static"]["a"]["cost_vm_hours"] == 2.0 + 0.25 * 10.0
    assert doc["static"]["b"]["cost_vm_hours"] == doc["static"]["b"]["idle_vm_hours"] == 1.0
    assert doc["static"]["total"] == {"checkouts": 5, "hits": 4, "hit_ratio": 0.8,
                                      "wait_mean_s": 10.0, "wait_p95_s": 10.0,
                                      "idle_vm_hours": 3.0, "clones": 6,
                                      "standby_vm_hours": 10.0, "resumes": 2,
                                      "cost_vm_hours": 5.5}
    table = as_table(result).splitlines()
    assert table[1].split()[:3] == ["pool", "checkouts", "hits"]
    assert table[1].split()[-5:] == ["standby", "VM-h", "resumes", "cost", "VM-h"]
    assert table[2].split()[-3:] == ["10.00", "2", "4.50"]
    assert len({len(line) for line in table[1:5]}) == 1  # aligned columns
    assert "idle VM-h + 0.25 x standby VM-h" in table[6]


@pytest.mark.parametrize(("content", "where"), [
    ("queued_at,platform\n2025-09-04T17:25:47Z,a\n", ":1: column duration_s: missing column"),
    ("queued_at,platform,duration_s\n2025-09-04T17:25:47Z,a,10\nyesterday,a,3\n",
     ":3: column queued_at: bad time"),
    ("queued_at,platform,duration_s\n2025-09-04T17:25:47Z,a,-1\n",
     ":2: column duration_s: negative"),
    ("start_time,pool,duration_s\n2025-09-04T17:25:47Z,a,ten\n",
     ":2: column duration_s: not a number"),
])
def test_a_bad_trace_is_one_line_naming_file_line_and_column_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, where: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(content)
    config = _config(tmp_path, "  - name: a\n    size: 1\n")
    status = main(["replay", "--trace", str(trace), "--config", str(config)])
    err = capsys.readouterr().err
    assert status == 2
    assert f"{trace}{where}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_missing_pool_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("queued_at,platform,duration_s\n2025-09-04T17:25:47Z,windows,10\n")
    config = _config(tmp_path, "  - name: a\n    size: 1\n")
    assert main(["replay", "--trace", str(trace), "--config", str(config)]) == 2
    assert "no pool or alias for the trace's platform(s) 'windows'" in capsys.readouterr().err


def test_start_and_hours_choose_the_window() -> None:
    from vmpooler.web.cli.replay import _window
    trace = [Checkout(T0 + 1800 * i, "a", 1.0) for i in range(6)]
    chosen, end = _window(trace, "2025-09-04T16:03:20Z", 1.0)  # T0 + 1800
    assert [c.t for c in chosen] == [T0 + 1800, T0 + 3600]
    assert end == T0 + 1800 + 3600
    assert _window(trace, None, None) == (trace, None)
    with pytest.raises(ReplayInputError, match="--start"):
        _window(trace, "tomorrow", None)
    with pytest.raises(ReplayInputError, match="--hours"):
        _window(trace, None, 0)


@pytest.mark.parametrize(("option", "message"), [
    (["--report", "{tmp}/missing/page.html"], "--report: {tmp}/missing is not a directory"),
    (["--report", "{tmp}"], "--report: {tmp} is a directory"),
    (["--progress-every", "0"], "--progress-every: must be above 0"),
])
def test_a_bad_report_or_progress_option_is_one_line_and_exit_2_before_any_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str],
        message: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("queued_at,platform,duration_s\n2025-09-04T17:25:47Z,a,10\n")
    config = _config(tmp_path, "  - name: a\n    size: 1\n")
    args = [part.format(tmp=tmp_path) for part in option]
    assert main(["replay", "--trace", str(trace), "--config", str(config), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vmpooler replay: {message.format(tmp=tmp_path)}"), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
