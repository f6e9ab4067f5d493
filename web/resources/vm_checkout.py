"""Checkout of ready VMs for POST ``/vm`` and POST ``/vm/:template`` (reference §1.3).

The Python side reads the request and decides, per requested unit, the ordered candidate
pools (vmpooler's alias and ``backend_weight`` selection:
:func:`vmpooler.actors.placement.choose.checkout_candidates`); one Lua script then takes every VM
or none (:meth:`CheckoutStore.checkout`). There is no process-local lock, so any number of
API processes may check out from one Redis.

What callers rely on: :func:`body_payload` and :func:`template_payload` raise vmpooler's 400
or return ``{name: count}`` in request order; :func:`allocate` raises 404/401/503 as vmpooler
does, or returns the 200 body, having sent metrics and ``pool_changed`` commands. With
``:auth:`` and ``require_token_for_checkout`` (ours), a checkout without a valid token is the
401 (vmpooler: a checkout needs no token).

Cost: exactly one Redis round trip per checkout (EVALSHA), the token check included (it is
folded into the script); with ``:quotas:`` limits one more before it (the requester's token,
:func:`vmpooler.web.identity.requester`) and the script is the quota's checkout
(:mod:`vmpooler.web.quota_guard`); one more, a pipelined read, only when ``usage_stats`` is on, and
one more at most once a second per process and set of pools for a name served by a pool
with ``failover: true`` (which of its pools can deliver).

Divergences from vmpooler 3.9.1 (on purpose):

* allocation is one atomic script valid across API processes (no in-process mutex); no
  partially allocated state is ever visible, and a rollback leaves no field behind
  (vmpooler left ``lifetime`` on VMs it put back);
* ``checkout.success`` counts only VMs actually handed out, and ``checkout.empty`` is sent
  for the first name that could not be served only (vmpooler also counted VMs it rolled
  back, and every failing name), tagged with that name as vmpooler does (a pool or an
  alias); ours, ``checkout.miss`` counts the refusal against each pool that name could be
  served from (for an alias: every pool it maps to, all found empty), so that
  ``success / (success + miss)`` is each pool's warm-hit ratio;
* a ready VM whose hash vanished is moved to completed for the manager to reap instead of
  being handed out;
* POST ``/vm/+`` (no names at all) answers 404 like an empty JSON body (vmpooler: 200
  ``{"ok": true}`` with no VM);
* the JSON body's pool-name rule accepts dots (see :mod:`vmpooler.web.input_rules`); the count
  cap 1..100 of the JSON body stays; POST ``/vm/:template`` takes at most
  :data:`MAX_PATH_NAMES` names (400 beyond; vmpooler had no cap, and 100,000 ``+a`` cost a
  worker 0.4 s and a 100,000-unit script call).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import falcon

from vmpooler.actors.config import Config
from vmpooler.actors.fairness.quota import QuotaTicket
from vmpooler.actors.fairness.quota_policy import Requester
from vmpooler.actors.placement.choose import checkout_candidates, names_of
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.checkout_store import CheckoutOutcome, CheckoutStore, Taken
from vmpooler.web import quota_guard
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError
from vmpooler.web.identity import client_key, requester
from vmpooler.web.input_rules import InputError, check_pool_name, check_vm_count
from vmpooler.web.tokens import presented_token, unauthorized

__all__ = [
    "MAX_PATH_NAMES",
    "allocate",
    "body_payload",
    "candidate_pools",
    "fqdn",
    "pool_domain",
    "record_usage",
    "template_payload",
    "usage_fields",
]

log = logging.getLogger(__name__)

usage_fields = ("tag:jenkins_build_url", "token:user", "template")
"""The VM fields :func:`record_usage` reads, in its order."""


def body_payload(body: Mapping[str, Any]) -> dict[str, int]:
    """``{name: count}`` from a parsed POST ``/vm`` body; 400 on the first bad pair."""
    payload: dict[str, int] = {}
    for name, count in body.items():
        try:
            payload[check_pool_name(name)] = check_vm_count(count)
        except InputError as exc:
            raise ApiError(400, {"ok": False, "error": exc.message}) from None
    return payload


MAX_PATH_NAMES = 1000
"""The most names ``a+b+a`` may join in the path of POST ``/vm/<names>`` and
``/ondemandvm/<names>`` (vmpooler: no cap)."""


def template_payload(template: str) -> dict[str, int]:
    """``a+b+a`` → ``{"a": 2, "b": 1}`` (Ruby ``split``: trailing empty names dropped).

    More than :data:`MAX_PATH_NAMES` names raise :class:`~vmpooler.web.input_rules.InputError`
    (the path is not split further)."""
    names = template.split("+", MAX_PATH_NAMES)
    while names and names[-1] == "":
        names.pop()
    if len(names) > MAX_PATH_NAMES:
        raise InputError(f"at most {MAX_PATH_NAMES} names may be joined by '+' in the path")
    payload: dict[str, int] = {}
    for name in names:
        payload[name] = payload.get(name, 0) + 1
    return payload


def candidate_pools(ctx: ApiContext, name: str) -> list[str]:
    """Pools that may serve one unit of ``name``, best first
    (:func:`vmpooler.actors.placement.choose.checkout_candidates` with the API's random
    source and failover health)."""
    return checkout_candidates(ctx.config, ctx.rng, ctx.backends, name)


_last_domains: list[tuple[Config, Mapping[str, str | None]]] = []  # of the Config seen last


def pool_domain(config: Config, pool: str) -> str | None:
    """The domain of a configured pool (the first of that name); None without one or when it
    is not configured. Worked out once per ``Config`` (a reload makes a new one)."""
    cached = _last_domains[0] if _last_domains else None
    if cached is None or cached[0] is not config:
        domains: dict[str, str | None] = {}
        for each in config.pools:
            domains.setdefault(each.name, each.domain)
        cached = (config, domains)
        _last_domains[:] = [cached]
    return cached[1].get(pool)


_last_now: list[tuple[datetime, str]] = []  # (second, its text) of the checkout seen last


def _now_text(seconds: float) -> str:
    """``timefmt.format_epoch(seconds)``, rendered once per second of time."""
    moment = datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=0)
    cached = _last_now[0] if _last_now else None
    if cached is not None and cached[0] == moment:
        return cached[1]
    text = timefmt.format_epoch(seconds)
    _last_now[:] = [(moment, text)]
    return text


def fqdn(config: Config, pool: str, vm: str) -> str:
    """``<vm>.<domain of pool>``, or the bare name when the pool has no domain (or is gone)."""
    domain = pool_domain(config, pool)
    return f"{vm}.{domain}" if domain else vm


def allocate(req: falcon.Request, ctx: ApiContext, store: CheckoutStore,
             payload: Mapping[str, int]) -> dict[str, Any]:
    """Check out ``payload`` all or nothing; the 200 body, or 404/401/503 raised."""
    started = ctx.clock.monotonic()
    token = _checkout_token(req, ctx)
    _check_names(ctx, payload)
    if token == "":
        raise unauthorized()
    requested = [name for name, count in payload.items() for _ in range(count)]
    asker, ticket = _quota(req, ctx, token, len(requested))
    usual = _usual_lifetime(ctx, token)
    capped = quota_guard.lifetime_cap(ctx, ticket, usual)
    units = [candidate_pools(ctx, name) for name in requested]
    now = ctx.clock.now()
    with ctx.tracer.start("redis checkout", kind="client",
                          attributes={"vmpooler.vms": len(requested)}):
        outcome = store.checkout(
            units, now=_now_text(now), epoch=now, token=token,
            lifetime=usual if capped is None else capped, quota=ticket,
            client=client_key(req, ctx))
    _refuse_unless_taken(ctx, outcome, asker, requested, units)
    body = _body(ctx, requested, outcome.taken)
    _after_checkout(ctx, store, outcome.taken, started)
    return body


def _checkout_token(req: falcon.Request, ctx: ApiContext) -> str | None:
    """The token presented (None without ``:auth:``, or when none is presented); the 401
    when ``require_token_for_checkout`` asks for one and none is presented (an invalid one is
    refused by the checkout script)."""
    token = presented_token(req) if ctx.auth_configured else None
    if token is None and ctx.auth_configured and ctx.config.settings.require_token_for_checkout:
        raise unauthorized()
    return token


def _check_names(ctx: ApiContext, payload: Mapping[str, int]) -> None:
    """The 404 for no name at all or for names that are neither pools nor aliases, each
    counted as ``checkout.invalid``."""
    if not payload:
        ctx.metrics.increment("checkout.invalid", tags={"pool": "unknown"})
        raise ApiError(404)
    requestable = names_of(ctx.config).requestable
    unknown = [name for name in payload if name not in requestable]
    if unknown:
        for name in unknown:
            ctx.metrics.increment("checkout.invalid", tags={"pool": name})
        raise ApiError(404)


def _usual_lifetime(ctx: ApiContext, token: str | None) -> int | None:
    """``vm_lifetime_auth`` for a checkout with a token (when set and positive), else None."""
    lifetime = ctx.config.settings.vm_lifetime_auth
    return lifetime if token is not None and lifetime and lifetime > 0 else None


def _refuse_unless_taken(ctx: ApiContext, outcome: CheckoutOutcome, asker: Requester | None,
                         requested: list[str], units: list[list[str]]) -> None:
    """Raise what the checkout script refused: the 401 (a bad token), the quota's refusal,
    or the 503 (a unit found every candidate empty: ``checkout.empty`` for its name,
    ``checkout.miss`` for each of its candidate pools)."""
    if outcome.bad_token:
        raise unauthorized()
    if outcome.refused is not None and asker is not None:
        raise quota_guard.refuse(ctx, asker, outcome.refused, len(requested))
    if not outcome.ok:
        failed = outcome.failed_unit or 0
        ctx.metrics.increment("checkout.empty", tags={"pool": requested[failed]})
        # every candidate pool of the refused unit was tried and found empty: a miss for each
        for pool in units[failed] or [requested[failed]]:
            ctx.metrics.increment("checkout.miss", tags={"pool": pool})
        raise ApiError(503)


def _body(ctx: ApiContext, requested: list[str], taken: Sequence[Taken]) -> dict[str, Any]:
    """The 200 body: each requested name's hostname, a list when it got several (counting
    ``checkout.success`` for each VM's pool)."""
    body: dict[str, Any] = {"ok": True}
    for name, one in zip(requested, taken, strict=True):
        ctx.metrics.increment("checkout.success", tags={"pool": one.pool})
        host = fqdn(ctx.config, one.pool, one.vm)
        entry = body.setdefault(name, {})
        if "hostname" not in entry:
            entry["hostname"] = host
        elif isinstance(entry["hostname"], list):
            entry["hostname"].append(host)
        else:
            entry["hostname"] = [entry["hostname"], host]
    return body


def _after_checkout(ctx: ApiContext, store: CheckoutStore, taken: Sequence[Taken],
                    started: float) -> None:
    """Usage statistics (when on), ``pool_changed`` once per pool taken from, and the
    ``checkout.duration`` timing (ours: one per 200, tagged with the first pool)."""
    if ctx.config.settings.usage_stats:
        vms = [t.vm for t in taken]
        for vm, values in store.vm_fields(vms, usage_fields).items():
            record_usage(ctx, "allocate", vm, dict(zip(usage_fields, values, strict=True)))
    for pool in dict.fromkeys(t.pool for t in taken):
        ctx.commands.pool_changed(pool, "checkout")
    ctx.metrics.timing("checkout.duration", max(0.0, ctx.clock.monotonic() - started),
                       tags={"pool": taken[0].pool})


def _quota(req: falcon.Request, ctx: ApiContext, token: str | None,
           asked: int) -> tuple[Requester | None, QuotaTicket | None]:
    """The requester and its quota when ``:quotas:`` sets limits (else both None, and no
    Redis read): a token that names no user is the 401, over ``vms_per_request`` the 429."""
    if not ctx.config.quotas.configured:
        return None, None
    asker = requester(req, ctx, token)
    if token is not None and not asker.authenticated:
        raise unauthorized()
    ticket = quota_guard.ticket_for(ctx, asker)
    if ticket is not None:
        quota_guard.check_per_request(ctx, asker, ticket, asked)
    return asker, ticket


# -- usage statistics (reference §4.10) ---------------------------------------------------------
def ruby_split(text: str, sep: str) -> list[str]:
    """Ruby's ``text.split(sep)``: Python's, with the trailing empty parts dropped."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _component(labels: str | None) -> str:
    if labels is None:
        return ""
    for part in ruby_split(labels, ","):
        key, _, value = part.partition("=")
        if value and key == "RMM_COMPONENT_TO_TEST_NAME":
            return value.split("=")[0]
    return "none"


def record_usage(ctx: ApiContext, operation: str, vm: str,
                 fields: Mapping[str, str | None]) -> None:
    """vmpooler's ``update_user_metrics`` for ``allocate``/``destroy``; never raises."""
    try:
        pool = (fields.get("template") or "").replace(".", "_")
        if not pool:
            raise ValueError("no template")
        user = (fields.get("token:user") or "unauthenticated").replace(".", "_")
        tags = {"operation": operation, "pool": pool}
        ctx.metrics.increment("user", tags={"user": user, **tags})
        url = fields.get("tag:jenkins_build_url")
        if not url:
            return
        if "litmus" in url:
            ctx.metrics.increment("usage_litmus", tags={"user": user, **tags})
            return
        parts = ruby_split(url, "/")[2:]
        stream = [s.replace(".", "_") for s in ruby_split(parts[2], "_")]
        value_stream = stream.pop(0) if stream else ""
        branch = stream.pop() if stream else ""
        project = stream.pop(0) if stream else ""
        component = _component(parts[3] if len(parts) > 3 else None)
        ctx.metrics.increment("usage_jenkins_instance", tags={
            "instance": parts[0].replace(".", "_"), "value_stream": value_stream, **tags})
        ctx.metrics.increment("usage_branch_project",
                              tags={"branch": branch, "project": project, **tags})
        ctx.metrics.increment("usage_job_component",
                              tags={"job": "_".join(stream), "component": component, **tags})
    except (ValueError, IndexError, AttributeError) as exc:
        log.debug("[%s] usage labels of '%s' not evaluated: %s", fields.get("template"), vm, exc)
