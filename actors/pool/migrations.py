"""Migration of checked-out VMs (reference §4.9): the pool actor asks the provider where a VM
in the pool's migrating set runs, letting it move the VM when ``migration_limit`` allows one
more migration, and records the answer in the VM hash.

:class:`Migrations` owns why each asked VM was asked (``moving``: a migration slot was
reserved in Redis; ``limit``: the limit is reached; ``off``: migration is disabled). Used
only on the pool actor's thread.
"""

from __future__ import annotations

import logging

from vmpooler.actors.messages import MigrateVm, ProviderCallFinished
from vmpooler.actors.pool.calls import ProviderCalls
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.storage import timefmt
from vmpooler.providers.base import MigrationResult

__all__ = ["Migrations"]

log = logging.getLogger(__name__)


class Migrations:
    """``MIGRATE`` calls of one pool and their answers."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, calls: ProviderCalls) -> None:
        self.policy, self.io, self.calls = policy, io, calls
        self.asked: dict[str, str] = {}  # vm -> why: "moving", "limit" or "off"

    def start(self, vm: str) -> None:
        """Ask the provider where a checked-out VM runs, letting it move the VM when
        ``migration_limit`` allows one more migration (reserved in Redis, atomically)."""
        limit = self.policy.settings.migration_limit or 0
        if limit <= 0:
            why = "off"
        elif self.io.provider_store.reserve_migration(vm, limit):
            why = "moving"
        else:
            why = "limit"
        if self.calls.send(MigrateVm(may_move=why == "moving"), vm):
            self.asked[vm] = why
        elif why == "moving":
            self.io.provider_store.release_migration(vm)

    def migrated(self, msg: ProviderCallFinished) -> None:
        """The answer to ``MIGRATE`` (a ``busy`` refusal included): release the migration
        slot, record the host (and the move) in the VM hash, count and log it."""
        name = self.policy.name
        vm = msg.vm or ""
        why = self.asked.pop(vm, "off")
        if why == "moving":
            self.io.provider_store.release_migration(vm)
        if msg.failure is not None:
            if msg.failure.busy:
                log.info("[%s] migration check of '%s' skipped: another call on it runs",
                         name, vm)
            else:
                log.error("[!] [%s] '%s' migration failed: %s", name, vm,
                          msg.failure.message)
            return
        result = None if msg.result is None else msg.result_of(MigrationResult)
        if result is None or result.host is None:
            return
        fields = {"host": result.host}
        if result.moved_from:
            checkout = timefmt.parse_epoch(self.io.store.vm_field(vm, "checkout"))
            fields.update(migrated="true", migration_time=f"{result.seconds:.2f}")
            if checkout is not None:
                fields["checkout_to_migration"] = f"{self.io.clock.now() - checkout:.2f}"
            self.io.metrics.timing("migrate", result.seconds, tags={"pool": name})
            self.io.metrics.increment("migrate_from", tags={"host": result.moved_from})
            self.io.metrics.increment("migrate_to", tags={"host": result.host})
            log.info("[>] [%s] '%s' migrated from %s to %s in %.2f seconds", name, vm,
                     result.moved_from, result.host, result.seconds)
        elif why == "moving":
            log.info("[ ] [%s] No migration required for '%s' running on %s", name, vm,
                     result.host)
        elif why == "limit":
            log.info("[ ] [%s] '%s' is running on %s. No migration will be evaluated since "
                     "the migration_limit has been reached", name, vm, result.host)
        else:
            log.info("[ ] [%s] '%s' is running on %s", name, vm, result.host)
        self.io.provider_store.record_migration(vm, fields)
