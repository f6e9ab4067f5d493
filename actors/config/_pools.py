"""Validation of ``:providers:``, ``:dns_configs:`` and ``:pools:``."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from vmpooler.actors.config._check import MISSING, Checker
from vmpooler.actors.config._data import freeze
from vmpooler.actors.config._failover import check_failover
from vmpooler.actors.config._sizing import demand_sizing
from vmpooler.actors.config._standby import standby_tier
from vmpooler.actors.config._values import coerce, show
from vmpooler.actors.config.model import DnsConfig, GlobalSettings, PoolConfig, ProviderConfig
from vmpooler.actors.config.overrides import HUGE

__all__ = ["build_dns_configs", "build_pools", "build_providers"]

DEFAULT_PROVIDER = "dummy"
_BAD_NAME = re.compile(r"[\s,/]")


def _canonical(name: str, known: Collection[str]) -> str | None:
    """The spelling in ``known`` matching ``name`` case-insensitively, or None."""
    for candidate in known:
        if candidate.lower() == name.lower():
            return candidate
    return None


def _known_text(known: Collection[str]) -> str:
    return ", ".join(sorted(known)) or "none"


def build_providers(
    section: Mapping[str, Any], chk: Checker, known_classes: Collection[str]
) -> dict[str, ProviderConfig]:
    """One ProviderConfig per entry; ``provider_class`` defaults to the entry's name."""
    providers: dict[str, ProviderConfig] = {}
    for name, value in section.items():
        path = ("providers", str(name))
        settings = chk.mapping(value, path)
        written = chk.get(settings, "provider_class", path, "str", str(name))
        canonical = _canonical(written, known_classes)
        if canonical is None:
            where = (*path, "provider_class") if "provider_class" in settings else path
            chk.fail(
                where,
                f"unknown provider class {written!r}; installed provider classes "
                f"(entry points 'vmpooler.providers'): {_known_text(known_classes)}",
            )
        if "folder_whitelist" in settings:
            chk.note(f"providers.{name}.folder_whitelist is deprecated; use resources_allowlist")
        settings = dict(settings)
        if settings.get("max_pool_size") is not None:  # read as an int once, here
            limit = chk.get(settings, "max_pool_size", path, "int?", minimum=1)
            if limit is None:
                del settings["max_pool_size"]
            else:
                settings["max_pool_size"] = limit
        providers[str(name)] = ProviderConfig(str(name), canonical or written, freeze(settings))
    return providers


def build_dns_configs(
    section: Mapping[str, Any], chk: Checker, known_classes: Collection[str]
) -> dict[str, DnsConfig]:
    """One DnsConfig per entry; ``dns_class`` defaults to the entry's name."""
    configs: dict[str, DnsConfig] = {}
    for name, value in section.items():
        path = ("dns_configs", str(name))
        settings = chk.mapping(value, path)
        written = chk.get(settings, "dns_class", path, "str", str(name))
        canonical = _canonical(written, known_classes)
        if canonical is None:
            where = (*path, "dns_class") if "dns_class" in settings else path
            chk.fail(
                where,
                f"unknown dns class {written!r}; installed dns classes "
                f"(entry points 'vmpooler.dns'): {_known_text(known_classes)}",
            )
        domain = chk.get(settings, "domain", path, "str?")
        configs[str(name)] = DnsConfig(str(name), canonical or written, domain, freeze(settings))
    return configs


def _name_error(name: str) -> str | None:
    if not name:
        return "must not be empty"
    if _BAD_NAME.search(name):
        return f"{name!r} must not contain blanks, commas or slashes"
    return None


def build_pools(
    entries: list[Any],
    chk: Checker,
    settings: GlobalSettings,
    providers: dict[str, ProviderConfig],
    dns_configs: Mapping[str, DnsConfig],
) -> tuple[PoolConfig, ...]:
    """Validate every pool; synthesise the ``dummy`` provider when a pool uses it.

    ``providers`` is updated in place with the synthesised entry.
    """
    names = {
        entry["name"] for entry in entries
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
    }
    seen: dict[str, int] = {}
    pools: list[PoolConfig] = []
    places: list[int] = []  # each pool's index in ``entries``
    for index, entry in enumerate(entries):
        path = ("pools", index)
        if not isinstance(entry, Mapping):
            chk.fail(path, f"expected a mapping describing a pool, got {show(entry)}")
            continue
        name = chk.require(entry, "name", path, "str")
        if name is not MISSING:
            problem = _name_error(name)
            if problem:
                chk.fail((*path, "name"), problem)
            elif name in seen:
                chk.fail((*path, "name"),
                         f"duplicate pool name {name!r} (also pools[{seen[name]}])",
                         related=("pools", seen[name], "name"))
            else:
                seen[name] = index
        size = chk.require(entry, "size", path, "int", minimum=0)
        provider = chk.get(entry, "provider", path, "str", DEFAULT_PROVIDER)
        if provider == DEFAULT_PROVIDER and provider not in providers:
            providers[provider] = ProviderConfig(DEFAULT_PROVIDER, DEFAULT_PROVIDER)
        elif provider not in providers:
            chk.fail(
                (*path, "provider"),
                f"unknown provider {provider!r}: no such entry under :providers: "
                f"(configured: {_known_text(providers)})",
            )
        if size is not MISSING:
            _check_size(chk, (*path, "size"), size, settings, providers.get(provider))
        aliases = _aliases(entry, path, chk, names)
        dns_plugin = chk.get(entry, "dns_plugin", path, "str?")
        domain = None
        if dns_plugin is not None:
            if dns_plugin in dns_configs:
                domain = dns_configs[dns_plugin].domain
            else:
                chk.fail(
                    (*path, "dns_plugin"),
                    f"unknown dns plugin {dns_plugin!r}: no such entry under :dns_configs: "
                    f"(configured: {_known_text(dns_configs)})",
                )
        optional = {
            "template": chk.get(entry, "template", path, "str", name),
            "ready_ttl": chk.get(entry, "ready_ttl", path, "int", settings.ready_ttl, minimum=0),
            "clone_target": chk.get(entry, "clone_target", path, "str?"),
            "timeout": chk.get(entry, "timeout", path, "int?", minimum=0),
            "timeout_notification": chk.get(
                entry, "timeout_notification", path, "int?", minimum=0
            ),
            "check_hostname_for_mismatch": chk.get(
                entry, "check_hostname_for_mismatch", path, "bool?"
            ),
        }
        optional["max_unhealthy"] = chk.get(entry, "max_unhealthy", path, "share?")
        optional["max_unhealthy_window"] = chk.get(
            entry, "max_unhealthy_window", path, "number?", positive=True
        )
        optional["failover"] = chk.get(entry, "failover", path, "bool", False)
        optional["ondemand_from_ready"] = chk.get(entry, "ondemand_from_ready", path, "bool?")
        optional["size_max"] = chk.get(entry, "size_max", path, "int?", minimum=0)
        for key in ("check_loop_delay_min", "check_loop_delay_max"):
            optional[key] = chk.get(entry, key, path, "number?", positive=True)
        optional["check_loop_delay_decay"] = chk.get(
            entry, "check_loop_delay_decay", path, "number?"
        )
        if name is MISSING or size is MISSING:
            continue
        optional["demand"] = demand_sizing(
            entry, path, chk, settings, size=size,
            limit=_limit(settings, providers.get(provider)))
        optional["standby"] = standby_tier(entry, path, chk, settings,
                                           demand=optional["demand"] is not None)
        places.append(index)
        pools.append(
            PoolConfig(
                name=name,
                size=size,
                provider=provider,
                alias=aliases,
                dns_plugin=dns_plugin,
                domain=domain,
                raw=freeze(entry),
                **optional,
            )
        )
    check_failover(list(zip(places, pools, strict=True)), chk, settings, providers)
    return tuple(pools)


def _limit(settings: GlobalSettings, provider: ProviderConfig | None) -> int:
    """The largest size a pool of ``provider`` may have."""
    own = provider.settings.get("max_pool_size") if provider is not None else None
    return own if isinstance(own, int) else settings.max_pool_size


def _check_size(chk: Checker, path: tuple[str | int, ...], size: int,
                settings: GlobalSettings, provider: ProviderConfig | None) -> None:
    """A pool's size must not exceed its provider's ``max_pool_size``, else the global one."""
    own = provider.settings.get("max_pool_size") if provider is not None else None
    limit = _limit(settings, provider)
    if size > limit:
        where = (f"providers.{provider.name}.max_pool_size" if own is not None and provider
                 else "max_pool_size")
        shown = size if size < HUGE else f"over {HUGE}"
        chk.fail(path, f"pool size {shown} is above the largest allowed, {limit} ({where})")


def _aliases(
    entry: Mapping[str, Any], path: tuple[str | int, ...], chk: Checker, names: set[str]
) -> tuple[str, ...]:
    """The pool's aliases, de-duplicated in order; a string becomes a one-element tuple."""
    raw = entry.get("alias")
    if raw is None:
        return ()
    try:
        aliases: tuple[str, ...] = coerce(raw, "strs")
    except ValueError:
        chk.fail((*path, "alias"), f"expected a string or a list of strings, got {show(raw)}")
        return ()
    good: list[str] = []
    for alias in aliases:
        problem = _name_error(alias)
        if problem:
            chk.fail((*path, "alias"), f"alias {problem}")
        elif alias not in good:
            if alias in names and alias != entry.get("name"):
                chk.note(
                    f"pools[{path[1]}].alias: {alias!r} is also the name of a pool: a request "
                    f"for {alias!r} takes a VM of pool {alias!r} or of {entry.get('name')!r}, "
                    "as in vmpooler"
                )
            good.append(alias)
    return tuple(good)
