"""The EC2 provider's settings: parsed from a ``ProviderContext``, checked for the config.

This module does not import boto3, so the configuration loader (and with it the API) can
check an ``aws`` section without the SDK; :func:`check_settings` reports a missing SDK as
one problem telling how to install it.

Provider keys, as vmpooler-provider-ec2 reads them: ``region`` (required), ``zone``,
``amisize``, ``volume_size``, ``dns_zone_resource_name``, ``domain``, ``project`` (the gem's
Cloud DNS project; accepted, unused), ``purge_unconfigured_resources``,
``resources_allowlist``, ``connection_pool_size``, ``connection_pool_timeout`` and the
credentials ``ABS_AWS_ACCESS_KEY`` / ``ABS_AWS_SECRET_KEY`` (the environment variables of the
same names win; without either, boto3's own chain: instance role, profile, ``AWS_*``).
Ours: ``subnet_id``, ``security_group_ids``, ``instance_tags`` (a mapping), ``key_name``,
``endpoint_url``, ``retry_mode`` (``adaptive``), ``max_attempts`` (10), ``api_timeout``
(60 s), ``state_poll_interval`` (5 s), ``state_wait_timeout`` (600 s: the longest a launch,
stop, start or termination is waited for), ``visibility_grace`` (60 s), ``vm_ready_check``
(``ssh``), ``vm_ready_port`` (22), ``vm_ready_timeout`` (5 s).

Pool keys: ``template`` (an AMI id, required), ``zone``, ``amisize``, ``volume_size``,
``provision`` (accepted; the gem's SSH set-up is not done), and, ours, ``subnet_id``,
``security_group_ids``, ``instance_tags``, ``vm_ready_check``, ``hibernate`` (instances
launched with hibernation configured: suspended standby VMs are hibernated). A pool key
wins over the provider's.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "INSTALL_HINT",
    "READY_CHECKS",
    "AwsSettings",
    "PoolSpec",
    "SettingsProblem",
    "check_settings",
    "sdk_missing",
]

READY_CHECKS = ("ssh", "ssh_ip", "instance_status")
"""``vm_ready_check`` values: TCP 22 of ``<vm>.<domain>`` (else of the private DNS name, as
the gem), TCP 22 of the private address, or EC2's own status checks both ``ok``."""

INSTALL_HINT = "the aws provider needs boto3: pip install 'vmpooler[aws]'"
RETRY_MODES = ("adaptive", "standard", "legacy")


def sdk_missing() -> bool:
    """True when boto3 is not installed (the ``aws`` extra); looks without importing it."""
    try:
        return importlib.util.find_spec("boto3") is None
    except (ImportError, ValueError):  # a module entry of None, or a broken parent
        return True


@dataclass(frozen=True, slots=True)
class SettingsProblem:
    """One thing wrong with an ``aws`` section (``pool`` None: a provider key)."""

    key: str
    message: str
    pool: str | None = None
    note: bool = False


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """How one pool's instances are launched: its keys resolved against the provider's."""

    name: str
    template: str
    amisize: str
    zone: str | None = None
    volume_size: int | None = None
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] = ()
    instance_tags: tuple[tuple[str, str], ...] = ()
    ready_check: str = "ssh"
    domain: str | None = None
    hibernate: bool = False


@dataclass(frozen=True, slots=True)
class AwsSettings:
    """Everything the provider needs, validated. Build it with :meth:`from_context`."""

    name: str
    region: str
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    endpoint_url: str | None = None
    key_name: str | None = None
    retry_mode: str = "adaptive"
    max_attempts: int = 10
    api_timeout: float = 60.0
    pool_size: int = 10
    poll_interval: float = 5.0
    wait_timeout: float = 600.0
    visibility_grace: float = 60.0
    ready_port: int = 22
    ready_timeout: float = 5.0
    max_lifetime_hours: int = 12
    allowlist: tuple[str, ...] = ()
    zone: str | None = None
    pools: Mapping[str, PoolSpec] = field(default_factory=dict)

    @classmethod
    def from_context(
        cls,
        name: str,
        settings: Mapping[str, Any],
        pools: Mapping[str, Mapping[str, Any]],
        global_settings: Mapping[str, Any],
        dns_domains: Mapping[str, str | None],
        environ: Mapping[str, str] | None = None,
    ) -> AwsSettings:
        """Parse the provider's section and its pools; ``environ`` (default
        ``os.environ``) gives the ``ABS_AWS_*`` credentials. Raises ``ValueError`` naming
        every problem (see :func:`check_settings`)."""
        problems = [p for p in check_settings(settings, pools, global_settings,
                                              sdk=False) if not p.note]
        if problems:
            raise ValueError("; ".join(_describe(p) for p in problems))
        env = os.environ if environ is None else environ
        task_limit = int(global_settings.get("task_limit") or 10)
        ready_check = str(settings.get("vm_ready_check") or "ssh")
        return cls(
            name=name,
            region=str(settings["region"]),
            access_key=env.get("ABS_AWS_ACCESS_KEY") or _opt(settings.get("ABS_AWS_ACCESS_KEY")),
            secret_key=env.get("ABS_AWS_SECRET_KEY") or _opt(settings.get("ABS_AWS_SECRET_KEY")),
            endpoint_url=_opt(settings.get("endpoint_url")),
            key_name=_opt(settings.get("key_name")),
            retry_mode=str(settings.get("retry_mode") or "adaptive"),
            max_attempts=int(settings.get("max_attempts") or 10),
            api_timeout=float(settings.get("api_timeout") or 60),
            pool_size=int(settings.get("connection_pool_size")
                          or max(len(pools), task_limit, 2)),
            poll_interval=float(settings.get("state_poll_interval") or 5),
            wait_timeout=float(settings.get("state_wait_timeout") or 600),
            visibility_grace=float(_first(settings.get("visibility_grace"), 60)),
            ready_port=int(settings.get("vm_ready_port") or 22),
            ready_timeout=float(settings.get("vm_ready_timeout") or 5),
            max_lifetime_hours=int(global_settings.get("max_lifetime_upper_limit") or 12),
            allowlist=tuple(str(v) for v in settings.get("resources_allowlist") or ()),
            zone=_opt(settings.get("zone")),
            pools={pool: _spec(pool, raw, settings, ready_check,
                               _first(settings.get("domain"), dns_domains.get(pool)))
                   for pool, raw in pools.items()},
        )


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


def _size(value: Any) -> int | None:
    return None if value is None else int(str(value).strip())


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _spec(pool: str, raw: Mapping[str, Any], settings: Mapping[str, Any], ready_check: str,
          domain: Any) -> PoolSpec:
    def pick(key: str) -> Any:
        return _first(raw.get(key), settings.get(key))

    tags = {**(settings.get("instance_tags") or {}), **(raw.get("instance_tags") or {})}
    return PoolSpec(
        name=pool,
        template=str(raw["template"]),
        amisize=str(pick("amisize")),
        zone=_opt(pick("zone")),
        volume_size=_size(pick("volume_size")),
        subnet_id=_opt(pick("subnet_id")),
        security_group_ids=tuple(str(g) for g in pick("security_group_ids") or ()),
        instance_tags=tuple((str(k), str(v)) for k, v in sorted(tags.items())),
        ready_check=str(raw.get("vm_ready_check") or ready_check),
        domain=_opt(domain),
        hibernate=_truthy(raw.get("hibernate")),
    )


# -- checking ---------------------------------------------------------------------------------

_STRING, _BOOL, _NUMBER, _INT, _STRINGS, _TAGS, _SIZE, _FLAG = (
    "a string", "true or false", "a number", "an integer", "a list of strings",
    "a mapping of tag names to strings", "a whole number of GB", "true or false")


def _kind_ok(value: Any, kind: str) -> bool:
    if kind == _STRING:
        return isinstance(value, str) and value.strip() != ""
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _FLAG:  # the gem compares with true and 'true'
        return isinstance(value, bool) or (isinstance(value, str)
                                           and value.strip().lower() in ("true", "false"))
    if kind in (_INT, _SIZE):
        if kind == _SIZE and isinstance(value, str):
            return value.strip().isdigit() and int(value) > 0
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == _TAGS:
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and isinstance(v, str | int | float) for k, v in value.items())
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


_COMMON: tuple[tuple[str, str], ...] = (
    ("zone", _STRING), ("amisize", _STRING), ("volume_size", _SIZE), ("subnet_id", _STRING),
    ("security_group_ids", _STRINGS), ("instance_tags", _TAGS), ("vm_ready_check", _STRING),
)
_PROVIDER_KEYS: tuple[tuple[str, str], ...] = (
    *_COMMON, ("region", _STRING), ("dns_zone_resource_name", _STRING), ("domain", _STRING),
    ("project", _STRING), ("resources_allowlist", _STRINGS), ("connection_pool_size", _INT),
    ("connection_pool_timeout", _NUMBER), ("ABS_AWS_ACCESS_KEY", _STRING),
    ("ABS_AWS_SECRET_KEY", _STRING), ("endpoint_url", _STRING), ("key_name", _STRING),
    ("retry_mode", _STRING), ("max_attempts", _INT), ("api_timeout", _NUMBER),
    ("state_poll_interval", _NUMBER), ("state_wait_timeout", _NUMBER),
    ("visibility_grace", _NUMBER),
    ("vm_ready_port", _INT), ("vm_ready_timeout", _NUMBER),
)
_POOL_KEYS: tuple[tuple[str, str], ...] = (
    *_COMMON, ("template", _STRING), ("provision", _FLAG), ("hibernate", _FLAG),
)
_SECRETS = frozenset({"ABS_AWS_ACCESS_KEY", "ABS_AWS_SECRET_KEY"})
_POSITIVE = frozenset({"connection_pool_size", "connection_pool_timeout", "max_attempts",
                       "api_timeout", "state_poll_interval", "state_wait_timeout", "vm_ready_port",
                       "vm_ready_timeout"})
_CHOICES = {"vm_ready_check": READY_CHECKS, "retry_mode": RETRY_MODES}


def _check_keys(section: Mapping[str, Any], keys: Iterable[tuple[str, str]],
                pool: str | None) -> list[SettingsProblem]:
    problems = []
    for key, kind in keys:
        value = section.get(key)
        if value is None:
            continue
        if not _kind_ok(value, kind):
            shown = "********" if key in _SECRETS else f"{value!r:.60}"  # never repeated
            problems.append(SettingsProblem(key, f"expected {kind}, got {shown}", pool))
        elif key in _POSITIVE and value <= 0:
            problems.append(SettingsProblem(key, f"must be greater than 0, got {value}", pool))
        elif key == "vm_ready_port" and value > 65535:
            problems.append(SettingsProblem(key, f"is not a TCP port: {value}", pool))
        elif key in _CHOICES and value not in _CHOICES[key]:
            problems.append(SettingsProblem(
                key, f"must be one of {', '.join(_CHOICES[key])}, got {value!r:.40}", pool))
    return problems


def check_settings(
    settings: Mapping[str, Any],
    pools: Mapping[str, Mapping[str, Any]],
    global_settings: Mapping[str, Any],
    *,
    sdk: bool = True,
) -> list[SettingsProblem]:
    """Every problem with an ``aws`` provider section and the pools it serves (none when the
    configuration is usable). Never raises; looks at nothing but its arguments and, with
    ``sdk``, whether boto3 can be imported (a missing SDK is one problem on
    ``provider_class`` saying how to install it)."""
    problems = _check_keys(settings, _PROVIDER_KEYS, None)
    if sdk and sdk_missing():
        problems.append(SettingsProblem("provider_class", INSTALL_HINT))
    if settings.get("region") is None:
        problems.append(SettingsProblem("region", "is required (an AWS region, e.g. us-west-2)"))
    for pool, raw in pools.items():
        problems.extend(_check_keys(raw, _POOL_KEYS, pool))
        if raw.get("template") is None:
            problems.append(SettingsProblem("template", "is required for an aws pool (an AMI "
                                            "id)", pool))
        if _first(raw.get("amisize"), settings.get("amisize")) is None:
            problems.append(SettingsProblem(
                "amisize", "is required: set it on the pool or on its provider (an instance "
                "type, e.g. t3.small)", pool))
        if _truthy(raw.get("provision")):
            problems.append(SettingsProblem(
                "provision", "is not done by this provider (the gem's SSH set-up): bake it "
                "into the AMI or user data", pool, note=True))
    return problems


def _describe(problem: SettingsProblem) -> str:
    where = f"pool {problem.pool}: " if problem.pool else ""
    return f"configuration error: {where}{problem.key} {problem.message}"
