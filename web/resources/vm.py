"""API v3 ``/vm`` resources: list pools, check out, inspect, modify, return, disk, snapshots.

Status codes, bodies and the order of checks are vmpooler 3.9.1's (reference §1.2, §1.3).
Divergences (on purpose; the allocation and validation ones are listed in
:mod:`vmpooler.web.resources.vm_checkout` and :mod:`vmpooler.web.input_rules`):

* GET ``/vm/:hostname`` reports ``ip`` from the VM's stored ``ip`` field (written by the
  manager after the clone); vmpooler resolved the short name with the API host's DNS;
* GET ``/vm/:hostname`` of a VM whose ``pool`` is no longer configured omits ``fqdn``
  (vmpooler answered 500), and an unreadable ``checkout`` time omits the times (500 before);
* PUT ``/vm/:hostname`` validates and writes atomically: nothing is written unless every
  argument is valid and the VM still exists (404 if it vanished meanwhile);
* DELETE ``/vm/:hostname`` moves the VM only out of running or ready (one script, also
  dropping its ``active`` and ``migrating`` entries): 200 when it ends up in completed (an
  already completed VM is 200 too); a VM in pending or in no queue answers 404 with
  ``delete.failed`` and is left alone (vmpooler answered 200 and added it to completed,
  leaving it in two queues);
* a VM carries at most ``:config: max_tags_per_vm`` tags (32): a PUT that would exceed it
  is a 400 with vmpooler's ``failure`` list and writes nothing (the check and the write are
  one script); the day's tag statistics ``vmpooler__tag__<date>`` expire ``:redis:
  data_ttl`` hours after their last write (vmpooler kept them for ever);
* with ``:auth:`` configured, ``:config: enforce_vm_ownership`` and
  ``require_token_for_vm_changes`` (both off by default) tighten who may change or return
  a VM, tags included (:mod:`vmpooler.web.tokens`);
* with ``:quotas:`` limits, a PUT giving a lifetime above the caller's ``lifetime_hours``
  is refused with the quota's 429 (:mod:`vmpooler.web.quota_guard`) and writes nothing.

Kept as vmpooler does it by default: tags need no token; DELETE of a ready VM (one never
checked out, so carrying no token) needs none either and moves it to completed, so a client
that guesses a ready VM's name can have it destroyed (the two settings above close that).
``remaining`` and ``end_time`` use the VM's own ``lifetime`` field
(0 when unset, so ``end_time`` = ``start_time``) while ``lifetime`` falls back to
``vm_lifetime``; DELETE of a VM carrying ``token:token`` needs a valid token even when auth
is not configured; the snapshot endpoints shorten the hostname without validating it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import falcon

from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore, ReturnOutcome
from vmpooler.web import input_rules, quota_guard
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, json_body
from vmpooler.web.body import read_json_object
from vmpooler.web.identity import requester
from vmpooler.web.resources import vm_checkout
from vmpooler.web.tokens import authorize_vm_change, check_owner, need_token, presented_token

__all__ = ["register"]

_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def _count(ctx: ApiContext, method: str, operation: str) -> None:
    ctx.metrics.increment("http_requests_vm_total",
                          tags={"method": method, "subpath": "vm", "operation": operation})


def _valid_hostname(hostname: str) -> str:
    """The short name of a hostname that passes the hostname rule (400 otherwise)."""
    try:
        return input_rules.shorten(input_rules.check_hostname(hostname))
    except input_rules.InputError as exc:
        raise ApiError(400, {"ok": False, "error": exc.message}) from None


def _too_many_tags(most: int, adds: int, has: int | None = None) -> ApiError:
    """The 400 of a PUT that would give a VM more than ``max_tags_per_vm`` tags."""
    carried = "" if has is None else f"this one has {has}; "
    return ApiError(400, {"ok": False, "failure": [
        f"A VM may carry at most {most} tags ({carried}the request adds {adds})."]})


def _hours(seconds: float) -> float:
    return round(seconds / 3600.0, 2)


def _end_time(checkout_at: datetime, hours: int) -> datetime:
    """``checkout_at`` plus ``hours``, held within the years a datetime has (1..9999): any
    client may set a lifetime of 10^18 hours, which vmpooler's Ruby Time still adds."""
    try:
        return checkout_at + timedelta(hours=hours)
    except OverflowError:
        edge = datetime.max if hours > 0 else datetime.min
        return edge.replace(microsecond=0, tzinfo=checkout_at.tzinfo)


def describe(ctx: ApiContext, short: str, rdata: dict[str, str]) -> dict[str, Any]:
    """The inner object of GET ``/vm/:hostname`` for one VM hash, keys in vmpooler's order."""
    info: dict[str, Any] = {"template": rdata.get("template")}
    lifetime = rdata.get("lifetime")
    info["lifetime"] = input_rules.ruby_to_i(
        lifetime if lifetime is not None else ctx.config.settings.vm_lifetime)
    now = ctx.clock.now()
    checkout_at = timefmt.parse_time(rdata.get("checkout"))
    if "destroy" in rdata:
        destroyed = timefmt.parse_epoch(rdata["destroy"])
        if checkout_at is not None and destroyed is not None:
            info["running"] = _hours(destroyed - checkout_at.timestamp())
        info["state"] = "destroyed"
    elif "checkout" in rdata:
        if checkout_at is not None:
            hours = input_rules.ruby_to_i(lifetime)
            info["running"] = _hours(now - checkout_at.timestamp())
            info["remaining"] = _hours(checkout_at.timestamp() + hours * 3600.0 - now)
            info["start_time"] = timefmt.rfc3339(checkout_at)
            info["end_time"] = timefmt.rfc3339(_end_time(checkout_at, hours))
        info["state"] = "running"
    elif rdata.get("standby"):  # ours: in the pool's standby tier (docs/sizing.md)
        info["state"] = "standby"
    else:
        info["state"] = "ready" if "check" in rdata else "pending"
    for key, value in rdata.items():
        if key.startswith("tag:") and len(key) > 4:
            info.setdefault("tags", {})[key[4:]] = value
        elif key.startswith("snapshot:") and len(key) > 9:
            info.setdefault("snapshots", []).append(key[9:])
    if "disk" in rdata:
        info["disk"] = vm_checkout.ruby_split(rdata["disk"], ":")
    info["ip"] = rdata.get("ip", "")
    domain = vm_checkout.pool_domain(ctx.config, rdata.get("pool") or "")
    if domain:
        info["fqdn"] = f"{short}.{domain}"
    for key in ("host", "migrated"):
        if key in rdata:
            info[key] = rdata[key]
    return info


class VmCollection:
    """``GET /vm`` (pool names) and ``POST /vm`` (checkout from a JSON body)."""

    def __init__(self, ctx: ApiContext, store: CheckoutStore) -> None:
        self.ctx = ctx
        self.store = store

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        json_body(resp, 200, list(self.ctx.config.pool_names))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        _count(self.ctx, "post", "checkout")
        payload = vm_checkout.body_payload(read_json_object(req))
        json_body(resp, 200, vm_checkout.allocate(req, self.ctx, self.store, payload))


class VmItem:
    """``POST /vm/:template`` (vm_checkout) and GET/PUT/DELETE ``/vm/:hostname``."""

    def __init__(self, ctx: ApiContext, store: CheckoutStore) -> None:
        self.ctx = ctx
        self.store = store

    def on_post(self, req: falcon.Request, resp: falcon.Response, hostname: str) -> None:
        _count(self.ctx, "get", "template")
        try:
            payload = vm_checkout.template_payload(hostname)
        except input_rules.InputError as exc:
            raise ApiError(400, {"ok": False, "error": exc.message}) from None
        json_body(resp, 200, vm_checkout.allocate(req, self.ctx, self.store, payload))

    def on_get(self, req: falcon.Request, resp: falcon.Response, hostname: str) -> None:
        _count(self.ctx, "get", "hostname")
        short = _valid_hostname(hostname)
        rdata = self.store.vm_hash(short)
        if not rdata:
            raise ApiError(404)
        json_body(resp, 200, {"ok": True, short: describe(self.ctx, short, rdata)})

    def on_put(self, req: falcon.Request, resp: falcon.Response, hostname: str) -> None:
        _count(self.ctx, "put", "modify")
        ctx = self.ctx
        settings = ctx.config.settings
        short = _valid_hostname(hostname)
        exists, (owner, checked_out) = self.store.vm_probe(short, ["token:token", "checkout"])
        if not exists:
            raise ApiError(404)
        body = read_json_object(req)
        authorize_vm_change(req, ctx, self.store, owner=owner, checked_out=bool(checked_out),
                            token_needed=ctx.auth_configured and "lifetime" in body)
        failures: list[str] = []
        for param, arg in body.items():
            if param == "lifetime":
                failures += input_rules.lifetime_problems(arg, settings.max_lifetime_upper_limit)
            elif param == "tags":
                failures += input_rules.tags_problems(arg, settings.allowed_tags)
            else:
                failures.append(f"Unknown argument {input_rules.ruby_to_s(arg)}.")
        if failures:
            raise ApiError(400, {"ok": False, "failure": failures})
        lifetime = input_rules.ruby_to_i(body["lifetime"]) if "lifetime" in body else None
        if lifetime is not None and ctx.config.quotas.configured:
            token = presented_token(req) if ctx.auth_configured else None
            quota_guard.check_lifetime(ctx, requester(req, ctx, token), lifetime)
        tags = input_rules.filter_tags(body.get("tags") or {}, ctx.config.tagfilter)
        kept = {k: v for k, v in tags.items() if isinstance(v, str) and v}
        if len(kept) > settings.max_tags_per_vm:
            raise _too_many_tags(settings.max_tags_per_vm, len(kept))
        if not body:
            json_body(resp, 200, {"ok": True})
            return
        outcome = self.store.modify_vm(
            short, date=timefmt.date_bucket(ctx.clock.now()), lifetime=lifetime, tags=kept,
            max_tags=settings.max_tags_per_vm, stats_ttl=ctx.config.redis.data_ttl * 3600)
        if not outcome.exists:
            raise ApiError(404)
        if not outcome.ok:
            raise _too_many_tags(settings.max_tags_per_vm, outcome.new_tags, outcome.tags)
        json_body(resp, 200, {"ok": True})

    def on_delete(self, req: falcon.Request, resp: falcon.Response, hostname: str) -> None:
        _count(self.ctx, "delete", "hostname")
        ctx = self.ctx
        short = _valid_hostname(hostname)
        rdata = self.store.vm_hash(short)
        if not rdata:
            raise ApiError(404)
        authorize_vm_change(req, ctx, self.store, owner=rdata.get("token:token"),
                            checked_out="checkout" in rdata,
                            token_needed="token:token" in rdata)
        pool = rdata.get("template") or rdata.get("pool")
        outcome = self.store.return_vm(pool, short) if pool else ReturnOutcome.NOT_RETURNABLE
        if outcome == ReturnOutcome.NOT_RETURNABLE:
            ctx.metrics.increment("delete.failed")
            raise ApiError(404)
        ctx.metrics.increment("delete.success")
        if outcome != ReturnOutcome.ALREADY_COMPLETED and pool:
            if ctx.config.settings.usage_stats:
                vm_checkout.record_usage(ctx, "destroy", short, rdata)
            ctx.commands.pool_changed(pool, "vm returned")
        json_body(resp, 200, {"ok": True})


def _short_existing(req: falcon.Request, ctx: ApiContext, store: CheckoutStore,
                    short: str, fields: list[str]) -> list[str | None]:
    """404 unless the VM's hash exists; the ownership rule; the requested fields."""
    exists, values = store.vm_probe(short, ["token:token", *fields])
    if not exists:
        raise ApiError(404)
    check_owner(req, ctx, values[0])
    return values[1:]


class Disk:
    """``POST /vm/:hostname/disk/:size``: queue a disk of ``size`` GB (202)."""

    def __init__(self, ctx: ApiContext, store: CheckoutStore) -> None:
        self.ctx = ctx
        self.store = store

    def on_post(self, req: falcon.Request, resp: falcon.Response, hostname: str,
                size: str) -> None:
        _count(self.ctx, "post", "disksize")
        if self.ctx.auth_configured:
            need_token(req, self.ctx, self.store)
        short = _valid_hostname(hostname)
        try:
            input_rules.check_disk_size(size)
        except input_rules.InputError as exc:
            raise ApiError(400, {"ok": False, "error": exc.message}) from None
        _short_existing(req, self.ctx, self.store, short, [])
        self.store.queue_task("disk", f"{short}:{size}")
        self.ctx.commands.tasks_queued()
        json_body(resp, 202, {"ok": True, short: {"disk": f"+{size}gb"}})


class Snapshots:
    """``POST /vm/:hostname/snapshot`` (create, 202) and ``.../snapshot/:name`` (revert)."""

    def __init__(self, ctx: ApiContext, store: CheckoutStore) -> None:
        self.ctx = ctx
        self.store = store

    def _start(self, req: falcon.Request, hostname: str) -> str:
        _count(self.ctx, "post", "snapshot")
        if self.ctx.auth_configured:
            need_token(req, self.ctx, self.store)
        return input_rules.shorten(hostname)

    def on_post(self, req: falcon.Request, resp: falcon.Response, hostname: str) -> None:
        short = self._start(req, hostname)
        _short_existing(req, self.ctx, self.store, short, [])
        rng = self.ctx.rng
        name = _ALPHABET[rng.randrange(25)] + "".join(rng.choice(_ALPHABET) for _ in range(31))
        self.store.queue_task("snapshot", f"{short}:{name}")
        self.ctx.commands.tasks_queued()
        json_body(resp, 202, {"ok": True, short: {"snapshot": name}})

    def on_post_revert(self, req: falcon.Request, resp: falcon.Response, hostname: str,
                       snapshot: str) -> None:
        short = self._start(req, hostname)
        (taken_at,) = _short_existing(req, self.ctx, self.store, short, [f"snapshot:{snapshot}"])
        if input_rules.ruby_to_i(taken_at) == 0:
            raise ApiError(404)
        self.store.queue_task("snapshot-revert", f"{short}:{snapshot}")
        self.ctx.commands.tasks_queued()
        json_body(resp, 202, {"ok": True})


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add the ``/vm`` routes under ``prefix``."""
    store = CheckoutStore(ctx.redis)
    app.add_route(f"{prefix}/vm", VmCollection(ctx, store))
    app.add_route(f"{prefix}/vm/{{hostname}}", VmItem(ctx, store))
    app.add_route(f"{prefix}/vm/{{hostname}}/disk/{{size}}", Disk(ctx, store))
    snapshots = Snapshots(ctx, store)
    app.add_route(f"{prefix}/vm/{{hostname}}/snapshot", snapshots)
    app.add_route(f"{prefix}/vm/{{hostname}}/snapshot/{{snapshot}}", snapshots, suffix="revert")
