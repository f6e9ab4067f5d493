"""Every endpoint of API v3 (reference §1.3) and the dashboard (§1.4) over real HTTP.

``vmpooler api`` runs as a process (gunicorn, 2 workers) over the session's redis-server,
with dummy authentication, ``experimental_features`` and three pools in two DNS domains —
and no manager: each test flushes Redis and seeds it the way vmpooler's specs do (ready,
running and pending VMs, a token, daily statistics), then one table row is sent with urllib.
A second process without ``experimental_features`` and without ``:auth:`` answers the 405s
of the config endpoints and the 404s of the token endpoints.

Every answer is checked for its status, ``Content-Type: application/json``, a body that is
not HTML, its documented shape (``web/openapi.json``) and its effect in Redis. The dashboard's
HTML page and assets, and path traversal on its static route, have tests of their own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.api_harness import TOKEN, USER
from tests.harness import wait_until
from tests.openapi_check import DOC, body_errors
from vmpooler.actors.service.command_stream import STREAM
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.embedded_redis import EmbeddedRedis, free_port
from vmpooler.actors.storage.request_store import DeleteOutcome, Entry, RequestStore

pytestmark = pytest.mark.integration

V = "/api/v3"
SECRET = "s3cret-provider-pw"
AUTH = {"X-AUTH-TOKEN": TOKEN}
BOGUS = {"X-AUTH-TOKEN": "bogus0000000000000000000000000000"}
REALM = 'Basic realm="Authentication required"'


def basic(user: str = USER, password: str = "pw") -> dict[str, str]:
    """HTTP Basic credentials; the dummy provider accepts any user whose password differs."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# -- the servers ----------------------------------------------------------------------------
def config_document(redis_port: int, *, auth: bool, experimental: bool) -> dict[str, Any]:
    document: dict[str, Any] = {
        ":config": {"experimental_features": experimental, "vm_lifetime_auth": 2,
                    "vm_lifetime": 24},
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":providers": {":dummy": {"provider_class": "dummy", "password": SECRET}},
        ":dns_configs": {":one": {"dns_class": "dynamic-dns", "domain": "one.example.test"},
                         ":two": {"dns_class": "dynamic-dns", "domain": "two.example.test"}},
        ":pools": [
            {"name": "pool1", "size": 2, "alias": ["poolone"], "template": "templates/pool1",
             "clone_target": "cluster1", "provider": "dummy", "dns_plugin": "one"},
            {"name": "pool2", "size": 2, "template": "templates/pool2", "provider": "dummy",
             "dns_plugin": "two"},
            {"name": "pool3", "size": 1, "template": "templates/pool3", "provider": "dummy",
             "dns_plugin": "one"},
        ],
    }
    if auth:
        document[":auth"] = {"provider": "dummy"}
    return document


@contextmanager
def serving(directory: Path, document: dict[str, Any]) -> Iterator[str]:
    """``vmpooler api --workers 2`` on a free port; yields the base URL, stops it after."""
    config = directory / "vmpooler.yaml"
    config.write_text(yaml.safe_dump(document))
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "VMPOOLER_DEBUG": "1"}
    for name in ("VMPOOLER_CONFIG", "VMPOOLER_CONFIG_FILE", "EXPERIMENTAL_FEATURES", "PORT"):
        env.pop(name, None)
    with open(directory / "api.log", "a") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "vmpooler.web.cli", "api", "--config", str(config),
             "--bind", f"127.0.0.1:{port}", "--workers", "2"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        assert process.poll() is None, (directory / "api.log").read_text()
        try:
            return send("GET", base + "/healthcheck").status == 200
        except OSError:
            return False

    try:
        wait_until(answering, 30, "the API to answer")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def main_api(tmp_path_factory: pytest.TempPathFactory,
             redis_server: EmbeddedRedis) -> Iterator[tuple[str, Path]]:
    """Auth (dummy), experimental features on: what most rows talk to."""
    directory = tmp_path_factory.mktemp("api-main")
    with serving(directory, config_document(redis_server.port, auth=True,
                                            experimental=True)) as base:
        yield base, directory / "api.log"


@pytest.fixture(scope="module")
def plain_api(tmp_path_factory: pytest.TempPathFactory,
              redis_server: EmbeddedRedis) -> Iterator[tuple[str, Path]]:
    """No ``:auth:``, no experimental features: token endpoints 404, config writes 405."""
    directory = tmp_path_factory.mktemp("api-plain")
    with serving(directory, config_document(redis_server.port, auth=False,
                                            experimental=False)) as base:
        yield base, directory / "api.log"


# -- HTTP -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # lower-case names
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def send(method: str, url: str, body: Any = None,
         headers: Mapping[str, str] | None = None) -> Answer:
    """One request with urllib; a dict/list body is sent as JSON, a str as it is."""
    data = None
    sent = dict(headers or {})
    if body is not None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        sent.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with _OPENER.open(request, timeout=10) as answer:
            status, got, raw = answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        status, got, raw = error.code, error.headers, error.read()
    return Answer(status, {k.lower(): v for k, v in got.items()}, raw.decode())


# -- the world each test starts from ---------------------------------------------------------
@dataclass(frozen=True)
class World:
    redis: redis.Redis
    now: float

    @property
    def today(self) -> str:
        return timefmt.date_bucket(self.now)

    def ready(self, pool: str) -> set[str]:
        return self.redis.smembers(schema.ready(pool))

    def running(self, pool: str) -> set[str]:
        return self.redis.smembers(schema.running(pool))

    def vm(self, name: str) -> dict[str, str]:
        return self.redis.hgetall(schema.vm(name))


def add_vm(r: redis.Redis, pool: str, name: str, queue: str, **fields: str) -> None:
    r.sadd(getattr(schema, queue)(pool), name)
    r.hset(schema.vm(name), mapping={"template": pool, "pool": pool, **fields})


def seed(r: redis.Redis) -> World:
    """pool1: two ready VMs and ``vm-run`` (checked out with TOKEN, a tag and a snapshot);
    pool2: one ready, ``vm-free`` running without a token, one pending; pool3: empty."""
    now = time.time()
    stamp = timefmt.format_epoch(now)
    r.hset(schema.token(TOKEN), mapping={"user": USER, "created": stamp})
    add_vm(r, "pool1", "vm-a1", "ready", check=stamp)
    add_vm(r, "pool1", "vm-a2", "ready", check=stamp)
    add_vm(r, "pool1", "vm-run", "running", checkout=stamp, lifetime="2",
           **{"token:token": TOKEN, "token:user": USER, "tag:project": "demo",
              "snapshot:snap1": "2024-05-01 10:00:00 +0000"})
    r.hset(schema.active("pool1"), "vm-run", stamp)
    add_vm(r, "pool2", "vm-b1", "ready", check=stamp)
    add_vm(r, "pool2", "vm-free", "running", checkout=stamp)
    add_vm(r, "pool2", "vm-pend", "pending")
    day = timefmt.date_bucket(now)
    r.hset(schema.boot_stats(day), mapping={"pool1:vm-a1": "12.5", "pool2:vm-b1": "20"})
    r.hset(schema.clone_stats(day), "pool1:vm-a1", "3.5")
    r.hset(schema.tag_stats(day), "vm-run:project", "demo")
    return World(r, now)


@pytest.fixture
def world(redis_server: EmbeddedRedis) -> Iterator[World]:
    """A client of our own (the session's ``redis_client`` is function-scoped anyway),
    a flushed database, and the seed."""
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, decode_responses=True)
    client.flushall()
    yield seed(client)
    client.flushall()
    client.close()


# -- the table --------------------------------------------------------------------------------
Check = Callable[[Answer, World], None]


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str
    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    expect: Any = None  # the exact JSON body, or a Check
    app: str = "main"
    before: Callable[[World], None] | None = None


def untouched(w: World) -> None:
    """Nothing was checked out or rolled back wrongly."""
    assert w.ready("pool1") == {"vm-a1", "vm-a2"} and w.ready("pool2") == {"vm-b1"}
    assert w.running("pool1") == {"vm-run"} and w.running("pool2") == {"vm-free"}
    for pool in ("pool1", "pool2", "pool3"):
        assert w.redis.smembers(schema.migrating(pool)) == set()
    assert set(w.redis.hgetall(schema.active("pool1"))) == {"vm-run"}
    for vm in ("vm-a1", "vm-a2", "vm-b1"):
        assert set(w.vm(vm)) == {"template", "pool", "check"}, vm


def rejected(a: Answer, w: World) -> None:
    assert a.json == {"ok": False}
    untouched(w)


def exact(expected: Any) -> Check:
    def check(a: Answer, w: World) -> None:
        assert a.json == expected
    return check


def both(*checks: Check) -> Check:
    def check(a: Answer, w: World) -> None:
        for one in checks:
            one(a, w)
    return check


def unauthorized(a: Answer, w: World) -> None:
    assert a.json == {"ok": False}
    assert a.headers["www-authenticate"] == REALM


def error(message: str) -> Check:
    def check(a: Answer, w: World) -> None:
        assert a.json == {"ok": False, "error": message}
    return check


def checked_out(expected: Mapping[str, tuple[str, int]], *, owner: bool = False) -> Check:
    """``{requested name: (domain, how many)}``; the VMs moved to running with a checkout."""
    def check(a: Answer, w: World) -> None:
        body = a.json
        assert list(body) == ["ok", *expected] and body["ok"] is True
        for name, (domain, count) in expected.items():
            hosts = body[name]["hostname"]
            hosts = [hosts] if count == 1 else hosts
            assert isinstance(hosts, list) and len(hosts) == count
            for fqdn in hosts:
                vm, _, got_domain = fqdn.partition(".")
                assert got_domain == domain
                fields = w.vm(vm)
                assert w.redis.sismember(schema.running(fields["template"]), vm)
                assert fields["checkout"]
                if owner:
                    assert (fields["token:token"], fields["token:user"]) == (TOKEN, USER)
                    assert fields["lifetime"] == "2"  # vm_lifetime_auth
                else:
                    assert "token:token" not in fields and "lifetime" not in fields
    return check


def vm_info(a: Answer, w: World) -> None:
    body = a.json
    assert list(body) == ["ok", "vm-run"]
    info = body["vm-run"]
    assert info["template"] == "pool1" and info["state"] == "running"
    assert info["lifetime"] == 2 and 0 <= info["running"] < 0.1
    assert info["tags"] == {"project": "demo"} and info["snapshots"] == ["snap1"]
    assert info["fqdn"] == "vm-run.one.example.test"


def unchanged(a: Answer, w: World) -> None:
    untouched(w)


def invalid_json(a: Answer, w: World) -> None:
    body = a.json
    assert list(body) == ["ok", "error"] and body["ok"] is False
    assert body["error"].startswith("Invalid JSON: ")


def state(vm: str, expected: str) -> Check:
    def check(a: Answer, w: World) -> None:
        assert a.json[vm]["state"] == expected
    return check


def stored(vm: str, name: str, value: str | None) -> Check:
    def check(a: Answer, w: World) -> None:
        assert w.vm(vm).get(name) == value
    return check


def members(key: str, expected: set[str]) -> Check:
    def check(a: Answer, w: World) -> None:
        assert w.redis.smembers(key) == expected
    return check


def field_is(vm: str, name: str, value: str | None) -> Check:
    def check(a: Answer, w: World) -> None:
        assert a.json == {"ok": True}
        assert w.vm(vm).get(name) == value
    return check


def returned(pool: str, vm: str) -> Check:
    def check(a: Answer, w: World) -> None:
        assert a.json == {"ok": True}
        assert not w.redis.sismember(schema.running(pool), vm)
        assert w.redis.sismember(schema.completed(pool), vm)
    return check


def disk_queued(a: Answer, w: World) -> None:
    assert a.json == {"ok": True, "vm-run": {"disk": "+8gb"}}
    assert w.redis.smembers(schema.tasks_disk()) == {"vm-run:8"}


def snapshot_queued(a: Answer, w: World) -> None:
    body = a.json
    name = body["vm-run"]["snapshot"]
    assert list(body) == ["ok", "vm-run"] and re.fullmatch(r"[a-y][a-z0-9]{31}", name)
    assert w.redis.smembers(schema.tasks_snapshot()) == {f"vm-run:{name}"}


def revert_queued(a: Answer, w: World) -> None:
    assert a.json == {"ok": True}
    assert w.redis.smembers(schema.tasks_snapshot_revert()) == {"vm-run:snap1"}


def no_tasks(a: Answer, w: World) -> None:
    for key in (schema.tasks_disk(), schema.tasks_snapshot(), schema.tasks_snapshot_revert()):
        assert not w.redis.exists(key)


def providers_status(a: Answer, w: World) -> None:
    assert a.json["providers"] == {"dummy": {"circuit_breaker": "unknown"}}
    assert list(a.json) == ["providers", "status"]


def full_status(a: Answer, w: World) -> None:
    body = a.json
    assert list(body) == ["boot", "capacity", "clone", "pools", "queue", "status"]
    assert body["pools"]["pool1"] == {"ready": 2, "running": 1, "pending": 0, "max": 2,
                                      "lastBoot": "", "alias": ["poolone"]}
    assert body["pools"]["pool2"] == {"ready": 1, "running": 1, "pending": 1, "max": 2,
                                      "lastBoot": ""}
    assert body["capacity"] == {"current": 3, "total": 5, "percent": 60.0}
    assert body["status"]["empty"] == ["pool3"] and body["status"]["ok"] is False
    assert body["boot"]["count"] == {"total": 2}
    assert body["queue"]["total"] == 6


def sections(*names: str) -> Check:
    def check(a: Answer, w: World) -> None:
        assert list(a.json) == list(names)
    return check


def summary(a: Answer, w: World) -> None:
    body = a.json
    assert list(body) == ["daily", "boot", "clone", "tag"]
    assert [day["date"] for day in body["daily"]] == [w.today]
    assert body["boot"]["count"]["total"] == 2
    assert body["tag"] == {"project": {"demo": 1, "total": 1}}


def summary_boot(a: Answer, w: World) -> None:
    body = a.json
    assert list(body) == ["boot", "daily"]
    assert body["boot"]["count"]["pool"] == {"pool1": {"total": 1}, "pool2": {"total": 1}}


def summary_tag(a: Answer, w: World) -> None:
    assert a.json["tag"] == {"project": {"demo": 1, "total": 1}}


def bad_date(value: str) -> Check:
    return error(f"Invalid date format '{value}', must match YYYY-MM-DD.")


def my_tokens(a: Answer, w: World) -> None:
    created = w.redis.hget(schema.token(TOKEN), "created")
    assert a.json == {"ok": True, TOKEN: {"created": created, "last": "never"}}


def token_created(a: Answer, w: World) -> None:
    body = a.json
    assert list(body) == ["ok", "token"] and body["ok"] is True
    assert re.fullmatch(r"[a-y][a-z0-9]{31}", body["token"])
    assert w.redis.hget(schema.token(body["token"]), "user") == USER


def no_new_token(a: Answer, w: World) -> None:
    assert w.redis.keys(schema.token("*")) == [schema.token(TOKEN)]


def token_details(a: Answer, w: World) -> None:
    body = a.json
    assert list(body) == ["ok", TOKEN]
    details = body[TOKEN]
    assert details["user"] == USER and details["created"]
    assert details["vms"] == {"running": ["vm-run"]}


def token_deleted(a: Answer, w: World) -> None:
    assert a.json == {"ok": True}
    assert not w.redis.exists(schema.token(TOKEN))


def token_kept(a: Answer, w: World) -> None:
    assert w.redis.exists(schema.token(TOKEN))


def override(key: str, expected: dict[str, str]) -> Check:
    def check(a: Answer, w: World) -> None:
        assert a.json == {"ok": True}
        assert w.redis.hgetall(key) == expected
    return check


def no_overrides(a: Answer, w: World) -> None:
    for key in (schema.config_poolsize(), schema.config_template(),
                schema.config_clone_target(), schema.poolreset(),
                schema.undo_size_override(), schema.undo_template_override()):
        assert not w.redis.exists(key), key


def poolsize_override(w: World) -> None:
    w.redis.hset(schema.config_poolsize(), "pool1", "3")


def poolsize_reset(a: Answer, w: World) -> None:
    assert a.json == {"ok": True, "pool_size_before_reset": 3, "pool_size_before_overrides": 2}
    assert not w.redis.exists(schema.config_poolsize())
    assert w.redis.smembers(schema.undo_size_override()) == {"pool1"}


def template_override(w: World) -> None:
    w.redis.hset(schema.config_template(), "pool1", "templates/new")


def template_reset(a: Answer, w: World) -> None:
    assert a.json == {"ok": True, "template_before_reset": "templates/new",
                      "template_before_overrides": "templates/pool1"}
    assert w.redis.smembers(schema.undo_template_override()) == {"pool1"}


def pool_configuration(a: Answer, w: World) -> None:
    body = a.json
    assert body["status"] == {"ok": True}
    pools = {p["name"]: p for p in body["pool_configuration"]}
    assert list(pools) == ["pool1", "pool2", "pool3"]
    assert (pools["pool1"]["size"], pools["pool1"]["template_ready"]) == (3, False)


def full_config(a: Answer, w: World) -> None:
    body = a.json
    assert body["status"] == {"ok": True}
    assert body["full_config"]["providers"]["dummy"]["password"] == "********"
    assert [p["name"] for p in body["full_config"]["pools"]] == ["pool1", "pool2", "pool3"]
    assert SECRET not in a.text


def openapi_document(a: Answer, w: World) -> None:
    body = a.json
    assert body["openapi"].startswith("3.") and f"{V}/vm" in body["paths"]


def redirect(a: Answer, w: World) -> None:
    assert a.headers["location"].endswith("/dashboard/") and a.text == ""


# -- on-demand requests -----------------------------------------------------------------------
def seed_requests(w: World) -> None:
    """``od-waiting`` (pool1 ×2 under ``poolone``, one delivered: ``vm-od1``; created with
    TOKEN), ``od-ready`` (``vm-od2`` of pool2, ``vm-od3`` of pool1 under ``poolone``),
    ``od-failed``, ``od-deleted`` and ``taken`` (in flight)."""
    store = RequestStore(w.redis)
    now = int(w.now)
    assert store.create("od-waiting", [Entry("poolone", "pool1", 2)], created=now,
                        token=TOKEN, user=USER)
    assert store.create("od-ready", [Entry("pool2", "pool2", 1), Entry("poolone", "pool1", 1)],
                        created=now)
    for request_id in ("od-failed", "od-deleted", "taken"):
        assert store.create(request_id, [Entry("pool3", "pool3", 1)], created=now)
    for request_id, alias, pool, vm in (("od-waiting", "poolone", "pool1", "vm-od1"),
                                        ("od-ready", "pool2", "pool2", "vm-od2"),
                                        ("od-ready", "poolone", "pool1", "vm-od3")):
        add_vm(w.redis, pool, vm, "running", checkout=timefmt.format_epoch(w.now),
               request_id=request_id, pool_alias=alias)
        w.redis.sadd(schema.request_vms(request_id, alias, pool), vm)
    store.claim("od-ready", now=now)
    assert store.fulfil("od-ready", [Entry("pool2", "pool2", 1),
                                     Entry("poolone", "pool1", 1)]) == (True, "ready")
    assert store.fail("od-failed", [Entry("pool3", "pool3", 1)], ttl=3600, reason=(
        "The request exceeded ondemand_request_ttl of 5 minutes"))[0]
    assert store.delete("od-deleted") is DeleteOutcome.DELETED


def commanded(request_id: str, reason: str, w: World) -> bool:
    """Whether the API appended ``request_changed`` for the request to the command stream."""
    return any(f.get("kind") == "request_changed" and f.get("pool") == request_id
               and f.get("reason") == reason for _, f in w.redis.xrange(STREAM))


def od_created(requested: str, *, owner: bool, request_id: str | None = None) -> Check:
    """201 with the id; the request hash, its queue entry and the command to the manager."""
    def check(a: Answer, w: World) -> None:
        body = a.json
        assert list(body) == ["ok", "request_id"] and body["ok"] is True
        made = body["request_id"]
        if request_id is not None:
            assert made == request_id
        else:
            assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                                r"[0-9a-f]{12}", made)
        expected = {"requested": requested}
        if owner:
            expected |= {"token:token": TOKEN, "token:user": USER}
        fields = w.redis.hgetall(schema.odrequest(made))
        assert fields.pop("user") == (USER if owner else "127.0.0.1")  # ours: who asked
        assert (fields.pop("priority"), fields.pop("share")) == ("normal", "1.0")
        assert fields == expected
        score = w.redis.zscore(schema.provisioning_request(), made)
        assert score is not None and score == int(score) and abs(score - w.now) < 60
        wait_until(lambda: commanded(made, "created", w), 10, "the request_changed command")
    return check


def no_request(a: Answer, w: World) -> None:
    """Nothing was recorded (the world has no request to begin with)."""
    assert w.redis.keys(schema.odrequest("*")) == []
    assert not w.redis.exists(schema.provisioning_request())


def od_deleted(request_id: str, vms: Mapping[str, str]) -> Check:
    """``{vm: pool}`` went running → completed; the request is deleted for 15 days."""
    def check(a: Answer, w: World) -> None:
        assert a.json == {"ok": True}
        for vm, pool in vms.items():
            assert not w.redis.sismember(schema.running(pool), vm)
            assert w.redis.sismember(schema.completed(pool), vm)
        assert w.redis.hget(schema.odrequest(request_id), "status") == "deleted"
        assert w.redis.ttl(schema.odrequest(request_id)) == 1_296_000
        assert w.redis.keys(schema.request_vms(request_id, "*", "*")) == []
        wait_until(lambda: commanded(request_id, "deleted", w), 10, "the request_changed command")
    return check


def od_status(request_id: str, status: str) -> Check:
    def check(a: Answer, w: World) -> None:
        assert w.redis.hget(schema.odrequest(request_id), "status") == status
    return check


def od_untouched(request_id: str, fields: dict[str, str]) -> Check:
    """The request hash is exactly ``fields`` (no status: still in flight) and no VM moved."""
    def check(a: Answer, w: World) -> None:
        assert w.redis.hgetall(schema.odrequest(request_id)) == fields
        assert w.redis.sismember(schema.running("pool1"), "vm-od1")
        assert w.redis.zscore(schema.provisioning_request(), request_id) is not None
    return check


def od_message(request_id: str, message: str) -> dict[str, Any]:
    return {"ok": True, "request_id": request_id, "ready": False, "message": message}


def od_error(message: str) -> Check:
    def check(a: Answer, w: World) -> None:
        assert a.json == {"ok": False, "message": message}
        no_request(a, w)
    return check


def ready_with_one_manager(a: Answer, w: World) -> None:
    """The seeded heartbeat (written just now) counts as a live manager."""
    assert a.json["ok"] is True and a.json["managers"]["live"] == 1
    assert [m["id"] for m in a.json["managers"]["members"]] == ["m:1:0"]


WRITES = [
    ("poolsize", "POST", "/config/poolsize", {"pool1": 3}),
    ("poolsize-reset", "DELETE", "/config/poolsize/pool1", None),
    ("pooltemplate", "POST", "/config/pooltemplate", {"pool1": "templates/new"}),
    ("pooltemplate-reset", "DELETE", "/config/pooltemplate/pool1", None),
    ("clonetarget", "POST", "/config/clonetarget", {"pool1": "cluster2"}),
    ("poolreset", "POST", "/poolreset", {"pool1": 1}),
]

CASES = [
    # -- misc ------------------------------------------------------------------------------
    Case("root-redirects", "GET", "/", 302, expect=redirect),
    Case("healthcheck", "GET", "/healthcheck", 200, expect={"ok": True}),
    Case("readiness", "GET", f"{V}/readiness", 200, expect=ready_with_one_manager,
         before=lambda w: w.redis.zadd(schema.manager_heartbeat(), {"m:1:0": w.now})),
    Case("readiness-no-manager", "GET", f"{V}/readiness/", 503, expect={
        "ok": False, "errors": ["no manager heartbeat"], "redis": {"ok": True},
        "managers": {"ok": False, "live": 0, "max_age": 15.0, "newest_age": None,
                     "members": [], "unheld_pools": 3}}),
    Case("unknown-route", "GET", "/nowhere", 404, expect={"ok": False}),
    Case("unknown-api-route", "GET", f"{V}/nowhere/at/all", 404, expect={"ok": False}),
    Case("openapi", "GET", f"{V}/openapi.json", 200, expect=openapi_document),
    # -- dashboard JSON (§1.4; not in the OpenAPI document) --------------------------------
    Case("dashboard-pool-stats", "GET", "/dashboard/stats/vmpooler/pool/?history=1", 200,
         expect={"pool1": {"size": 2, "ready": 2, "history": [2]},
                 "pool2": {"size": 2, "ready": 1, "history": [1]},
                 "pool3": {"size": 1, "ready": 0, "history": [0]}}),
    Case("dashboard-running-stats", "GET", "/dashboard/stats/vmpooler/running", 200,
         expect={"pool1": {"running": 1}, "pool2": {"running": 1}, "pool3": {"running": 0}}),
    Case("dashboard-asset-missing", "GET", "/dashboard/static/nope.js", 404,
         expect={"ok": False}),
    # -- GET/POST /vm ----------------------------------------------------------------------
    Case("list-pools", "GET", f"{V}/vm", 200, expect=["pool1", "pool2", "pool3"]),
    Case("list-pools-slash", "GET", f"{V}/vm/", 200, expect=["pool1", "pool2", "pool3"]),
    Case("checkout-one", "POST", f"{V}/vm", 200, {"pool1": 1},
         expect=checked_out({"pool1": ("one.example.test", 1)})),
    Case("checkout-alias-and-pool", "POST", f"{V}/vm", 200, {"poolone": "1", "pool2": 1},
         expect=checked_out({"poolone": ("one.example.test", 1),
                             "pool2": ("two.example.test", 1)})),
    Case("checkout-two-of-a-pool", "POST", f"{V}/vm", 200, {"pool1": 2},
         expect=checked_out({"pool1": ("one.example.test", 2)})),
    Case("checkout-with-token", "POST", f"{V}/vm", 200, {"pool2": 1}, AUTH,
         expect=checked_out({"pool2": ("two.example.test", 1)}, owner=True)),
    Case("checkout-vmfloaty-form-content-type", "POST", f"{V}/vm", 200, '{"pool1":"1"}',
         {"Content-Type": "application/x-www-form-urlencoded", **AUTH},
         expect=checked_out({"pool1": ("one.example.test", 1)}, owner=True)),
    Case("checkout-bad-json", "POST", f"{V}/vm", 400, "{", expect=both(invalid_json, unchanged)),
    Case("checkout-not-an-object", "POST", f"{V}/vm", 400, "[1]",
         expect=error("Request body must be a JSON object")),
    Case("checkout-bad-pool-name", "POST", f"{V}/vm", 400, {"pool_1!": 1},
         expect=error("Invalid pool name format")),
    Case("checkout-count-zero", "POST", f"{V}/vm", 400, {"pool1": 0},
         expect=error("VM count must be at least 1")),
    Case("checkout-count-over-100", "POST", f"{V}/vm", 400, {"pool1": 101},
         expect=error("VM count must be at most 100")),
    Case("checkout-count-not-integer", "POST", f"{V}/vm", 400, {"pool1": "two"},
         expect=error("VM count must be a valid integer")),
    Case("checkout-unknown-pool", "POST", f"{V}/vm", 404, {"pool1": 1, "pool9": 1},
         expect=rejected),
    Case("checkout-empty-object", "POST", f"{V}/vm", 404, {}, expect={"ok": False}),
    Case("checkout-bad-token", "POST", f"{V}/vm", 401, {"pool1": 1}, BOGUS,
         expect=both(unauthorized, unchanged)),
    Case("checkout-empty-pool", "POST", f"{V}/vm", 503, {"pool3": 1}, expect=rejected),
    Case("checkout-partial-rolls-back", "POST", f"{V}/vm", 503, {"pool1": 2, "pool2": 2}, AUTH,
         expect=rejected),
    Case("checkout-partial-alias-rolls-back", "POST", f"{V}/vm", 503,
         {"pool2": 1, "poolone": 3}, expect=rejected),
    # -- POST /vm/:template -----------------------------------------------------------------
    Case("template-two-pools", "POST", f"{V}/vm/pool1+pool2", 200,
         expect=checked_out({"pool1": ("one.example.test", 1),
                             "pool2": ("two.example.test", 1)})),
    Case("template-repeat-and-alias", "POST", f"{V}/vm/poolone+poolone/", 200,
         expect=checked_out({"poolone": ("one.example.test", 2)})),
    Case("template-with-token", "POST", f"{V}/vm/pool1", 200, headers=AUTH,
         expect=checked_out({"pool1": ("one.example.test", 1)}, owner=True)),
    Case("template-unknown", "POST", f"{V}/vm/pool1+pool9", 404, expect={"ok": False}),
    Case("template-too-many-names", "POST", f"{V}/vm/{'+'.join(['x'] * 1001)}", 400,
         expect=both(exact({"ok": False,
                            "error": "at most 1000 names may be joined by '+' in the path"}),
                     unchanged)),
    Case("template-bad-token", "POST", f"{V}/vm/pool1", 401, headers=BOGUS,
         expect=both(unauthorized, unchanged)),
    Case("template-empty-pool", "POST", f"{V}/vm/pool3", 503, expect=rejected),
    Case("template-partial-rolls-back", "POST", f"{V}/vm/pool2+pool1+pool1+pool1", 503,
         expect=rejected),
    # -- GET/PUT/DELETE /vm/:hostname --------------------------------------------------------
    Case("get-vm", "GET", f"{V}/vm/vm-run", 200, expect=vm_info),
    Case("get-vm-by-fqdn", "GET", f"{V}/vm/vm-run.one.example.test/", 200, expect=vm_info),
    Case("get-vm-pending", "GET", f"{V}/vm/vm-pend", 200, expect=state("vm-pend", "pending")),
    Case("get-vm-ready", "GET", f"{V}/vm/vm-a1", 200, expect=state("vm-a1", "ready")),
    Case("get-vm-bad-hostname", "GET", f"{V}/vm/bad_name", 400,
         expect=error("Invalid hostname format")),
    Case("get-vm-hostname-too-long", "GET", f"{V}/vm/{'.'.join(['abcdefgh'] * 29)}", 400,
         expect=error("Hostname too long")),
    Case("get-vm-unknown", "GET", f"{V}/vm/nope", 404, expect={"ok": False}),
    Case("put-tags", "PUT", f"{V}/vm/vm-run", 200, {"tags": {"project": "other"}},
         expect=field_is("vm-run", "tag:project", "other")),
    Case("put-lifetime-with-token", "PUT", f"{V}/vm/vm-run.one.example.test", 200,
         {"lifetime": 4}, AUTH, expect=field_is("vm-run", "lifetime", "4")),
    Case("put-lifetime-without-token", "PUT", f"{V}/vm/vm-run", 401, {"lifetime": 4},
         expect=both(unauthorized, stored("vm-run", "lifetime", "2"))),
    Case("put-lifetime-zero", "PUT", f"{V}/vm/vm-run", 400, {"lifetime": 0}, AUTH,
         expect=both(exact({"ok": False, "failure": [
             "Lifetime must be a positive integer (got 0)"]}),
             stored("vm-run", "lifetime", "2"))),
    Case("put-bad-tag", "PUT", f"{V}/vm/vm-run", 400, {"tags": {"bad key": "x"}},
         expect={"ok": False, "failure": ["Invalid tag key format"]}),
    Case("put-bad-json", "PUT", f"{V}/vm/vm-run", 400, "{", expect=invalid_json),
    Case("put-bad-hostname", "PUT", f"{V}/vm/bad_name", 400, {"tags": {"a": "b"}},
         expect=error("Invalid hostname format")),
    Case("put-unknown", "PUT", f"{V}/vm/nope", 404, {"tags": {"a": "b"}},
         expect={"ok": False}),
    Case("delete-owned-with-token", "DELETE", f"{V}/vm/vm-run", 200, headers=AUTH,
         expect=returned("pool1", "vm-run")),
    Case("delete-owned-without-token", "DELETE", f"{V}/vm/vm-run", 401,
         expect=both(unauthorized, unchanged)),
    Case("delete-unowned-without-token", "DELETE", f"{V}/vm/vm-free.two.example.test", 200,
         expect=returned("pool2", "vm-free")),
    Case("delete-bad-hostname", "DELETE", f"{V}/vm/bad_name", 400,
         expect=error("Invalid hostname format")),
    Case("delete-unknown", "DELETE", f"{V}/vm/nope", 404, expect={"ok": False}),
    # -- disk, snapshot, revert --------------------------------------------------------------
    Case("disk", "POST", f"{V}/vm/vm-run/disk/8", 202, headers=AUTH, expect=disk_queued),
    Case("disk-without-token", "POST", f"{V}/vm/vm-run/disk/8", 401,
         expect=both(unauthorized, no_tasks)),
    Case("disk-size-zero", "POST", f"{V}/vm/vm-run/disk/0", 400, headers=AUTH,
         expect=error("Disk size must be at least 1")),
    Case("disk-size-too-big", "POST", f"{V}/vm/vm-run/disk/2049", 400, headers=AUTH,
         expect=error("Disk size must be at most 2048")),
    Case("disk-bad-hostname", "POST", f"{V}/vm/bad_name/disk/8", 400, headers=AUTH,
         expect=error("Invalid hostname format")),
    Case("disk-unknown-vm", "POST", f"{V}/vm/nope/disk/8", 404, headers=AUTH,
         expect=both(exact({"ok": False}), no_tasks)),
    Case("snapshot", "POST", f"{V}/vm/vm-run/snapshot", 202, headers=AUTH,
         expect=snapshot_queued),
    Case("snapshot-without-token", "POST", f"{V}/vm/vm-run/snapshot", 401,
         expect=both(unauthorized, no_tasks)),
    Case("snapshot-unknown-vm", "POST", f"{V}/vm/nope/snapshot", 404, headers=AUTH,
         expect={"ok": False}),
    # as in vmpooler, no hostname rule here: the VM is just not found
    Case("snapshot-bad-hostname", "POST", f"{V}/vm/bad_name/snapshot", 404, headers=AUTH,
         expect=both(exact({"ok": False}), no_tasks)),
    Case("revert", "POST", f"{V}/vm/vm-run.one.example.test/snapshot/snap1", 202,
         headers=AUTH, expect=revert_queued),
    Case("revert-without-token", "POST", f"{V}/vm/vm-run/snapshot/snap1", 401,
         expect=both(unauthorized, no_tasks)),
    Case("revert-unknown-snapshot", "POST", f"{V}/vm/vm-run/snapshot/nope", 404,
         headers=AUTH, expect=both(exact({"ok": False}), no_tasks)),
    Case("revert-unknown-vm", "POST", f"{V}/vm/nope/snapshot/snap1", 404, headers=AUTH,
         expect=both(exact({"ok": False}), no_tasks)),
    # as in vmpooler, no hostname rule here: the VM is just not found
    Case("revert-bad-hostname", "POST", f"{V}/vm/bad_name/snapshot/snap1", 404, headers=AUTH,
         expect=both(exact({"ok": False}), no_tasks)),
    # -- status, poolstat, totalrunning, summary ---------------------------------------------
    Case("status", "GET", f"{V}/status", 200, expect=full_status),
    Case("status providers", "GET", f"{V}/status?view=providers", 200,
         expect=providers_status),
    Case("status-view", "GET", f"{V}/status/?view=capacity,queue", 200,
         expect=sections("capacity", "queue", "status")),
    Case("status-empty-view", "GET", f"{V}/status?view=", 200, expect=sections("status")),
    Case("poolstat-by-alias", "GET", f"{V}/poolstat?pool=poolone,pool2", 200,
         expect={"pools": {"pool1": {"max": 2, "alias": ["poolone"], "ready": 2},
                           "pool2": {"max": 2, "ready": 1}}}),
    Case("poolstat-nothing", "GET", f"{V}/poolstat/", 200, expect={"pools": {}}),
    Case("totalrunning", "GET", f"{V}/totalrunning", 200, expect={"running": 2}),
    Case("summary", "GET", f"{V}/summary", 200, expect=summary),
    Case("summary-bad-date", "GET", f"{V}/summary?from=2024-1-1", 400,
         expect=bad_date("2024-1-1")),
    Case("summary-to-before-from", "GET", f"{V}/summary?from=2024-01-02&to=2024-01-01", 400,
         expect=error("Date range is invalid, 'to' cannot come before 'from'.")),
    Case("summary-from-future", "GET", f"{V}/summary?from=2999-01-01&to=2999-01-02", 400,
         expect=error("Date range is invalid, 'from' must be in the past.")),
    Case("summary-route", "GET", f"{V}/summary/boot/", 200, expect=summary_boot),
    Case("summary-route-key", "GET", f"{V}/summary/tag/project", 200, expect=summary_tag),
    Case("summary-route-bad-date", "GET", f"{V}/summary/tag?from=2024-02-30", 400,
         expect=bad_date("2024-02-30")),
    Case("summary-route-key-bad-date", "GET", f"{V}/summary/clone/count?to=yesterday", 400,
         expect=bad_date("yesterday")),
    Case("summary-unknown-route", "GET", f"{V}/summary/nope", 404, expect={"ok": False}),
    Case("summary-unknown-route-key", "GET", f"{V}/summary/nope/key/", 404,
         expect={"ok": False}),
    # -- tokens --------------------------------------------------------------------------------
    Case("token-list", "GET", f"{V}/token", 200, headers=basic(), expect=my_tokens),
    Case("token-list-no-credentials", "GET", f"{V}/token/", 401, expect=unauthorized),
    Case("token-list-bad-credentials", "GET", f"{V}/token", 401, headers=basic("jdoe", "jdoe"),
         expect=unauthorized),
    Case("token-list-none-of-mine", "GET", f"{V}/token", 404, headers=basic("alice"),
         expect={"ok": False}),
    Case("token-create", "POST", f"{V}/token", 200, headers=basic(), expect=token_created),
    Case("token-create-no-credentials", "POST", f"{V}/token", 401,
         expect=both(unauthorized, no_new_token)),
    Case("token-details", "GET", f"{V}/token/{TOKEN}/", 200, expect=token_details),
    Case("token-details-unknown", "GET", f"{V}/token/{'z' * 32}", 404, expect={"ok": False}),
    Case("token-delete", "DELETE", f"{V}/token/{TOKEN}", 200, headers=basic("anyone"),
         expect=token_deleted),
    Case("token-delete-no-credentials", "DELETE", f"{V}/token/{TOKEN}", 401,
         expect=both(unauthorized, token_kept)),
    # vmpooler answered 401 here; ours is 404 (docs/compatibility.md, test_api_token.py)
    Case("token-delete-unknown", "DELETE", f"{V}/token/{'z' * 32}", 404, headers=basic(),
         expect={"ok": False}),
    *[Case(f"token-without-auth-{method.lower()}-{n}", method, f"{V}{path}", 404,
           headers=basic(), app="plain", expect=both(exact({"ok": False}), token_kept))
      for n, (method, path) in enumerate([("GET", "/token"), ("POST", "/token"),
                                          ("GET", f"/token/{TOKEN}"),
                                          ("DELETE", f"/token/{TOKEN}")])],
    # -- on-demand: POST /ondemandvm -----------------------------------------------------------
    Case("od-create", "POST", f"{V}/ondemandvm", 201, {"poolone": 2, "pool2": "1"}, AUTH,
         expect=od_created("poolone:pool1:2,pool2:pool2:1", owner=True)),
    Case("od-create-with-id", "POST", f"{V}/ondemandvm/", 201,
         {"pool3": 1, "request_id": "ci-job-7"}, AUTH,
         expect=od_created("pool3:pool3:1", owner=True, request_id="ci-job-7")),
    Case("od-create-vmfloaty-form-content-type", "POST", f"{V}/ondemandvm", 201,
         '{"pool1":"1"}', {"Content-Type": "application/x-www-form-urlencoded", **AUTH},
         expect=od_created("pool1:pool1:1", owner=True)),
    Case("od-create-without-auth", "POST", f"{V}/ondemandvm", 201, {"pool2": 1}, AUTH,
         app="plain", expect=od_created("pool2:pool2:1", owner=False)),
    Case("od-create-no-token", "POST", f"{V}/ondemandvm", 401, {"pool1": 1},
         expect=both(unauthorized, no_request)),
    Case("od-create-bad-token", "POST", f"{V}/ondemandvm", 401, {"pool1": 1}, BOGUS,
         expect=both(unauthorized, no_request)),
    Case("od-create-bad-json", "POST", f"{V}/ondemandvm", 400, "{", AUTH,
         expect=od_error("JSON payload could not be parsed")),
    Case("od-create-empty-body", "POST", f"{V}/ondemandvm", 400, "", AUTH,
         expect=od_error("JSON payload could not be parsed")),
    Case("od-create-null", "POST", f"{V}/ondemandvm", 400, "null", AUTH,
         expect=od_error('JSON payload must be an object of {"<pool or alias>": <count>}')),
    Case("od-create-negative-count", "POST", f"{V}/ondemandvm", 400, {"pool1": -1}, AUTH,
         expect=od_error("the count of 'pool1' must be a whole number of at least 0")),
    Case("od-create-bad-request-id", "POST", f"{V}/ondemandvm", 400,
         {"pool1": 1, "request_id": "job:1"}, AUTH,
         expect=od_error("request_id must hold only letters, digits, '.', '_' and '-'")),
    Case("od-create-unknown", "POST", f"{V}/ondemandvm", 404, {"pool1": 1, "pool9": 1}, AUTH,
         expect=both(exact({"ok": False, "bad_templates": ["pool9"]}), no_request)),
    Case("od-create-too-many", "POST", f"{V}/ondemandvm", 403, {"pool1": 11}, AUTH,
         expect=od_error("requested amount of instances exceeds the maximum 10")),
    Case("od-create-taken", "POST", f"{V}/ondemandvm", 409, {"pool1": 1, "request_id": "taken"},
         AUTH, before=seed_requests,
         expect=both(exact({"ok": False, "request_id": "taken",
                            "message": "request_id 'taken' has already been created"}),
                     od_untouched("taken", {"requested": "pool3:pool3:1"}))),
    # -- on-demand: POST /ondemandvm/:template -------------------------------------------------
    Case("od-url", "POST", f"{V}/ondemandvm/pool1+pool3+pool1/", 201, headers=AUTH,
         expect=od_created("pool1:pool1:2,pool3:pool3:1", owner=True)),
    Case("od-url-unknown", "POST", f"{V}/ondemandvm/pool1+pool9", 404, headers=AUTH,
         expect=both(exact({"ok": False, "bad_templates": ["pool9"]}), no_request)),
    Case("od-url-too-many", "POST", f"{V}/ondemandvm/{'+'.join(['pool2'] * 11)}", 403,
         headers=AUTH, expect=od_error("requested amount of instances exceeds the maximum 10")),
    Case("od-url-no-token", "POST", f"{V}/ondemandvm/pool1", 401,
         expect=both(unauthorized, no_request)),
    Case("od-url-too-many-names", "POST", f"{V}/ondemandvm/{'+'.join(['x'] * 1001)}", 400,
         headers=AUTH,
         expect=od_error("at most 1000 names may be joined by '+' in the path")),
    # -- on-demand: GET /ondemandvm/:requestid -------------------------------------------------
    Case("od-get-waiting", "GET", f"{V}/ondemandvm/od-waiting", 202, before=seed_requests,
         expect={"ok": True, "request_id": "od-waiting", "ready": False,
                 "poolone": {"ready": "1", "pending": "1"}}),
    Case("od-get-ready", "GET", f"{V}/ondemandvm/od-ready/", 200, before=seed_requests,
         expect={"ok": True, "request_id": "od-ready", "ready": True,
                 "pool2": {"hostname": ["vm-od2.two.example.test"]},
                 "poolone": {"hostname": ["vm-od3.one.example.test"]}}),
    Case("od-get-failed", "GET", f"{V}/ondemandvm/od-failed", 200, before=seed_requests,
         expect=od_message("od-failed", "The request failed to provision instances within the "
                                         "configured ondemand_request_ttl '5'")),
    Case("od-get-deleted", "GET", f"{V}/ondemandvm/od-deleted", 200, before=seed_requests,
         expect=od_message("od-deleted", "The request has been deleted")),
    Case("od-get-unknown", "GET", f"{V}/ondemandvm/nope", 404,
         expect={"ok": False, "message": "no request found for request_id 'nope'"}),
    Case("od-get-bad-id", "GET", f"{V}/ondemandvm/vm__inj", 400,
         expect={"ok": False,
                 "message": "request_id must not hold '__' nor start or end with '_'"}),
    # -- on-demand: DELETE /ondemandvm/:requestid ----------------------------------------------
    Case("od-delete", "DELETE", f"{V}/ondemandvm/od-waiting", 200, headers=AUTH,
         before=seed_requests, expect=od_deleted("od-waiting", {"vm-od1": "pool1"})),
    Case("od-delete-ready", "DELETE", f"{V}/ondemandvm/od-ready/", 200, headers=AUTH,
         before=seed_requests,
         expect=od_deleted("od-ready", {"vm-od2": "pool2", "vm-od3": "pool1"})),
    Case("od-delete-again", "DELETE", f"{V}/ondemandvm/od-deleted", 200, headers=AUTH,
         before=seed_requests,
         expect={"ok": True, "message": "the request has already been deleted"}),
    Case("od-delete-failed", "DELETE", f"{V}/ondemandvm/od-failed", 200, headers=AUTH,
         before=seed_requests,
         expect=both(exact({"ok": True, "message": "the request has already failed"}),
                     od_status("od-failed", "failed"))),
    Case("od-delete-no-token", "DELETE", f"{V}/ondemandvm/od-waiting", 401,
         before=seed_requests,
         expect=both(unauthorized, od_untouched("od-waiting", {
             "requested": "poolone:pool1:2", "token:token": TOKEN, "token:user": USER}))),
    Case("od-delete-unknown", "DELETE", f"{V}/ondemandvm/nope", 404, headers=AUTH,
         expect={"ok": False, "message": "no request found for request_id 'nope'"}),
    Case("od-delete-bad-id", "DELETE", f"{V}/ondemandvm/token", 400, headers=AUTH,
         expect={"ok": False, "message": "request_id must not be 'token', a word of "
                                         "vmpooler's Redis key names"}),
    # -- experimental config endpoints ----------------------------------------------------------
    Case("poolsize-change", "POST", f"{V}/config/poolsize", 201, {"pool1": 3}, AUTH,
         expect=override(schema.config_poolsize(), {"pool1": "3"})),
    Case("poolsize-same", "POST", f"{V}/config/poolsize/", 200, {"pool1": 2}, AUTH,
         expect=override(schema.config_poolsize(), {})),
    Case("poolsize-unknown", "POST", f"{V}/config/poolsize", 400, {"pool9": 1}, AUTH,
         expect={"ok": False, "not_configured": ["pool9"]}),
    Case("poolsize-not-a-size", "POST", f"{V}/config/poolsize", 400, {"pool1": "four"}, AUTH,
         expect={"ok": False, "not_configured": ["pool1"]}),
    Case("poolsize-empty-body", "POST", f"{V}/config/poolsize", 400, "", AUTH,
         expect=error("Request body is empty")),
    Case("poolsize-reset", "DELETE", f"{V}/config/poolsize/pool1", 201, headers=AUTH,
         before=poolsize_override, expect=poolsize_reset),
    Case("poolsize-reset-untouched", "DELETE", f"{V}/config/poolsize/pool1/", 200,
         headers=AUTH, expect={"ok": True, "pool_size_before_reset": 2,
                               "pool_size_before_overrides": 2}),
    Case("poolsize-reset-unknown", "DELETE", f"{V}/config/poolsize/pool9", 404, headers=AUTH,
         expect={"ok": False}),
    Case("pooltemplate-change", "POST", f"{V}/config/pooltemplate", 201,
         {"pool1": "templates/new"}, AUTH,
         expect=override(schema.config_template(), {"pool1": "templates/new"})),
    Case("pooltemplate-same", "POST", f"{V}/config/pooltemplate", 200,
         {"pool2": "templates/pool2"}, AUTH, expect=override(schema.config_template(), {})),
    Case("pooltemplate-bad", "POST", f"{V}/config/pooltemplate", 400,
         {"pool1": "templates/ok", "pool2": "/leading"}, AUTH,
         expect={"ok": False, "bad_templates": ["pool2"]}),
    Case("pooltemplate-reset", "DELETE", f"{V}/config/pooltemplate/pool1", 201, headers=AUTH,
         before=template_override, expect=template_reset),
    Case("pooltemplate-reset-untouched", "DELETE", f"{V}/config/pooltemplate/pool1", 200,
         headers=AUTH, expect={"ok": True, "template_before_reset": "templates/pool1",
                               "template_before_overrides": "templates/pool1"}),
    Case("pooltemplate-reset-unknown", "DELETE", f"{V}/config/pooltemplate/poolone", 404,
         headers=AUTH, expect={"ok": False}),
    Case("clonetarget-change", "POST", f"{V}/config/clonetarget", 201, {"pool1": "cluster2"},
         AUTH, expect=override(schema.config_clone_target(), {"pool1": "cluster2"})),
    Case("clonetarget-same", "POST", f"{V}/config/clonetarget", 200, {"pool1": "cluster1"},
         AUTH, expect=override(schema.config_clone_target(), {})),
    Case("clonetarget-unknown", "POST", f"{V}/config/clonetarget", 400, {"pool9": "c"}, AUTH,
         expect={"ok": False, "bad_templates": ["pool9"]}),
    Case("poolreset", "POST", f"{V}/poolreset", 201, {"pool1": 1, "pool2": None}, AUTH,
         expect=both(exact({"ok": True}), members(schema.poolreset(), {"pool1", "pool2"}))),
    Case("poolreset-unknown", "POST", f"{V}/poolreset/", 400, {"pool1": 1, "pool9": 1}, AUTH,
         expect=both(exact({"ok": False, "bad_pools": ["pool9"]}), no_overrides)),
    *[Case(f"{name}-bad-token", method, f"{V}{path}", 401, body, BOGUS,
           expect=both(unauthorized, no_overrides)) for name, method, path, body in WRITES],
    *[Case(f"{name}-without-experimental-features", method, f"{V}{path}", 405, body,
           app="plain", expect=both(exact({"ok": False}), no_overrides))
      for name, method, path, body in WRITES],
    Case("method-not-allowed", "PATCH", f"{V}/vm", 405, {"pool1": 1}, expect={"ok": False}),
    Case("config", "GET", f"{V}/config/", 200, before=poolsize_override,
         expect=pool_configuration),
    Case("full-config", "GET", f"{V}/full_config", 200, expect=full_config),
]


# -- checking an answer against the OpenAPI document ------------------------------------------
_TEMPLATES = sorted(DOC["paths"], key=lambda t: t.count("{"))


def template_of(path: str) -> str | None:
    """The documented path template serving ``path`` (literal segments win)."""
    bare = path.split("?")[0].rstrip("/") or "/"
    for template in _TEMPLATES:
        if re.fullmatch(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)), bare):
            return template
    return None


def documented(method: str, path: str) -> str | None:
    template = template_of(path)
    if template is None or method.lower() not in DOC["paths"][template]:
        return None
    return template


UNREACHABLE = {
    "403",  # enforce_vm_ownership is off here (covered in test_api_vm.py)
    "429",  # rate limiting is off here
    f"get {V}/config 404",  # only without any pool (vmpooler: pools list nil)
    # documented, but this API answers 400 for every bad body (vmpooler: 404 for `null`)
    f"post {V}/config/poolsize 404", f"post {V}/config/pooltemplate 404",
    f"post {V}/config/clonetarget 404", f"post {V}/poolreset 404",
    # documented, but no hostname rule applies to snapshots (as in vmpooler): 404 instead
    f"post {V}/vm/{{hostname}}/snapshot 400", f"post {V}/vm/{{hostname}}/snapshot/{{snapshot}} 400",
    # Redis unavailable: Redis stays up here (tests/test_openapi.py points every operation
    # at a closed port; tests/test_redis_faults_processes.py stops the server)
    *(f"{method} {template} 503" for template, ops in DOC["paths"].items()
      for method, op in ops.items()
      if op["responses"].get("503", {}).get("$ref") == "#/components/responses/RedisUnavailable"),
}


def test_the_table_covers_every_documented_operation_and_status() -> None:
    """Every operation of web/openapi.json (the dashboard is not in it) is in the
    table with every documented status this setup can produce."""
    covered = {f"{c.method.lower()} {documented(c.method, c.path)} {c.status}" for c in CASES}
    missing = []
    for template, operations in DOC["paths"].items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status in operation["responses"]:
                key = f"{method} {template} {status}"
                if status not in UNREACHABLE and key not in UNREACHABLE | covered:
                    missing.append(key)
    assert missing == []


# -- the test -----------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_endpoint(case: Case, world: World, request: pytest.FixtureRequest) -> None:
    base, _ = request.getfixturevalue("plain_api" if case.app == "plain" else "main_api")
    if case.before:
        case.before(world)
    answer = send(case.method, base + case.path, case.body, case.headers)
    assert answer.status == case.status, answer.text
    assert answer.headers.get("content-type") == "application/json"
    assert not answer.text.lstrip().startswith("<") and "<html" not in answer.text.lower()
    template = documented(case.method, case.path)
    if template is not None:
        assert body_errors(case.method, template, answer.status, answer.text) == []
    if callable(case.expect):
        case.expect(answer, world)
    elif case.expect is not None:
        assert answer.json == case.expect


def test_json_bodies_are_vmpoolers_pretty_print(main_api: tuple[str, Path],
                                                world: World) -> None:
    base, _ = main_api
    answer = send("GET", f"{base}{V}/totalrunning")
    assert answer.text == '{\n  "running": 2\n}'


# -- what gunicorn answers before the application sees the request ----------------------------
def raw_exchange(base: str, data: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(data)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


@pytest.mark.parametrize("data", [
    b"GET /api/v3/vm/" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /api/v3/vm HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
    b"NOT-HTTP\r\n\r\n",
    b"POST /api/v3/vm HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
], ids=["uri-too-long", "header-too-large", "bad-request-line", "bad-content-length"])
def test_requests_gunicorn_cannot_parse_are_answered_in_json(
    main_api: tuple[str, Path], data: bytes
) -> None:
    head, _, body = raw_exchange(main_api[0], data).partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    assert not body.lstrip().startswith(b"<")


# -- the dashboard page through gunicorn ----------------------------------------------------
def test_dashboard_page_and_assets(main_api: tuple[str, Path]) -> None:
    base, _ = main_api
    page = send("GET", f"{base}/dashboard/")
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["cache-control"] == "no-cache"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "<title>vmpooler</title>" in page.text
    assets = re.findall(r'(?:href|src)="(/dashboard/static/[^"]+\?v=[0-9a-f]{16})"', page.text)
    assert len(assets) == 2
    for link, content_type in zip(sorted(assets), ["text/css", "text/javascript"], strict=True):
        asset = send("GET", base + link)
        assert asset.status == 200
        assert asset.headers["content-type"] == f"{content_type}; charset=utf-8"
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"
        again = send("GET", base + link, headers={"If-None-Match": asset.headers["etag"]})
        assert again.status == 304 and again.text == ""


@pytest.mark.parametrize("target", [
    b"/dashboard/../../etc/passwd",
    b"/dashboard/static/../../../../etc/passwd",
    b"/dashboard/static/..%2f..%2f..%2f..%2fetc%2fpasswd",
    b"/dashboard/static/%2e%2e%2f%2e%2e%2fopenapi.json",
    b"/dashboard/static/..%5c..%5copenapi.json",
    b"/dashboard/static/%252e%252e%252fopenapi.json",
    b"/dashboard/static/dashboard.html",
])
def test_dashboard_static_route_cannot_escape(main_api: tuple[str, Path],
                                              target: bytes) -> None:
    """Sent byte for byte (urllib would tidy the path): 404 JSON, never a file."""
    head, _, body = raw_exchange(
        main_api[0], b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 "), head
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body) == {"ok": False}


def test_the_servers_logged_no_traceback(main_api: tuple[str, Path]) -> None:
    """No request of the table made the API log an unexpected exception (a JSON 500)."""
    assert "Traceback" not in main_api[1].read_text()
