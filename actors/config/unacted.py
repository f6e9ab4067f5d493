"""Keys the configuration accepts but nothing acts on, as warnings naming file, line and key.

An operator who writes a key believes it does something. :func:`unacted_warnings` lists
every accepted key that does nothing in this configuration: a section vmpooler has and we do
not implement (``:graphs:``), ``:tracing:`` keys while tracing is off, ``:config:`` keys
only the vSphere provider reads when no pool uses one, a provider's purge keys when no pool
uses that provider, tuning keys whose feature is switched off, the token rules of ``/vm``
switched on without ``:auth:``, and ``experimental_features_without_auth`` with
``:auth:``. ``vmpooler check-config`` prints them; the manager logs them at start.

Locations are found by reading the main file, its ``extra_config`` files and the
``pools_from_dir`` files again (the loaded :class:`~vmpooler.actors.config.Config` keeps no
text); a value set by an environment variable, or a document read from
``VMPOOLER_CONFIG``, is reported without a line. Reading never raises.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vmpooler.actors.config._yaml import Locator, SourceText
from vmpooler.actors.config.model import Config
from vmpooler.actors.config.pools_dir import pool_file_paths, read_pool_files
from vmpooler.actors.config.problems import ConfigProblem, KeyPath, format_key

__all__ = ["unacted_keys", "unacted_warnings"]

VSPHERE_ONLY = ("create_folders", "manage_host_selection", "host_selection_max_age",
                "utilization_limit", "vsphere_timeout", "max_tries", "retry_factor",
                "create_linked_clones")
"""``:config:`` keys that only the vSphere provider reads."""

# (switch, keys that do nothing while it is false)
_SWITCHED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("purge_enabled", ("purge_dry_run", "purge_interval", "max_pending_age", "max_ready_age",
                       "max_completed_age", "max_orphaned_age")),
    ("health_check_enabled", ("health_check_interval", "health_thresholds")),
    ("dlq_enabled", ("dlq_ttl", "dlq_max_entries")),
    ("experimental_features", ("experimental_features_without_auth",)),
)
_NEED_AUTH = ("enforce_vm_ownership", "require_token_for_vm_changes",
              "require_token_for_checkout")
_DEFAULT_ON = {"connection_pool_monitor_enabled": ("connection_pool_monitor_interval",)}


def unacted_keys(config: Config) -> list[tuple[KeyPath, str]]:
    """``(key path, why nothing acts on it)`` for every such key, in document order."""
    out: list[tuple[KeyPath, str]] = []
    tracing = config.raw.get("tracing")
    if isinstance(tracing, Mapping) and not config.tracing.enabled:
        out.extend((("tracing", key), "has no effect while enabled is not true")
                   for key in ("jaeger_host", "otlp_endpoint", "sample_ratio") if key in tracing)
    if "graphs" in config.raw:
        out.append((("graphs",), "the dashboard keeps no Graphite history; this section is "
                                 "accepted and ignored"))
    section: Mapping[str, Any] = config.settings.raw
    used = {p.provider for p in config.pools}
    classes = {config.providers[name].provider_class.lower()
               for name in used if name in config.providers}
    if "vsphere" not in classes:
        out.extend((("config", key), "only the vSphere provider reads this key, and no pool "
                                     "uses a vSphere provider") for key in VSPHERE_ONLY
                   if key in section)
    for switch, keys in _SWITCHED:
        if not getattr(config.settings, switch):
            out.extend((("config", key), f"has no effect while {switch} is false")
                       for key in keys if key in section)
    for switch, keys in _DEFAULT_ON.items():
        if not getattr(config.settings, switch):
            out.extend((("config", key), f"has no effect while {switch} is false")
                       for key in keys if key in section)
    out.extend(_brake_windows(config))
    out.extend(_failover_keys(config))
    if not config.auth:
        out.extend((("config", key), "has no effect without :auth: (no client can get a "
                                     "token)")
                   for key in _NEED_AUTH if getattr(config.settings, key))
    if config.auth and config.settings.experimental_features_without_auth:
        out.append((("config", "experimental_features_without_auth"),
                    "has no effect with :auth: (pool changes need a valid token)"))
    for name, provider in config.providers.items():
        if name in used:
            continue
        for key in ("purge_unconfigured_resources", "resources_allowlist", "folder_whitelist"):
            if key in provider.settings:
                out.append((("providers", name, key), f"no pool uses provider {name!r}, so "
                            "it is not started and nothing is purged"))
    return out


def _brake_windows(config: Config) -> list[tuple[KeyPath, str]]:
    """``max_unhealthy_window`` where no pool it reaches has the brake on."""
    out: list[tuple[KeyPath, str]] = []
    braked = [pool for pool in config.pools if pool.brake(config.settings)[0] is not None]
    inherits = [pool for pool in braked if pool.max_unhealthy_window is None]
    if "max_unhealthy_window" in config.settings.raw and not inherits:
        out.append((("config", "max_unhealthy_window"),
                    "no pool that inherits it has max_unhealthy set below 100%"))
    for index, pool in enumerate(config.pools):
        if "max_unhealthy_window" in pool.raw and pool not in braked:
            out.append((("pools", index, "max_unhealthy_window"),
                        f"pool {pool.name!r} has no max_unhealthy below 100%"))
    return out


def _failover_keys(config: Config) -> list[tuple[KeyPath, str]]:
    """``size_max`` without ``failover`` (on a pool not sized by demand), ``failover`` of a
    pool with no failover sibling, and ``failover_failures`` when no such pool has one."""
    out: list[tuple[KeyPath, str]] = []
    opted = [pool for pool in config.pools if pool.failover]
    alone = {pool.name for pool in opted if not any(
        other is not pool and set(other.alias) & set(pool.alias) for other in opted)}
    if "failover_failures" in config.settings.raw and len(alone) == len(opted):
        out.append((("config", "failover_failures"),
                    "no two pools of one alias have failover: true"))
    for index, pool in enumerate(config.pools):
        if pool.size_max is not None and not pool.failover and pool.demand is None:
            out.append((("pools", index, "size_max"),
                        f"pool {pool.name!r} has no failover: true"))
        elif pool.name in alone:
            out.append((("pools", index, "failover"),
                        f"no other pool of alias {', '.join(map(repr, pool.alias))} has "
                        f"failover: true: pool {pool.name!r} has no sibling to stand in for"))
    return out


def _sources(config: Config, cwd: Path, environ: Mapping[str, str]) -> list[SourceText]:
    sources = []
    main = Path(config.source)
    if main.is_file():
        files = [main]
        extra = environ.get("EXTRA_CONFIG") or config.settings.raw.get("extra_config")
        names = extra.split(",") if isinstance(extra, str) else list(extra or [])
        files += [cwd / str(name).strip() for name in names if str(name).strip()]
        for file in files:
            try:
                sources.append(SourceText(str(file), file.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError):
                continue
        if config.settings.pools_from_dir:
            try:
                paths = pool_file_paths(cwd / config.settings.pools_from_dir)
            except OSError:
                paths = []
            sources.extend(read_pool_files(paths).sources)
    return sources


def unacted_warnings(config: Config, *, cwd: Path | None = None,
                     environ: Mapping[str, str] | None = None) -> list[ConfigProblem]:
    """:func:`unacted_keys` located: ``str()`` of each is ``file:line: key: message``."""
    keys = unacted_keys(config)
    if not keys:
        return []
    environ = os.environ if environ is None else environ
    sources = _sources(config, Path.cwd() if cwd is None else cwd, environ)
    locator = Locator(sources, {}) if sources else None
    warnings = []
    for path, message in keys:
        source, line = locator.locate(path) if locator else (config.source, None)
        warnings.append(ConfigProblem(source, line, format_key(path),
                                      f"{message} (not acted on)"))
    return warnings
