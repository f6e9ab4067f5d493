"""Mixed deployments with vmpooler 3.9.1: its API in front of our manager on one Redis, and
our API reading a Redis its API wrote.

vmpooler's API sends our manager no command: everything here reaches the manager through the
Redis schema alone, at its periodic cycle (``check_loop_delay_min`` = 1 s).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.differential import seed
from tests.differential.client import Answer, send
from tests.differential.config import write_config
from tests.differential.processes import (
    Api,
    RedisServer,
    our_api,
    our_manager,
    redis_server,
    require_ruby,
    ruby_api,
)
from tests.differential.seed import PASSWORD, TOKEN, USER
from tests.harness import wait_until

pytestmark = pytest.mark.integration

V3 = "/api/v3"
SIZES = {"pool1": 5, "pool2": 2, "pool3": 1}
FAST_CYCLES = "  check_loop_delay_min: 1\n  check_loop_delay_max: 2\n  task_limit: 20\n"


def call(api: Api, method: str, path: str, body: Any = None, **kw: Any) -> Answer:
    payload = None if body is None else json.dumps(body).encode()
    return send(api.port, method, path, body=payload, **kw)


def ready(server: RedisServer, pool: str) -> int:
    return int(server.client.scard(f"vmpooler__ready__{pool}"))


def filled(server: RedisServer, sizes: dict[str, int]) -> bool:
    return all(ready(server, p) == n and not server.client.scard(f"vmpooler__pending__{p}")
               for p, n in sizes.items())


@dataclass
class RubyFrontedManager:
    redis: RedisServer
    ruby: Api


@pytest.fixture(scope="module")
def ruby_fronted_manager(tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[RubyFrontedManager]:
    """One Redis, our ``vmpooler manager`` (dummy provider) and vmpooler 3.9.1's API, shared
    by the tests of this module; each test works on pools of its own."""
    install = require_ruby()
    tmp_path = tmp_path_factory.mktemp("ruby-fronted")
    with redis_server(tmp_path / "redis") as server:
        server.client.hset(f"vmpooler__token__{TOKEN}",
                           mapping={"user": USER, "created": seed.T0})
        config = write_config(tmp_path / "run", redis_port=server.port, extra=FAST_CYCLES)
        with our_manager(config), ruby_api(install, config) as ruby:
            wait_until(lambda: filled(server, SIZES), 30, "our manager to fill the pools")
            yield RubyFrontedManager(server, ruby)


def test_checkout_and_return_through_vmpoolers_api_are_served_by_our_manager(
    ruby_fronted_manager: RubyFrontedManager,
) -> None:
    server, ruby = ruby_fronted_manager.redis, ruby_fronted_manager.ruby
    taken = call(ruby, "POST", f"{V3}/vm/pool3", token=TOKEN)
    assert taken.status == 200, taken.body
    fqdn = taken.json["pool3"]["hostname"]
    vm = fqdn.split(".")[0]
    assert fqdn == f"{vm}.three.example.com"
    assert server.client.sismember("vmpooler__running__pool3", vm)
    wait_until(lambda: filled(server, {"pool3": 1}), 30, "our manager to refill pool3")
    shown = call(ruby, "GET", f"{V3}/vm/{vm}")
    assert shown.status == 200
    assert shown.json[vm]["state"] == "running" and shown.json[vm]["lifetime"] == 2
    assert server.client.sismember("vmpooler__running__pool3", vm), "a checked-out VM is kept"

    returned = call(ruby, "DELETE", f"{V3}/vm/{vm}", token=TOKEN)
    assert (returned.status, returned.json) == (200, {"ok": True})
    wait_until(lambda: not server.client.sismember("vmpooler__completed__pool3", vm)
               and not server.client.sismember("vmpooler__running__pool3", vm)
               and server.client.hget(f"vmpooler__vm__{vm}", "destroy") is not None,
               30, "our manager to destroy the returned VM")
    assert call(ruby, "GET", f"{V3}/vm/{vm}").json[vm]["state"] == "destroyed"


def test_a_pool_size_override_through_vmpoolers_api_resizes_the_pool(
    ruby_fronted_manager: RubyFrontedManager,
) -> None:
    server, ruby = ruby_fronted_manager.redis, ruby_fronted_manager.ruby
    grown = call(ruby, "POST", f"{V3}/config/poolsize", {"pool2": 3}, token=TOKEN)
    assert (grown.status, grown.json) == (201, {"ok": True})
    wait_until(lambda: filled(server, {"pool2": 3}), 30, "our manager to grow pool2 to 3")
    reset = call(ruby, "DELETE", f"{V3}/config/poolsize/pool2", token=TOKEN)
    assert reset.status == 201, reset.body
    assert reset.json == {"ok": True, "pool_size_before_reset": 3,
                          "pool_size_before_overrides": 2}
    wait_until(lambda: filled(server, {"pool2": 2})
               and not server.client.sismember("vmpooler__pool__undo_size_override", "pool2"),
               30, "our manager to shrink pool2 back to 2 and take the undo")


def test_an_ondemand_request_through_vmpoolers_api_is_provisioned_by_our_manager(
    ruby_fronted_manager: RubyFrontedManager,
) -> None:
    server, ruby = ruby_fronted_manager.redis, ruby_fronted_manager.ruby
    created = call(ruby, "POST", f"{V3}/ondemandvm", {"pool1": 1, "poolone": 1}, token=TOKEN)
    assert created.status == 201, created.body
    request_id = created.json["request_id"]

    def answered() -> Answer | None:
        answer = call(ruby, "GET", f"{V3}/ondemandvm/{request_id}")
        return answer if answer.status == 200 else None

    done = wait_until(answered, 30, "the request to be ready, as vmpooler's API reports it")
    body = done.json
    assert body["ok"] is True and body["ready"] is True, body
    for name in ("pool1", "poolone"):
        [fqdn] = body[name]["hostname"]
        vm = fqdn.split(".")[0]
        assert fqdn.endswith(".one.example.com")
        assert server.client.sismember("vmpooler__running__pool1", vm)
        assert server.client.hget(f"vmpooler__vm__{vm}", "token:token") == TOKEN
    assert server.client.hget(f"vmpooler__odrequest__{request_id}", "status") == "ready"
    assert filled(server, {"pool1": 5}), "the request's VMs are not the pool's"


# -- our API over what vmpooler's API wrote ------------------------------------------------------
@dataclass
class WrittenByRuby:
    ruby: Api
    ours: Api
    redis: RedisServer
    token: str
    vm: str
    request_id: str


@pytest.fixture(scope="module")
def written_by_ruby(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WrittenByRuby]:
    """vmpooler 3.9.1's API, used to create a token, check out a VM (then tag it and set its
    lifetime), request an on-demand VM and override a pool size; then our API on the same
    Redis. No manager runs: the pools are seeded as one would have left them. Shared by the
    tests below; only the last one changes anything."""
    install = require_ruby()
    tmp_path = tmp_path_factory.mktemp("written-by-ruby")
    with redis_server(tmp_path / "redis") as server:
        seed.initial(server.client)
        seed.vm("pool1", "vm-a")(server.client)
        seed.vm("pool3", "vm-b")(server.client)
        config = write_config(tmp_path / "ruby", redis_port=server.port)
        with ruby_api(install, config) as ruby:
            created = call(ruby, "POST", f"{V3}/token", basic=(USER, PASSWORD))
            assert created.status == 200, created.body
            token = created.json["token"]
            taken = call(ruby, "POST", f"{V3}/vm", {"poolone": 1}, token=token)
            assert taken.status == 200, taken.body
            changed = call(ruby, "PUT", f"{V3}/vm/vm-a",
                           {"lifetime": 7, "tags": {"project": "mixed"}}, token=token)
            assert changed.status == 200, changed.body
            requested = call(ruby, "POST", f"{V3}/ondemandvm", {"pool3": 2}, token=token)
            assert requested.status == 201, requested.body
            sized = call(ruby, "POST", f"{V3}/config/poolsize", {"pool2": 4}, token=token)
            assert sized.status == 201, sized.body
            with our_api(write_config(tmp_path / "ours", redis_port=server.port)) as ours:
                yield WrittenByRuby(ruby, ours, server, token, "vm-a",
                                    requested.json["request_id"])


def test_our_api_reads_tokens_vmpoolers_api_created(written_by_ruby: WrittenByRuby) -> None:
    w = written_by_ruby
    listed = call(w.ours, "GET", f"{V3}/token", basic=(USER, PASSWORD))
    assert listed.status == 200
    assert set(listed.json) == {"ok", TOKEN, w.token}
    assert listed.json[w.token]["created"] == w.redis.client.hget(
        f"vmpooler__token__{w.token}", "created")
    shown = call(w.ours, "GET", f"{V3}/token/{w.token}")
    assert shown.status == 200
    assert shown.json[w.token]["user"] == USER
    assert shown.json[w.token]["vms"] == {"running": [w.vm]}
    assert shown.json == call(w.ruby, "GET", f"{V3}/token/{w.token}").json


def test_our_api_reads_a_vm_vmpoolers_api_checked_out(written_by_ruby: WrittenByRuby) -> None:
    w = written_by_ruby
    ours = call(w.ours, "GET", f"{V3}/vm/{w.vm}")
    assert ours.status == 200
    vm = ours.json[w.vm]
    assert (vm["template"], vm["state"], vm["lifetime"]) == ("pool1", "running", 7)
    assert vm["tags"] == {"project": "mixed"}
    assert vm["fqdn"] == f"{w.vm}.one.example.com"
    theirs = call(w.ruby, "GET", f"{V3}/vm/{w.vm}").json[w.vm]
    for hours in ("running", "remaining"):  # they grow with time
        assert abs(vm.pop(hours) - theirs.pop(hours)) < 0.02
    assert vm == theirs
    status = call(w.ours, "GET", f"{V3}/status").json
    assert status["pools"]["pool1"]["running"] == 1
    assert status["pools"]["pool1"]["ready"] == 0
    assert status["pools"]["pool3"]["ready"] == 1
    assert status["pools"]["pool2"]["max"] == 4, "the size override vmpooler's API wrote"
    assert call(w.ours, "GET", f"{V3}/totalrunning").json == {"running": 1}


def test_our_api_reads_an_ondemand_request_vmpoolers_api_created(
    written_by_ruby: WrittenByRuby,
) -> None:
    w = written_by_ruby
    ours = call(w.ours, "GET", f"{V3}/ondemandvm/{w.request_id}")
    assert ours.status == 202
    assert ours.json == {"ok": True, "request_id": w.request_id, "ready": False,
                         "pool3": {"ready": "0", "pending": "2"}}
    assert ours.json == call(w.ruby, "GET", f"{V3}/ondemandvm/{w.request_id}").json


def test_our_api_accepts_vmpoolers_token_and_returns_its_checkout(
    written_by_ruby: WrittenByRuby,
) -> None:
    w = written_by_ruby
    assert call(w.ours, "DELETE", f"{V3}/vm/{w.vm}").status == 401, "the VM carries a token"
    returned = call(w.ours, "DELETE", f"{V3}/vm/{w.vm}", token=w.token)
    assert (returned.status, returned.json) == (200, {"ok": True})
    assert w.redis.client.sismember("vmpooler__completed__pool1", w.vm)
    assert not w.redis.client.sismember("vmpooler__running__pool1", w.vm)
    deleted = call(w.ours, "DELETE", f"{V3}/ondemandvm/{w.request_id}", token=w.token)
    assert (deleted.status, deleted.json) == (200, {"ok": True})
    assert call(w.ruby, "GET", f"{V3}/ondemandvm/{w.request_id}").json["message"] == (
        "The request has been deleted")
