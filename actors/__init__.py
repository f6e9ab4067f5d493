"""vmpooler's embeddable core: the actor system that keeps pools of ready VMs.

The public API is :class:`PoolerSystem` (start, stop, reads of pool state, commands to the
actors, on-demand requests) and :func:`load_config`::

    from vmpooler.actors import PoolerSystem, load_config

    system = PoolerSystem.start(load_config("vmpooler.yaml"))
    print(system.pool_status("debian-12-x86_64"))
    system.stop()

Library code logs through ``logging.getLogger("vmpooler...")`` and configures nothing.
"""

import importlib
import logging
from typing import Any

__all__ = [
    "Clock",
    "Config",
    "ConfigError",
    "FakeClock",
    "PoolStatus",
    "PoolerSystem",
    "RealClock",
    "RequestRecord",
    "Scheduler",
    "ThreadScheduler",
    "load_config",
]

_HOMES = {
    "Clock": "runtime.clock", "FakeClock": "runtime.clock", "RealClock": "runtime.clock",
    "Scheduler": "runtime.clock", "ThreadScheduler": "runtime.clock", "Config": "config",
    "ConfigError": "config", "load_config": "config", "PoolerSystem": "system",
    "PoolStatus": "system", "RequestRecord": "storage.request_store",
}

logging.getLogger("vmpooler").addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    """Import public names on first use, so ``import vmpooler.actors.x`` stays light."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"vmpooler.actors.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'vmpooler.actors' has no attribute {name!r}")
