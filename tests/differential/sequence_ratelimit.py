"""The sequence for a configuration with the rate limiter on (reference §1.6) and small
limits, each class with its own limit and period (:data:`RATE_LIMITS`), so that an answer
naming the wrong class shows.

It counts up to each class's limit and past it: GETs without a token (``global_per_ip``,
``ip:127.0.0.1``), POSTs with ``/vm`` in the path — checkouts, disk and snapshot requests —
without and with a token (``vm_creation``), DELETEs of VMs (``vm_deletion``) and requests with
a token (``authenticated``). ``/ondemandvm`` does not contain ``/vm``: its POSTs and DELETEs
count as ``authenticated`` or ``global_per_ip``. An empty token header makes a request
``authenticated`` but identifies the client by its address (ours: an empty or unknown token
counts as ``global_per_ip`` by address, a listed difference). Answers over a limit are 429 with
the rate-limit headers; accepted answers carry none (each step compares :data:`HEADERS`).

The APIs' readiness polls are not part of the sequence: the test clears the counters they
left before the first step. Step ids start with ``ratelimit-``.
"""

from __future__ import annotations

from typing import Any

import redis

from tests.differential.seed import PASSWORD, TOKEN, USER, vm, vms
from tests.differential.step import Seed, Step, delete, get, post

__all__ = [
    "HEADERS",
    "KEYED_RATE_LIMITS",
    "RATE_LIMITS",
    "REFUSED",
    "rate_limits_yaml",
    "sequence_ratelimit",
    "sequence_ratelimit_keys",
]

V3 = "/api/v3"
HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")
"""The response headers every step of this sequence compares."""

RATE_LIMITS: dict[str, tuple[int, int]] = {
    "global_per_ip": (3, 450),
    "authenticated": (4, 900),
    "vm_creation": (2, 600),
    "vm_deletion": (3, 300),
}
"""class → (limit, period in seconds), written as ``:rate_limits:``."""


REFUSED = frozenset({
    "ratelimit-global-over", "ratelimit-global-over-again", "ratelimit-global-ondemand",
    "ratelimit-global-token-create", "ratelimit-global-dashboard", "ratelimit-create-over",
    "ratelimit-create-token-over", "ratelimit-delete-over", "ratelimit-auth-over",
    "ratelimit-auth-over-ondemand", "ratelimit-auth-over-poolsize",
    "ratelimit-auth-over-ondemand-delete", "ratelimit-delete-after-auth-over",
    "ratelimit-window-over", "ratelimit-window-no-expiry",
})
"""The steps of :func:`sequence_ratelimit` that vmpooler answers 429; it accepts the
others."""


def rate_limits_yaml() -> str:
    """:data:`RATE_LIMITS` as the top-level ``:rate_limits:`` section, with symbol keys as
    vmpooler reads them."""
    lines = [":rate_limits:"]
    for name, (limit, period) in RATE_LIMITS.items():
        lines += [f"  :{name}:", f"    :limit: {limit}", f"    :period: {period}"]
    return "\n".join(lines) + "\n"


KEYED_RATE_LIMITS = """\
:rate_limits:
  :global_per_ip:
    limit: 1
    period: 60
  :vm_creation:
    :limit: 1
"""
"""A ``:rate_limits:`` section vmpooler misreads: ``global_per_ip`` with plain (string) keys,
``vm_creation`` without its ``period``."""


def _get(id: str, path: str, **kw: Any) -> Step:
    return get(f"ratelimit-{id}", path, headers=HEADERS, **kw)


def _post(id: str, path: str, body: Any = None, **kw: Any) -> Step:
    return post(f"ratelimit-{id}", path, body, headers=HEADERS, **kw)


def _delete(id: str, path: str, **kw: Any) -> Step:
    return delete(f"ratelimit-{id}", path, headers=HEADERS, **kw)


def per_ip() -> list[Step]:
    """``global_per_ip`` (3): any route counts, a 404 too; then everything without a token
    is refused, ``/ondemandvm``, Basic-authenticated token requests and the dashboard
    included. An empty token header is another class."""
    od = f"{V3}/ondemandvm"
    return [
        _get("global-1", f"{V3}/vm"),
        _get("global-2", f"{V3}/poolstat?pool=pool1"),
        _get("global-unknown-route", f"{V3}/nope"),
        _get("global-over", f"{V3}/vm"),
        _get("global-over-again", f"{V3}/totalrunning"),
        _post("global-ondemand", od, {"pool1": 1}),
        _post("global-token-create", f"{V3}/token", basic=(USER, PASSWORD)),
        _get("global-dashboard", "/dashboard/stats/vmpooler/pool"),
        _get("empty-token", f"{V3}/vm", token=""),
    ]


def creation() -> list[Step]:
    """``vm_creation`` (2) by address, then by token; an on-demand request with that token
    is still accepted (``authenticated``)."""
    return [
        _post("create-1", f"{V3}/vm/pool1", seed=vm("pool1", "vm-rl1")),
        _post("create-disk-notoken", f"{V3}/vm/vm-rl1/disk/8"),
        _post("create-over", f"{V3}/vm", {"pool1": 1}, seed=vm("pool1", "vm-rl2")),
        _post("create-token", f"{V3}/vm/pool1", token=TOKEN),
        _post("create-snapshot", f"{V3}/vm/vm-rl2/snapshot", token=TOKEN,
              capture={"snapshot": "vm-rl2.snapshot"}),
        _post("create-token-over", f"{V3}/vm/vm-rl2/disk/8", token=TOKEN),
        _post("ondemand-token", f"{V3}/ondemandvm", {"pool3": 1}, token=TOKEN,
              capture={"request": "request_id"}),
    ]


def deletion() -> list[Step]:
    """``vm_deletion`` (3) by token, a 404 included; by address it still has room; deleting
    an on-demand request is ``authenticated``."""
    return [
        _delete("delete-1", f"{V3}/vm/vm-rl1", token=TOKEN),
        _delete("delete-2", f"{V3}/vm/vm-rl2", token=TOKEN),
        _delete("delete-missing", f"{V3}/vm/vm-nope", token=TOKEN),
        _delete("delete-over", f"{V3}/vm/vm-rl3", token=TOKEN,
                seed=vm("pool1", "vm-rl3", "running")),
        _delete("delete-ip", f"{V3}/vm/vm-rl3"),
        _delete("ondemand-delete-token", f"{V3}/ondemandvm/{{request}}", token=TOKEN),
    ]


def authenticated() -> list[Step]:
    """``authenticated`` (4, two used by the on-demand steps): then every request with that
    token but VM creations and deletions is refused; another token is another client."""
    return [
        _get("auth-vm", f"{V3}/vm/vm-rl3", token=TOKEN),
        _get("auth-config", f"{V3}/config", token=TOKEN),
        _get("auth-over", f"{V3}/vm", token=TOKEN),
        _post("auth-over-ondemand", f"{V3}/ondemandvm", {"pool3": 1}, token=TOKEN),
        _post("auth-over-poolsize", f"{V3}/config/poolsize", {"pool1": 3}, token=TOKEN),
        _delete("auth-over-ondemand-delete", f"{V3}/ondemandvm/{{request}}", token=TOKEN),
        _get("auth-other-token", f"{V3}/vm", token="bogus"),
        _delete("delete-after-auth-over", f"{V3}/vm/vm-rl4", token=TOKEN,
                seed=vm("pool1", "vm-rl4", "running")),
    ]


def _counter(cls: str, client: str, value: int, ttl: int | None) -> Seed:
    """A seed setting the counter of ``cls`` and ``client`` to ``value``, expiring in
    ``ttl`` seconds (None: never)."""
    def seed(redis_client: redis.Redis) -> None:
        redis_client.set(f"vmpooler__ratelimit__{cls}__{client}", value, ex=ttl)
    return seed


def windows() -> list[Step]:
    """Counters with a window shorter than the period, and without one: an accepted request
    into a window that is running out (vmpooler renews the expiry to the full period), and a
    rejection by a counter that never expires (as a crashed writer may leave one)."""
    ip = "ip:127.0.0.1"
    return [
        _delete("window-accepted", f"{V3}/vm/vm-rl5", seed=vms(
            vm("pool1", "vm-rl5", "running"), _counter("vm_deletion", ip, 2, 100))),
        _delete("window-over", f"{V3}/vm/vm-rl6", seed=vm("pool1", "vm-rl6", "running")),
        _get("window-no-expiry", f"{V3}/vm", seed=_counter("global_per_ip", ip, 3, None)),
    ]


def sequence_ratelimit() -> list[Step]:
    """The whole sequence, in order."""
    steps = [*per_ip(), *creation(), *deletion(), *authenticated(), *windows()]
    ids = [s.id for s in steps]
    assert len(ids) == len(set(ids)), "step ids must be unique"
    return steps


def sequence_ratelimit_keys() -> list[Step]:
    """The sequence for :data:`KEYED_RATE_LIMITS`: two GETs without a token and two
    checkouts. Step ids start with ``ratelimit-keys-``."""
    return [
        _get("keys-global-1", f"{V3}/vm"),
        _get("keys-global-2", f"{V3}/vm"),
        _post("keys-create-1", f"{V3}/vm/pool1", seed=vm("pool1", "vm-rk1")),
        _post("keys-create-over", f"{V3}/vm/pool1", seed=vm("pool1", "vm-rk2")),
    ]
