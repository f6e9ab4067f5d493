"""How a pool actor acts on the answers of its provider calls (a mixin of ``PoolActor``).

Each handler runs on the pool actor's thread, one at a time, and applies its transition
through a compare-and-set script: an answer about a VM that has since moved (drained,
checked out, reaped) changes nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis

from vmpooler.actors.messages import (
    CloneResult,
    ProviderCallFinished,
    ProviderFailure,
    ProviderOp,
    ReadyCheckResult,
    RunningCheckResult,
)
from vmpooler.actors.pool.policy import (
    PendingVerdict,
    hostname_mismatch,
    pending_verdict,
)
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.dlq import DeadLetter
from vmpooler.providers.base import MigrationResult

if TYPE_CHECKING:
    from vmpooler.actors.pool.actor import PoolActor

__all__ = ["OutcomeHandlers"]

log = logging.getLogger(__name__)


def _log_failure(failure: ProviderFailure, message: str, *args: object,
                 level: int = logging.ERROR) -> None:
    """Log a failed call, at debug level when the circuit breaker refused it: the provider
    actor logs the breaker's state changes once, instead of one line per call."""
    log.log(logging.DEBUG if failure.circuit_open else level, message, *args)


class OutcomeHandlers:
    """Handlers for :class:`ProviderCallFinished`, by operation."""

    def on_outcome(self: PoolActor, msg: ProviderCallFinished) -> None:
        """Dispatch one provider answer."""
        if msg.failure is not None and msg.failure.busy:
            if msg.op is ProviderOp.LIST_VMS:
                self.on_inventory(None, msg.failure.message)  # back off, cycle later
            elif msg.op is ProviderOp.MIGRATE:
                OutcomeHandlers._migrated(self, msg)
            return  # another call for this VM is running; the next cycle looks again
        handler = {
            ProviderOp.LIST_VMS: OutcomeHandlers._listed,
            ProviderOp.CLONE: OutcomeHandlers._cloned,
            ProviderOp.CHECK_PENDING: OutcomeHandlers._pending_checked,
            ProviderOp.CHECK_READY: OutcomeHandlers._ready_checked,
            ProviderOp.CHECK_RUNNING: OutcomeHandlers._running_checked,
            ProviderOp.DESTROY: OutcomeHandlers._destroyed,
            ProviderOp.PREPARE_TEMPLATE: OutcomeHandlers._template_prepared,
            ProviderOp.MIGRATE: OutcomeHandlers._migrated,
        }.get(msg.op)
        if handler is not None:
            handler(self, msg)
        elif msg.failure is not None:
            log.error("[!] [%s] %s of '%s' failed: %s", self.name, msg.op.value, msg.vm,
                      msg.failure.message)

    def _listed(self: PoolActor, msg: ProviderCallFinished) -> None:
        if msg.failure is not None:
            self.on_inventory(None, msg.failure.message)
        else:
            self.on_inventory(tuple(msg.result), None)

    def _dead_letter(self: PoolActor, queue: str, vm: str, error_class: str, message: str,
                     *, count: bool = True) -> None:
        """Record a dead letter for ``vm`` (when ``dlq_enabled``), with its request's id,
        alias and retry count if it was cloned for one; ``count`` the
        ``vmpooler_dlq.<queue>.count`` metric (not for purges, as vmpooler). A Redis
        failure is logged, never raised: the transition it records has happened."""
        if not self.settings.dlq_enabled:
            return
        request_id, alias = self.ondemand.get(vm, (None, None))
        try:
            retries = self.upkeep.retry_count(request_id) if request_id else 0
            entry = DeadLetter.now(vm=vm, pool=self.name, queue=queue, error_class=error_class,
                                   error_message=message, epoch=self.clock.now(),
                                   retry_count=retries, request_id=request_id,
                                   pool_alias=alias)
            self.store.dlq_add(queue, entry.member(), entry.epoch,
                               ttl=self.settings.dlq_ttl * 3600,
                               max_entries=self.settings.dlq_max_entries)
        except redis.RedisError as exc:
            log.error("[!] [dlq] failed to move '%s' to the dead-letter queue: %s", vm, exc)
            return
        if count:
            self.metrics.increment(f"vmpooler_dlq.{queue}.count", tags={"pool": self.name})
        log.debug("[!] [dlq] moved '%s' from '%s' queue to DLQ: %s", vm, queue, message)

    # -- clone --------------------------------------------------------------------------------
    def _cloned(self: PoolActor, msg: ProviderCallFinished) -> None:
        vm = msg.vm or ""
        ondemand = vm in self.ondemand
        if msg.failure is None:
            result: CloneResult = msg.result
            try:
                self.store.clone_succeeded(
                    self.name, vm, seconds=result.seconds, ip=result.ip,
                    date=timefmt.date_bucket(self.clock.now()), ondemand=ondemand,
                )
            except Exception:
                self.owed_slots += 1
                raise
            self.clone_failures = 0
            self.metrics.increment("clone.outcome", tags={
                "pool": self.name, "provider": self.pool.provider, "result": "success"})
            self.metrics.gauge("vmpooler_clone", result.seconds, tags={"pool": self.name})
            log.info("[+] [%s] '%s' cloned in %.2f seconds", self.name, vm, result.seconds)
            self._send(ProviderOp.CHECK_PENDING, vm)
            if ondemand:
                self._ondemand_slot_freed()
            else:
                self.refill(freed=1)
            return
        failure = msg.failure
        self.clone_failures += 1
        self.clone_retry_at = self.clock.monotonic() + min(
            self.backoff.max, self.backoff.min * 2 ** (self.clone_failures - 1))
        if failure.error_class == "StaleDnsError":
            self.metrics.increment("vmpooler_errors.staledns", tags={"pool": self.name})
        if not failure.circuit_open:  # refused before reaching the provider: nothing died
            self._dead_letter("clone", vm, failure.error_class, failure.message)
            self.metrics.increment("clone.outcome", tags={
                "pool": self.name, "provider": self.pool.provider, "result": "failure"})
        try:
            was_pending = self.store.clone_failed(self.name, vm, error=failure.message,
                                    error_class=failure.error_class, ttl=self.data_ttl,
                                    release_slot=True, ondemand=ondemand)
        except Exception:
            if not ondemand:
                self.owed_slots += 1
            raise
        if was_pending and not failure.circuit_open:
            self._lost("clone_failed")
        self._forget_caches(vm)
        _log_failure(failure, "[!] [%s] '%s' clone failed: %s: %s", self.name, vm,
                     failure.error_class, failure.message)
        if ondemand:
            self._ondemand_lost(vm, f"clone failed: {failure.error_class}: {failure.message}",
                                permanent=failure.permanent)
            self._ondemand_slot_freed()
        else:
            self.refill(freed=1)

    # -- pending --------------------------------------------------------------------------------
    def _pending_checked(self: PoolActor, msg: ProviderCallFinished) -> None:
        vm = msg.vm or ""
        now = self.clock.now()
        if msg.failure is None and msg.result and vm in self.ondemand:
            self._ondemand_ready(vm)
            return
        if msg.failure is None and msg.result:
            started = self._clone_started(vm)
            boot = now - started if started is not None else 0.0
            moved = self.store.mark_ready(self.name, vm, now=timefmt.format_epoch(now),
                                          boot_seconds=boot, date=timefmt.date_bucket(now))
            if moved < 0:  # a request's VM this actor did not know of: its request takes it
                self.ondemand.update(self.store.ondemand_owners([vm]))
                if vm in self.ondemand:
                    self._ondemand_ready(vm)
                return
            if moved:
                self.ready_since[vm] = now
                self.next_check[vm] = self.clock.monotonic() + self.settings.vm_checktime * 60
                self.clone_started.pop(vm, None)
                self.reserved_at.pop(vm, None)
                self.notified.discard(vm)
                self.metrics.timing("time_to_ready_state", boot, tags={"pool": self.name})
                log.info("[>] [%s] '%s' moved from 'pending' to 'ready' queue", self.name, vm)
            return
        if msg.failure is not None:
            self.store.set_vm_fields(vm, {"open_socket_error": msg.failure.message})
        verdict = pending_verdict(
            now=now, clone_started=self._clone_started(vm), timeout_min=self.timeout_min,
            notification_min=self.notify_min, already_notified=vm in self.notified,
        )
        if verdict == PendingVerdict.NOTIFY:
            self.notified.add(vm)
            self.store.set_vm_fields(vm, {"timeout_notification": "1"})
            log.warning("[!] [%s] '%s' has been pending for over %s minutes and will fail "
                        "after %s minutes", self.name, vm, self.notify_min, self.timeout_min)
        elif verdict == PendingVerdict.FAIL:
            if self.store.retire(self.name, vm, "pending"):
                self._lost("pending_timeout")
                self._dead_letter("pending", vm, "Timeout", msg.failure.message
                                  if msg.failure is not None
                                  else "VM timed out during pending phase")
                self.metrics.increment("vmpooler_errors.markedasfailed", tags={"pool": self.name})
                reason = msg.failure.message if msg.failure is not None else "not ready"
                log.error("[>] [%s] '%s' marked as 'failed' after %s minutes (%s)", self.name,
                          vm, self.timeout_min, reason)
            self._ondemand_lost(vm, f"not ready after {self.timeout_min} minutes")
            self._forget_caches(vm)

    # -- ready ----------------------------------------------------------------------------------
    def _ready_checked(self: PoolActor, msg: ProviderCallFinished) -> None:
        vm = msg.vm or ""
        if msg.failure is not None:
            _log_failure(msg.failure, "[!] [%s] could not check ready VM '%s': %s", self.name,
                         vm, msg.failure.message, level=logging.WARNING)
            return
        result: ReadyCheckResult = msg.result
        if hostname_mismatch(vm, result.hostname):
            if self.store.retire(self.name, vm, "ready"):
                self._lost("check_failed")
                log.info("[>] [%s] '%s' has mismatched hostname '%s', moved to 'completed'",
                         self.name, vm, result.hostname)
                self._forget_caches(vm)
            return
        if not result.ready:
            if result.reason:
                self.store.set_vm_fields(vm, {"open_socket_error": result.reason})
            if self.store.retire(self.name, vm, "ready"):
                self._lost("check_failed")
                self._dead_letter("ready", vm, "NotReady",
                                  result.reason or "VM became unreachable in ready queue")
                log.info("[>] [%s] '%s' is unreachable, moved to 'completed'", self.name, vm)
                self._forget_caches(vm)

    # -- running --------------------------------------------------------------------------------
    def _running_checked(self: PoolActor, msg: ProviderCallFinished) -> None:
        vm = msg.vm or ""
        if msg.failure is not None:
            _log_failure(msg.failure, "[!] [%s] could not check running VM '%s': %s",
                         self.name, vm, msg.failure.message, level=logging.WARNING)
            return
        result: RunningCheckResult = msg.result
        if result.tagged:
            self.store.set_vm_fields(vm, {"user_tagged": "true"})
        if not result.exists and self.store.retire(self.name, vm, "running"):
            log.info("[>] [%s] '%s' is no longer in inventory, moved to 'completed'", self.name,
                     vm)
            self._forget_caches(vm)

    # -- destroy --------------------------------------------------------------------------------
    def _destroyed(self: PoolActor, msg: ProviderCallFinished) -> None:
        vm = msg.vm or ""
        if msg.failure is not None:
            _log_failure(msg.failure, "[!] [%s] '%s' destroy failed: %s", self.name, vm,
                         msg.failure.message)
            return
        self.store.forget(self.name, vm, delete_hash=False)
        self._forget_caches(vm)
        self.metrics.gauge("vmpooler_destroy", msg.seconds, tags={"pool": self.name})
        log.info("[-] [%s] '%s' destroyed in %.2f seconds", self.name, vm, msg.seconds)

    # -- migration ----------------------------------------------------------------------------
    def _migrated(self: PoolActor, msg: ProviderCallFinished) -> None:
        vm = msg.vm or ""
        why = self.migrations.pop(vm, "off")
        if why == "moving":
            self.provider_store.release_migration(vm)
        if msg.failure is not None:
            if msg.failure.busy:
                log.info("[%s] migration check of '%s' skipped: another call on it runs",
                         self.name, vm)
            else:
                log.error("[!] [%s] '%s' migration failed: %s", self.name, vm,
                          msg.failure.message)
            return
        result: MigrationResult | None = msg.result
        if result is None or result.host is None:
            return
        fields = {"host": result.host}
        if result.moved_from:
            checkout = timefmt.parse_epoch(self.store.vm_field(vm, "checkout"))
            fields.update(migrated="true", migration_time=f"{result.seconds:.2f}")
            if checkout is not None:
                fields["checkout_to_migration"] = f"{self.clock.now() - checkout:.2f}"
            self.metrics.timing("migrate", result.seconds, tags={"pool": self.name})
            self.metrics.increment("migrate_from", tags={"host": result.moved_from})
            self.metrics.increment("migrate_to", tags={"host": result.host})
            log.info("[>] [%s] '%s' migrated from %s to %s in %.2f seconds", self.name, vm,
                     result.moved_from, result.host, result.seconds)
        elif why == "moving":
            log.info("[ ] [%s] No migration required for '%s' running on %s", self.name, vm,
                     result.host)
        elif why == "limit":
            log.info("[ ] [%s] '%s' is running on %s. No migration will be evaluated since "
                     "the migration_limit has been reached", self.name, vm, result.host)
        else:
            log.info("[ ] [%s] '%s' is running on %s", self.name, vm, result.host)
        self.provider_store.record_migration(vm, fields)

    def _template_prepared(self: PoolActor, msg: ProviderCallFinished) -> None:
        self.preparing = False
        if msg.failure is not None:
            log.error("[!] [%s] failed while preparing template '%s': %s", self.name,
                      self.template, msg.failure.message)
        else:
            self.store.add_delta_disks(self.template)
        self.store.set_prepared_template(self.name, self.template)
        self.refill()
