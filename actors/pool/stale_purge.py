"""The pool actor's part in the auto-purge of stale queue entries (reference §4.11).

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
Used only on the pool actor's thread.
"""

from __future__ import annotations

import contextlib
import logging

import pykka

from vmpooler.actors.messages import PoolPurged, PurgeStaleVms
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.pool.dead_letters import DeadLetters
from vmpooler.actors.pool.request_vms import OnDemandVms
from vmpooler.actors.pool.vm_cache import VmCache
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.queues import Queue

__all__ = ["StalePurge"]

log = logging.getLogger(__name__)


class StalePurge:
    """One pool's answer to :class:`PurgeStaleVms`."""

    def __init__(self, policy: PoolSettings, io: PoolIO, *, vms: VmCache, ondemand: OnDemandVms,
                 dead_letters: DeadLetters) -> None:
        self.policy, self.io, self.vms = policy, io, vms
        self.ondemand = ondemand
        self.dead_letters = dead_letters
        self.counts: dict[str, int] = {}

    def purge(self, msg: PurgeStaleVms) -> None:
        """Move (or, in a dry run, count) the pool's stale VMs; the caller then sends
        :meth:`answer` (also when this raised: a Redis error or a lost lease stop the round
        with what was done)."""
        s, name, now = self.policy.settings, self.policy.name, self.io.clock.now()
        counts = self.counts = {"pending": 0, "ready": 0, "completed": 0}
        rules = ((Queue.PENDING, ("clone",), s.max_pending_age),
                 (Queue.READY, ("ready",), s.max_ready_age),
                 (Queue.COMPLETED, ("destroy", "checkout"), s.max_completed_age))
        for queue, stamps, limit in rules:
            vms = sorted(self.io.store.members(name, queue))
            for vm, values in self.io.store.vm_fields(vms, list(stamps)).items():
                stamp = next((timefmt.parse_epoch(v) for v in values if v), None)
                if stamp is None or now - stamp <= limit:
                    continue
                age = now - stamp
                if msg.dry_run:
                    counts[queue] += 1
                    log.info("[*] [purge][dry-run] [%s] would purge stale %s VM '%s' (age: %.0fs, "
                             "max: %.0fs)", name, queue, vm, age, limit)
                elif self._purge_one(queue, vm, age, limit):
                    counts[queue] += 1
                    self.io.metrics.increment(f"vmpooler_purge.{queue}.count", tags={"pool": name})

    def answer(self, msg: PurgeStaleVms) -> None:
        """Answer ``PoolPurged`` with what :meth:`purge` did this round (nothing, when this
        manager does not own the pool: its owner's housekeeper purges it)."""
        counts, self.counts = self.counts, {}
        with contextlib.suppress(pykka.ActorDeadError):
            msg.reply_to.tell(PoolPurged(msg.round, self.policy.name,
                                         pending=counts.get("pending", 0),
                                         ready=counts.get("ready", 0),
                                         completed=counts.get("completed", 0)))

    def _purge_one(self, queue: str, vm: str, age: float, limit: float) -> bool:
        name = self.policy.name
        if queue == "completed":
            if not self.io.upkeep_store.purge_completed(name, vm, ttl=self.policy.data_ttl):
                return False
            log.info("[!] [purge] [%s] removed stale completed VM '%s' (age: %.0fs)", name, vm,
                     age)
        else:
            if not self.io.store.retire(name, vm, queue):
                return False
            self.io.lost("purged")
            log.info("[!] [purge] [%s] moved stale %s VM '%s' to 'completed' (age: %.0fs)", name,
                     queue, vm, age)
            if queue == "pending":
                self.dead_letters.add("pending", vm, "Purge",
                                      f"Stale pending VM (age: {age:.0f}s > max: {limit:.0f}s)",
                                      count=False)
                self.ondemand.failed(vm, f"purged: pending for {age:.0f}s")
        self.vms.forget(vm)
        return True
