"""The housekeeper: the manager's periodic upkeep (reference §4.11), one actor for all.

* **Auto-purge** (``purge_enabled``), at start and then every ``purge_interval`` seconds: it
  asks every pool actor to purge its own stale VMs (:mod:`~vmpooler.actors.pool.stale_purge`; a
  pool's queues have one writer, its actor), expires orphaned VM hashes itself — hashes
  whose ``pool`` names a pool none of whose queues hold the VM, older than
  ``max_orphaned_age`` by ``clone`` — and, once every pool has answered, emits
  ``vmpooler_purge.cycle.duration`` and ``vmpooler_purge.total.count``. With
  ``purge_dry_run`` nothing is written anywhere; what would go is logged and counted.
* **Queue health** (``health_check_enabled``), at start and then every
  ``health_check_interval`` seconds: writes ``vmpooler__health`` as vmpooler does
  (:mod:`~vmpooler.actors.service.queue_health`), logs a summary and emits ``vmpooler_health.*``.
* **Start-up purge answers**: the system sends each provider's
  ``PURGE_UNCONFIGURED`` call with this actor as ``reply_to``; the outcome is logged here.

Timers come from the injected scheduler; a Redis outage is logged and the next tick tries
again. Nothing here blocks on another actor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pykka
import redis

from vmpooler.actors.config import GlobalSettings
from vmpooler.actors.messages import (
    PoolPurged,
    ProviderCallFinished,
    PurgeStaleVms,
    RunHealthCheck,
    RunPurge,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor
from vmpooler.actors.service.periodic import Ticks
from vmpooler.actors.service.queue_health import (
    emit_gauges,
    health_metrics,
    health_status,
    metrics_json,
    summary,
)
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.upkeep_store import UpkeepStore

__all__ = ["ORPHAN_TTL", "Housekeeper"]

log = logging.getLogger(__name__)

ORPHAN_TTL = 3600
"""Seconds an orphaned VM hash is given to live once purged (vmpooler's hour)."""


class Housekeeper(SupervisedActor):
    """See the module docstring. Start with :meth:`pykka.ThreadingActor.start`."""

    def __init__(
        self,
        *,
        settings: GlobalSettings,
        pools: Sequence[str],
        upkeep: UpkeepStore,
        directory: ActorDirectory,
        clock: Clock,
        scheduler: Scheduler,
        metrics: Metrics,
        supervisor: pykka.ActorRef[Any] | None = None,
    ) -> None:
        super().__init__(name="housekeeping", supervisor=supervisor)
        self.settings = settings
        self.pools = tuple(pools)
        self.upkeep = upkeep
        self.directory = directory
        self.clock = clock
        self.scheduler = scheduler
        self.ticks = Ticks(scheduler, self.actor_ref)
        self.metrics = metrics
        self.round = 0
        self.outstanding: set[str] = set()
        self.purged = 0
        self.round_started = 0.0

    def setup(self) -> None:
        if self.settings.purge_enabled:
            self.actor_ref.tell(RunPurge())
        if self.settings.health_check_enabled:
            self.actor_ref.tell(RunHealthCheck())

    def on_stop(self) -> None:
        self.ticks.cancel_all()

    def handle(self, message: object) -> None:
        match message:
            case RunPurge():
                self.ticks.arm(self.settings.purge_interval, RunPurge())
                self._guard("purge", self._start_purge)
            case PoolPurged():
                self._pool_purged(message)
            case RunHealthCheck():
                self.ticks.arm(self.settings.health_check_interval, RunHealthCheck())
                self._guard("health", self._health_check)
            case ProviderCallFinished():
                self._provider_answered(message)

    @staticmethod
    def _guard(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except redis.RedisError as exc:
            log.error("[!] [%s] failed: %s: %s; trying again at the next interval", what,
                      redis_failure(exc), exc)

    # -- purge ----------------------------------------------------------------------------------
    def _start_purge(self) -> None:
        if self.outstanding:
            log.warning("[!] [purge] round %d: no answer from %s; starting a new round",
                        self.round, ", ".join(sorted(self.outstanding)))
            self._finish_purge()
        dry_run = self.settings.purge_dry_run
        self.round += 1
        self.purged = 0
        self.round_started = self.clock.monotonic()
        log.debug("[*] [purge] starting stale queue entry purge cycle %d", self.round)
        for pool in self.pools:
            if self.directory.tell(Address.pool(pool).name,
                                   PurgeStaleVms(self.round, dry_run, self.actor_ref)):
                self.outstanding.add(pool)
            else:
                log.warning("[!] [purge] [%s] pool actor not running; skipped", pool)
        self.purged += self._purge_orphans(dry_run)
        if not self.outstanding:
            self._finish_purge()

    def _purge_orphans(self, dry_run: bool) -> int:
        limit, now, count = self.settings.max_orphaned_age, self.clock.now(), 0
        for orphan in self.upkeep.orphans():
            if orphan.clone is None or now - orphan.clone <= limit:
                continue
            age = now - orphan.clone
            if dry_run:
                count += 1
                log.info("[*] [purge][dry-run] would expire orphaned metadata of '%s' (age: "
                         "%.0fs, max: %.0fs)", orphan.vm, age, limit)
            elif self.upkeep.expire_orphan(orphan, ttl=ORPHAN_TTL) == 1:
                count += 1
                self.metrics.increment("vmpooler_purge.orphaned.count")
                log.info("[!] [purge] orphaned metadata of '%s' expires in %ds (age: %.0fs)",
                         orphan.vm, ORPHAN_TTL, age)
        return count

    def _pool_purged(self, msg: PoolPurged) -> None:
        if msg.round != self.round or msg.pool not in self.outstanding:
            return
        self.outstanding.discard(msg.pool)
        self.purged += msg.pending + msg.ready + msg.completed
        if not self.outstanding:
            self._finish_purge()

    def _finish_purge(self) -> None:
        seconds = self.clock.monotonic() - self.round_started
        self.outstanding = set()
        verb = "would be purged (dry run)" if self.settings.purge_dry_run else "purged"
        log.info("[*] [purge] completed purge cycle in %.2fs: %d entries %s", seconds,
                 self.purged, verb)
        self.metrics.gauge("vmpooler_purge.cycle.duration", seconds)
        self.metrics.gauge("vmpooler_purge.total.count", self.purged)

    # -- health ---------------------------------------------------------------------------------
    def _health_check(self) -> None:
        started, now = self.clock.monotonic(), self.clock.now()
        thresholds = self.settings.health_thresholds
        figures = health_metrics(
            now=now, pools=self.pools, ages=self.upkeep.queue_ages(self.pools),
            thresholds=thresholds, tasks=self.upkeep.task_counts(),
            dlq_sizes=self.upkeep.dlq_sizes() if self.settings.dlq_enabled else None,
            orphaned=len(self.upkeep.orphans()),
        )
        status = health_status(figures, thresholds)
        stamp = timefmt.rfc3339(datetime.fromtimestamp(int(now)).astimezone())
        self.upkeep.write_health(metrics_json(figures), status, stamp)
        log.log(logging.INFO if status == "healthy" else logging.WARNING, "%s",
                summary(figures, status))
        emit_gauges(figures, status, self.metrics)
        self.metrics.gauge("vmpooler_health.check.duration", self.clock.monotonic() - started)

    # -- start-up purge of unconfigured resources ----------------------------------------------
    @staticmethod
    def _provider_answered(msg: ProviderCallFinished) -> None:
        provider = msg.vm or "provider"
        if msg.failure is None:
            log.info("[*] [%s] unconfigured resources purged in %.2fs", provider, msg.seconds)
        else:
            log.error("[!] [%s] failed while purging unconfigured resources: %s: %s", provider,
                      msg.failure.error_class, msg.failure.message)
