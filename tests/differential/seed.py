"""Redis contents written identically to both servers, the way vmpooler's manager (and its
specs) write them: what the sequence's requests then read."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import redis

from tests.differential.config import POOLS

__all__ = [
    "PASSWORD",
    "T0",
    "TOKEN",
    "USER",
    "initial",
    "ondemand_request",
    "vm",
    "vms",
]

TOKEN = "abcdefghijklmnopqrstuvwxyz012345"
USER = "jdoe"
PASSWORD = "s3cret"
T0 = "2024-05-01 13:02:11 +0000"
"""A timestamp in vmpooler's format (Ruby ``Time#to_s``)."""


def initial(client: redis.Redis) -> None:
    """What a manager has published, a token of ``jdoe`` and today's statistics."""
    today = datetime.date.today().isoformat()
    client.sadd("vmpooler__pools", *POOLS)
    client.hset(f"vmpooler__token__{TOKEN}", mapping={"user": USER, "created": T0})
    client.hset("vmpooler__lastboot", mapping={"pool1": T0, "pool2": T0})
    client.hset(f"vmpooler__clone__{today}", mapping={"pool1:vm-old1": "10.5",
                                                      "pool2:vm-old2": "20.0"})
    client.hset(f"vmpooler__boot__{today}", mapping={"pool1:vm-old1": "30.0"})
    client.hset(f"vmpooler__tag__{today}", mapping={"vm-old1:project": "alpha"})


def vm(pool: str, name: str, queue: str = "ready", **fields: str) -> Callable[[redis.Redis], None]:
    """A seed putting VM ``name`` of ``pool`` in ``queue`` with the manager's fields
    (``template`` and ``pool`` are the pool, ``clone`` is :data:`T0`) plus ``fields``; a
    running VM also gets its ``active`` entry and ``checkout`` time."""
    def seed(client: redis.Redis) -> None:
        base = {"template": pool, "pool": pool, "clone": T0}
        if queue == "ready":
            base["ready"] = T0
        if queue == "running":
            base["checkout"] = T0
            client.hset(f"vmpooler__active__{pool}", name, T0)
        client.hset(f"vmpooler__vm__{name}", mapping={**base, **fields})
        client.sadd(f"vmpooler__{queue}__{pool}", name)
    return seed


def vms(*seeds: Callable[[redis.Redis], None]) -> Callable[[redis.Redis], None]:
    """Several seeds as one."""
    def seed(client: redis.Redis) -> None:
        for each in seeds:
            each(client)
    return seed


def ondemand_request(request_id: str, requested: str, *, status: str | None = None,
                     delivered: dict[str, list[str]] | None = None,
                     ) -> Callable[[redis.Redis], None]:
    """A request as the API and the manager leave it: ``requested`` (``name:pool:n,...``),
    ``status`` (none: still waiting), the delivered VMs per ``name:pool`` (running, each in
    its per-request set) and, while waiting, its place in ``provisioning__processing``."""
    def seed(client: redis.Redis) -> None:
        fields = {"requested": requested, "token:token": TOKEN, "token:user": USER}
        if status:
            fields["status"] = status
        client.hset(f"vmpooler__odrequest__{request_id}", mapping=fields)
        if not status:
            client.zadd("vmpooler__provisioning__processing", {request_id: 1714568531})
        for name_pool, names in (delivered or {}).items():
            name, pool = name_pool.split(":")
            client.sadd(f"vmpooler__{request_id}__{name}__{pool}", *names)
            for each in names:
                vm(pool, each, "running", request_id=request_id, pool_alias=name)(client)
    return seed
