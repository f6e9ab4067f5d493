"""The Redis schema: every key name and every Lua script vmpooler uses, in one place.

Key names are vmpooler 3.9.1's exactly (reference §2.1), so a Redis shared with a Ruby
vmpooler, dashboards and operators' scripts keep working. Nothing else in the project spells
``vmpooler__``: everything asks this module.

Each Lua script is one transition that could race with another process (the API, another
manager). It checks the current state before it writes, and returns a code the caller must
handle. Scripts document their KEYS and ARGV.
"""

from __future__ import annotations

import hashlib

from vmpooler.actors.storage.queues import Queue
from vmpooler.actors.storage.schema.brake_scripts import BrakeScripts
from vmpooler.actors.storage.schema.checkout_scripts import CheckoutScripts
from vmpooler.actors.storage.schema.failover_scripts import FailoverScripts
from vmpooler.actors.storage.schema.lease_scripts import LeaseScripts
from vmpooler.actors.storage.schema.namespaces import NAMESPACES
from vmpooler.actors.storage.schema.pool_scripts import Scripts
from vmpooler.actors.storage.schema.quota_scripts import QuotaScripts
from vmpooler.actors.storage.schema.ratelimit_scripts import RateLimitScripts
from vmpooler.actors.storage.schema.request_scripts import RequestScripts
from vmpooler.actors.storage.schema.standby_scripts import StandbyScripts
from vmpooler.actors.storage.schema.status_scripts import StatusScripts
from vmpooler.actors.storage.schema.upkeep_scripts import UpkeepScripts
from vmpooler.actors.storage.schema.user_quota_scripts import UserQuotaScripts

__all__ = [
    "DEMAND_MAX",
    "DEMAND_MISSES_MAX",
    "DEMAND_MISS_BUDGET",
    "DEMAND_MISS_WINDOW",
    "DEMAND_RETENTION",
    "NAMESPACES",
    "BrakeScripts",
    "CheckoutScripts",
    "FailoverScripts",
    "LeaseScripts",
    "QuotaScripts",
    "RateLimitScripts",
    "RequestScripts",
    "Scripts",
    "StandbyScripts",
    "StatusScripts",
    "UpkeepScripts",
    "UserQuotaScripts",
    "active",
    "boot_stats",
    "brake",
    "clone_stats",
    "commands",
    "completed",
    "config_clone_target",
    "config_errors",
    "config_poolsize",
    "config_template",
    "demand",
    "demand_guard",
    "demand_misses",
    "discovered",
    "dlq",
    "dlq_pattern",
    "empty",
    "failover",
    "health",
    "held",
    "history",
    "history_checkouts",
    "history_clones",
    "history_misses",
    "lastboot",
    "lease",
    "lease_token",
    "login_failures_address",
    "login_failures_user",
    "manager_heartbeat",
    "manager_inbox",
    "migrating",
    "migration",
    "odcreate_task",
    "odinflight",
    "odrequest",
    "pending",
    "pool_hash",
    "poolreset",
    "pools",
    "provider_health",
    "provisioning_processing",
    "provisioning_request",
    "queue",
    "quota_held",
    "quota_labels",
    "quota_usage_snapshot",
    "quota_users",
    "ratelimit",
    "ready",
    "request_vms",
    "running",
    "sizing",
    "standby",
    "tasks_clone",
    "tasks_clone_slots",
    "tasks_disk",
    "tasks_ondemandclone",
    "tasks_ondemandclone_slots",
    "tasks_slot_owners",
    "tasks_snapshot",
    "tasks_snapshot_revert",
    "template_deltas",
    "template_prepared",
    "token",
    "undo_size_override",
    "undo_template_override",
    "vm",
    "vm_name",
    "vm_pattern",
    "wait_times",
    "waits",
]

_P = "vmpooler__"


# -- per-pool VM queues (sets) -------------------------------------------------------------
def pending(pool: str) -> str:
    """Set of VMs being cloned or booting."""
    return f"{_P}pending__{pool}"


def ready(pool: str) -> str:
    """Set of VMs ready for checkout."""
    return f"{_P}ready__{pool}"


def running(pool: str) -> str:
    """Set of checked-out VMs."""
    return f"{_P}running__{pool}"


def completed(pool: str) -> str:
    """Set of VMs waiting to be destroyed."""
    return f"{_P}completed__{pool}"


def discovered(pool: str) -> str:
    """Set of provider VMs found in no queue (destroyed on the next pass unless claimed)."""
    return f"{_P}discovered__{pool}"


def migrating(pool: str) -> str:
    """Set of checked-out VMs the provider may migrate (a side set: they stay in running)."""
    return f"{_P}migrating__{pool}"


def queue(name: Queue, pool: str) -> str:
    """The key of ``pool``'s queue ``name`` (``queue(Queue.READY, p) == ready(p)``)."""
    return f"{_P}{name}__{pool}"


def held(pool: str) -> str:
    """Set of a pool's ready VMs that failed a check while its mass-failure brake was
    engaged (ours): out of ``ready``, so no checkout takes them, and not destroyed; checked
    again when the brake releases."""
    return f"{_P}held__{pool}"


def standby(pool: str) -> str:
    """Set of a pool's standby VMs (ours, docs/sizing.md "Standby tier"): cloned, checked
    ready, then suspended or powered off; out of ``ready``, so no client or key reader of
    vmpooler sees them. Each VM's hash says where it stands (``standby``: ``suspending``,
    ``suspended``, ``resuming`` or ``checking``; ``standby_since``, ``resumed``)."""
    return f"{_P}standby__{pool}"


def brake(pool: str) -> str:
    """Hash ``engaged failures held updated`` of a pool's mass-failure brake (ours), written
    by its pool actor when they change, for ``/status``."""
    return f"{_P}brake__{pool}"


def config_errors() -> str:
    """Hash pool -> JSON ``{error_class, message, since, template, clone_target}`` of the
    pools in the configuration-error state (ours: a clone failed permanently); each pool's
    field is written by its pool actor when it enters the state or the error changes and
    deleted when it leaves, for ``/status``."""
    return f"{_P}configerror"


def failover(pool: str) -> str:
    """Hash ``state reason since size ready effective covering updated`` of a pool with
    ``failover: true`` (ours): whether it can deliver and what it takes over of its alias
    siblings, written by its pool actor every cycle behind its lease; expires when no
    manager refreshes it (docs/vsphere.md)."""
    return f"{_P}failover__{pool}"


def active(pool: str) -> str:
    """Hash VM -> checkout time of checked-out VMs."""
    return f"{_P}active__{pool}"


def empty(pool: str) -> str:
    """String ``"true"`` while the pool has no ready VM."""
    return f"{_P}empty__{pool}"


# -- per-VM and per-token hashes ------------------------------------------------------------
def vm(name: str) -> str:
    """Hash of one VM's fields (reference §2.2)."""
    return f"{_P}vm__{name}"


def token(value: str) -> str:
    """Hash ``user``, ``created``, ``last`` of one API token."""
    return f"{_P}token__{value}"


def ratelimit(cls: str, client: str) -> str:
    """Integer request counter of one rate-limit class and client (``ip:<addr>`` or
    ``token:<token>`` of an existing API token); expires ``period`` s after its creation."""
    return f"{_P}ratelimit__{cls}__{client}"


def login_failures_user(user: str) -> str:
    """Integer (ours): failed Basic logins of a user name, TTL ``login_failure_window``. The
    name is case-folded and hashed (32 hex digits of SHA-256): bounded, ``JDoe`` is ``jdoe``."""
    digest = hashlib.sha256(user.strip().casefold().encode("utf-8", "surrogatepass"))
    return f"{_P}login_failures__user__{digest.hexdigest()[:32]}"


def login_failures_address(address: str) -> str:
    """Integer (ours): failed Basic logins from a client address (≤ 64 characters), same TTL."""
    return f"{_P}login_failures__address__{address[:64]}"


# -- global counters and task queues --------------------------------------------------------
def tasks_clone() -> str:
    """Integer: pooled clones in flight."""
    return f"{_P}tasks__clone"


def tasks_ondemandclone() -> str:
    """Integer: on-demand clones in flight."""
    return f"{_P}tasks__ondemandclone"


def tasks_clone_slots(manager: str) -> str:
    """Set (ours): the VMs whose pooled clone slot ``manager`` holds (their clone not
    answered yet). ``tasks__clone`` is kept equal to the sum of these sets' sizes."""
    return f"{_P}tasks__clone__{manager}"


def tasks_ondemandclone_slots(manager: str) -> str:
    """Set (ours): the VMs whose on-demand clone slot ``manager`` holds."""
    return f"{_P}tasks__ondemandclone__{manager}"


def tasks_slot_owners() -> str:
    """Hash (ours): the managers that may hold clone slots (have slot sets), one field each
    (value ``1``)."""
    return f"{_P}tasks__slot_owners"


def tasks_disk() -> str:
    """Set of ``"<vm>:<gb>"`` disk requests."""
    return f"{_P}tasks__disk"


def tasks_snapshot() -> str:
    """Set of ``"<vm>:<name>"`` snapshot requests."""
    return f"{_P}tasks__snapshot"


def tasks_snapshot_revert() -> str:
    """Set of ``"<vm>:<name>"`` snapshot-revert requests."""
    return f"{_P}tasks__snapshot-revert"


# -- on-demand request queues (global sorted sets) -------------------------------------------
def provisioning_request() -> str:
    """Sorted set of on-demand request ids not yet expanded, score = creation epoch."""
    return f"{_P}provisioning__request"


def provisioning_processing() -> str:
    """Sorted set of on-demand request ids being provisioned, score = creation epoch."""
    return f"{_P}provisioning__processing"


def odrequest(request_id: str) -> str:
    """Hash of one on-demand request: ``requested``, ``token:token``, ``token:user``,
    ``status``, ``retry_count``, ``failure_reason`` (reference §2.4)."""
    return f"{_P}odrequest__{request_id}"


def request_vms(request_id: str, alias: str, pool: str) -> str:
    """Set of the VMs delivered to a request for one ``alias:pool`` entry. The request id is
    the key's first word: see :data:`NAMESPACES`."""
    return f"{_P}{request_id}__{alias}__{pool}"


def odinflight(user: str) -> str:
    """Set (ours) of the ids of ``user``'s on-demand requests counted against
    ``max_ondemand_requests_per_user``; members whose request is no longer in flight are
    dropped when the set is next checked (:mod:`vmpooler.actors.storage.request_quota`)."""
    return f"{_P}odinflight__{user}"


def quota_held(user: str) -> str:
    """Set (ours) of what ``user`` holds under ``:quotas:``: ``vm:<pool>:<vm>`` for a VM it
    checked out, ``rq:<id>`` for an on-demand request; a member that holds nothing any more
    is dropped by the next script that counts the set (``user_quota_scripts``)."""
    return f"{_P}quota__held__{user}"


def quota_users() -> str:
    """Hash (ours) user -> ``<label>|<limits>`` of every user with a :func:`quota_held` set:
    the usage view's index (``user_quota_scripts``)."""
    return f"{_P}quota__users"


def quota_labels() -> str:
    """Counter (ours) of the opaque labels given to users in the usage view."""
    return f"{_P}quota__labels"


def quota_usage_snapshot() -> str:
    """Hash (ours) of the usage view's last count, shared by the API processes: ``at`` (when
    it was counted), the totals ``users``, ``vms_held``, ``ondemand_in_flight`` and ``top``,
    the users holding the most (JSON, ``user_quota_scripts.USAGE_SNAPSHOT``); it expires."""
    return f"{_P}quota__usage_snapshot"


def odcreate_task() -> str:
    """Sorted set of clone tasks ``"<name>:<pool>:<count>:<id>"``.

    Score: queueing epoch; 1 for retries, 0 for a cancel marker.
    """
    return f"{_P}odcreate__task"


# -- statistics -------------------------------------------------------------------------------
def clone_stats(date: str) -> str:
    """Hash ``"<pool>:<vm>"`` -> clone seconds, per day (``YYYY-MM-DD``)."""
    return f"{_P}clone__{date}"


def boot_stats(date: str) -> str:
    """Hash ``"<pool>:<vm>"`` -> seconds from clone to ready, per day."""
    return f"{_P}boot__{date}"


def tag_stats(date: str) -> str:
    """Hash ``"<vm>:<tag>"`` -> value, per day."""
    return f"{_P}tag__{date}"


def lastboot() -> str:
    """Hash pool -> time its last VM became ready."""
    return f"{_P}lastboot"


# -- pool configuration and overrides -------------------------------------------------------
def pools() -> str:
    """Set of configured pool names (published by the manager at start)."""
    return f"{_P}pools"


def pool_hash(pool: str) -> str:
    """Hash of a pool's configuration as published by the manager."""
    return f"{_P}pool__{pool}"


def config_poolsize() -> str:
    """Hash pool -> size override."""
    return f"{_P}config__poolsize"


def config_template() -> str:
    """Hash pool -> template override."""
    return f"{_P}config__template"


def config_clone_target() -> str:
    """Hash pool -> clone target override."""
    return f"{_P}config__clone_target"


def undo_size_override() -> str:
    """Set of pools whose size override was removed."""
    return f"{_P}pool__undo_size_override"


def undo_template_override() -> str:
    """Set of pools whose template override was removed."""
    return f"{_P}pool__undo_template_override"


def poolreset() -> str:
    """Set of pools asked to drain and refill."""
    return f"{_P}poolreset"


def template_prepared() -> str:
    """Hash pool -> template last prepared."""
    return f"{_P}template__prepared"


def template_deltas() -> str:
    """Set of templates that have delta disks."""
    return f"{_P}template__deltas"


def migration() -> str:
    """Set of VMs migrating now (vSphere provider)."""
    return f"{_P}migration"


def dlq(queue: str) -> str:
    """Sorted set of dead-letter entries for ``pending``, ``ready``, ``clone`` or (ours)
    ``standby``."""
    return f"{_P}dlq__{queue}"


def dlq_pattern() -> str:
    """SCAN pattern matching every dead-letter queue."""
    return f"{_P}dlq__*"


def vm_pattern() -> str:
    """SCAN pattern matching every VM hash (``vm(name)`` for any name)."""
    return f"{_P}vm__*"


def vm_name(key: str) -> str:
    """The VM name of a VM hash key (the inverse of :func:`vm`)."""
    return key.removeprefix(f"{_P}vm__")


def health() -> str:
    """Hash ``metrics`` (JSON), ``status`` (healthy, degraded, unhealthy), ``last_check``
    (RFC 3339): the manager's queue health check (reference §4.11); expires after 1 h."""
    return f"{_P}health"


def history(pool: str) -> str:
    """Sorted set of one pool's recorded history (ours): one member per point,
    ``"<t>:<ready>:<running>:<pending>:<checkouts>:<clones>"`` scored by ``t``, the epoch start
    of the point's interval; the last two are the cumulative counters read at that time
    (:mod:`vmpooler.actors.storage.history_store`). Trimmed to 24 h and a fixed number of points."""
    return f"{_P}history__pool__{pool}"


def history_checkouts() -> str:
    """Hash pool -> checkouts ever served from it (ours; ``HINCRBY`` in the checkout script)."""
    return f"{_P}history__checkouts"


def history_misses() -> str:
    """Hash pool -> checkouts that found no ready VM (ours; ``HINCRBY`` in the checkout script
    for each miss it logs in :func:`demand_misses`: one per pool a refused request asked for
    first, bounded per requester)."""
    return f"{_P}history__misses"


def demand(pool: str) -> str:
    """Sorted set of one pool's served checkouts (ours): every checkout the API served from
    the pool (and every ready VM an on-demand request took), member ``"<epoch>:<vm>"``, scored
    by its epoch. Written by the checkout script, which keeps at most :data:`DEMAND_MAX`
    members and drops those older than :data:`DEMAND_RETENTION` seconds every 64 entries.
    Checkouts that found no VM go to :func:`demand_misses`, so they never push served ones
    out (a log written before that split may still hold misses, ``"<epoch>:-<n>"``, read as
    such). With :func:`demand_misses`, what demand sizing learns from and ``vmpooler history
    export`` writes."""
    return f"{_P}demand__{pool}"


def demand_misses(pool: str) -> str:
    """Sorted set of one pool's checkouts that found no ready VM (ours): member
    ``"<epoch>:-<n>"`` (n: the pool's misses so far, :func:`history_misses`), scored by its
    epoch. The checkout script logs at most one per pool a request names first, and at most
    :data:`DEMAND_MISS_BUDGET` per requester and pool in each :data:`DEMAND_MISS_WINDOW`
    (:func:`demand_guard`); it keeps at most :data:`DEMAND_MISSES_MAX` members and the same
    :data:`DEMAND_RETENTION` as :func:`demand`."""
    return f"{_P}demand_misses__{pool}"


def demand_guard(pool: str) -> str:
    """Hash requester -> misses it asked to log in the pool's current window (ours): the
    requester is ``u:<token user>`` or ``a:<client address>``. Expires
    :data:`DEMAND_MISS_WINDOW` seconds after it was created (a fixed window)."""
    return f"{_P}demand_guard__{pool}"


DEMAND_RETENTION = 28 * 24 * 3600
"""Seconds of checkouts :func:`demand` keeps (four weeks: weekly cycles need a few)."""

DEMAND_MAX = 50_000
"""Members :func:`demand` keeps at most per pool (about 3 MB), the oldest dropped first."""

DEMAND_MISSES_MAX = 10_000
"""Members :func:`demand_misses` keeps at most per pool, the oldest dropped first."""

DEMAND_MISS_BUDGET = 2
"""Misses one requester may add to a pool's :func:`demand_misses` per window."""

DEMAND_MISS_WINDOW = 60
"""Seconds of one window of :data:`DEMAND_MISS_BUDGET` (:func:`demand_guard`'s expiry)."""


def sizing(pool: str) -> str:
    """Hash of a demand-sized pool's current target and why (ours): ``target``, ``reason``,
    ``forecast``, ``floor``, ``ceiling``, ``clone_time`` (seconds), ``warm_hit`` (the share
    of the last day's checkouts served warm), ``updated`` (epoch); written by the pool's
    owner, read by ``/status``."""
    return f"{_P}sizing__{pool}"


def waits() -> str:
    """Hash request id -> its wait (ours): JSON ``{"position": <VMs granted before its next
    one>, "ready_at": <epoch estimate>, "at": <epoch written>}``, written by the on-demand
    manager running the request (at most once a second, only the entries that changed) and
    its entry deleted when the request finishes; read by ``GET /ondemandvm/<id>``. Expires
    when no manager writes it for an hour."""
    return f"{_P}waits__requests"


def wait_times() -> str:
    """Hash pool -> ``"<clone> <ready>"`` (ours): the median of the pool's last clone times
    and of the times from a clone's start to its VM ready, in seconds, written by the pool's
    owner when they change; what the on-demand manager's estimates are made of. Expires
    when no manager writes it for a day."""
    return f"{_P}waits__pools"


def history_clones() -> str:
    """Hash pool -> clones ever finished for it (ours; ``HINCRBY`` when a clone succeeds)."""
    return f"{_P}history__clones"


def lease(kind: str, name: str) -> str:
    """String (ours): the lease of one owned thing, ``kind`` ``pool``, ``request`` or
    ``grants`` (the granter of on-demand clone slots, name ``ondemand``).
    Value ``<token> <holder>`` (holder = manager id); it expires after the lease TTL unless
    its holder renews it (:mod:`vmpooler.actors.storage.lease_store`)."""
    return f"{_P}lease__{kind}__{name}"


def lease_token() -> str:
    """String (ours): the fencing-token counter; INCR once per lease taken, so tokens only
    grow."""
    return f"{_P}lease__token"


def manager_heartbeat() -> str:
    """Sorted set of live managers (ours): member = manager id (``host:pid:started``),
    score = epoch seconds of its last beat. Each manager beats its own member, prunes
    members older than the prune age and re-arms the key's expiry, so the key vanishes
    once no manager beats (:mod:`vmpooler.actors.storage.heartbeat_store`)."""
    return f"{_P}manager__heartbeat"


def manager_inbox(manager: str) -> str:
    """Stream (ours): messages other managers send to one manager's actors, one entry per
    message (fields ``to``, ``type``, ``body``; :mod:`vmpooler.actors.cluster.relay`). It
    expires an hour after its last entry, so a dead manager's inbox goes by itself."""
    return f"{_P}manager__inbox__{manager}"


def provider_health(provider: str) -> str:
    """Hash of one provider's breaker, connection pool and last error, written by its
    provider actor for ``/status`` (ours; expires when no manager refreshes it)."""
    return f"{_P}provider__{provider}"


# -- API -> manager commands ------------------------------------------------------------------
def commands() -> str:
    """Stream of API commands for the managers' consumer group (ours; vmpooler has none)."""
    return f"{_P}commands"
