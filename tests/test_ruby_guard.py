"""A manager refuses to start beside a running vmpooler (Ruby) manager, and our managers'
``check`` stamps say they are ours (``check_by``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import make_config, pool, started, wait_until
from vmpooler.actors.config import Config
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.service.ruby_guard import (
    ForeignManagerError,
    foreign_window,
    refuse_beside_foreign_manager,
)
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.check_stamps import (
    read_ready_stamps,
    stamp_fields,
    stamp_writer,
    written_by_us,
)
from vmpooler.actors.storage.store import Store

NOW = FakeClock().now()
"""Where every harness's fake clock starts."""


def _config() -> Config:
    return make_config([pool("a", 2), pool("b", 1)])


def _ready(client: redis.Redis, pool_name: str, vm: str, **fields: str) -> None:
    client.sadd(schema.ready(pool_name), vm)
    client.hset(schema.vm(vm), mapping={"pool": pool_name, "template": pool_name, **fields})


def _ruby_stamp(age: float) -> str:
    """What vmpooler writes: ``check`` only, Ruby ``Time#to_s``, ``age`` seconds before NOW."""
    return timefmt.format_epoch(NOW - age)


# -- our stamps ------------------------------------------------------------------------------
class _Holding:
    """A fence over pool ``a``'s lease, held as the lease key says."""

    key = schema.lease("pool", "a")

    def held(self) -> str | None:
        return "3 m1:1:1"


@pytest.mark.parametrize("fenced", [False, True], ids=["plain", "fenced"])
def test_our_check_stamps_name_their_manager(redis_client: redis.Redis, fenced: bool) -> None:
    store = Store(redis_client).owned_by("host:42:1700000000")
    if fenced:
        redis_client.set(_Holding.key, _Holding().held())
        store = store.with_fence(_Holding())
    redis_client.hset(schema.vm("v2"), "check_by", "other:1:1 stale")
    store.set_check_times({"v1": "2023-11-14 22:13:20 +0000", "v2": "2023-11-14 22:13:21 +0000"})
    for vm, value in (("v1", "2023-11-14 22:13:20 +0000"), ("v2", "2023-11-14 22:13:21 +0000")):
        fields = redis_client.hgetall(schema.vm(vm))
        assert fields == {"check": value, "check_by": f"host:42:1700000000 {value}"}
        assert written_by_us(fields["check"], fields["check_by"])
        assert stamp_writer(fields["check_by"]) == "host:42:1700000000"
        # vmpooler reads the stamp back (Time.parse); so do we, to the second
        assert timefmt.parse_epoch(fields["check"]) is not None


def test_a_stamp_overwritten_by_someone_else_is_not_ours() -> None:
    ours = stamp_fields("m:1:1", "2023-11-14 22:13:20 +0000")
    assert written_by_us(ours["check"], ours["check_by"])
    assert not written_by_us("2023-11-14 22:14:25 +0000", ours["check_by"])  # Ruby, later
    assert not written_by_us("2023-11-14 22:13:20 +0000", None)
    assert not written_by_us(None, ours["check_by"])
    assert not written_by_us("x", "no-space")


def test_read_ready_stamps_reads_only_ready_vms(redis_client: redis.Redis) -> None:
    _ready(redis_client, "a", "r1", check="c1")
    _ready(redis_client, "b", "r2", **stamp_fields("m:1:1", "c2"))
    redis_client.sadd(schema.running("a"), "run1")
    redis_client.hset(schema.vm("run1"), "check", "c3")
    stamps = read_ready_stamps(redis_client, ["a", "b", "a", "none"])
    assert [(s.pool, s.vm, s.check, s.ours) for s in stamps] == [
        ("a", "r1", "c1", False), ("b", "r2", "c2", True)]


# -- the guard at start ------------------------------------------------------------------------
def test_refuses_beside_a_recent_foreign_stamp_and_writes_nothing(
    redis_client: redis.Redis,
) -> None:
    _ready(redis_client, "a", "ours-1", **stamp_fields("m:1:1", _ruby_stamp(5)))
    _ready(redis_client, "b", "ruby-vm", check=_ruby_stamp(42), ready=_ruby_stamp(100))
    redis_client.set(schema.tasks_clone(), 3)  # a Ruby clone in flight: never zeroed
    before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
    with pytest.raises(ForeignManagerError) as refused, started(redis_client, _config()):
        pass
    message = str(refused.value)
    assert "Ruby vmpooler manager appears to be running on this Redis" in message
    assert "'ruby-vm'" in message and "pool 'b'" in message and "checked 42s ago" in message
    assert "will not run beside it" in message and "\n" not in message
    assert refused.value.stamp.vm == "ruby-vm"
    assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == before


def test_starts_beside_foreign_stamps_older_than_the_window(redis_client: redis.Redis) -> None:
    config = _config()
    window = foreign_window(config)
    assert window == 2 * 60 + 60  # vm_checktime 1 min, vmpooler's 60 s loop delay
    _ready(redis_client, "a", "old", check=_ruby_stamp(window + 1))
    assert refuse_beside_foreign_manager(redis_client, config, NOW) == 1
    with started(redis_client, config) as h:
        assert h.system.actor_ref("pool:a") is not None
    # one second younger than the window: a running manager
    _ready(redis_client, "a", "young", check=_ruby_stamp(window - 1))
    with pytest.raises(ForeignManagerError):
        refuse_beside_foreign_manager(redis_client, config, NOW)


def test_starts_with_no_ready_vm(redis_client: redis.Redis) -> None:
    redis_client.sadd(schema.running("a"), "taken")  # stamps off the ready queue do not count
    redis_client.hset(schema.vm("taken"), "check", _ruby_stamp(1))
    with started(redis_client, _config()) as h:
        assert h.system.actor_ref("pool:a") is not None


def test_a_published_pool_not_configured_here_counts(redis_client: redis.Redis) -> None:
    redis_client.sadd(schema.pools(), "rubys-own")
    _ready(redis_client, "rubys-own", "ruby-vm", check=_ruby_stamp(3))
    with pytest.raises(ForeignManagerError, match="pool 'rubys-own'"):
        refuse_beside_foreign_manager(redis_client, _config(), NOW)


def test_the_window_follows_vm_checktime_and_the_longest_loop_delay() -> None:
    config = make_config([pool("a", 1, check_loop_delay_max=300)], vm_checktime=5)
    assert foreign_window(config) == 2 * 300 + 300


def test_starts_beside_another_of_our_managers_and_after_our_own_run(
    redis_client: redis.Redis,
) -> None:
    config = _config()
    with started(redis_client, config) as first:
        ready = first.wait_full("a", 2)

        def all_checked() -> bool:
            first.advance(5)  # the next cycle checks the ready VMs
            stamps = read_ready_stamps(redis_client, ["a"])
            return {s.vm for s in stamps if s.check} == ready

        wait_until(all_checked, 10, "the ready VMs to be checked")
        stamps = read_ready_stamps(redis_client, ["a"])
        assert all(s.ours for s in stamps)
        assert {stamp_writer(s.check_by) for s in stamps} == {first.system.manager_id}
        with started(redis_client, config) as second:  # beside a live manager of ours
            assert second.system.actor_ref("pool:a") is not None
    with started(redis_client, config) as again:  # after our own run, stamps fresh
        assert again.system.actor_ref("pool:a") is not None


# -- the commands ------------------------------------------------------------------------------
def _cli_config(path: Path, port: int) -> Path:
    document = {
        ":config": {"check_loop_delay_min": 1, "check_loop_delay_max": 2},
        ":redis": {"server": "127.0.0.1", "port": port},
        ":providers": {":dummy": {"provider_class": "dummy"}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [{"name": "a", "size": 1, "provider": "dummy", "dns_plugin": "local"}],
    }
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.integration
@pytest.mark.parametrize("command", ["manager", "run"])
def test_the_commands_exit_with_one_line_saying_why(
    redis_client: redis.Redis, tmp_path: Path, command: str,
) -> None:
    port = redis_client.connection_pool.connection_kwargs["port"]
    config = _cli_config(tmp_path / "vmpooler.yaml", port)
    _ready(redis_client, "a", "ruby-vm", check=timefmt.format_epoch(redis_client.time()[0]))
    extra = ["--bind", "127.0.0.1:1"] if command == "run" else []
    done = subprocess.run(
        [sys.executable, "-m", "vmpooler.web.cli", command, "--config", str(config), *extra],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("vmpooler: refusing to start: a Ruby vmpooler manager appears")
    assert "'ruby-vm' of pool 'a'" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert not redis_client.exists(schema.manager_heartbeat())


def test_run_worker_refuses_when_the_ruby_manager_came_after_the_master_looked(
    redis_client: redis.Redis, tmp_path: Path,
) -> None:
    from vmpooler.web.api_context import ApiContext
    from vmpooler.web.cli.serve import ApiServer, ServeOptions

    config = _config()
    _ready(redis_client, "a", "ruby-vm", check=timefmt.format_epoch(redis_client.time()[0]))
    server = ApiServer(config, ServeOptions(), with_manager=True)
    server.state.contexts.append(ApiContext(config=config, redis=redis_client))
    with pytest.raises(SystemExit) as exited:
        server._post_worker_init(None)
    assert exited.value.code == 3  # gunicorn: "Worker failed to boot", the master exits 3
    assert server.state.system is None
