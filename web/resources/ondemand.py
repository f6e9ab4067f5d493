"""API v3 ``/ondemandvm`` resources: create, read and delete on-demand requests.

Status codes, bodies and the order of checks are vmpooler 3.9.1's (reference §1.3, §2.4).
Every write goes through :class:`~vmpooler.actors.storage.request_store.RequestStore` (one
compare-and-set script each; a create through the gate every create passes,
:class:`~vmpooler.actors.fairness.intake.Intake`), and after every create and delete the
manager is told (``ctx.commands.request_changed``) so the request's actor starts, or stops,
at once.

* ``POST /ondemandvm`` (JSON body ``{"<pool or alias>": <count>, "request_id": "<id>"}``)
  and ``POST /ondemandvm/<a+b+a>`` (counts by repetition): a valid token first when auth is
  configured (401); then :mod:`vmpooler.web.resources.ondemand_create`'s checks
  (400/404/403); 409 when the request id is taken; 201 ``{"ok": true, "request_id": id}``.
* ``GET /ondemandvm/<id>`` (no auth): 400 an id that breaks the rule of request ids; 404
  unknown; 200 ready (FQDNs per requested name), failed (``message``: vmpooler's for a
  request failed at its TTL, else its ``failure_reason``, ours) or deleted; 202
  while in flight, with string counts per requested name and, ours, once the manager running
  it has placed it in the clone queue: ``queue_position``, ``estimated_ready_at`` and
  ``estimated_ready_in`` (docs/fairness.md, "Honest waits").
* ``DELETE /ondemandvm/<id>``: a valid token when auth is configured; 400 an id that breaks
  the rule; 404 unknown; 200.

Divergences from vmpooler 3.9.1 (on purpose; those of the order's checks are listed in
:mod:`vmpooler.web.resources.ondemand_create`):

* the request is created in one script (hash, token fields and the ``provisioning__request``
  entry together, only if the id is free), so two clients racing for one id cannot both get
  201;
* DELETE never changes a final status: a request that already failed answers 200
  ``{"ok": true, "message": "the request has already failed"}`` and stays failed (vmpooler
  overwrote ``failed`` with ``deleted``); a deleted request also leaves the provisioning
  queues at once (vmpooler left that to its manager, which still cloned for it);
* under ``:config: enforce_vm_ownership`` (off by default) a request created with a token can
  only be deleted with that token (403);
* ours, off by default: with ``:config: max_ondemand_requests_per_user`` and auth configured,
  a POST is refused with 429 ``{"ok": false, "message": ...}`` while the token's user has
  that many requests in flight (created, not yet ready, failed or deleted); the count and
  the creation are one script (the gate: :mod:`vmpooler.actors.fairness.intake`);
* ours, only with ``:quotas:`` limits: a POST over the user's ``vms_per_request``,
  ``ondemand_in_flight`` or ``vms_held`` is refused with 429 ``{"ok": false, "reason":
  "quota", ...}`` (:mod:`vmpooler.web.quota_guard`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import falcon

from vmpooler.actors.fairness.intake import (
    Applicant,
    Intake,
    PriorityRefused,
    UnknownPriorityError,
    admit_priority,
    origin_for,
)
from vmpooler.actors.fairness.quota_policy import Requester
from vmpooler.actors.storage.request_store import DeleteOutcome, RequestRecord
from vmpooler.actors.storage.timefmt import rfc3339
from vmpooler.actors.storage.wait_store import Wait, WaitStore
from vmpooler.web import quota_guard
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError, json_body
from vmpooler.web.identity import requester
from vmpooler.web.input_rules import InputError
from vmpooler.web.resources import ondemand_create, vm_checkout
from vmpooler.web.tokens import need_token, ownership_enforced, presented_token

__all__ = ["register"]


def _count(ctx: ApiContext, method: str, operation: str) -> None:
    ctx.metrics.increment("http_requests_vm_total",
                          tags={"method": method, "subpath": "ondemand", "operation": operation})


def _not_found(request_id: str) -> ApiError:
    return ApiError(404, {"ok": False,
                          "message": f"no request found for request_id '{request_id}'"})


def _authorised(req: falcon.Request, ctx: ApiContext) -> str | None:
    """vmpooler's need_token when auth is configured (401); the token, if auth is."""
    return need_token(req, ctx) if ctx.auth_configured else None


_NOT_GIVEN = object()

_TTL_REASON = "The request exceeded ondemand_request_ttl"
_INTERNAL_REASON = "Internal error"
"""How the failure reason of a request failed at its TTL starts (vmpooler's ``message``
is shown for it; any other reason is shown as it is)."""


def _pop_priority(ctx: ApiContext, payload: dict[str, Any]) -> Any:
    """The body's ``priority`` (ours), taken out of it unless a pool or alias is called
    that; ``_NOT_GIVEN`` when there is none."""
    config = ctx.config
    if "priority" in config.pool_names or "priority" in config.aliases:
        return _NOT_GIVEN
    return payload.pop("priority", _NOT_GIVEN)


def _priority(ctx: ApiContext, value: Any, asker: Requester) -> str:
    """The request's priority (``normal`` when not given): 400 for an unknown value, 403
    ``{"reason": "priority"}`` for ``high`` from a user ``:quotas: high_priority`` does not
    name (:func:`~vmpooler.actors.fairness.intake.admit_priority`)."""
    if value is _NOT_GIVEN:
        return "normal"
    try:
        return admit_priority(ctx.config.quotas, asker, value)
    except UnknownPriorityError as exc:
        raise ApiError(400, {"ok": False, "message": str(exc)}) from None
    except PriorityRefused as exc:
        raise ApiError(403, {"ok": False, "reason": "priority", "message": exc.message}) from None


def _applicant(ctx: ApiContext, asker: Requester, token: str | None,
               priority: str) -> Applicant:
    """Who asks, as the gate sees it: the token's user (read once) is written with the
    request; ``max_ondemand_requests_per_user`` counts the token's user, else the token,
    when auth is configured and a token was presented."""
    user = asker.user if asker.authenticated else None
    counted = (user or token) if ctx.auth_configured and token else None
    return Applicant(asker, origin_for(ctx.config.quotas, asker, priority), token=token,
                     token_user=user, counted_as=counted)


def _create(ctx: ApiContext, intake: Intake, req: falcon.Request, token: str | None,
            payload: dict[str, Any], request_id: Any,
            priority_given: Any = _NOT_GIVEN) -> dict[str, Any]:
    """Check the order, draw the pools and record the request through the gate
    (:mod:`vmpooler.actors.fairness.intake`); the 201 body."""
    asker = requester(req, ctx, token)
    priority = _priority(ctx, priority_given, asker)
    counts, chosen = ondemand_create.check_order(ctx, payload, request_id=request_id)
    entries = ondemand_create.plan(ctx, counts)
    outcome = intake.create(ctx.config, chosen, entries, _applicant(ctx, asker, token, priority),
                            created=int(ctx.clock.now()))
    if outcome.refusal is not None:
        raise quota_guard.refusal_error(ctx, asker, outcome.refusal,
                                        sum(entry.count for entry in entries))
    if not outcome.created:
        ctx.metrics.increment("ondemandrequest_generate.duplicaterequests")
        raise ApiError(409, {"ok": False, "request_id": chosen,
                             "message": f"request_id '{chosen}' has already been created"})
    ctx.metrics.increment("ondemandrequest_generate.success")
    ctx.commands.request_changed(chosen, "created")
    return {"ok": True, "request_id": chosen}


def describe(ctx: ApiContext, record: RequestRecord,
             wait: Wait | None = None) -> tuple[int, dict[str, Any]]:
    """The status and body of GET ``/ondemandvm/:requestid`` for a request; ``wait``: its
    published wait, shown while it is in flight."""
    body: dict[str, Any] = {"ok": True, "request_id": record.request_id, "ready": False}
    if record.status == "ready":
        body["ready"] = True
        for entry in record.entries:
            hosts = [vm_checkout.fqdn(ctx.config, entry.pool, vm)
                     for vm in record.delivered.get(entry.key, ())]
            body.setdefault(entry.alias, {"hostname": []})["hostname"].extend(hosts)
        return 200, body
    if record.status == "failed":
        reason = record.failure_reason or ""
        if reason.startswith(_INTERNAL_REASON):  # an exception's text is for the log only
            reason = "The request failed on an internal error (the manager's log says more)"
        body["message"] = (reason if reason and not reason.startswith(_TTL_REASON) else (
            "The request failed to provision instances within the configured "
            f"ondemand_request_ttl '{ctx.config.settings.ondemand_request_ttl}'"))
        return 200, body
    if record.status == "deleted":
        body["message"] = "The request has been deleted"
        return 200, body
    totals: dict[str, list[int]] = {}
    for entry in record.entries:
        ready = len(record.delivered.get(entry.key, ()))
        total = totals.setdefault(entry.alias, [0, 0])
        total[0] += ready
        total[1] += entry.count - ready
    for alias, (ready, pending) in totals.items():
        body[alias] = {"ready": str(ready), "pending": str(pending)}
    if wait is not None:
        body["queue_position"] = wait.position
        body["estimated_ready_at"] = rfc3339(datetime.fromtimestamp(round(wait.ready_at), UTC))
        body["estimated_ready_in"] = max(0, round(wait.ready_at - ctx.clock.now()))
    return 202, body


class OnDemandCollection:
    """``POST /ondemandvm``: a request from a JSON body."""

    def __init__(self, ctx: ApiContext, intake: Intake) -> None:
        self.ctx = ctx
        self.intake = intake

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        _count(self.ctx, "post", "requestid")
        token = _authorised(req, self.ctx)
        payload = ondemand_create.read_payload(req)
        request_id = payload.pop("request_id", None)
        priority = _pop_priority(self.ctx, payload)
        json_body(resp, 201, _create(self.ctx, self.intake, req, token, payload, request_id,
                                     priority))


class OnDemandItem:
    """``POST /ondemandvm/:template`` (a request by URL) and GET/DELETE
    ``/ondemandvm/:requestid`` (one route: Falcon names the segment once)."""

    def __init__(self, ctx: ApiContext, intake: Intake) -> None:
        self.ctx = ctx
        self.intake = intake
        self.store = intake.requests

    def on_post(self, req: falcon.Request, resp: falcon.Response, requestid: str) -> None:
        _count(self.ctx, "delete", "template")  # vmpooler's metric name for this route
        token = _authorised(req, self.ctx)
        try:
            payload = dict(vm_checkout.template_payload(requestid))
        except InputError as exc:
            raise ApiError(400, {"ok": False, "message": exc.message}) from None
        json_body(resp, 201, _create(self.ctx, self.intake, req, token, payload, None))

    def on_get(self, req: falcon.Request, resp: falcon.Response, requestid: str) -> None:
        _count(self.ctx, "get", "request")
        record = self.store.read(ondemand_create.check_request_id(requestid))
        if record is None:
            raise _not_found(requestid)
        finished = record.status in ("ready", "failed", "deleted")
        wait = None if finished else WaitStore(self.ctx.redis).wait(record.request_id)
        status, body = describe(self.ctx, record, wait)
        json_body(resp, status, body)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, requestid: str) -> None:
        _count(self.ctx, "delete", "request")
        ctx = self.ctx
        _authorised(req, ctx)
        ondemand_create.check_request_id(requestid)
        if ownership_enforced(ctx):
            owner = self.store.owner_token(requestid)
            if owner and presented_token(req) != owner:
                raise ApiError(403, {"ok": False,
                                     "message": "This request was created with another token"})
        outcome = self.store.delete(requestid)
        if outcome is DeleteOutcome.NOT_FOUND:
            raise _not_found(requestid)
        if outcome is DeleteOutcome.ALREADY_DELETED:
            json_body(resp, 200, {"ok": True, "message": "the request has already been deleted"})
            return
        if outcome is DeleteOutcome.ALREADY_FAILED:
            json_body(resp, 200, {"ok": True, "message": "the request has already failed"})
            return
        ctx.commands.request_changed(requestid, "deleted")
        json_body(resp, 200, {"ok": True})


def register(app: falcon.App, ctx: ApiContext, prefix: str) -> None:
    """Add the ``/ondemandvm`` routes under ``prefix``."""
    intake = Intake(ctx.redis)
    app.add_route(f"{prefix}/ondemandvm", OnDemandCollection(ctx, intake))
    app.add_route(f"{prefix}/ondemandvm/{{requestid}}", OnDemandItem(ctx, intake))
