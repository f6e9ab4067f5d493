"""Helpers for the tests of ``:quotas:``: an API over the real redis-server whose
configuration carries a quota section, parsed by the real parser."""

from __future__ import annotations

import dataclasses
from typing import Any

import falcon.testing
import redis

from tests.api_harness import Api, api, api_config, api_pool
from vmpooler.actors.config._check import Checker
from vmpooler.actors.config._quotas import quota_policy
from vmpooler.actors.fairness.quota_policy import QuotaPolicy

P = "/api/v3"
ALICE = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
BOB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"


def policy(section: dict[str, Any]) -> QuotaPolicy:
    """``section`` (the ``:quotas:`` mapping) through the real parser, which must accept it."""
    chk = Checker()
    parsed = quota_policy(section, chk)
    assert chk.issues == []
    return parsed


def quota_api(redis_client: redis.Redis, section: dict[str, Any], *, auth: bool = True,
              vms: int = 0, **settings: Any) -> Api:
    """Pools ``pool1`` (alias ``poolone``) and ``pool2``, ``vms`` ready VMs in each
    (``p1-<i>``, ``p2-<i>``), tokens of ``alice`` and ``bob`` and the quotas ``section``."""
    settings.setdefault("experimental_features", True)
    config = api_config([api_pool("pool1", 2, alias=("poolone",)), api_pool("pool2", 1)],
                        auth=auth, **settings)
    a = api(redis_client, dataclasses.replace(config, quotas=policy(section)))
    a.add_token(ALICE, "alice")
    a.add_token(BOB, "bob")
    for i in range(vms):
        a.add_vm("pool1", f"p1-{i}")
        a.add_vm("pool2", f"p2-{i}")
    return a


def checkout(a: Api, body: dict[str, int], token: str | None = ALICE
             ) -> falcon.testing.Result:
    headers = {"X-AUTH-TOKEN": token} if token else {}
    return a.client.simulate_post(f"{P}/vm", json=body, headers=headers)


def ondemand(a: Api, body: dict[str, Any], token: str | None = ALICE
             ) -> falcon.testing.Result:
    headers = {"X-AUTH-TOKEN": token} if token else {}
    return a.client.simulate_post(f"{P}/ondemandvm", json=body, headers=headers)


def hostnames(result: falcon.testing.Result) -> list[str]:
    """The VM names of a 200 checkout body."""
    names: list[str] = []
    for key, value in result.json.items():
        if key == "ok":
            continue
        hosts = value["hostname"]
        names += [hosts] if isinstance(hosts, str) else hosts
    return [name.split(".")[0] for name in names]
