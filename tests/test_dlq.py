"""Dead letters: what the pool actors write (vmpooler's member format, request fields), and
``vmpooler dlq list`` / ``vmpooler dlq replay`` run as real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import redis
import yaml

from tests.harness import make_config, pool, started, wait_until
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.dlq_store import DeadLetter, parse_member
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]


def test_member_is_vmpoolers_format() -> None:
    entry = DeadLetter.now(vm="v1", pool="p", queue="clone", error_class="E",
                           error_message="boom", epoch=1_700_000_000.7, retry_count=2,
                           request_id="r1", pool_alias="alias")
    vm, epoch, body = entry.member().split(":", 2)
    assert (vm, epoch) == ("v1", "1700000000")
    assert list(json.loads(body)) == ["vm", "pool", "queue_from", "error_class",
                                      "error_message", "failed_at", "retry_count",
                                      "request_id", "pool_alias"]
    assert " " not in body  # Ruby's to_json is compact
    assert datetime.fromisoformat(json.loads(body)["failed_at"]).timestamp() == 1_700_000_000
    parsed = parse_member("clone", entry.member())
    assert (parsed.body(), parsed.epoch, parsed.member()) == (entry.body(), entry.epoch,
                                                              entry.member())
    plain = DeadLetter.now(vm="v2", pool="p", queue="ready", error_class="E",
                           error_message="x", epoch=5)
    assert "request_id" not in plain.member()
    assert parse_member("ready", "garbage").error_message == ""


def test_an_ondemand_clone_failure_names_its_request(redis_client: redis.Redis) -> None:
    config = make_config([pool("a", 0)], dlq_enabled=True, max_vm_retries=1)
    with started(redis_client, config, createvm_fail_percent=100) as h:
        request_id = h.system.request_ondemand({"a": 1}, request_id="req-1")
        assert request_id == "req-1"
        wait_until(lambda: redis_client.zcard(schema.dlq("clone")) >= 2, 10,
                   "a dead letter for the clone and for its retry")
        h.quiesce()
        entries = sorted((parse_member("clone", m) for m in
                          redis_client.zrange(schema.dlq("clone"), 0, -1)),
                         key=lambda e: e.retry_count)
        assert [(e.request_id, e.pool_alias, e.retry_count) for e in entries[:2]] == [
            ("req-1", "a", 0), ("req-1", "a", 1)]
        assert entries[0].error_class == "TransientProviderError"
        assert timefmt.parse_epoch(entries[0].failed_at) == int(h.clock.now())
        assert h.metrics.counts("vmpooler_dlq.clone.count", pool="a") >= 2


def test_a_pending_vm_gone_from_the_provider_is_a_dead_letter(redis_client: redis.Redis) -> None:
    redis_client.sadd(schema.pending("a"), "ghost")
    redis_client.hset(schema.vm("ghost"), mapping={"pool": "a", "template": "a",
                                                   "clone": timefmt.format_epoch(1e9)})
    config = make_config([pool("a", 0)], dlq_enabled=True)
    with started(redis_client, config) as h:  # missed by two listings: a dead letter
        wait_until(lambda: h.advance(5) or redis_client.zcard(schema.dlq("pending")), 10,
                   "a dead letter")
        (member,) = redis_client.zrange(schema.dlq("pending"), 0, -1)
        entry = parse_member("pending", member)
        assert (entry.vm, entry.error_class) == ("ghost", "VmNotFound")
    redis_client.flushall()
    redis_client.sadd(schema.pending("a"), "ghost")
    with started(redis_client, make_config([pool("a", 0)])) as h:  # dlq_enabled is false
        wait_until(lambda: h.advance(5) or not redis_client.sismember(schema.pending("a"),
                                                                      "ghost"), 10)
        assert not redis_client.exists(schema.dlq("pending"))


# -- the command line ------------------------------------------------------------------------

def _config(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(yaml.safe_dump({
        ":redis": {"server": "127.0.0.1", "port": port},
        ":providers": {":dummy": {"provider_class": "dummy"}},
        ":pools": [{"name": "a", "size": 1}, {"name": "b", "size": 1}],
    }))
    return path


def _dlq(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VMPOOLER, "dlq", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=60)


def _add(client: redis.Redis, queue: str, vm: str, pool_name: str, epoch: int) -> str:
    member = DeadLetter.now(vm=vm, pool=pool_name, queue=queue, error_class="Timeout",
                            error_message=f"{vm} failed", epoch=epoch).member()
    client.zadd(schema.dlq(queue), {member: epoch})
    return member


def test_dlq_list_and_replay(tmp_path: Path, redis_server: EmbeddedRedis,
                             redis_client: redis.Redis) -> None:
    config = _config(tmp_path, redis_server.port)
    c = redis_client
    _add(c, "pending", "lost1", "a", 100)  # in no queue: requeued to completed
    _add(c, "ready", "seen1", "a", 200)  # already in completed: entry removed
    c.sadd(schema.completed("a"), "seen1")
    reused = _add(c, "clone", "reused", "b", 300)  # the name was taken again: left running
    c.sadd(schema.running("b"), "reused")
    stray = _add(c, "clone", "stray", "gone-pool", 400)  # pool not configured: kept

    listed = _dlq(config, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [(e["queue"], e["vm"], e["pool"]) for e in entries] == [
        ("pending", "lost1", "a"), ("ready", "seen1", "a"), ("clone", "reused", "b"),
        ("clone", "stray", "gone-pool")]
    table = _dlq(config, "list", "--pool", "a")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["QUEUE", "FAILED", "AT", "POOL", "VM", "RETRIES", "REQUEST",
                                "ERROR"]
    assert "lost1" in lines[1] and "Timeout: lost1 failed" in lines[1]
    assert lines[-1] == "2 entries"
    assert _dlq(config, "list", "--queue", "ready", "--vm", "nobody").stdout.strip() == (
        "no dead-letter entries")

    before = {q: c.zrange(schema.dlq(q), 0, -1) for q in ("pending", "ready", "clone")}
    dry = _dlq(config, "replay", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would requeue pending entry of 'lost1'" in dry.stdout
    assert {q: c.zrange(schema.dlq(q), 0, -1) for q in before} == before
    assert not c.sismember(schema.completed("a"), "lost1")

    done = _dlq(config, "replay")
    assert done.returncode == 0, done.stderr
    assert c.sismember(schema.completed("a"), "lost1")
    assert not c.exists(schema.dlq("pending")) and not c.exists(schema.dlq("ready"))
    assert c.smembers(schema.running("b")) == {"reused"}
    assert not c.sismember(schema.completed("b"), "reused")
    assert c.zrange(schema.dlq("clone"), 0, -1) == [stray]
    assert reused not in c.zrange(schema.dlq("clone"), 0, -1)
    assert "kept      clone entry of 'stray'" in done.stdout
    assert done.stdout.splitlines()[-1] == (
        "4 selected: 1 requeued, 2 removed (already queued), 1 kept")
    woken = c.xrange(schema.commands())
    assert [(e[1]["kind"], e[1]["pool"]) for e in woken] == [("pool_changed", "a")]
    again = _dlq(config, "replay")
    assert again.stdout.splitlines()[-1] == "1 selected: 0 requeued, 0 removed (already " \
                                            "queued), 1 kept"


def test_dlq_without_a_running_embedded_redis_says_so(tmp_path: Path) -> None:
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump({":redis": {"data_dir": str(tmp_path / "nowhere")},
                                      ":pools": [{"name": "a", "size": 1}]}))
    result = _dlq(config, "list")
    assert result.returncode == 1
    assert "no embedded redis-server is running" in result.stderr
