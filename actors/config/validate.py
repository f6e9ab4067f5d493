"""Validation: turn a normalised document (plain keys, env overrides applied) into a Config.

Every problem is collected; nothing raises here. The loader maps the returned issues to
files and lines and raises one ``ConfigError`` listing them all.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from typing import Any, cast

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config._data import freeze
from vmpooler.actors.config._metrics import metrics_settings
from vmpooler.actors.config._pools import build_dns_configs, build_pools, build_providers
from vmpooler.actors.config._quotas import quota_policy
from vmpooler.actors.config._redis_settings import redis_settings
from vmpooler.actors.config._tracing import tracing_settings
from vmpooler.actors.config._values import show
from vmpooler.actors.config.model import (
    DEFAULT_HEALTH_THRESHOLDS,
    DEFAULT_RATE_LIMITS,
    Config,
    GlobalSettings,
)
from vmpooler.actors.config.problems import DOMAIN_REMOVED, Issue

__all__ = ["KNOWN_SECTIONS", "NO_POOLS_NOTE", "ProviderCheck", "validate_document"]

NO_POOLS_NOTE = ("no :pools: section, and no pools published in Redis "
                 "(vmpooler__pools): no pools are configured")

ProviderCheck = Callable[[Mapping[str, Any], Mapping[str, Mapping[str, Any]], Mapping[str, Any]],
                         list[Any]]
"""A provider class's settings check (entry point group ``vmpooler.provider_settings``):
called with the provider's section, its pools' raw entries by name and the ``:config:``
section; returns problems with ``key``, ``message`` and ``pool`` (None for a provider key),
and optionally ``note`` (true: reported as a note, not an issue)."""

KNOWN_SECTIONS = frozenset({
    "config", "pools", "providers", "redis", "auth", "dns_configs", "tagfilter", "statsd",
    "graphite", "prometheus", "datadog", "rate_limits", "vsphere", "graphs", "tracing",
    "quotas",
})
# Documented `:config:` keys that GlobalSettings does not model (carried in `raw`).
_OTHER_CONFIG_KEYS = frozenset({
    "extra_config", "create_folders", "manage_host_selection", "host_selection_max_age",
    "utilization_limit", "vsphere_timeout", "purge_unconfigured_folders", "domain",
})


def validate_document(
    doc: Any,
    *,
    source: str,
    known_provider_classes: Collection[str],
    known_dns_classes: Collection[str],
    provider_checks: Mapping[str, ProviderCheck] | None = None,
    debug: bool = False,
    api_port: int = 4567,
    app_env: str = "development",
) -> tuple[Config | None, list[Issue], list[str]]:
    """Validate ``doc``; return ``(config, issues, notes)`` — ``config`` is None if issues."""
    chk = Checker()
    if not isinstance(doc, Mapping):
        chk.fail((), f"the configuration must be a mapping of sections, got {show(doc)}")
        return None, chk.issues, chk.notes
    for key in doc:
        if key not in KNOWN_SECTIONS:
            chk.note(f"unknown top-level section :{key}: (carried through, unused)")
    settings = _settings(chk.mapping(doc.get("config"), ("config",)), chk)
    redis = redis_settings(chk.mapping(doc.get("redis"), ("redis",)), chk)
    providers = build_providers(
        chk.mapping(doc.get("providers"), ("providers",)), chk, known_provider_classes
    )
    dns_configs = build_dns_configs(
        chk.mapping(doc.get("dns_configs"), ("dns_configs",)), chk, known_dns_classes
    )
    entries = doc.get("pools")
    if "pools" not in doc:
        chk.note(NO_POOLS_NOTE)
    if entries is not None and not isinstance(entries, list):
        chk.fail(("pools",), f"expected a list of pools, got {show(entries)}")
    pools = build_pools(
        entries if isinstance(entries, list) else [], chk, settings, providers, dns_configs
    )
    _check_provider_settings(chk, providers, pools, entries, settings, provider_checks or {})
    config = Config(
        source=source,
        settings=settings,
        redis=redis,
        pools=pools,
        providers=freeze(providers),
        dns_configs=freeze(dns_configs),
        auth=_auth(doc, chk, debug),
        tagfilter=_tagfilter(chk.mapping(doc.get("tagfilter"), ("tagfilter",)), chk),
        metrics=metrics_settings(doc, chk, redis.data_dir),
        raw=freeze(doc),
        rate_limits=_rate_limits(chk.mapping(doc.get("rate_limits"), ("rate_limits",)), chk),
        debug=debug,
        api_port=api_port,
        app_env=app_env,
        quotas=quota_policy(chk.mapping(doc.get("quotas"), ("quotas",)), chk),
        tracing=tracing_settings(chk.mapping(doc.get("tracing"), ("tracing",)), chk),
    )
    if chk.issues:
        return None, chk.issues, chk.notes
    return config, chk.issues, chk.notes


def _check_provider_settings(
    chk: Checker,
    providers: Mapping[str, Any],
    pools: tuple[Any, ...],
    entries: Any,
    settings: GlobalSettings,
    checks: Mapping[str, ProviderCheck],
) -> None:
    """Run each provider class's own check over its section and pools."""
    index: dict[str, int] = {}
    for position, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            index.setdefault(entry["name"], position)
    for name, provider in providers.items():
        check = checks.get(provider.provider_class.lower())
        if check is None:
            continue
        served = {p.name: p.raw for p in pools if p.provider == name}
        for problem in check(provider.settings, served, settings.raw):
            if getattr(problem, "note", False):
                where = (f"pool {problem.pool}: " if problem.pool is not None
                         else f"providers.{name}.")
                chk.note(f"{where}{problem.key} {problem.message}")
            elif problem.pool is None:
                chk.fail(("providers", name, problem.key), problem.message)
            else:
                chk.fail(("pools", index.get(problem.pool, 0), problem.key), problem.message)


def _settings(section: Mapping[str, Any], chk: Checker) -> GlobalSettings:
    path = ("config",)
    if section.get("domain") is not None:
        chk.fail(("config", "domain"), DOMAIN_REMOVED)
    known = {item.name for item in fields(GlobalSettings)} | _OTHER_CONFIG_KEYS
    for key in section:
        if key not in known:
            chk.note(f"unknown key config.{key} (carried through, unused)")
    effective = dict(section)
    if "purge_unconfigured_folders" in section:
        chk.note("config.purge_unconfigured_folders is deprecated; "
                 "use purge_unconfigured_resources")
        effective.setdefault("purge_unconfigured_resources",
                             section["purge_unconfigured_folders"])
    settings = chk.build(GlobalSettings, effective, path, raw=freeze(section),
                         health_thresholds=_health_thresholds(section, chk))
    low, high = settings.check_loop_delay_min, settings.check_loop_delay_max
    changes: dict[str, Any] = {}
    if settings.trusted_proxies:
        changes["trusted_proxies"] = _trusted_proxies(section.get("trusted_proxies"),
                                                      settings.trusted_proxies, chk)
    if high < low:
        chk.note(f"config.check_loop_delay_max ({high}) is below check_loop_delay_min "
                 f"({low}); using {low}")
        changes["check_loop_delay_max"] = low
    if settings.check_loop_delay_decay <= 1:
        chk.note(f"config.check_loop_delay_decay ({settings.check_loop_delay_decay}) "
                 "must exceed 1; using 2.0")
        changes["check_loop_delay_decay"] = 2.0
    return _replace(settings, changes)


def _trusted_proxies(written: Any, entries: tuple[str, ...], chk: Checker) -> tuple[str, ...]:
    """``trusted_proxies`` as normalised networks (``10.0.0.1/32``, ``fd00::/8``); an entry
    may hold several separated by commas or blanks (as ``TRUSTED_PROXIES`` does). Each entry
    that is not an address or a CIDR network is a problem at its position."""
    networks: list[str] = []
    for index, entry in enumerate(entries):
        where: tuple[str | int, ...] = ("config", "trusted_proxies")
        if isinstance(written, list):
            where = (*where, index)
        for word in entry.replace(",", " ").split():
            try:
                networks.append(str(ipaddress.ip_network(word, strict=False)))
            except ValueError:
                chk.fail(where, f"{word!r} is not an IP address or CIDR network (for example "
                                "10.0.0.5, 10.0.0.0/8 or fd00::/8)")
    return tuple(dict.fromkeys(networks))


def _health_thresholds(section: Mapping[str, Any], chk: Checker) -> Mapping[str, float]:
    """``health_thresholds`` merged over vmpooler's defaults; unknown keys are noted."""
    path = ("config", "health_thresholds")
    given = chk.mapping(section.get("health_thresholds"), path)
    merged = dict(DEFAULT_HEALTH_THRESHOLDS)
    for key in given:
        if key not in merged:
            chk.note(f"unknown key config.health_thresholds.{key} (ignored; known: "
                     f"{', '.join(DEFAULT_HEALTH_THRESHOLDS)})")
            continue
        merged[key] = chk.get(given, key, path, "number", merged[key], minimum=0)
    return cast("Mapping[str, float]", freeze(merged))


def _replace(settings: GlobalSettings, changes: Mapping[str, Any]) -> GlobalSettings:
    if not changes:
        return settings
    values = {item.name: getattr(settings, item.name) for item in fields(settings)}
    return GlobalSettings(**{**values, **changes})


def _auth(doc: Mapping[str, Any], chk: Checker, debug: bool) -> Mapping[str, Any] | None:
    if doc.get("auth") is None:
        return None
    section = chk.mapping(doc["auth"], ("auth",))
    path = ("auth",)
    provider = chk.require(section, "provider", path, "str")
    if provider == "dummy" and not debug:
        chk.fail((*path, "provider"), "dummy authentication accepts any username that differs "
                 "from the password; it is refused unless VMPOOLER_DEBUG is set")
    elif provider == "ldap":
        ldap = chk.mapping(section.get("ldap"), (*path, "ldap"))
        chk.require(ldap, "host", (*path, "ldap"), "str")
        chk.get(ldap, "port", (*path, "ldap"), "int?", minimum=1, maximum=65535)
        chk.require(ldap, "base", (*path, "ldap"), "strs")
        chk.require(ldap, "user_object", (*path, "ldap"), "strs")
        chk.mapping(ldap.get("encryption"), (*path, "ldap", "encryption"))
        chk.mapping(ldap.get("service_account_hash"), (*path, "ldap", "service_account_hash"))
    elif isinstance(provider, str) and provider != "dummy":
        chk.fail((*path, "provider"), f"unknown auth provider {provider!r} (dummy or ldap)")
    return cast("Mapping[str, Any]", freeze(section))


def _tagfilter(section: Mapping[str, Any], chk: Checker) -> Mapping[str, str]:
    filters: dict[str, str] = {}
    for tag, pattern in section.items():
        path = ("tagfilter", str(tag))
        if not isinstance(pattern, str):
            chk.fail(path, f"expected a regular expression string, got {show(pattern)}")
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            chk.fail(path, f"invalid regular expression {pattern!r}: {exc}")
            continue
        filters[str(tag)] = pattern
    return cast("Mapping[str, str]", freeze(filters))


def _rate_limits(section: Mapping[str, Any], chk: Checker) -> Mapping[str, Mapping[str, int]]:
    limits = {name: dict(value) for name, value in DEFAULT_RATE_LIMITS.items()}
    for name, value in section.items():
        path = ("rate_limits", str(name))
        if name not in limits:
            chk.note(f"unknown rate limit class rate_limits.{name} (ignored; known: "
                     f"{', '.join(DEFAULT_RATE_LIMITS)})")
            continue
        entry = chk.mapping(value, path)
        limits[name]["limit"] = chk.get(entry, "limit", path, "int", limits[name]["limit"])
        limits[name]["period"] = chk.get(entry, "period", path, "int", limits[name]["period"],
                                         minimum=1)
    return cast("Mapping[str, Mapping[str, int]]", freeze(limits))
