"""The vSphere provider's settings: parsed from a ``ProviderContext``, checked for the config.

This module does not import pyvmomi, so the configuration loader (and with it the API) can
check a vSphere section without loading the SDK. Keys and defaults follow vmpooler's
vsphere provider 3.4.0 (reference §3.3, §3.4); ours are marked below.

Provider keys (``:providers: :<name>:``): ``server`` (required), ``port`` (443),
``username`` and ``password`` (required; also from ``VMPOOLER_PROVIDER_<NAME>_USERNAME`` /
``_PASSWORD``), ``insecure`` (false: the certificate is verified), ``datacenter``,
``connection_pool_size`` (default the largest of: pools served, ``task_limit``, 2),
``connection_pool_timeout`` (60 s), ``vsphere_timeout`` (60 s; also a ``:config:`` key),
``resources_allowlist`` (legacy ``folder_whitelist``), ``create_folders``,
``utilization_limit`` (90; also ``:config:``), from ``:config:`` ``manage_host_selection``
and ``host_selection_max_age`` (60 s), and, ours: ``vm_ready_check``,
``vm_ready_port`` (22), ``vm_ready_timeout`` (5 s), ``ip_wait_timeout`` (240 s),
``linked_clone_snapshot`` (``vmpooler-linked-clone``), ``log_vm_events_on_failure``
(false) and ``max_vm_events`` (20, at most 1000): log vCenter's events for a pending VM
that fails (vmpooler PR #629).

Pool keys: ``template`` (an inventory path below the datacenter's VM folder, or a bare
name), ``folder``, ``datastore`` (required), ``clone_target`` (else ``:config:
clone_target``; required), ``datacenter`` (else the provider's; else, as the gem's
``find_datacenter(nil)``, the first datacenter vCenter lists, chosen at run time), ``network``,
``create_linked_clone`` (else ``:config: create_linked_clones``, default true),
``snapshot_mainMem_ioBlockPages``, ``snapshot_mainMem_iowait`` and, ours,
``vm_ready_check`` (else the provider's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_LINKED_CLONE_SNAPSHOT",
    "READY_CHECKS",
    "PoolPlacement",
    "SettingsProblem",
    "VsphereSettings",
    "check_settings",
]

READY_CHECKS = ("ssh", "ssh_ip", "guest_tools")
"""``vm_ready_check`` values: TCP 22 of ``<vm>.<domain>`` (vmpooler's check), TCP 22 of the
IP vCenter reports for the guest, or VMware Tools running with an IP reported."""

DEFAULT_LINKED_CLONE_SNAPSHOT = "vmpooler-linked-clone"


@dataclass(frozen=True, slots=True)
class SettingsProblem:
    """One thing wrong with a vSphere section, or, when ``note`` is true, one thing worth
    saying about it that does not make it unusable.

    ``pool`` is None for a provider key, else the name of the pool whose key is wrong.
    """

    key: str
    message: str
    pool: str | None = None
    note: bool = False


@dataclass(frozen=True, slots=True)
class PoolPlacement:
    """Where and how one pool's VMs are made: its settings resolved against the provider's
    and the global ones."""

    name: str
    template: str
    folder: str
    datastore: str
    datacenter: str | None
    """None: vCenter's first datacenter, which the provider resolves (see
    :meth:`with_datacenter`) before any inventory path is built."""
    clone_target: str
    network: str | None = None
    linked_clone: bool = True
    linked_clone_snapshot: str = DEFAULT_LINKED_CLONE_SNAPSHOT
    ready_check: str = "ssh"
    domain: str | None = None
    extra_config: tuple[tuple[str, str], ...] = ()

    @property
    def resolved_datacenter(self) -> str:
        """The datacenter of a placement :meth:`with_datacenter` resolved. ``ValueError``
        when it is still None (an inventory path would name no datacenter)."""
        if self.datacenter is None:
            raise ValueError(f"pool {self.name}: the datacenter is not resolved yet")
        return self.datacenter

    @property
    def folder_path(self) -> str:
        """The folder's inventory path: ``<datacenter>/vm/<folder>``."""
        return f"{self.datacenter}/vm/{self.folder.strip('/')}"

    def with_datacenter(self, datacenter: str) -> PoolPlacement:
        """This placement with ``datacenter`` filled in when the configuration left it
        unset; unchanged when it names one."""
        if self.datacenter is not None:
            return self
        return dataclasses.replace(self, datacenter=datacenter)


@dataclass(frozen=True, slots=True)
class VsphereSettings:
    """Everything the provider needs, validated. Build it with :meth:`from_context`."""

    name: str
    server: str
    username: str
    password: str = field(repr=False)
    port: int = 443
    insecure: bool = False
    session_pool_size: int = 2
    session_wait: float = 60.0
    socket_timeout: float = 60.0
    login_tries: int = 3
    login_retry_factor: float = 10.0
    create_folders: bool = True
    utilization_limit: float = 90.0
    manage_host_selection: bool = False
    host_selection_max_age: float = 60.0
    ready_port: int = 22
    ready_timeout: float = 5.0
    ip_wait_timeout: float = 240.0
    log_vm_events: bool = False
    max_vm_events: int = 20
    allowlist: tuple[str, ...] = ()
    pools: Mapping[str, PoolPlacement] = field(default_factory=dict)

    @classmethod
    def from_context(
        cls,
        name: str,
        settings: Mapping[str, Any],
        pools: Mapping[str, Mapping[str, Any]],
        global_settings: Mapping[str, Any],
        dns_domains: Mapping[str, str | None],
    ) -> VsphereSettings:
        """Parse the provider's section and its pools.

        Raises ``ValueError`` listing every problem (see :func:`check_settings`).
        """
        problems = [p for p in check_settings(settings, pools, global_settings) if not p.note]
        if problems:
            raise ValueError("; ".join(_describe(p) for p in problems))
        task_limit = int(global_settings.get("task_limit") or 10)
        default_size = max(len(pools), task_limit, 2)
        ready_check = str(settings.get("vm_ready_check") or "ssh")
        placements = {
            pool: _placement(pool, raw, settings, global_settings, ready_check,
                             dns_domains.get(pool))
            for pool, raw in pools.items()
        }
        create_folders = _first(settings.get("create_folders"),
                                global_settings.get("create_folders"))
        return cls(
            name=name,
            server=str(settings["server"]),
            username=str(settings["username"]),
            password=str(settings["password"]),
            port=int(settings.get("port") or 443),
            insecure=bool(settings.get("insecure", False)),
            session_pool_size=int(settings.get("connection_pool_size") or default_size),
            session_wait=float(settings.get("connection_pool_timeout") or 60),
            socket_timeout=float(_first(settings.get("vsphere_timeout"),
                                        global_settings.get("vsphere_timeout")) or 60),
            login_tries=max(1, int(global_settings.get("max_tries") or 3)),
            login_retry_factor=float(_first(global_settings.get("retry_factor"), 10)),
            create_folders=True if create_folders is None else bool(create_folders),
            utilization_limit=float(_first(settings.get("utilization_limit"),
                                           global_settings.get("utilization_limit"), 90)),
            manage_host_selection=bool(global_settings.get("manage_host_selection", False)),
            host_selection_max_age=float(_first(global_settings.get("host_selection_max_age"),
                                                60)),
            ready_port=int(settings.get("vm_ready_port") or 22),
            ready_timeout=float(settings.get("vm_ready_timeout") or 5),
            ip_wait_timeout=float(_first(settings.get("ip_wait_timeout"), 240)),
            log_vm_events=bool(settings.get("log_vm_events_on_failure", False)),
            max_vm_events=int(settings.get("max_vm_events") or 20),
            allowlist=tuple(str(v) for v in _allowlist(settings)),
            pools=placements,
        )

    @property
    def url(self) -> str:
        """Where vCenter's SDK is, for messages (never carries credentials)."""
        return f"https://{self.server}:{self.port}/sdk"


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _allowlist(settings: Mapping[str, Any]) -> Iterable[Any]:
    value = _first(settings.get("resources_allowlist"), settings.get("folder_whitelist"))
    return value or ()


def _linked_clone(raw: Mapping[str, Any], global_settings: Mapping[str, Any]) -> bool:
    """The gem's rule: the pool's ``create_linked_clone`` wins, else ``create_linked_clones``
    (which defaults to true)."""
    value = _first(raw.get("create_linked_clone"), global_settings.get("create_linked_clones"))
    return True if value is None else bool(value)


def _placement(
    pool: str,
    raw: Mapping[str, Any],
    settings: Mapping[str, Any],
    global_settings: Mapping[str, Any],
    ready_check: str,
    domain: str | None,
) -> PoolPlacement:
    extra: list[tuple[str, str]] = []
    for key, option in (("snapshot_mainMem_ioBlockPages", "mainMem.ioBlockPages"),
                        ("snapshot_mainMem_iowait", "mainMem.iowait")):
        if raw.get(key) is not None:
            extra.append((option, str(raw[key])))
    return PoolPlacement(
        name=pool,
        template=str(raw["template"]).strip("/"),
        folder=str(raw["folder"]).strip("/"),
        datastore=str(raw["datastore"]),
        datacenter=_optional_str(_first(raw.get("datacenter"), settings.get("datacenter"))),
        clone_target=str(_first(raw.get("clone_target"), global_settings.get("clone_target"))),
        network=None if raw.get("network") is None else str(raw["network"]),
        linked_clone=_linked_clone(raw, global_settings),
        linked_clone_snapshot=str(settings.get("linked_clone_snapshot")
                                  or DEFAULT_LINKED_CLONE_SNAPSHOT),
        ready_check=str(raw.get("vm_ready_check") or ready_check),
        domain=domain,
        extra_config=tuple(extra),
    )


# -- checking ---------------------------------------------------------------------------------

_STRING, _BOOL, _NUMBER, _INT, _STRINGS = "a string", "true or false", "a number", \
    "an integer", "a list of strings"


def _kind_ok(value: Any, kind: str) -> bool:
    if kind == _STRING:
        return isinstance(value, str) and value.strip() != ""
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


_PROVIDER_KEYS: tuple[tuple[str, str], ...] = (
    ("server", _STRING), ("username", _STRING), ("password", _STRING), ("port", _INT),
    ("insecure", _BOOL), ("datacenter", _STRING), ("connection_pool_size", _INT),
    ("connection_pool_timeout", _NUMBER), ("vsphere_timeout", _NUMBER),
    ("create_folders", _BOOL), ("utilization_limit", _NUMBER), ("vm_ready_check", _STRING),
    ("vm_ready_port", _INT), ("vm_ready_timeout", _NUMBER), ("ip_wait_timeout", _NUMBER),
    ("linked_clone_snapshot", _STRING), ("resources_allowlist", _STRINGS),
    ("folder_whitelist", _STRINGS), ("log_vm_events_on_failure", _BOOL),
    ("max_vm_events", _INT),
)
_POOL_KEYS: tuple[tuple[str, str], ...] = (
    ("template", _STRING), ("folder", _STRING), ("datastore", _STRING),
    ("datacenter", _STRING), ("clone_target", _STRING), ("network", _STRING),
    ("create_linked_clone", _BOOL), ("vm_ready_check", _STRING),
)
_SECRETS = frozenset({"password"})
_POSITIVE = frozenset({"port", "connection_pool_size", "connection_pool_timeout",
                       "vsphere_timeout", "vm_ready_port", "vm_ready_timeout",
                       "max_vm_events"})
MAX_VM_EVENTS = 1000


def _check_keys(
    section: Mapping[str, Any], keys: Iterable[tuple[str, str]], pool: str | None
) -> list[SettingsProblem]:
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
        elif key == "max_vm_events" and value > MAX_VM_EVENTS:
            problems.append(SettingsProblem(key, f"must be at most {MAX_VM_EVENTS}, got {value}",
                                            pool))
        elif key == "port" and value > 65535:
            problems.append(SettingsProblem(key, f"is not a TCP port: {value}", pool))
        elif key == "vm_ready_check" and value not in READY_CHECKS:
            problems.append(SettingsProblem(
                key, f"must be one of {', '.join(READY_CHECKS)}, got {value!r:.40}", pool))
    return problems


def check_settings(
    settings: Mapping[str, Any],
    pools: Mapping[str, Mapping[str, Any]],
    global_settings: Mapping[str, Any],
) -> list[SettingsProblem]:
    """Every problem with a vSphere provider section and the pools it serves (none but notes
    when the configuration is usable). Never raises; looks at nothing but its arguments.

    A pool without a ``datacenter`` (nor its provider) is no problem: vmpooler's provider
    then uses the first datacenter vCenter lists; a note says so, since only the running
    provider can know which one that is."""
    problems = _check_keys(settings, _PROVIDER_KEYS, None)
    for key in ("server", "username", "password"):
        if settings.get(key) is None:
            problems.append(SettingsProblem(
                key, f"is required (or set it in the environment as "
                     f"VMPOOLER_PROVIDER_<NAME>_{key.upper()})"))
    for pool, raw in pools.items():
        problems.extend(_check_keys(raw, _POOL_KEYS, pool))
        for key in ("template", "folder", "datastore"):
            if raw.get(key) is None:
                problems.append(SettingsProblem(key, "is required for a vsphere pool", pool))
        if _first(raw.get("datacenter"), settings.get("datacenter")) is None:
            problems.append(SettingsProblem(
                "datacenter", "is not set on the pool nor on its provider: the first "
                "datacenter vCenter lists will be used (as vmpooler does)", pool, note=True))
        if _first(raw.get("clone_target"), global_settings.get("clone_target")) is None:
            problems.append(SettingsProblem(
                "clone_target", "is required: set it on the pool or as :config: clone_target "
                "(a cluster, host or resource pool)", pool))
    return problems


def _describe(problem: SettingsProblem) -> str:
    where = f"pool {problem.pool}: " if problem.pool else ""
    return f"configuration error: {where}{problem.key} {problem.message}"
