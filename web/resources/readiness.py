"""``GET /api/v3/readiness``: can this API serve, and is a manager working behind it?

Ours (vmpooler has only the static ``/healthcheck``, kept as it is in ``misc``). Ready means
both:

* Redis answers ``PING`` within :data:`PROBE_TIMEOUT` seconds, without retries, on a small
  connection pool of its own (the API's pool retries for seconds, which a probe must not);
* at least one manager's heartbeat (:mod:`vmpooler.actors.storage.heartbeat_store`) is younger
  than the stale age: ``manager_heartbeat_max_age``, by default three
  ``manager_heartbeat_interval`` s.

200 ``{"ok": true, "redis": {...}, "managers": {...}}`` or 503 with ``"ok": false`` and
``"errors"``, a list of sentences saying what is wrong (``redis unreachable: ...``, ``no
manager heartbeat``, ``the newest manager heartbeat is 47 s old (max 15 s)``). With the
queue health check on (``health_check_enabled``, reference §4.11) ``"health"`` reports
``status`` and ``last_check`` of ``vmpooler__health`` (null before the first check); the
queue health is information only and never makes the answer 503. Each member says how many
of the configured pools' leases it holds (``pools``), and ``managers.unheld_pools`` how many
are held by nobody (none but for a moment while a dead manager's leases expire, or while no
manager runs): where several managers share the Redis, which one serves how much. Two round
trips to Redis.

Who sees what: the status code, ``ok``, ``errors``, the counts and ages are for everyone (a
load balancer needs no more). The managers' ids (``host:pid:started``) and the text of a
Redis error (its address) only go to a client on this host or, with ``:auth:`` configured,
one presenting a valid ``X-AUTH-TOKEN`` (one round trip more): the rule of
:func:`vmpooler.web.viewer.sees_details`, which the manager's ``/ready`` applies too; anyone
else gets each member without ``id`` and ``redis unreachable`` without the reason.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import falcon
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.connection import sibling
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore, stale_age
from vmpooler.actors.storage.lease_store import POOL, LeaseStore
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import json_body
from vmpooler.web.tokens import token_is_valid
from vmpooler.web.viewer import sees_details

__all__ = ["PROBE_TIMEOUT", "Readiness", "probe_client", "public_view", "register"]

_REDIS_DOWN = "redis unreachable"

PROBE_TIMEOUT = 1.0
"""Seconds the probe waits to connect, for a free connection, and for Redis's answer."""


def probe_client(client: redis.Redis, timeout: float = PROBE_TIMEOUT) -> redis.Redis:
    """A client to the same server as ``client`` with short timeouts and no retries."""
    return sibling(client, max_connections=4, timeout=timeout, socket_timeout=timeout,
                   socket_connect_timeout=timeout, health_check_interval=0,
                   retry=Retry(NoBackoff(), 0))


class Readiness:
    """See the module docstring. Thread-safe; reads only."""

    def __init__(self, ctx: ApiContext, probe: redis.Redis | None = None) -> None:
        settings = ctx.config.settings
        self.ctx = ctx
        self.probe = probe or probe_client(ctx.redis)
        self.store = HeartbeatStore(self.probe)
        self.leases = LeaseStore(self.probe)
        self.pools = [pool.name for pool in ctx.config.pools]
        self.max_age = stale_age(settings.manager_heartbeat_interval,
                                 settings.manager_heartbeat_max_age)
        self.health_check = settings.health_check_enabled
        self.tokens = CheckoutStore(self.probe)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = self.check()
        if not self.sees_details(req):
            body = public_view(body)
        json_body(resp, 200 if body["ok"] else 503, body)

    def sees_details(self, req: falcon.Request) -> bool:
        """Whether ``req`` may see manager ids and Redis error texts (module docstring)."""
        return sees_details(req.remote_addr, req.get_header,
                            self._token_valid if self.ctx.auth_configured else None)

    def _token_valid(self, token: str) -> bool:
        return token_is_valid(self.tokens, token, self.ctx.clock.now())

    def check(self) -> dict[str, Any]:
        """The answer's body; ``body["ok"]`` says ready."""
        try:
            beats, status, last_check = self.store.readiness()
            held = self.leases.holders(POOL, self.pools)
        except redis.RedisError as exc:
            error = f"{_REDIS_DOWN}: {exc}"
            return {"ok": False, "errors": [error], "redis": {"ok": False, "error": str(exc)}}
        now = self.ctx.clock.now()
        holders = Counter(lease.holder for lease in held.values() if lease is not None)
        members: list[dict[str, Any]] = [{"id": beat.manager, "age": _age(now, beat.at),
                    "pools": holders.get(beat.manager, 0)} for beat in beats]
        live = sum(1 for m in members if m["age"] <= self.max_age)
        errors: list[str] = []
        if not members:
            errors.append("no manager heartbeat")
        elif not live:
            errors.append(f"the newest manager heartbeat is {members[0]['age']:.0f} s old "
                          f"(max {self.max_age:g} s)")
        body: dict[str, Any] = {
            "ok": not errors,
            "redis": {"ok": True},
            "managers": {"ok": bool(live), "live": live, "max_age": self.max_age,
                         "newest_age": members[0]["age"] if members else None,
                         "members": members,
                         "unheld_pools": sum(1 for lease in held.values() if lease is None)},
        }
        if errors:
            body["errors"] = errors
        if self.health_check:
            body["health"] = {"status": status, "last_check": last_check}
        return body


def public_view(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without what names hosts: members' ``id``, the Redis error's text."""
    out = dict(body)
    if "errors" in out:
        out["errors"] = [_REDIS_DOWN if e.startswith(_REDIS_DOWN) else e for e in out["errors"]]
    out["redis"] = {k: v for k, v in out["redis"].items() if k != "error"}
    if "managers" in out:
        managers = dict(out["managers"])
        managers["members"] = [{k: v for k, v in m.items() if k != "id"}
                               for m in managers["members"]]
        out["managers"] = managers
    return out


def _age(now: float, stamp: float) -> float:
    """Seconds since ``stamp``, to the tenth; never negative (a writer's clock ahead)."""
    return round(max(0.0, now - float(stamp)), 1)


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add ``{prefix}/readiness``."""
    app.add_route(f"{prefix}/readiness", Readiness(ctx))
