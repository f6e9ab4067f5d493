"""The ``:config:`` and ``:redis:`` sections: :class:`GlobalSettings` and
:class:`RedisSettings`, each field declared once with :func:`setting` (part of
:mod:`vmpooler.actors.config.model`: import the names from there).

Each field carries its YAML key (the field name), its environment variable, its type
("kind") and its allowed range in ``dataclasses.field`` metadata, which drives validation
and env overrides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vmpooler.actors.config._data import empty_mapping, freeze

__all__ = ["DEFAULT_HEALTH_THRESHOLDS", "GlobalSettings", "RedisSettings", "setting"]


DEFAULT_HEALTH_THRESHOLDS: Mapping[str, float] = freeze(
    {
        "pending_queue_max": 100,
        "ready_queue_max": 500,
        "dlq_max_warning": 100,
        "dlq_max_critical": 1000,
        "stuck_vm_age_threshold": 7200,  # seconds
        "stuck_vm_max_warning": 10,
        "stuck_vm_max_critical": 50,
    }
)
"""vmpooler's queue-health thresholds; ``:config: health_thresholds`` is merged over them."""


def setting(
    default: Any,
    kind: str,
    *,
    env: str | None = None,
    minimum: float | None = 0,
    maximum: float | None = None,
    positive: bool = False,
) -> Any:
    """Declare one setting.

    ``kind`` is one of ``int``, ``number`` (int or float), ``share`` (``40%`` or ``0.4``,
    read as a fraction 0..1), ``bool``, ``str``, ``strs`` (list of strings), ``weights``
    (mapping of string to int) or ``attempts`` (a count, or a list of delays counted by its
    length, as vmpooler 3.x's redis-rb takes them); a trailing ``?`` means ``None`` is
    allowed. ``minimum``/``maximum`` bound numbers inclusively, ``positive`` demands > 0.
    """
    meta = {
        "kind": kind,
        "env": env,
        "minimum": minimum,
        "maximum": maximum,
        "positive": positive,
    }
    if kind == "weights":
        return field(default_factory=empty_mapping, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class GlobalSettings:
    """The ``:config:`` section. Durations are minutes unless the comment says otherwise."""

    site_name: str = setting("<b>vmpooler</b>", "str", env="SITE_NAME")
    logfile: str | None = setting(None, "str?", env="LOGFILE")
    prefix: str = setting("", "str", env="PREFIX")
    task_limit: int = setting(10, "int", env="TASK_LIMIT")
    ondemand_clone_limit: int = setting(10, "int", env="ONDEMAND_CLONE_LIMIT")
    # Ours (docs/fairness.md): on-demand requests take ready VMs of their pools first; the
    # default of every pool's ``ondemand_from_ready``.
    ondemand_from_ready: bool = setting(False, "bool")
    timeout: int = setting(15, "int", env="TIMEOUT")
    timeout_notification: int = setting(5, "int", env="TIMEOUT_NOTIFICATION")
    max_vm_retries: int = setting(3, "int")
    vm_checktime: int = setting(1, "int", env="VM_CHECKTIME", minimum=1)
    vm_lifetime: int = setting(24, "int", env="VM_LIFETIME")  # hours
    vm_lifetime_auth: int | None = setting(None, "int?", env="VM_LIFETIME_AUTH")  # hours
    max_lifetime_upper_limit: int | None = setting(
        None, "int?", env="MAX_LIFETIME_UPPER_LIMIT"
    )  # hours
    ready_ttl: int = setting(60, "int", env="READY_TTL")
    ondemand_request_ttl: int = setting(5, "int", env="ONDEMAND_REQUEST_TTL")
    # Seconds past the TTL an on-demand request keeps waiting for VMs already cloning or
    # booting (no new clones start). Ours; 0 is vmpooler's behaviour.
    ondemand_request_grace: int = setting(0, "int", env="ONDEMAND_REQUEST_GRACE", minimum=0)
    max_ondemand_instances_per_request: int = setting(
        10, "int", env="MAX_ONDEMAND_INSTANCES_PER_REQUEST"
    )
    # Ours: the most on-demand requests one user may have in flight (when :auth: is
    # configured: the token's user); None is no limit.
    max_ondemand_requests_per_user: int | None = setting(
        None, "int?", env="MAX_ONDEMAND_REQUESTS_PER_USER", minimum=1
    )
    # Ours: the largest pool size a pool, a size override or POST /config/poolsize may set;
    # a provider's own ``max_pool_size`` wins for its pools.
    max_pool_size: int = setting(10_000, "int", env="MAX_POOL_SIZE", minimum=1)
    # Ours (docs/sizing.md, "Standby tier"): the defaults of every pool's standby tier: how
    # many suspended (or powered-off) VMs it keeps besides its ready ones (a number, ``auto``
    # for the demand sizer to choose, 0 for none), in which state, for how many minutes at
    # most before they are recycled; how many resumes one pool runs at once; and the price
    # of a standby VM-hour against a running one (the sizer's weight).
    standby: int | str = setting(0, "count_or_auto")
    standby_state: str = setting("suspended", "str")
    standby_ttl: int = setting(1440, "int", minimum=1)
    standby_resume_limit: int = setting(10, "int", minimum=1)
    standby_cost: float = setting(0.1, "number", positive=True, maximum=1)
    # Ours (docs/sizing.md): how pools are sized unless a pool says otherwise: ``static``
    # (vmpooler's fixed ``size``) or ``demand`` (between ``size_min`` and ``size_max``, the
    # ready count the pool's checkout history calls for, to serve ``target_warm_hit`` of its
    # checkouts from ready VMs).
    sizing: str = setting("static", "str", env="SIZING")
    size_min: int = setting(0, "int")
    target_warm_hit: float = setting(0.99, "share")
    # Ours (vmpooler PR #456): a directory whose *.yaml/*.yml files each hold pools (a
    # :pools: list or a bare list), appended in file-name order (actors/config/pools_dir.py).
    pools_from_dir: str | None = setting(None, "str?", env="POOLS_FROM_DIR")
    allowed_tags: tuple[str, ...] | None = setting(None, "strs?")
    # Ours: the most ``tag:`` fields a VM may carry; a PUT /vm that would exceed it is a 400.
    max_tags_per_vm: int = setting(32, "int", env="MAX_TAGS_PER_VM", minimum=1)
    # With :auth: configured: a VM checked out with a token can only be changed with that
    # token, and a VM not checked out only with a valid token (vmpooler: any valid token).
    enforce_vm_ownership: bool = setting(False, "bool", env="ENFORCE_VM_OWNERSHIP")
    # Ours, with :auth: configured: PUT/DELETE /vm/<name> need a valid token for every VM.
    require_token_for_vm_changes: bool = setting(
        False, "bool", env="REQUIRE_TOKEN_FOR_VM_CHANGES")
    # Ours, with :auth: configured: POST /vm and /vm/<pools> (checkouts) need a valid token.
    require_token_for_checkout: bool = setting(
        False, "bool", env="REQUIRE_TOKEN_FOR_CHECKOUT")
    clone_target: str | None = setting(None, "str?", env="CLONE_TARGET")
    backend_weight: Mapping[str, int] = setting(None, "weights")
    experimental_features: bool = setting(False, "bool", env="EXPERIMENTAL_FEATURES")
    # Ours: with experimental_features and no :auth:, the API refuses pool changes (403) on a
    # listener other hosts can reach; true lets anyone change them there (logged at start).
    experimental_features_without_auth: bool = setting(
        False, "bool", env="EXPERIMENTAL_FEATURES_WITHOUT_AUTH")
    usage_stats: bool = setting(False, "bool", env="USAGE_STATS")
    request_logger: bool = setting(False, "bool", env="REQUEST_LOGGER")
    rate_limiting_enabled: bool = setting(False, "bool")
    # Addresses or CIDR networks of reverse proxies whose X-Forwarded-For (else Forwarded)
    # header names the client (ours); empty: the peer's address is the client's.
    trusted_proxies: tuple[str, ...] = setting((), "strs", env="TRUSTED_PROXIES")
    # Ours: the limiters (rate limits, failed logins, per-address quotas) count IPv6 clients
    # by their network of this many bits (an IPv4 client by its address).
    ipv6_prefix_length: int = setting(64, "int", env="IPV6_PREFIX_LENGTH", minimum=1,
                                      maximum=128)
    # Failed HTTP Basic logins (ours): after this many within the window (seconds), further
    # attempts for that user name / from that address are refused with 429. 0 is off.
    login_failures_per_user: int = setting(10, "int")
    login_failures_per_address: int = setting(30, "int")
    login_failure_window: int = setting(300, "int", minimum=1)
    migration_limit: int | None = setting(None, "int?", env="MIGRATION_LIMIT")
    max_tries: int = setting(3, "int", env="MAX_TRIES", minimum=1)
    retry_factor: int = setting(10, "int", env="RETRY_FACTOR")
    check_loop_delay_min: float = setting(5.0, "number", positive=True)  # seconds
    check_loop_delay_max: float = setting(60.0, "number", positive=True)  # seconds
    check_loop_delay_decay: float = setting(2.0, "number", minimum=None)
    check_ready_vm_hostname_for_mismatch: bool = setting(True, "bool")
    create_template_delta_disks: bool = setting(
        False, "bool", env="CREATE_TEMPLATE_DELTA_DISKS"
    )
    create_linked_clones: bool = setting(True, "bool", env="CREATE_LINKED_CLONES")
    purge_unconfigured_resources: bool = setting(
        False, "bool", env="PURGE_UNCONFIGURED_RESOURCES"
    )
    circuit_breaker_enabled: bool = setting(True, "bool")
    circuit_breaker_failure_threshold: int = setting(5, "int", minimum=1)
    circuit_breaker_timeout: float = setting(30.0, "number")  # seconds
    circuit_breaker_half_open_attempts: int = setting(3, "int", minimum=1)
    provider_call_timeout: float = setting(600.0, "number", positive=True)  # seconds
    # Ours: a pool whose clone failed permanently (missing template, no permission) clones
    # nothing more but trial clones, further and further apart up to one every this many
    # seconds (actors/pool/config_error.py).
    config_error_retry_interval: float = setting(300.0, "number", positive=True)  # seconds
    # Adaptive timeouts of provider calls (reference §4.11; fed here): seconds.
    adaptive_timeout_enabled: bool = setting(True, "bool")
    connection_pool_timeout_min: float = setting(5.0, "number", positive=True)
    connection_pool_timeout_max: float = setting(60.0, "number", positive=True)
    connection_pool_timeout_initial: float = setting(30.0, "number", positive=True)
    connection_pool_monitor_enabled: bool = setting(True, "bool")
    connection_pool_monitor_interval: float = setting(10.0, "number", positive=True)  # s
    dlq_enabled: bool = setting(False, "bool")
    dlq_ttl: int = setting(168, "int")  # hours
    dlq_max_entries: int = setting(10000, "int")
    # Auto-purge of stale queue entries (reference §4.11): seconds.
    purge_enabled: bool = setting(False, "bool")
    purge_dry_run: bool = setting(False, "bool")
    purge_interval: float = setting(3600.0, "number", positive=True)
    max_pending_age: float = setting(7200.0, "number", positive=True)
    max_ready_age: float = setting(86400.0, "number", positive=True)
    max_completed_age: float = setting(3600.0, "number", positive=True)
    max_orphaned_age: float = setting(86400.0, "number", positive=True)
    # Queue health check (reference §4.11): seconds; thresholds merged over the defaults.
    health_check_enabled: bool = setting(False, "bool")
    health_check_interval: float = setting(300.0, "number", positive=True)
    health_thresholds: Mapping[str, float] = field(
        default_factory=lambda: DEFAULT_HEALTH_THRESHOLDS)
    # Manager heartbeat and API readiness (ours): seconds. The max age defaults to three
    # intervals (actors/storage/heartbeat_store.py).
    manager_heartbeat_interval: float = setting(5.0, "number", positive=True)
    manager_heartbeat_max_age: float | None = setting(None, "number?", positive=True)
    # Pool leases (ours, several managers on one Redis): seconds a manager's lease on a pool
    # lasts unless renewed; None is three heartbeat intervals (actors/cluster/ownership.py).
    manager_lease_ttl: float | None = setting(None, "number?", positive=True)
    # The dashboard's recorded history (ours): seconds between two points of each pool's
    # counts (actors/service/history_recorder.py).
    history_interval: float = setting(60.0, "number", env="VMPOOLER_HISTORY_INTERVAL",
                                      positive=True)
    # The mass-failure brake (ours, after Cluster API's maxUnhealthy): when more than this
    # share of a pool's size fails a check within the window (seconds), failing VMs are held
    # instead of destroyed. None or 1.0 (100%) is off.
    max_unhealthy: float | None = setting(None, "share?")
    max_unhealthy_window: float = setting(600.0, "number", positive=True)
    # Alias failover (ours): a pool with ``failover: true`` counts as down after this many
    # failed inventories or clones in a row (at once when its provider's breaker is open).
    failover_failures: int = setting(3, "int", minimum=1)
    # The API's connections (ours; per gunicorn worker process): seconds a client has to
    # send a whole request (from connecting, or from its first byte), to take a response,
    # and to idle between two requests on a kept-alive connection; connections held at once.
    api_read_timeout: float = setting(10.0, "number", env="API_READ_TIMEOUT", positive=True)
    api_write_timeout: float = setting(30.0, "number", env="API_WRITE_TIMEOUT", positive=True)
    api_keepalive_timeout: float = setting(5.0, "number", env="API_KEEPALIVE_TIMEOUT",
                                           positive=True)
    api_max_connections: int = setting(1000, "int", env="API_MAX_CONNECTIONS", minimum=1)
    raw: Mapping[str, Any] = field(default_factory=empty_mapping)
    """The whole ``:config:`` section as written, after environment overrides."""


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """The ``:redis:`` section. ``server`` None means: start the embedded redis-server."""

    server: str | None = setting(None, "str?", env="REDIS_SERVER")
    port: int = setting(6379, "int", env="REDIS_PORT", minimum=1, maximum=65535)
    # With the embedded server (no ``server``), ``password`` is its password instead of the
    # one it generates; ``username`` and the TLS keys need a ``server`` or ``sentinels``.
    password: str | None = setting(None, "str?", env="REDIS_PASSWORD")
    username: str | None = setting(None, "str?", env="REDIS_USERNAME")  # ACL user
    # TLS (ours): ``ssl`` on, the server's certificate is verified against ``ssl_ca_file``
    # (else the system's CAs) and must name ``server``, unless ``ssl_verify`` is false;
    # ``ssl_cert_file``/``ssl_key_file`` are a client certificate (``tls-auth-clients``).
    ssl: bool = setting(False, "bool", env="REDIS_SSL")
    ssl_ca_file: str | None = setting(None, "str?", env="REDIS_SSL_CA_FILE")
    ssl_cert_file: str | None = setting(None, "str?", env="REDIS_SSL_CERT_FILE")
    ssl_key_file: str | None = setting(None, "str?", env="REDIS_SSL_KEY_FILE")
    ssl_verify: bool = setting(True, "bool", env="REDIS_SSL_VERIFY")
    db: int = setting(0, "int")
    data_ttl: int = setting(168, "int", env="REDIS_DATA_TTL")  # hours
    connection_pool_size: int = setting(10, "int", env="REDIS_CONNECTION_POOL_SIZE", minimum=1)
    connection_pool_timeout: float = setting(
        5.0, "number", env="REDIS_CONNECTION_POOL_TIMEOUT", positive=True
    )  # seconds
    reconnect_attempts: int = setting(10, "attempts", env="REDIS_RECONNECT_ATTEMPTS")
    data_dir: str = setting("./var/redis", "str", env="VMPOOLER_REDIS_DATA_DIR")
    # Redis Sentinel (ours): the master named ``sentinel_master`` is asked of these
    # sentinels ("host:port" each) instead of connecting to ``server``.
    sentinels: tuple[str, ...] = ()
    sentinel_master: str | None = setting(None, "str?", env="REDIS_SENTINEL_MASTER")
    sentinel_password: str | None = setting(None, "str?", env="REDIS_SENTINEL_PASSWORD")

    @property
    def embedded(self) -> bool:
        """True when neither a server nor sentinels are configured and vmpooler runs its own
        redis-server."""
        return self.server is None and not self.sentinels

    @property
    def sentinel_addresses(self) -> tuple[tuple[str, int], ...]:
        """``sentinels`` as ``(host, port)`` pairs (validated, so every entry parses)."""
        pairs = []
        for entry in self.sentinels:
            host, _, port = entry.rpartition(":")
            pairs.append((host.strip("[]"), int(port)))
        return tuple(pairs)
