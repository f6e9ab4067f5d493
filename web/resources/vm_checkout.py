"""Checkout of ready VMs for POST ``/vm`` and POST ``/vm/:template`` (reference §1.3).

The Python side reads the request and decides, per requested unit, the ordered candidate
pools (vmpooler's alias and ``backend_weight`` selection); one Lua script then takes every VM
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
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import falcon

from vmpooler.actors.config import Config
from vmpooler.actors.fairness.policy import Requester
from vmpooler.actors.fairness.quota import QuotaTicket
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.checkout_store import CheckoutStore
from vmpooler.web import quota_guard
from vmpooler.web.alias_failover import failover_names
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError
from vmpooler.web.identity import client_key, requester
from vmpooler.web.input_rules import InputError, check_pool_name, check_vm_count
from vmpooler.web.tokens import presented_token, unauthorized

__all__ = [
    "MAX_PATH_NAMES",
    "allocate",
    "backend_weight",
    "body_payload",
    "candidate_pools",
    "fqdn",
    "pool_domain",
    "record_usage",
    "template_payload",
    "usage_fields",
    "weighted_draw",
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


def backend_weight(config: Config, name: str) -> int | None:
    """The ``backend_weight`` of the pool's clone target, or None (unknown pool, no target or
    no weight for it)."""
    try:
        pool = config.pool(name)
    except KeyError:
        return None
    target = pool.clone_target or config.settings.clone_target
    return None if target is None else config.settings.backend_weight.get(target)


def weighted_draw(config: Config, rng: random.Random, backends: list[str]) -> str | None:
    """One of ``backends`` drawn by ``backend_weight`` (a weight of 0 never wins), or None
    when weights are not configured for every one of them or all are 0."""
    if not config.settings.backend_weight:
        return None
    weights = [backend_weight(config, b) for b in backends]
    if None in weights:
        return None
    positive = [(b, w) for b, w in zip(backends, weights, strict=True) if w and w > 0]
    total = sum(w for _, w in positive)
    if total <= 0:
        return None
    point = rng.random() * total
    for backend, weight in positive:
        point -= weight
        if point < 0:
            return backend
    return positive[-1][0]


def candidate_pools(ctx: ApiContext, name: str) -> list[str]:
    """Pools that may serve one unit of ``name``, best first (vmpooler's fetch_single_vm).

    Candidates are ``name`` and its alias targets. When every candidate is a pool whose
    clone target has a ``backend_weight``, one is drawn by weight (0 never wins); otherwise
    one is drawn uniformly. The drawn one goes first, the others follow as fallbacks. Names
    that are not pools are dropped. For a name served by a pool with ``failover: true``
    (ours), the pools that cannot deliver now (:mod:`vmpooler.web.alias_failover`) go last, so
    they serve only when no other candidate has a ready VM.
    """
    config = ctx.config
    index = _index(config)
    backends = [name]
    aliases = index.aliases
    if aliases:
        backends += [p for p in aliases.get(name, ()) if p not in backends]
        first = weighted_draw(config, ctx.rng, backends) or ctx.rng.choice(backends)
        backends.remove(first)
        backends.insert(0, first)
    pools = index.pools
    found = [b for b in backends if b in pools]
    if name in index.failover and len(found) > 1:
        down = ctx.backends.undeliverable(config, found)
        if down:
            found = [b for b in found if b not in down] + [b for b in found if b in down]
    return found


def pool_domain(config: Config, pool: str) -> str | None:
    """The domain of a configured pool; None without one or when it is not configured."""
    return _index(config).domains.get(pool)


@dataclass(frozen=True, slots=True)
class _Index:
    """What a checkout looks up in a :class:`Config`, worked out once per ``Config`` (it is
    immutable; a reload makes a new one): pool names, the names a client may request (pools
    and aliases), alias -> pools, pool -> domain (of the first pool of that name)."""

    config: Config
    pools: frozenset[str]
    requestable: frozenset[str]
    aliases: Mapping[str, tuple[str, ...]]
    domains: Mapping[str, str | None]
    failover: frozenset[str]  # names served by a pool with failover: true


_last_index: list[_Index] = []  # the index of the Config seen last (one entry)


def _index(config: Config) -> _Index:
    cached = _last_index[0] if _last_index else None
    if cached is not None and cached.config is config:
        return cached
    aliases = config.aliases
    domains: dict[str, str | None] = {}
    for pool in config.pools:
        domains.setdefault(pool.name, pool.domain)
    index = _Index(config=config, pools=frozenset(config.pool_names),
                   requestable=frozenset(config.pool_names) | frozenset(aliases),
                   aliases=aliases, domains=domains, failover=failover_names(config))
    _last_index[:] = [index]
    return index


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
    token = presented_token(req) if ctx.auth_configured else None
    if token is None and ctx.auth_configured and ctx.config.settings.require_token_for_checkout:
        raise unauthorized()  # an invalid token is refused by the checkout script below
    requestable = _requestable(ctx.config)
    unknown = [name for name in payload if name not in requestable]
    if not payload:
        ctx.metrics.increment("checkout.invalid", tags={"pool": "unknown"})
        raise ApiError(404)
    if unknown:
        for name in unknown:
            ctx.metrics.increment("checkout.invalid", tags={"pool": name})
        raise ApiError(404)
    if token == "":
        raise unauthorized()
    lifetime = ctx.config.settings.vm_lifetime_auth
    usual = lifetime if token is not None and lifetime and lifetime > 0 else None
    requested = [name for name, count in payload.items() for _ in range(count)]
    asker, ticket = _quota(req, ctx, token, len(requested))
    capped = quota_guard.lifetime_cap(ctx, ticket, usual)
    units = [candidate_pools(ctx, name) for name in requested]
    now = ctx.clock.now()
    outcome = store.checkout(
        units, now=_now_text(now), epoch=now, token=token,
        lifetime=usual if capped is None else capped, quota=ticket,
        client=client_key(req, ctx))
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
    body: dict[str, Any] = {"ok": True}
    for name, taken in zip(requested, outcome.taken, strict=True):
        ctx.metrics.increment("checkout.success", tags={"pool": taken.pool})
        host = fqdn(ctx.config, taken.pool, taken.vm)
        entry = body.setdefault(name, {})
        if "hostname" not in entry:
            entry["hostname"] = host
        elif isinstance(entry["hostname"], list):
            entry["hostname"].append(host)
        else:
            entry["hostname"] = [entry["hostname"], host]
    if ctx.config.settings.usage_stats:
        vms = [t.vm for t in outcome.taken]
        for vm, values in store.vm_fields(vms, usage_fields).items():
            record_usage(ctx, "allocate", vm, dict(zip(usage_fields, values, strict=True)))
    for pool in dict.fromkeys(t.pool for t in outcome.taken):
        ctx.commands.pool_changed(pool, "checkout")
    ctx.metrics.timing("checkout.duration", max(0.0, ctx.clock.monotonic() - started),
                       tags={"pool": outcome.taken[0].pool})  # ours: one per 200, first pool
    return body


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


def _requestable(config: Config) -> frozenset[str]:
    """vmpooler's ``pool_names``: configured pools plus aliases."""
    return _index(config).requestable


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
