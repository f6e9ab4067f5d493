"""What ``vmpooler manager --bind HOST:PORT`` serves, for Kubernetes probes and Prometheus.

vmpooler's manager-only mode always serves ``/healthcheck`` and, with ``:prometheus:``, its
exporter on port 4567 (reference §0, §1.5); ours listens only when asked (``--bind``, else
``$VMPOOLER_MANAGER_BIND``). GET and HEAD, JSON bodies:

* ``/healthcheck``: liveness, from the actors alone (never Redis: an outage must not get the
  manager killed): 200 ``{"ok": true}``, or 503 ``{"ok": false, "error": ...}`` once the
  system stopped, its supervisor died or it gave up on an actor;
* ``/ready``: 200 ``{"ok": true, "manager", "heartbeat_age", "pools"}`` (the pools whose lease
  it holds) while this manager's own heartbeat is younger than the stale age
  (:func:`~vmpooler.actors.storage.heartbeat_store.stale_age`) and Redis answers ``PING``;
  else 503 saying which (``no heartbeat written yet``, ``heartbeat is 47 s old (max 15 s)``,
  ``redis: <error>``). The manager's id (``host:pid:started``) and the text of a Redis error
  (its address) only go to a client the API's ``/readiness`` would show them to
  (:func:`~vmpooler.web.viewer.sees_details`: a loopback peer without forwarding headers,
  or, with ``:auth:`` configured, a valid ``X-AUTH-TOKEN``, which cannot be checked while
  Redis is down); anyone else gets the same status without ``manager`` and ``redis
  unreachable`` for the error;
* ``:prometheus: prometheus_endpoint`` (``/prometheus``): the text exposition, the API's own
  (every process sharing the multiprocess directory); 404 when Prometheus is not configured;
* anything else 404 ``{"ok": false, "error": "not found"}``; other methods 405.

:class:`ManagerProbes` judges; :mod:`vmpooler.web.cli.probe_server` listens.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.metrics.prometheus import PrometheusMetrics
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.actors.storage.heartbeat_store import HeartbeatStore, stale_age
from vmpooler.actors.storage.lease_store import POOL, LeaseStore
from vmpooler.actors.system import PoolerSystem
from vmpooler.web.resources.readiness import PROBE_TIMEOUT, probe_client
from vmpooler.web.tokens import token_is_valid
from vmpooler.web.viewer import HeaderReader, sees_details

__all__ = ["Answer", "ManagerProbes", "json_answer", "public_view"]

Answer = tuple[int, str, bytes]
"""Status, content type, body."""

_REDIS_ERROR = "redis: "
_REDIS_DOWN = "redis unreachable"


def _no_headers(_name: str) -> str | None:
    return None


def json_answer(status: int, body: dict[str, Any]) -> Answer:
    """``body`` as a JSON answer."""
    return status, "application/json", json.dumps(body).encode()


def _fail(error: str) -> tuple[int, dict[str, Any]]:
    return 503, {"ok": False, "error": error}


class ManagerProbes:
    """The judgements behind the probes of one manager. Thread-safe.

    Callers may rely on: :meth:`health` reads no Redis and never blocks on an actor;
    :meth:`ready` makes two round trips to Redis at most, on a client of its own that waits
    ``timeout`` s at most for anything and never retries; both return ``(status, body)``,
    200 or 503, the body JSON-ready with ``"ok"``; ages come from ``clock`` (by default the
    system's, which writes the heartbeat). Until :meth:`attach` the manager is starting:
    live, not ready, no metrics yet (503).
    """

    def __init__(self, config: Config, *, clock: Clock | None = None,
                 timeout: float = PROBE_TIMEOUT) -> None:
        settings = config.settings
        self.max_age = stale_age(settings.manager_heartbeat_interval,
                                 settings.manager_heartbeat_max_age)
        self.pools = [pool.name for pool in config.pools]
        prometheus = config.metrics.prometheus
        self.metrics_path = prometheus.endpoint if prometheus is not None else None
        self.clock = clock
        self.timeout = timeout
        self.auth_configured = bool(config.auth)
        self._system: PoolerSystem | None = None
        self._probe: redis.Redis | None = None

    def attach(self, system: PoolerSystem) -> None:
        """Judge ``system`` from now on."""
        self._probe = probe_client(system.redis, self.timeout)
        self.clock = self.clock or system.clock
        self._system = system

    def close(self) -> None:
        """Release the Redis connections of :meth:`ready`."""
        if self._probe is not None:
            self._probe.close()

    def health(self) -> tuple[int, dict[str, Any]]:
        """Liveness: is the actor system running (module docstring)?"""
        if self._system is None:
            return 200, {"ok": True, "starting": True}
        reason = self._system.liveness()
        return _fail(reason) if reason else (200, {"ok": True})

    def ready(self) -> tuple[int, dict[str, Any]]:
        """Readiness: a fresh heartbeat of this manager and Redis answering (module docstring)."""
        system, probe, clock = self._system, self._probe, self.clock
        if system is None or probe is None or clock is None:
            return _fail("the manager is starting")
        reason = system.liveness()
        if reason:
            return _fail(reason)
        me = system.manager_id
        try:
            beats, _, _ = HeartbeatStore(probe).readiness()  # PING first
            held = LeaseStore(probe).holders(POOL, self.pools)
        except redis.RedisError as exc:
            return _fail(f"{_REDIS_ERROR}{exc}")
        at = next((beat.at for beat in beats if beat.manager == me), None)
        if at is None:
            return _fail("no heartbeat written yet")
        age = round(max(0.0, clock.now() - at), 1)
        if age > self.max_age:
            return _fail(f"heartbeat is {age:g} s old (max {self.max_age:g} s)")
        pools = sum(1 for lease in held.values() if lease is not None and lease.holder == me)
        return 200, {"ok": True, "manager": me, "heartbeat_age": age, "pools": pools}

    def sees_details(self, peer: str | None, header: HeaderReader) -> bool:
        """Whether a client at ``peer`` sending the headers ``header`` reads may see the
        manager's id and Redis's error texts (module docstring)."""
        return sees_details(peer, header, self._token_valid if self.auth_configured else None)

    def _token_valid(self, token: str) -> bool:
        probe, clock = self._probe, self.clock
        if probe is None or clock is None:
            return False
        return token_is_valid(CheckoutStore(probe), token, clock.now())

    def answer(self, path: str, peer: str | None = None,
               header: HeaderReader = _no_headers) -> Answer:
        """The answer to a GET of ``path`` (a query string ignored, a trailing slash too)
        from a client at ``peer`` (None: unknown, not local) whose headers ``header`` reads."""
        path = path.split("?", 1)[0].rstrip("/") or "/"
        if path == "/healthcheck":
            return json_answer(*self.health())
        if path == "/ready":
            status, body = self.ready()
            if not self.sees_details(peer, header):
                body = public_view(body)
            return json_answer(status, body)
        if path == (self.metrics_path or "/prometheus").rstrip("/"):
            return self._metrics()
        return json_answer(404, {"ok": False, "error": "not found"})

    def _metrics(self) -> Answer:
        system = self._system
        if self.metrics_path is not None and system is None:
            return json_answer(*_fail("the manager is starting"))
        if system is not None and isinstance(system.metrics, PrometheusMetrics):
            body, content_type = system.metrics.exposition()
            return 200, content_type, body
        return json_answer(404, {"ok": False, "error": "prometheus is not configured"})


def public_view(body: dict[str, Any]) -> dict[str, Any]:
    """A ``/ready`` body without what names hosts: the manager's id, a Redis error's text."""
    out = {k: v for k, v in body.items() if k != "manager"}
    error = out.get("error")
    if isinstance(error, str) and error.startswith(_REDIS_ERROR):
        out["error"] = _REDIS_DOWN
    return out
