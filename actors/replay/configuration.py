"""The configuration a replay runs: the operator's pools on a simulated hypervisor.

:func:`replay_config` takes the operator's :class:`Config` and the trace's platforms and
returns the configuration the replay's actors run, the platform → pools map, and notes for
the operator. The pools keep every setting of the operator's file (size, aliases, loop
delays, timeouts, ``task_limit`` …); what changes, and why, is listed in
:data:`REPLAY_SETTINGS` and in docs/replay.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from vmpooler.actors.config import Config, ConfigError, PoolConfig, load_config
from vmpooler.actors.config.render import effective_document

__all__ = [
    "POLICIES", "REPLAY_SETTINGS", "ReplayInputError", "ReplaySetup", "replay_config",
]

POLICIES = ("static", "demand")
"""``static``: every pool keeps its fixed ``size`` (``sizing`` keys dropped) and a standby
tier of a fixed count (``standby: auto`` read as 0); ``demand``: every pool is sized by
demand (``sizing: demand``, with its own ``size_min``, ``size_max``, ``target_warm_hit`` and
``schedule`` when it sets them). Either way the standby keys (``standby``,
``standby_state`` …) pass through as written (``standby: auto`` needs ``sizing: demand``, so
the configuration reads it as 0 under ``static``)."""

SIZING_KEYS = ("sizing",)
"""Pool keys that choose a sizing policy (dropped for ``static``)."""

REPLAY_SETTINGS: Mapping[str, Any] = {
    # the on-demand sweep's period (each pool keeps its own loop delays): it finds requests
    # nobody announced, and the replay announces every one
    "check_loop_delay_min": 600,
    # background work that changes no pool: rarer, so the simulated clock jumps further
    "connection_pool_monitor_interval": 3600,
    "connection_pool_monitor_enabled": False,
    "manager_heartbeat_interval": 600,
    "history_interval": 3600,
    "purge_enabled": False,
    "purge_unconfigured_resources": False,
    "dlq_enabled": False,
    "usage_stats": False,
    # the simulated hypervisor never hangs: a clone queued for a worker must not time out
    "adaptive_timeout_enabled": False,
    "provider_call_timeout": 7 * 24 * 3600,
    # a missed checkout's fallback request waits as long as it takes, never expires
    "ondemand_request_ttl": 7 * 24 * 60,
}
"""``:config:`` values a replay always uses, whatever the operator's file says."""

SYNTHESISED_SIZE = 1
"""The ``size`` of a pool made up for a trace platform when the configuration has none."""


class ReplayInputError(ValueError):
    """The configuration or the trace cannot be replayed; ``str()`` says why and where."""


@dataclass(frozen=True, slots=True)
class ReplaySetup:
    """What :func:`replay_config` made."""

    config: Config
    """The configuration the replay's actors run (dummy provider, no DNS, no metrics)."""
    candidates: Mapping[str, tuple[str, ...]]
    """Trace platform → the pools that may serve it (a pool: itself; an alias: its pools)."""
    notes: tuple[str, ...] = field(default=())
    """What the operator should know (synthesised pools, settings replaced)."""


def _candidates(config: Config, platforms: Sequence[str]) -> dict[str, tuple[str, ...]]:
    pools, aliases = set(config.pool_names), config.aliases
    found: dict[str, tuple[str, ...]] = {}
    missing = []
    for platform in dict.fromkeys(platforms):
        if platform in pools:
            found[platform] = (platform,)
        elif platform in aliases:
            found[platform] = tuple(aliases[platform])
        else:
            missing.append(platform)
    if missing:
        raise ReplayInputError(
            f"{config.source}: no pool or alias for the trace's platform(s) "
            f"{', '.join(repr(m) for m in missing)} (pools: {', '.join(config.pool_names)}; "
            f"aliases: {', '.join(aliases) or 'none'})")
    return found


def _pool_entry(entry: Mapping[str, Any], policy: str,
                delays: tuple[float, float, float]) -> dict[str, Any]:
    pool = dict(entry)
    # the pool's own loop delays, written out: the global minimum is the replay's
    pool["check_loop_delay_min"], pool["check_loop_delay_max"] = delays[0], delays[1]
    pool["check_loop_delay_decay"] = delays[2]
    pool["provider"] = "dummy"
    for key in ("dns_plugin", "clone_target"):
        pool.pop(key, None)
    for key in SIZING_KEYS:
        pool.pop(key, None)
    if policy == "demand":
        pool["sizing"] = "demand"
    return pool


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def _standby_auto(pools: list[dict[str, Any]], settings: dict[str, Any],
                  policy: str) -> list[str]:
    """The note naming the pools with ``standby: auto`` (their own or the ``:config:``
    default): under ``static`` the configuration reads it as 0 (no sizer chooses the
    count), under ``demand`` the target starts at 0."""
    inherited = _is_auto(settings.get("standby"))
    names = [p["name"] for p in pools
             if (_is_auto(p["standby"]) if "standby" in p else inherited)]
    if not names:
        return []
    if policy == "static":
        return [f"standby: auto read as 0 (no standby VMs) under the static policy: "
                f"{', '.join(names)}"]
    return [f"standby: auto ({', '.join(names)}): the standby target starts at 0 (the "
            "demand sizer's to set)"]


def _delays(config: Config, entry: Mapping[str, Any]) -> tuple[float, float, float]:
    """The pool's effective check-loop ``(min, max, decay)`` under ``config``."""
    name = entry["name"]
    pool = config.pool(name) if name in config.pool_names else PoolConfig(
        name=name, size=0, template=name, ready_ttl=0)
    return pool.loop_delays(config.settings)


def replay_config(config: Config, platforms: Sequence[str], policy: str, *,
                  redis_port: int) -> ReplaySetup:
    """The configuration to replay ``platforms``' checkouts under ``policy`` (one of
    :data:`POLICIES`) on the redis-server at 127.0.0.1:``redis_port``.

    Every platform must name a pool or an alias of ``config``, else
    :class:`ReplayInputError` names the ones that do not; when ``config`` has no pools at
    all, one pool per platform is made up (``size`` :data:`SYNTHESISED_SIZE`, the
    configuration's defaults for the rest). A configuration the validator refuses after
    these changes (say, a pool whose ``size_min`` is above its size under ``demand``) is a
    :class:`ReplayInputError` listing its problems.
    """
    notes: list[str] = []
    doc = effective_document(config)
    if config.pools:
        candidates = _candidates(config, platforms)
        entries: list[Mapping[str, Any]] = doc["pools"]
    else:
        names = list(dict.fromkeys(platforms))
        candidates = {name: (name,) for name in names}
        entries = [{"name": name, "template": name, "size": SYNTHESISED_SIZE} for name in names]
        notes.append(f"{config.source} has no pools: one pool per trace platform "
                     f"({', '.join(names)}), size {SYNTHESISED_SIZE}, the configuration's "
                     f"defaults for everything else")
    doc["pools"] = [_pool_entry(entry, policy, _delays(config, entry)) for entry in entries]
    doc["providers"] = {"dummy": {"provider_class": "dummy"}}
    doc["dns_configs"] = {}
    doc["redis"] = {"server": "127.0.0.1", "port": redis_port}
    for section in ("auth", "statsd", "graphite", "datadog", "prometheus", "tagfilter"):
        doc.pop(section, None)
    settings = doc.setdefault("config", {})
    written = config.settings.raw
    changed = sorted(k for k, v in REPLAY_SETTINGS.items()
                     if k in written and written[k] != v and k != "check_loop_delay_min")
    settings.update(REPLAY_SETTINGS)
    if policy == "static":  # the pools' default too: a pool without sizing is static
        settings["sizing"] = "static"
    notes.extend(_standby_auto(doc["pools"], settings, policy))
    for key in ("logfile", "extra_config", "pools_from_dir"):
        settings.pop(key, None)
    if changed:
        notes.append(f"settings replaced for the replay: {', '.join(changed)}")
    text = yaml.safe_dump(doc, sort_keys=False)
    try:
        replayed = load_config(None, environ={"VMPOOLER_CONFIG": text})
    except ConfigError as exc:
        raise ReplayInputError(
            f"{config.source}: cannot be replayed with the {policy} policy:\n{exc}") from None
    return ReplaySetup(replayed, candidates, tuple(notes))


