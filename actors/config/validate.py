"""Validation: turn a normalised document (plain keys, env overrides applied) into a Config.

Every problem is collected; nothing raises here. The loader maps the returned issues to
files and lines and raises one ``ConfigError`` listing them all.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from pathlib import PurePath
from typing import Any, cast

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config._data import freeze
from vmpooler.actors.config._pools import build_dns_configs, build_pools, build_providers
from vmpooler.actors.config._quotas import quota_policy
from vmpooler.actors.config._values import coerce, show
from vmpooler.actors.config.model import (
    DEFAULT_HEALTH_THRESHOLDS,
    DEFAULT_RATE_LIMITS,
    Config,
    GlobalSettings,
    MetricsSettings,
    PrometheusSettings,
    RedisSettings,
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
    redis = _redis(chk.mapping(doc.get("redis"), ("redis",)), chk)
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
        metrics=_metrics(doc, chk, redis.data_dir),
        raw=freeze(doc),
        rate_limits=_rate_limits(chk.mapping(doc.get("rate_limits"), ("rate_limits",)), chk),
        debug=debug,
        api_port=api_port,
        app_env=app_env,
        quotas=quota_policy(chk.mapping(doc.get("quotas"), ("quotas",)), chk),
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


def _redis(section: Mapping[str, Any], chk: Checker) -> RedisSettings:
    effective = dict(section)
    if effective.get("server") == "":
        effective["server"] = None
    sentinels = _sentinels(effective.get("sentinels"), chk)
    settings = chk.build(RedisSettings, effective, ("redis",), sentinels=sentinels)
    if sentinels or effective.get("sentinels") not in (None, []):
        if settings.sentinel_master is None and "sentinel_master" not in effective:
            chk.fail(("redis", "sentinel_master"), "required with sentinels: the name of "
                     "the master the sentinels monitor (their `sentinel monitor <name> ...`)")
        if settings.server is not None:
            chk.fail(("redis", "server"), "set either server or sentinels, not both (with "
                     "sentinels the master's address is asked of them)")
    else:
        for key in ("sentinel_master", "sentinel_password"):
            if effective.get(key) is not None:
                chk.fail(("redis", key), "has no effect without sentinels; add :redis: "
                         "sentinels (a list of host:port) or remove it")
    _redis_access(settings, chk)
    return settings


_TLS_FILES = ("ssl_ca_file", "ssl_cert_file", "ssl_key_file")


def _redis_access(settings: RedisSettings, chk: Checker) -> None:
    """``username`` and TLS need a Redis of the site's; the TLS files need ``ssl`` and must
    be readable files; a client certificate needs its key and the other way round."""
    if settings.embedded:
        if settings.username is not None:
            chk.fail(("redis", "username"), "needs :redis: server or sentinels: the embedded "
                     "redis-server has only its default user (its password is :redis: "
                     "password, or the one it generates)")
        if settings.ssl:
            chk.fail(("redis", "ssl"), "needs :redis: server or sentinels: the embedded "
                     "redis-server listens on loopback without TLS")
    for key in _TLS_FILES:
        path = getattr(settings, key)
        if path is None:
            continue
        if not settings.ssl:
            chk.fail(("redis", key), "has no effect without ssl: true")
        elif not os.path.isfile(path) or not os.access(path, os.R_OK):
            chk.fail(("redis", key), f"{path!r} is not a readable file")
    if settings.ssl and (settings.ssl_cert_file is None) != (settings.ssl_key_file is None):
        missing = "ssl_key_file" if settings.ssl_key_file is None else "ssl_cert_file"
        chk.fail(("redis", missing), "required with "
                 f"{'ssl_cert_file' if missing == 'ssl_key_file' else 'ssl_key_file'}: a "
                 "client certificate and its private key")


def _sentinels(value: Any, chk: Checker) -> tuple[str, ...]:
    """``:redis: sentinels`` as ``"host:port"`` strings: a list of ``host:port`` strings or
    ``{host, port}`` mappings (port 26379 when omitted from a mapping)."""
    path: tuple[str | int, ...] = ("redis", "sentinels")
    if value is None:
        return ()
    if not isinstance(value, list):
        chk.fail(path, f"expected a list of host:port, got {show(value)}")
        return ()
    out: list[str] = []
    for index, entry in enumerate(value):
        where = (*path, index)
        if isinstance(entry, Mapping):
            host, port = entry.get("host"), entry.get("port", 26379)
            unknown = sorted(str(k) for k in entry if k not in ("host", "port"))
            if unknown:
                chk.fail(where, f"unknown key(s) {', '.join(unknown)} (host and port only)")
                continue
        elif isinstance(entry, str) and ":" in entry:
            host, _, port = entry.strip().rpartition(":")
            host = host.strip("[]")
        else:
            chk.fail(where, f"expected host:port or a mapping of host and port, got "
                     f"{show(entry)}")
            continue
        if not isinstance(host, str) or not host:
            chk.fail(where, f"expected a host name, got {show(host)}")
            continue
        try:
            number = int(coerce(port, "int", minimum=1, maximum=65535))
        except ValueError as exc:
            chk.fail(where, f"port: {exc}")
            continue
        out.append(f"[{host}]:{number}" if ":" in host else f"{host}:{number}")
    return tuple(out)


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


def _metrics(doc: Mapping[str, Any], chk: Checker, data_dir: str) -> MetricsSettings:
    chosen = [name for name in ("datadog", "statsd", "graphite", "prometheus")
              if name in doc and (name in ("datadog", "prometheus") or doc[name] is not None)]
    for name in chosen[1:]:
        chk.note(f":{name}: is ignored because :{chosen[0]}: takes precedence")
    if not chosen:
        return MetricsSettings()
    backend = chosen[0]
    path = (backend,)
    section = chk.mapping(doc[backend], path)
    if backend == "prometheus":
        return _prometheus(section, chk, data_dir)
    port_limits = {"minimum": 1, "maximum": 65535}
    if backend == "datadog":
        prefix = chk.get(section, "prefix", path, "str") or chk.get(
            section, "namespace", path, "str", "vmpooler")
        tags = section.get("tags")
        if isinstance(tags, Mapping):
            tags = [f"{key}:{value}" for key, value in tags.items()]
        return MetricsSettings(
            backend=backend,
            host=chk.get(section, "host", path, "str", "127.0.0.1"),
            port=chk.get(section, "port", path, "int", 8125, **port_limits),
            prefix=prefix,
            tags=chk.get({"tags": tags}, "tags", path, "strs", ()),
        )
    host = chk.require(section, "server", path, "str")
    return MetricsSettings(
        backend=backend,
        host=host if isinstance(host, str) else None,
        port=chk.get(section, "port", path, "int", 8125 if backend == "statsd" else 2003,
                     **port_limits),
        prefix=chk.get(section, "prefix", path, "str", "vmpooler"),
    )


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


def _prometheus(section: Mapping[str, Any], chk: Checker, data_dir: str) -> MetricsSettings:
    """``:prometheus:``: ``prefix`` (the ``vmpooler_instance`` label), ``prometheus_prefix``
    (the metric name prefix), ``prometheus_endpoint``, and ours, ``multiprocess_dir``."""
    path = ("prometheus",)
    instance = chk.get(section, "prefix", path, "str", "vmpooler")
    namespace = chk.get(section, "prometheus_prefix", path, "str", "vmpooler")
    if isinstance(namespace, str) and not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", namespace):
        chk.fail((*path, "prometheus_prefix"),
                 f"{namespace!r} is not a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)")
    endpoint = chk.get(section, "prometheus_endpoint", path, "str", "/prometheus")
    if isinstance(endpoint, str) and not endpoint.startswith("/"):
        chk.fail((*path, "prometheus_endpoint"),
                 f"expected a path starting with /, got {endpoint!r}")
    directory = chk.get(section, "multiprocess_dir", path, "str",
                        str(PurePath(data_dir) / "prometheus"))
    return MetricsSettings(
        backend="prometheus", prefix=namespace, tags=(f"vmpooler_instance:{instance}",),
        prometheus=PrometheusSettings(endpoint=endpoint, multiprocess_dir=directory),
    )
