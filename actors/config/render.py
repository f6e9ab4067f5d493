"""``render_config``: the effective configuration as vmpooler-style YAML, secrets masked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import yaml

from vmpooler.actors.config._data import mask_secrets, thaw
from vmpooler.actors.config.model import Config, PoolConfig

__all__ = ["effective_document", "render_config"]

_SECTION_ORDER = ("config", "redis", "auth", "providers", "dns_configs", "pools")
# Below these sections vmpooler reads the keys of the first level as Ruby symbols.
_SYMBOL_CHILDREN = frozenset({"providers", "dns_configs", "rate_limits"})
# Under :auth: :ldap:, these sub-sections have symbol keys too.
_LDAP_SYMBOL_SECTIONS = frozenset({"encryption", "service_account_hash"})


def _settings_section(values: Any, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared field's effective value, then the raw keys the dataclass ignores."""
    names = [item.name for item in fields(values) if item.name != "raw"]
    section = {name: thaw(getattr(values, name)) for name in names}
    section.update({key: thaw(value) for key, value in raw.items() if key not in section})
    return section


def _pool(pool: PoolConfig) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": pool.name,
        "template": pool.template,
        "size": pool.size,
        "provider": pool.provider,
    }
    if pool.alias:
        entry["alias"] = list(pool.alias)
    entry["ready_ttl"] = pool.ready_ttl
    entry.update({key: thaw(value) for key, value in pool.raw.items() if key not in entry})
    return entry


def effective_document(config: Config) -> dict[str, Any]:
    """The configuration as a plain document (plain keys) with every default filled in.

    Secrets are *not* masked here; :func:`render_config` masks them.
    """
    doc: dict[str, Any] = thaw(config.raw)
    doc["config"] = _settings_section(config.settings, config.settings.raw)
    doc["config"].pop("extra_config", None)  # already merged into this document
    doc["config"].pop("pools_from_dir", None)  # its pools are in :pools: below
    raw_redis = config.raw.get("redis")
    doc["redis"] = _settings_section(
        config.redis, raw_redis if isinstance(raw_redis, Mapping) else {}
    )
    doc["pools"] = [_pool(pool) for pool in config.pools]
    doc["providers"] = {
        name: {"provider_class": provider.provider_class, **thaw(provider.settings)}
        for name, provider in config.providers.items()
    }
    metrics = config.metrics
    if metrics.backend == "prometheus" and metrics.prometheus is not None:
        instance = dict(tag.split(":", 1) for tag in metrics.tags).get("vmpooler_instance")
        doc["prometheus"] = {"prefix": instance, "prometheus_prefix": metrics.prefix,
                             "prometheus_endpoint": metrics.prometheus.endpoint,
                             "multiprocess_dir": metrics.prometheus.multiprocess_dir}
    elif metrics.backend != "none":
        section: dict[str, Any] = {
            "server" if metrics.backend != "datadog" else "host": metrics.host,
            "port": metrics.port, "prefix": metrics.prefix}
        if metrics.backend == "datadog":
            section["tags"] = list(metrics.tags)
        raw_section = config.raw.get(metrics.backend)
        if isinstance(raw_section, Mapping):
            section.update({k: thaw(v) for k, v in raw_section.items() if k not in section})
        doc[metrics.backend] = section
    if config.settings.rate_limiting_enabled:
        doc["rate_limits"] = thaw(config.rate_limits)
    first = [key for key in _SECTION_ORDER if key in doc]
    return {key: doc[key] for key in [*first, *(key for key in doc if key not in first)]}


def _symbolise(doc: dict[str, Any]) -> dict[str, Any]:
    """Give the keys vmpooler reads as Ruby symbols their ``:`` prefix back."""
    out: dict[str, Any] = {}
    for section, value in doc.items():
        if section in _SYMBOL_CHILDREN and isinstance(value, dict):
            value = {f":{name}": _symbolise_limits(section, item) for name, item in value.items()}
        elif section == "auth" and isinstance(value, dict):
            value = {(":ldap" if key == "ldap" else key): _ldap(item) if key == "ldap" else item
                     for key, item in value.items()}
        out[f":{section}"] = value
    return out


def _symbolise_limits(section: str, value: Any) -> Any:
    if section == "rate_limits" and isinstance(value, dict):
        return {f":{key}": item for key, item in value.items()}
    return value


def _ldap(ldap: Any) -> Any:
    if not isinstance(ldap, dict):
        return ldap
    return {
        key: (
            {f":{sub}": item for sub, item in value.items()}
            if key in _LDAP_SYMBOL_SECTIONS and isinstance(value, dict) else value
        )
        for key, value in ldap.items()
    }


def render_config(config: Config) -> str:
    """The effective configuration as YAML with vmpooler's symbol keys, secrets masked.

    The text starts with comment lines naming the source and listing ``config.notes``; it
    loads back with ``load_config`` (masked secrets excepted). This is what
    ``vmpooler check-config`` prints.
    """
    header = ["# vmpooler effective configuration", f"# source: {config.source}"]
    header.extend(f"# note: {note}" for note in config.notes)
    body = yaml.safe_dump(
        _symbolise(mask_secrets(effective_document(config))),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=100,
    )
    return "\n".join(header) + "\n" + body
