"""The Redis schema: every key name and every Lua script vmpooler uses, in one place.

Key names are vmpooler 3.9.1's exactly (reference §2.1), so a Redis shared with a Ruby
vmpooler, dashboards and operators' scripts keep working. Nothing else in the project spells
``vmpooler__``: everything asks this module.

Key names live in submodules by concern (``pool_keys``: a pool's queues and published state;
``client_keys``: VM and token hashes, per-client counters; ``task_keys``: work in flight;
``ondemand_keys``: on-demand requests and quotas; ``stats_keys``: statistics and history;
``config_keys``: published configuration and overrides; ``manager_keys``: the managers'
coordination and housekeeping), scripts in the ``*_scripts`` submodules. This package
re-exports every name: import them from here (``schema.ready(pool)``), not from a submodule.

Each Lua script is one transition that could race with another process (the API, another
manager). It checks the current state before it writes, and returns a code the caller must
handle. Scripts document their KEYS and ARGV.
"""

from __future__ import annotations

from vmpooler.actors.storage.schema.brake_scripts import BrakeScripts
from vmpooler.actors.storage.schema.checkout_scripts import CheckoutScripts
from vmpooler.actors.storage.schema.client_keys import (
    login_failures_address,
    login_failures_user,
    ratelimit,
    token,
    vm,
    vm_name,
    vm_pattern,
)
from vmpooler.actors.storage.schema.config_keys import (
    config_clone_target,
    config_poolsize,
    config_template,
    pool_hash,
    poolreset,
    pools,
    template_deltas,
    template_prepared,
    undo_size_override,
    undo_template_override,
)
from vmpooler.actors.storage.schema.failover_scripts import FailoverScripts
from vmpooler.actors.storage.schema.lease_scripts import LeaseScripts
from vmpooler.actors.storage.schema.manager_keys import (
    commands,
    dlq,
    dlq_pattern,
    health,
    lease,
    lease_token,
    manager_heartbeat,
    manager_inbox,
    provider_health,
)
from vmpooler.actors.storage.schema.namespaces import NAMESPACES
from vmpooler.actors.storage.schema.ondemand_keys import (
    odcreate_task,
    odinflight,
    odrequest,
    provisioning_processing,
    provisioning_request,
    quota_held,
    quota_labels,
    quota_usage_snapshot,
    quota_users,
    request_vms,
    waits,
)
from vmpooler.actors.storage.schema.pool_keys import (
    active,
    brake,
    completed,
    config_errors,
    discovered,
    empty,
    failover,
    held,
    migrating,
    pending,
    queue,
    ready,
    running,
    standby,
)
from vmpooler.actors.storage.schema.pool_scripts import Scripts
from vmpooler.actors.storage.schema.quota_scripts import QuotaScripts
from vmpooler.actors.storage.schema.ratelimit_scripts import RateLimitScripts
from vmpooler.actors.storage.schema.request_scripts import RequestScripts
from vmpooler.actors.storage.schema.standby_scripts import StandbyScripts
from vmpooler.actors.storage.schema.stats_keys import (
    DEMAND_MAX,
    DEMAND_MISS_BUDGET,
    DEMAND_MISS_WINDOW,
    DEMAND_MISSES_MAX,
    DEMAND_RETENTION,
    boot_stats,
    clone_stats,
    demand,
    demand_guard,
    demand_misses,
    history,
    history_checkouts,
    history_clones,
    history_misses,
    lastboot,
    sizing,
    tag_stats,
    wait_times,
)
from vmpooler.actors.storage.schema.status_scripts import StatusScripts
from vmpooler.actors.storage.schema.task_keys import (
    migration,
    tasks_clone,
    tasks_clone_slots,
    tasks_disk,
    tasks_ondemandclone,
    tasks_ondemandclone_slots,
    tasks_slot_owners,
    tasks_snapshot,
    tasks_snapshot_revert,
)
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
    "tag_stats",
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
