"""``vmpooler manager --bind``: the manager's liveness, readiness and Prometheus listener.

The judgements (:class:`ManagerProbes`) over a system on the fake clock and real Redis, with
their own fake clock for the heartbeat's age; the listener (:class:`ProbeServer`) over HTTP
on loopback; and the shipped command as a real process beside a redis-server that goes away.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import yaml

from tests.harness import dummy_for, make_config, pool, started, wait_until
from tests.test_manager_process import processes, spawn, write_config  # noqa: F401
from vmpooler.actors.config import Config, MetricsSettings
from vmpooler.actors.config.model import PrometheusSettings
from vmpooler.actors.messages import ActorCrashed
from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.actors.pool.hostnames import HostnameGenerator
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, find_redis_server, free_port
from vmpooler.actors.system import PoolerSystem
from vmpooler.web.cli.probe_server import MAX_CONNECTIONS, MAX_REQUEST, ProbeServer, parse_bind
from vmpooler.web.cli.probes import ManagerProbes

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]
Address = tuple[str, int]


def two_pools() -> Config:
    return make_config([pool("alpha", 1), pool("beta", 1)])  # heartbeat every 5 s: max 15 s


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of the test's own, which the test may stop."""
    server = EmbeddedRedis(data_dir=tmp_path / "redis", persist=False, hardened=False,
                           binary=find_redis_server(prefer_system=True))
    server.start()
    yield server
    server.stop()


def fetch(address: Address, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        connection.request(method, path)
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


def get_json(address: Address, path: str) -> tuple[int, dict]:
    status, headers, body = fetch(address, path)
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(body)


@contextmanager
def listening(probes: ManagerProbes, **options: float) -> Iterator[Address]:
    server = ProbeServer(probes, ("127.0.0.1", 0), **options).start()
    try:
        yield server.address
    finally:
        server.stop()


# -- the judgements ------------------------------------------------------------------------------
def test_a_starting_manager_is_live_but_not_ready() -> None:
    probes = ManagerProbes(two_pools())
    assert probes.health() == (200, {"ok": True, "starting": True})
    assert probes.ready() == (503, {"ok": False, "error": "the manager is starting"})


def test_ready_while_its_own_heartbeat_is_fresh_on_the_injected_clock(
    redis_client: redis.Redis,
) -> None:
    with started(redis_client, two_pools()) as h:
        clock = FakeClock(start=h.clock.now())
        probes = ManagerProbes(h.system.config, clock=clock)
        probes.attach(h.system)
        me = h.system.manager_id
        wait_until(lambda: probes.ready()[1].get("pools") == 2, what="both pools' leases")
        assert probes.ready() == (200, {"ok": True, "manager": me, "heartbeat_age": 0.0,
                                        "pools": 2})
        clock.advance(15)  # the stale age: three 5 s intervals
        assert probes.ready()[0] == 200
        clock.advance(0.1)
        assert probes.ready() == (503, {"ok": False,
                                        "error": "heartbeat is 15.1 s old (max 15 s)"})
        clock.advance(31.9)
        assert probes.ready()[1]["error"] == "heartbeat is 47 s old (max 15 s)"
        assert probes.health() == (200, {"ok": True})  # a late beat is no reason to kill it
        probes.close()


def test_another_managers_heartbeat_does_not_make_this_one_ready(
    redis_client: redis.Redis,
) -> None:
    with started(redis_client, two_pools()) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        h.quiesce()  # the heartbeat actor's first beat is its own message: let it land first
        redis_client.zrem(schema.manager_heartbeat(), h.system.manager_id)
        redis_client.zadd(schema.manager_heartbeat(), {"other:1:0": h.clock.now()})
        assert probes.ready() == (503, {"ok": False, "error": "no heartbeat written yet"})
        h.advance(5)  # the next beat
        assert probes.ready()[0] == 200
        probes.close()


def test_a_redis_outage_fails_readiness_but_never_liveness(
    own_redis: EmbeddedRedis,
) -> None:
    client = redis.Redis(port=own_redis.port, decode_responses=True)
    with started(client, two_pools()) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        assert probes.ready()[0] == 200
        h.quiesce()  # no first beat still in the heartbeat actor's mailbox
        own_redis.stop()
        status, body = probes.ready()
        assert status == 503 and body["error"].startswith("redis: ")
        assert str(own_redis.port) in body["error"]
        assert probes.health() == (200, {"ok": True})
        own_redis.start()  # back, empty, on the same port
        assert probes.ready() == (503, {"ok": False, "error": "no heartbeat written yet"})
        h.advance(5)  # the next beat
        assert probes.ready()[0] == 200
        probes.close()
    client.close()


def test_an_actor_given_up_by_the_supervisor_fails_liveness(redis_client: redis.Redis) -> None:
    with started(redis_client, two_pools()) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        history = h.system.actor_ref("history")
        assert history is not None and probes.health() == (200, {"ok": True})
        supervisor = history.proxy().supervisor.get(timeout=10)
        for _ in range(6):  # what a crashing child tells its supervisor; the budget is 5
            supervisor.tell(ActorCrashed("history", "boom", "RuntimeError"))
        expected = (503, {"ok": False, "error": "actors given up by the supervisor: history"})
        wait_until(lambda: probes.health() == expected, what="the supervisor to give up")
        assert probes.ready() == expected
        history.stop()  # out of the directory: the system's stop no longer knows it
        probes.close()


def test_a_stopped_system_is_not_live(redis_client: redis.Redis) -> None:
    with started(redis_client, two_pools()) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        h.system.stop()
        stopped = (503, {"ok": False, "error": "the manager has stopped"})
        assert probes.health() == stopped and probes.ready() == stopped
        probes.close()


# -- the listener --------------------------------------------------------------------------------
def test_listener_answers_get_and_head_and_json_for_everything_else(
    redis_client: redis.Redis,
) -> None:
    with started(redis_client, two_pools()) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        with listening(probes) as address:
            assert get_json(address, "/healthcheck") == (200, {"ok": True})
            assert get_json(address, "/healthcheck/?verbose=1") == (200, {"ok": True})
            status, body = get_json(address, "/ready")
            assert status == 200 and body["manager"] == h.system.manager_id
            status, headers, raw = fetch(address, "/ready", "HEAD")
            assert (status, raw) == (200, b"") and int(headers["Content-Length"]) > 0
            assert get_json(address, "/nope") == (404, {"ok": False, "error": "not found"})
            assert get_json(address, "/prometheus") == (
                404, {"ok": False, "error": "prometheus is not configured"})
            for method in ("POST", "DELETE", "PUT"):
                status, headers, raw = fetch(address, "/ready", method)
                assert status == 405 and headers["Allow"] == "GET, HEAD"
                assert json.loads(raw) == {"ok": False, "error": "method not allowed"}
            h.system.stop()
            assert get_json(address, "/healthcheck") == (
                503, {"ok": False, "error": "the manager has stopped"})


def test_listener_serves_prometheus_at_the_configured_endpoint(
    redis_client: redis.Redis,
) -> None:
    config = dataclasses.replace(two_pools(), metrics=MetricsSettings(
        backend="prometheus", prometheus=PrometheusSettings(endpoint="/metrics")))
    clock = FakeClock()
    system = PoolerSystem.start(
        config, redis_client=redis_client, clock=clock, scheduler=clock,
        metrics=PrometheusMetrics("vmpooler", ["vmpooler_instance:probes"]),
        providers={"dummy": dummy_for(config)}, hostnames=HostnameGenerator(rng=random.Random(1)),
        resolver=lambda _fqdn: False)
    try:
        probes = ManagerProbes(config)
        with listening(probes) as address:
            assert fetch(address, "/metrics")[0] == 503  # not attached yet: starting
            probes.attach(system)

            def exposed() -> bytes:
                status, headers, body = fetch(address, "/metrics")
                assert status == 200 and headers["Content-Type"].startswith("text/plain")
                return body if b'vmpooler_ready{poolname="alpha"' in body else b""

            wait_until(exposed, 10, "alpha's ready gauge")
            assert get_json(address, "/prometheus") == (404, {"ok": False, "error": "not found"})
    finally:
        system.stop()


def fetch_as(address: Address, path: str, headers: dict[str, str]) -> tuple[int, dict]:
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


FORWARDED = [{"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"},
             {"X-Real-IP": "203.0.113.9"}]


@pytest.mark.slow
def test_ready_names_the_manager_only_to_local_clients_or_a_valid_token(
    own_redis: EmbeddedRedis,
) -> None:
    client = redis.Redis(port=own_redis.port, decode_responses=True)
    config = dataclasses.replace(two_pools(), auth={"provider": "dummy"})
    client.hset(schema.token("goodtoken"), mapping={"user": "bob", "created": "now"})
    with started(client, config) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        with listening(probes) as address:
            wait_until(lambda: get_json(address, "/ready")[0] == 200, 10, "ready")
            me = h.system.manager_id
            assert get_json(address, "/ready")[1]["manager"] == me  # local: details
            for headers in FORWARDED:  # through a proxy on this host: not local
                status, body = fetch_as(address, "/ready", headers)
                assert status == 200 and "manager" not in body and me not in json.dumps(body)
                assert body["ok"] is True and body["pools"] == 2
                for token in ("nosuchtoken", "bad token!", ""):
                    assert "manager" not in fetch_as(
                        address, "/ready", {**headers, "X-AUTH-TOKEN": token})[1]
                status, body = fetch_as(address, "/ready", {**headers, "X-AUTH-TOKEN": "goodtoken"})
                assert (status, body["manager"]) == (200, me)
            own_redis.stop()  # Redis's error names its address; a token cannot be checked
            status, body = get_json(address, "/ready")
            assert status == 503 and str(own_redis.port) in body["error"]
            for headers in FORWARDED:
                for token in ({}, {"X-AUTH-TOKEN": "goodtoken"}):
                    assert fetch_as(address, "/ready", {**headers, **token}) == (
                        503, {"ok": False, "error": "redis unreachable"})
        probes.close()
    client.close()


def test_without_auth_a_token_shows_no_details() -> None:
    probes = ManagerProbes(two_pools())
    assert not probes.sees_details("203.0.113.9", {"X-AUTH-TOKEN": "any"}.get)
    assert not probes.sees_details(None, lambda _name: None)
    assert probes.sees_details("::1", lambda _name: None)
    assert probes.sees_details("::ffff:127.0.0.2", lambda _name: None)
    assert not probes.sees_details("127.0.0.1", {"X-Real-IP": "127.0.0.1"}.get)


def trickle_until_closed(address: Address, limit: float) -> float:
    """Send a request's head a byte at a time until the server closes the connection (a
    read with a short timeout between bytes); the seconds that took, ``limit`` at most."""
    start = time.monotonic()
    with socket.create_connection(address, timeout=10) as client:
        client.settimeout(0.05)
        while time.monotonic() - start < limit:
            try:
                client.sendall(b"X")
                if client.recv(100) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:  # reset: closed
                break
    return time.monotonic() - start


def test_listener_drops_a_stalled_or_trickling_client_and_answers_an_oversized_request(
    redis_client: redis.Redis,
) -> None:
    with started(redis_client, two_pools()) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        with listening(probes, read_timeout=0.3) as address:
            with socket.create_connection(address, timeout=10) as stalled:
                stalled.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n")  # and nothing more
                assert stalled.recv(100) == b""  # closed after 0.3 s, unanswered
            assert trickle_until_closed(address, 5) < 5  # a byte every 50 ms: no way around
            with socket.create_connection(address, timeout=10) as big:
                big.sendall(b"GET /ready HTTP/1.0\r\nX-Pad: " + b"a" * MAX_REQUEST + b"\r\n\r\n")
                answer = big.makefile("rb").read()
            assert answer.startswith(b"HTTP/1.0 431 ")
            assert answer.endswith(b'{"ok": false, "error": "request too large"}')
            assert get_json(address, "/healthcheck") == (200, {"ok": True})


def test_idle_connections_hold_no_slot_and_the_oldest_makes_room(
    redis_client: redis.Redis,
) -> None:
    with started(redis_client, two_pools()) as h:
        probes = ManagerProbes(h.system.config, clock=h.clock)
        probes.attach(h.system)
        server = ProbeServer(probes, ("127.0.0.1", 0), read_timeout=30, max_connections=8)
        with server:
            server.start()
            address = server.address
            idle = [socket.create_connection(address, timeout=10) for _ in range(8)]
            try:
                wait_until(lambda: server.waiting == 8, 10, "8 connections waiting")
                for _ in range(3):  # answered while every waiting place is taken
                    assert get_json(address, "/healthcheck") == (200, {"ok": True})
                with socket.create_connection(address, timeout=10) as ninth:
                    assert idle[0].recv(100) == b""  # the oldest closed to make room
                    ninth.sendall(b"GET /healthcheck HTTP/1.0\r\n\r\n")
                    assert ninth.makefile("rb").read().startswith(b"HTTP/1.0 200 ")
                    assert server.waiting == 7  # idle[1:]; the ninth was answered
            finally:
                for connection in idle:
                    connection.close()


def test_the_default_number_of_waiting_connections_is_far_above_a_handful() -> None:
    assert MAX_CONNECTIONS >= 500


@pytest.mark.parametrize(("text", "address"), [
    ("127.0.0.1:4567", ("127.0.0.1", 4567)), ("0.0.0.0:0", ("0.0.0.0", 0)),
    ("[::1]:9090", ("::1", 9090)), ("probe.example:80", ("probe.example", 80)),
])
def test_bind_address_syntax(text: str, address: Address) -> None:
    assert parse_bind(text) == address


@pytest.mark.parametrize("text", ["4567", ":4567", "host:", "host:http", "host:65536", "::1:80"])
def test_bind_address_syntax_errors(text: str) -> None:
    with pytest.raises(Exception, match="expected HOST:PORT"):
        parse_bind(text)


# -- the shipped command -------------------------------------------------------------------------
def answer(port: int, path: str) -> tuple[int, str]:
    try:
        status, _, body = fetch(("127.0.0.1", port), path)
    except (ConnectionError, http.client.HTTPException):
        return 0, ""
    return status, body.decode()


@pytest.mark.integration
def test_manager_process_answers_probes_and_stays_live_through_a_redis_outage(
    tmp_path: Path, own_redis: EmbeddedRedis,
    processes: list[subprocess.Popen[str]],
) -> None:
    config = write_config(tmp_path / "f.yaml", redis_port=own_redis.port,
                          pools={"alpha": 2}, dummy={})
    document = yaml.safe_load(config.read_text())
    document[":prometheus"] = {"multiprocess_dir": str(tmp_path / "prometheus")}
    config.write_text(yaml.safe_dump(document))
    port = free_port()
    log = tmp_path / "m.log"
    manager = spawn(processes, "manager", "--config", str(config),
                    "--bind", f"127.0.0.1:{port}", log=log)
    wait_until(lambda: answer(port, "/ready")[0] == 200, 30, "/ready to answer 200")
    ready = json.loads(answer(port, "/ready")[1])
    assert ready["manager"].split(":")[1] == str(manager.pid) and ready["pools"] == 1
    assert answer(port, "/healthcheck") == (200, '{"ok": true}')
    status, body = fetch_as(("127.0.0.1", port), "/ready", {"X-Forwarded-For": "203.0.113.9"})
    assert status == 200 and "manager" not in body and str(manager.pid) not in json.dumps(body)
    wait_until(lambda: 'vmpooler_ready{poolname="alpha"' in answer(port, "/prometheus")[1],
               30, "the manager's gauges in /prometheus")
    own_redis.stop()
    wait_until(lambda: answer(port, "/ready")[0] == 503, 10, "/ready to answer 503")
    assert json.loads(answer(port, "/ready")[1])["error"].startswith("redis: ")
    assert fetch_as(("127.0.0.1", port), "/ready", {"X-Real-IP": "203.0.113.9"}) == (
        503, {"ok": False, "error": "redis unreachable"})
    assert answer(port, "/healthcheck") == (200, '{"ok": true}')
    manager.send_signal(signal.SIGTERM)
    assert manager.wait(timeout=15) == 0
    text = log.read_text()
    assert f"[*] [manager] probes on 127.0.0.1:{port}" in text
    assert "Traceback" not in text and "/healthcheck" not in text  # probes log at debug only


def test_an_address_that_cannot_be_bound_is_one_line_and_exit_1(tmp_path: Path) -> None:
    config = write_config(tmp_path / "f.yaml", redis_port=free_port(), pools={"a": 1}, dummy={})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(  # the flag wins over a (broken) environment variable
            [*VMPOOLER, "manager", "--config", str(config), "--bind", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "VMPOOLER_MANAGER_BIND": "nonsense"})
    assert result.returncode == 1
    assert result.stderr.startswith(f"vmpooler: refusing to start: cannot listen on "
                                    f"127.0.0.1:{port}: ")
    assert "Address already in use" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_bad_bind_syntax_is_a_usage_error(tmp_path: Path, where: str) -> None:
    args, env = [*VMPOOLER, "manager"], dict(os.environ)
    if where == "flag":
        args += ["--bind", "localhost"]
    else:
        env["VMPOOLER_MANAGER_BIND"] = "localhost"
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env,
                            cwd=tmp_path)
    assert result.returncode == 2
    assert "argument --bind: expected HOST:PORT" in result.stderr
    assert "'localhost'" in result.stderr and "Traceback" not in result.stderr
