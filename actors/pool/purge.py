"""The pool actor's part in the auto-purge of stale queue entries (a mixin of ``PoolActor``,
reference §4.11).

The housekeeper asks every pool actor with :class:`~vmpooler.actors.messages.PurgeStaleVms`
every ``purge_interval`` seconds; the pool's queues are written only here, by their owner,
each move a compare-and-set script. What is stale, by the VM hash's timestamps:

* pending longer than ``max_pending_age`` (by ``clone``): a dead letter (``pending``,
  ``Purge``), then to completed, where the normal path destroys it (vmpooler removed it
  from pending and waited for the provider's VM to be rediscovered); a request's VM is
  reported to its request, which retries;
* ready longer than ``max_ready_age`` (by ``ready``): to completed;
* completed longer than ``max_completed_age`` (by ``destroy``, else ``checkout``): out of
  completed, as vmpooler does (a VM the provider still has is rediscovered and destroyed).

A VM without the timestamp is left alone. With ``purge_dry_run`` nothing is written: the
candidates are logged and counted. The answer, :class:`~vmpooler.actors.messages.PoolPurged`,
carries the counts (metrics ``vmpooler_purge.<queue>.count``, tag ``pool``, are counted here).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import pykka

from vmpooler.actors.messages import PoolPurged, PurgeStaleVms
from vmpooler.actors.storage import timefmt

if TYPE_CHECKING:
    from vmpooler.actors.pool.actor import PoolActor

__all__ = ["StalePurge"]

log = logging.getLogger(__name__)


class StalePurge:
    """:meth:`_purge_stale` for the pool actor."""

    def _purge_stale(self: PoolActor, msg: PurgeStaleVms) -> None:
        s, name, now = self.settings, self.name, self.clock.now()
        counts = {"pending": 0, "ready": 0, "completed": 0}
        rules = (("pending", ("clone",), s.max_pending_age),
                 ("ready", ("ready",), s.max_ready_age),
                 ("completed", ("destroy", "checkout"), s.max_completed_age))
        for queue, stamps, limit in rules:
            vms = sorted(self.store.members(name, queue))
            for vm, values in self.store.vm_fields(vms, list(stamps)).items():
                stamp = next((timefmt.parse_epoch(v) for v in values if v), None)
                if stamp is None or now - stamp <= limit:
                    continue
                age = now - stamp
                if msg.dry_run:
                    counts[queue] += 1
                    log.info("[*] [purge][dry-run] [%s] would purge stale %s VM '%s' (age: %.0fs, "
                             "max: %.0fs)", name, queue, vm, age, limit)
                elif StalePurge._purge_one(self, queue, vm, age, limit):
                    counts[queue] += 1
                    self.metrics.increment(f"vmpooler_purge.{queue}.count", tags={"pool": name})
        with contextlib.suppress(pykka.ActorDeadError):
            msg.reply_to.tell(PoolPurged(msg.round, name, **counts))

    def _purge_one(self: PoolActor, queue: str, vm: str, age: float, limit: float) -> bool:
        name = self.name
        if queue == "completed":
            if not self.upkeep.purge_completed(name, vm, ttl=self.data_ttl):
                return False
            log.info("[!] [purge] [%s] removed stale completed VM '%s' (age: %.0fs)", name, vm,
                     age)
        else:
            if not self.store.retire(name, vm, queue):
                return False
            self._lost("purged")
            log.info("[!] [purge] [%s] moved stale %s VM '%s' to 'completed' (age: %.0fs)", name,
                     queue, vm, age)
            if queue == "pending":
                self._dead_letter("pending", vm, "Purge",
                                  f"Stale pending VM (age: {age:.0f}s > max: {limit:.0f}s)",
                                  count=False)
                self._ondemand_lost(vm, f"purged: pending for {age:.0f}s")
        self._forget_caches(vm)
        return True
