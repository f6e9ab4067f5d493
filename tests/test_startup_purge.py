"""``purge_unconfigured_resources`` at manager start-up: which providers purge (global and
per-provider settings, allowlists), the dummy provider's side, and the vSphere provider's
side called through the provider actor when a system starts (on the vCenter simulator)."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.harness import context_for, make_config, pool, started, wait_until
from vmpooler.actors.config import Config, ProviderConfig
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.provider.startup_purge import startup_purges
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.system import PoolerSystem
from vmpooler.providers.dummy import DummyProvider


def _vm(name: str, pool_name: str) -> dict[str, Any]:
    return {"name": name, "hostname": name, "poolname": pool_name, "dummy_state": "RUNNING",
            "ready": True, "snapshots": [], "disks": []}


INVENTORY = {"pool": {
    "a": [_vm("a1", "a")],
    "retired": [_vm("r1", "retired"), _vm("r2", "retired"), _vm("pet", "retired")],
    "kept": [_vm("k1", "kept")],
}}


def _config(global_on: bool = False, **provider: Any) -> Config:
    config = make_config([pool("a", 1)], purge_unconfigured_resources=global_on)
    return Config(**{**{f: getattr(config, f) for f in config.__dataclass_fields__},
                     "providers": {"dummy": ProviderConfig("dummy", "dummy", provider)}})


def test_which_providers_purge_and_their_allowlists() -> None:
    assert startup_purges(_config()) == {}
    assert startup_purges(_config(global_on=True)) == {"dummy": ()}
    assert startup_purges(_config(purge_unconfigured_resources=True,
                                  resources_allowlist=["kept"])) == {"dummy": ("kept",)}
    # the provider's own false wins over the global true (vmpooler's `||` ignored it)
    assert startup_purges(_config(global_on=True, purge_unconfigured_resources=False)) == {}
    assert startup_purges(_config(purge_unconfigured_resources="true",
                                  folder_whitelist="old")) == {"dummy": ("old",)}


def test_dummy_purges_what_no_configured_pool_uses(tmp_path: Path) -> None:
    config = make_config([pool("a", 1)])
    path = tmp_path / "dummy.yaml"
    provider = DummyProvider(context_for(config, {"initial_state": INVENTORY,
                                                  "filename": str(path),
                                                  "resources_allowlist": ["pet"]}),
                             rng=random.Random(1), sleep=lambda _s: None)
    provider.purge_unconfigured_resources(["kept"])
    assert provider.inventory_snapshot() == {"a": ["a1"], "retired": ["pet"], "kept": ["k1"]}
    reloaded = DummyProvider(context_for(config, {"filename": str(path)}))
    assert reloaded.inventory_snapshot() == provider.inventory_snapshot()
    provider.create_vm("a", "r1")  # the purged name is free again


@pytest.mark.parametrize("setting", [{"purge_unconfigured_resources": True},
                                     {"purge_unconfigured_resources": False}])
def test_a_starting_manager_purges_through_the_provider_actor(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture, setting: dict[str, Any],
) -> None:
    caplog.set_level(logging.INFO, logger="vmpooler")
    config = _config(global_on=True, resources_allowlist=["kept"], **setting)
    provider = DummyProvider(context_for(config, {"initial_state": INVENTORY}),
                             rng=random.Random(1), sleep=lambda _s: None)
    with started(redis_client, config, provider=provider) as h:
        if setting["purge_unconfigured_resources"]:
            wait_until(lambda: "retired" not in provider.inventory_snapshot(), 10,
                       "the unconfigured pool's VMs to be purged")
            wait_until(lambda: any("unconfigured resources purged" in r.getMessage()
                                   for r in caplog.records), 10, "the housekeeper's log line")
            assert provider.inventory_snapshot()["kept"] == ["k1"]
        else:
            h.quiesce()
            assert provider.inventory_snapshot()["retired"] == ["r1", "r2", "pet"]


# -- vSphere, on the simulator -------------------------------------------------------------

@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Any]:
    from tests import vcsim

    with vcsim.running(tmp_path / "vcsim") as simulator:
        vcsim.prepare(simulator.connect(), folders=("vmpooler/p1",))
        yield simulator


def test_vsphere_purge_runs_when_the_system_starts(sim: Any, redis_client: redis.Redis) -> None:
    from tests import vcsim
    from tests.test_vsphere_provider import POOL, make

    si = sim.connect()
    vcsim.clone_plain_vm(si, "vmpooler/old-pool", "stale1")
    vcsim.make_folder(si, "vmpooler/keep-me")
    provider = make(sim)
    p1 = pool("p1", 0)
    p1 = type(p1)(**{**{f: getattr(p1, f) for f in p1.__dataclass_fields__},
                     "provider": "vsphere", "raw": {**p1.raw, **POOL}})
    base = make_config([p1])
    config = Config(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                       "providers": {"vsphere": ProviderConfig("vsphere", "vsphere", {
                           "purge_unconfigured_resources": True,
                           "resources_allowlist": ["keep-me"]})}})
    clock = FakeClock()
    system = PoolerSystem.start(config, redis_client=redis_client, clock=clock,
                                scheduler=clock, metrics=RecordingMetrics(),
                                providers={"vsphere": provider})
    try:
        wait_until(lambda: vcsim.find(si, "DC0/vm/vmpooler/old-pool") is None, 20,
                   "the unconfigured folder to be removed")
        children = {c.name for c in vcsim.find(si, "DC0/vm/vmpooler").childEntity}
        assert children == {"p1", "keep-me"}
    finally:
        system.stop()
