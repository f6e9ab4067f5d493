"""On-demand requests for POST ``/ondemandvm`` and POST ``/ondemandvm/:template`` (reference
§1.3, §2.4): reading the order, checking it, and choosing the pool of every instance.

What callers rely on: :func:`read_payload` returns the JSON object of the body or raises
the 400; :func:`check_order` raises vmpooler's 404/403 (and our 400s) or returns the counts
and the request id to use; :func:`plan` draws one pool per instance and returns the
request's entries (``alias:pool:count``), never an entry with a count of 0. Nothing here
writes Redis.

Divergences from vmpooler 3.9.1 (on purpose; listed in docs/compatibility.md):

* a body that is not a JSON object (``null``, an array, a number) is a 400 (vmpooler: 404
  for ``null``, 500 otherwise); a body over 10240 bytes is a 400;
* a count must be a whole number ≥ 0 — an integer, an integral float or a string starting
  with digits (Ruby's integer prefix, as vmpooler reads it: ``"2abc"`` is 2); a negative or
  non-numeric count is a 400 naming the key (vmpooler asked for zero instances);
* a request for no VM (no name, or every count 0) is a 400 (vmpooler made it, marked it
  ready with no hostnames at once and kept it 30 days);
* a supplied ``request_id`` must follow
  :func:`~vmpooler.actors.storage.request_ids.request_id_problem`'s rule (1..64 of
  ``[A-Za-z0-9._-]``, no ``__``, no leading or trailing ``_``, not a word of the key schema:
  the id becomes part of key names), else 400; ``null`` means "none supplied", as in
  vmpooler;
* a pool is chosen among the **configured** pools (vmpooler only considered pools the manager
  had published to ``vmpooler__pools``, so a plain pool name could yield no instance);
* ``request_id`` is only special in the JSON body: as a name in ``/ondemandvm/<names>`` it is
  unknown (vmpooler used its count as the request id);
* an unknown name is counted as ``ondemandrequest_fail.invalid`` under ``unknown``
  (:mod:`vmpooler.web.metric_labels`), so client text never becomes part of a metric name.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

import falcon

from vmpooler.actors.config.overrides import saturate
from vmpooler.actors.placement.choose import ondemand_plan
from vmpooler.actors.storage.request_ids import request_id_problem
from vmpooler.actors.storage.request_store import Entry
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError
from vmpooler.web.body import MAX_BODY, parse_json, read_raw
from vmpooler.web.input_rules import ruby_to_i

__all__ = [
    "check_order",
    "check_request_id",
    "plan",
    "read_payload",
]

_UNPARSABLE = "JSON payload could not be parsed"
_INT_START = re.compile(r"[ \t\r\n\f\v]*[+-]?[0-9]")


def _bad_request(message: str) -> ApiError:
    return ApiError(400, {"ok": False, "message": message})


def read_payload(req: falcon.Request) -> dict[str, Any]:
    """The body as a JSON object (read whatever the Content-Type says, as vmfloaty sends
    ``application/x-www-form-urlencoded``); 400 ``{"ok": false, "message": ...}`` otherwise."""
    raw = read_raw(req, MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise _bad_request("Request body too large")
    try:
        value = parse_json(raw.decode("utf-8"))
    except ValueError:  # InvalidJson, and UnicodeDecodeError for bytes that are not UTF-8
        raise _bad_request(_UNPARSABLE) from None
    if not isinstance(value, dict):
        raise _bad_request("JSON payload must be an object of {\"<pool or alias>\": <count>}")
    return value


def _count(name: str, value: Any) -> int:
    """A count as vmpooler reads it (Ruby ``to_i``), refusing what is not a whole number ≥ 0."""
    number: int | None = None
    if isinstance(value, bool) or value is None:
        number = None
    elif isinstance(value, int):
        number = saturate(value)
    elif isinstance(value, float):
        number = saturate(int(value)) if value.is_integer() else None
    elif isinstance(value, str) and _INT_START.match(value):
        number = ruby_to_i(value)
    if number is None or number < 0:
        raise _bad_request(f"the count of '{name}' must be a whole number of at least 0")
    return number


def _request_id(value: Any) -> str:
    """A supplied request id, or 400 naming ``request_id``."""
    problem = request_id_problem(value)
    if problem is not None:
        raise _bad_request(problem)
    return str(value)


def check_request_id(value: str) -> str:
    """The ``:requestid`` of GET/DELETE ``/ondemandvm/<id>`` if it follows the rule of
    request ids; 400 ``{"ok": false, "message": ...}`` otherwise (no such request can
    exist, and no key is read for it)."""
    return _request_id(value)


def check_order(ctx: ApiContext, payload: Mapping[str, Any], *,
                request_id: Any = None) -> tuple[dict[str, int], str]:
    """``({name: count}, request id)`` for a valid order, in vmpooler's order of checks.

    Unknown names → 404 ``{"ok": false, "bad_templates": [...]}``; a bad count → 400; any
    count over ``max_ondemand_instances_per_request`` → 403; no count of at least 1 (``{}``,
    ``{"<pool>": 0}``, only ``priority``) → 400; a bad ``request_id`` → 400.
    Without a ``request_id`` a random UUID v4 is used. Sends the ``ondemandrequest_fail``
    metrics.
    """
    config = ctx.config
    known = set(config.pool_names) | set(config.aliases)
    bad = [name for name in payload if name not in known]
    if bad:
        for name in bad:
            ctx.metrics.increment("ondemandrequest_fail.invalid", tags={"pool": name})
        raise ApiError(404, {"ok": False, "bad_templates": bad})
    counts = {name: _count(name, value) for name, value in payload.items()}
    limit = config.settings.max_ondemand_instances_per_request
    for name, count in counts.items():
        if count > limit:
            ctx.metrics.increment("ondemandrequest_fail.toomanyrequests", tags={"pool": name})
            raise ApiError(403, {"ok": False, "message": "requested amount of instances "
                                                         f"exceeds the maximum {limit}"})
    if not any(counts.values()):
        raise _bad_request("the request asks for no VM: name at least one pool or alias with "
                           "a count of at least 1, as {\"<pool or alias>\": <count>}")
    chosen = str(uuid.uuid4()) if request_id is None else _request_id(request_id)
    return counts, chosen


def plan(ctx: ApiContext, counts: Mapping[str, int]) -> list[Entry]:
    """One pool drawn per instance, counted per (name, pool) in order of first draw
    (:func:`vmpooler.actors.placement.choose.ondemand_plan` with the API's random source and
    failover health): for a name served by a pool with ``failover: true`` (ours) the draw
    leaves out the pools that cannot deliver now, unless none can."""
    return ondemand_plan(ctx.config, ctx.rng, ctx.backends, counts)
