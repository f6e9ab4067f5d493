"""API v3 configuration resources (reference §1.3 "Experimental config endpoints").

* ``GET /config`` — every pool's configuration with its effective size and template (Redis
  overrides applied) and ``template_ready``; ``GET /full_config`` — the whole configuration.
* ``POST``/``DELETE /config/poolsize``, ``/config/pooltemplate``, ``POST /config/clonetarget``
  and ``POST /poolreset`` — only with ``:config: experimental_features`` (else 405
  ``{"ok": false}``), and with a valid ``X-AUTH-TOKEN`` when auth is configured (else 401);
  without auth, on a listener other hosts can reach, only with ``:config:
  experimental_features_without_auth`` (else 403, :mod:`vmpooler.web.pool_changes`).
  They write vmpooler's override hashes, undo sets and reset set
  (:class:`~vmpooler.actors.storage.config_store.ConfigStore`), then tell the manager
  (``ctx.commands.pool_changed``) so it acts at once instead of at its next cycle.

Divergences from vmpooler 3.9.1, all where vmpooler crashed, leaked or kept stale state:

* an empty body, invalid JSON or a body that is not a JSON object (``null`` included) →
  400 ``{"ok": false, "error": ...}`` (vmpooler: 500, or 404 for ``null``);
* an alias is not a pool here: as a body key it is listed as invalid (400 with
  ``not_configured``/``bad_templates``/``bad_pools``), as a DELETE path it is 404
  (vmpooler: 500 on the config endpoints; poolreset queued an alias nobody consumed);
* a pool size is parsed like Ruby's ``Integer()`` (blanks, ``0x``/``0b``/``0o``/leading-0
  octal, ``_`` between digits) but a non-integral JSON number is refused rather than
  truncated, and the override is stored as a plain decimal (vmpooler stored the raw text,
  e.g. ``"0x10"``, which only a Ruby reader understands);
* a pool size above the pool's ``max_pool_size`` (ours, default 10,000; a provider's own
  value wins) is invalid: 400 with ``not_configured`` listing the pool and ``error`` naming
  the limit, nothing written (vmpooler took ``1e300`` and cloned without end);
* a template or clone target that is not a string, or an empty clone target, is invalid
  (400) instead of a 500 or a stored ``""``;
* current values are read from Redis, not from one API process's memory, so every worker
  agrees; DELETE also removes an override equal to the configured value (answering 200);
* ``GET /full_config`` masks every secret (passwords, tokens, API keys) with ``********``:
  vmpooler returned them unauthenticated;
* a method the route does not have answers 405 ``{"ok": false}`` (Sinatra answered 404).
"""

from __future__ import annotations

import json
from typing import Any

import falcon

from vmpooler.actors.config import PoolConfig
from vmpooler.actors.config._data import mask_secrets
from vmpooler.actors.storage.config_store import ConfigStore, OverrideKind, Overrides, ruby_integer
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, json_body
from vmpooler.web.body import MAX_BODY, InvalidJsonError, parse_json, read_raw
from vmpooler.web.pool_changes import check_pool_change
from vmpooler.web.tokens import need_token

__all__ = ["register"]


def _payload(req: falcon.Request) -> dict[str, Any]:
    """The body as a JSON object; 400 ``{"ok": false, "error": ...}`` otherwise."""
    raw = read_raw(req, MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ApiError(400, {"ok": False, "error": "Request body too large"})
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        raise ApiError(400, {"ok": False, "error": "Request body is empty"})
    try:
        value = parse_json(text)
    except InvalidJsonError as exc:
        raise ApiError(400, {"ok": False, "error": f"Invalid JSON: {exc}"}) from None
    if not isinstance(value, dict):
        raise ApiError(400, {"ok": False, "error": "Request body must be a JSON object"})
    return value


def _plain(value: Any) -> Any:
    """A JSON-safe copy: anything JSON cannot carry is stringified, as vmpooler did."""
    return json.loads(json.dumps(value, default=str))


class _Resource:
    """Shared plumbing: the context, the override store, guards and effective values."""

    def __init__(self, ctx: ApiContext, store: ConfigStore) -> None:
        self.ctx = ctx
        self.store = store

    def guard(self, req: falcon.Request) -> None:
        """405 unless experimental features are on; then vmpooler's need_token, or without
        auth the lock of a reachable listener (403)."""
        if not self.ctx.config.settings.experimental_features:
            raise ApiError(405)
        if self.ctx.auth_configured:
            need_token(req, self.ctx)
        else:
            check_pool_change(self.ctx)

    def pool(self, name: str) -> PoolConfig | None:
        """The configured pool called ``name`` (aliases are not pools), or None."""
        try:
            return self.ctx.config.pool(name)
        except KeyError:
            return None

    def invalid(self, metric: str, key: str, names: list[str],
                error: str | None = None) -> ApiError:
        for name in names:
            self.ctx.metrics.increment(metric, tags={"pool": name})
        body: dict[str, Any] = {"ok": False, key: names}
        if error is not None:
            body["error"] = error
        return ApiError(400, body)

    def changed(self, pools: list[str], reason: str) -> None:
        for name in pools:
            self.ctx.commands.pool_changed(name, reason)


class _Override(_Resource):
    """``POST /config/<kind>`` ``{"<pool>": <value>}``: set overrides where they change."""

    kind: OverrideKind
    bad_key: str

    def problems(self, name: str, value: Any) -> int:
        """How many times vmpooler lists ``name`` as invalid (0: valid)."""
        raise NotImplementedError

    def explain(self, payload: dict[str, Any]) -> str | None:
        """A sentence for the 400's ``error`` (ours) when a rule of ours refused the body."""
        return None

    def normal(self, value: Any) -> str:
        """The valid ``value`` as stored in Redis."""
        return str(value)

    def current(self, pool: PoolConfig, ov: Overrides) -> str | None:
        """The value in effect now, in its stored form."""
        raise NotImplementedError

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.guard(req)
        payload = _payload(req)
        bad = [name for name, value in payload.items()
               for _ in range(self.problems(name, value))]
        if bad:
            raise self.invalid("config.invalid", self.bad_key, bad, self.explain(payload))
        ov = self.store.overrides()
        changes = {name: self.normal(value) for name, value in payload.items()
                   if self.normal(value) != self.current(self.ctx.config.pool(name), ov)}
        self.store.set_overrides(self.kind, changes)
        self.changed(list(changes), f"{self.kind} override set through the API")
        json_body(resp, 201 if changes else 200, {"ok": True})


class PoolSize(_Override):
    """``POST /config/poolsize`` ``{"<pool>": <size>}`` (400 ``not_configured``)."""

    kind, bad_key = "size", "not_configured"

    def problems(self, name: str, value: Any) -> int:
        size = ruby_integer(value)
        return (self.pool(name) is None) + (size is None or size < 0 or self._too_big(name, size))

    def explain(self, payload: dict[str, Any]) -> str | None:
        for name, value in payload.items():
            size = ruby_integer(value)
            if size is not None and self._too_big(name, size):
                limit = self.ctx.config.max_pool_size(self.ctx.config.pool(name))
                return f"the size of '{name}' must be at most {limit} (max_pool_size)"
        return None

    def _too_big(self, name: str, size: int) -> bool:
        pool = self.pool(name)
        return pool is not None and size > self.ctx.config.max_pool_size(pool)

    def normal(self, value: Any) -> str:
        return str(ruby_integer(value))

    def current(self, pool: PoolConfig, ov: Overrides) -> str | None:
        return str(ov.size_of(pool))


class PoolTemplate(_Override):
    """``POST /config/pooltemplate`` ``{"<pool>": "<folder>/<template>"}``."""

    kind, bad_key = "template", "bad_templates"

    def problems(self, name: str, value: Any) -> int:
        if not isinstance(value, str):
            return (self.pool(name) is None) + 1
        return ((self.pool(name) is None) + ("/" not in value) + value.startswith("/")
                + value.endswith("/"))

    def current(self, pool: PoolConfig, ov: Overrides) -> str | None:
        return ov.template_of(pool)


class CloneTarget(_Override):
    """``POST /config/clonetarget`` ``{"<pool>": "<cluster>"}`` (400 ``bad_templates``)."""

    kind, bad_key = "clone_target", "bad_templates"

    def problems(self, name: str, value: Any) -> int:
        return int(self.pool(name) is None or not isinstance(value, str) or not value)

    def current(self, pool: PoolConfig, ov: Overrides) -> str | None:
        return ov.clone_target_of(pool)


class _Reset(_Resource):
    """``DELETE /config/<kind>/{pool}``: back to the configured value."""

    kind: OverrideKind
    label: str

    def values(self, pool: PoolConfig, ov: Overrides) -> tuple[Any, Any]:
        """``(in effect now, configured)``."""
        raise NotImplementedError

    def on_delete(self, req: falcon.Request, resp: falcon.Response, pool: str) -> None:
        self.guard(req)
        cfg = self.pool(pool)
        if cfg is None:
            raise ApiError(404)
        ov = self.store.overrides()
        current, configured = self.values(cfg, ov)
        changed = current != configured
        if changed or pool in ov.of(self.kind):
            self.store.remove_override(self.kind, pool, undo=changed)
        if changed:
            self.changed([pool], f"{self.kind} override removed through the API")
        json_body(resp, 201 if changed else 200, {
            "ok": True, f"{self.label}_before_reset": current,
            f"{self.label}_before_overrides": configured})


class ResetSize(_Reset):
    """``DELETE /config/poolsize/{pool}``."""

    kind, label = "size", "pool_size"

    def values(self, pool: PoolConfig, ov: Overrides) -> tuple[Any, Any]:
        return ov.size_of(pool, self.ctx.config.max_pool_size(pool)), pool.size


class ResetTemplate(_Reset):
    """``DELETE /config/pooltemplate/{pool}``."""

    kind, label = "template", "template"

    def values(self, pool: PoolConfig, ov: Overrides) -> tuple[Any, Any]:
        return ov.template_of(pool), pool.template


class PoolReset(_Resource):
    """``POST /poolreset`` ``{"<pool>": <anything>}``: drain and refill each pool."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.guard(req)
        payload = _payload(req)
        bad = [name for name in payload if self.pool(name) is None]
        if bad:
            raise self.invalid("poolreset.invalid", "bad_pools", bad)
        self.store.request_reset(payload)
        self.changed(list(payload), "pool reset requested through the API")
        json_body(resp, 201, {"ok": True})


class PoolConfiguration(_Resource):
    """``GET /config``: the pools as configured, with the overrides in effect (size,
    template, clone target) and ``ready_ttl`` filled in from ``:config:`` when the pool has
    none, as vmpooler's loader does."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ov = self.store.overrides()
        pools = []
        for pool in self.ctx.config.pools:
            entry: dict[str, Any] = {"name": pool.name, **mask_secrets(pool.raw)}
            template = ov.template_of(pool)
            entry["size"] = ov.size_of(pool, self.ctx.config.max_pool_size(pool))
            entry["template"] = template
            if ov.clone_targets.get(pool.name):
                entry["clone_target"] = ov.clone_targets[pool.name]
            entry.setdefault("ready_ttl", pool.ready_ttl)  # vmpooler fills it in at load
            entry["template_ready"] = ov.prepared.get(pool.name) == template
            pools.append(entry)
        json_body(resp, 200, {"pool_configuration": _plain(pools), "status": {"ok": True}})


class FullConfig(_Resource):
    """``GET /full_config``: the whole configuration, secrets masked."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        json_body(resp, 200, {"full_config": _plain(self.ctx.config.masked()),
                              "status": {"ok": True}})


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add the configuration routes under ``prefix``."""
    store = ConfigStore(ctx.redis)
    routes: dict[str, type[_Resource]] = {
        "/config": PoolConfiguration,
        "/full_config": FullConfig,
        "/config/poolsize": PoolSize,
        "/config/poolsize/{pool}": ResetSize,
        "/config/pooltemplate": PoolTemplate,
        "/config/pooltemplate/{pool}": ResetTemplate,
        "/config/clonetarget": CloneTarget,
        "/poolreset": PoolReset,
    }
    for path, resource in routes.items():
        app.add_route(prefix + path, resource(ctx, store))
