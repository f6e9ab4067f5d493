"""Validation of ``:redis:``: the connection settings, Sentinel's addresses, and what
access (ACL user, TLS files) needs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vmpooler.actors.config._check import Checker
from vmpooler.actors.config._values import coerce, show
from vmpooler.actors.config.model import RedisSettings

__all__ = ["redis_settings"]


def redis_settings(section: Mapping[str, Any], chk: Checker) -> RedisSettings:
    """The ``:redis:`` section as :class:`RedisSettings`; each problem recorded in ``chk``."""
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
