"""Disk, snapshot and snapshot-revert tasks (reference §4.9).

The API queues tasks in Redis sets (``vmpooler__tasks__disk`` …). This actor takes them on
a timer — and at once when told :class:`~vmpooler.actors.messages.TasksQueued` — resolves
each VM's pool from its hash, sends the work to that pool's provider actor and records the
result in the VM's hash. Unlike vmpooler (one task of each kind per 5 s) it takes every
queued task each round, up to ``batch`` of each kind.
"""

from __future__ import annotations

import logging
from typing import Any

import pykka
import redis

from vmpooler.actors.messages import (
    CallProvider,
    CreateDisk,
    CreateSnapshot,
    ProviderCallFinished,
    ProviderOp,
    RevertSnapshot,
    RunPoolCycle,
    TasksQueued,
)
from vmpooler.actors.messages.address import Address
from vmpooler.actors.runtime.clock import Clock, Scheduler
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.redis_errors import redis_failure
from vmpooler.actors.storage.store import Store

__all__ = ["TaskActor"]

log = logging.getLogger(__name__)

_KINDS = {
    "disk": ProviderOp.CREATE_DISK,
    "snapshot": ProviderOp.CREATE_SNAPSHOT,
    "snapshot-revert": ProviderOp.REVERT_SNAPSHOT,
}


class TaskActor(SupervisedActor):
    """Runs the disk and snapshot task queues for every pool."""

    def __init__(
        self,
        *,
        store: Store,
        directory: ActorDirectory,
        pool_providers: dict[str, str],
        clock: Clock,
        scheduler: Scheduler,
        interval: float = 5.0,
        batch: int = 100,
        supervisor: pykka.ActorRef[Any] | None = None,
    ) -> None:
        super().__init__(name=Address.tasks().name, supervisor=supervisor)
        self.store = store
        self.directory = directory
        self.pool_providers = pool_providers
        self.clock = clock
        self.scheduler = scheduler
        self.interval = interval
        self.batch = batch
        self.args: dict[int, tuple[str, Any, str]] = {}  # call id -> kind, value, task
        self.call_ids = 0
        self.retry_after: set[str] = set()  # VMs with a task put back: look again when one ends

    def setup(self) -> None:
        self.actor_ref.tell(RunPoolCycle())

    def handle(self, message: object) -> None:
        match message:
            case RunPoolCycle():
                self._round()
                self.scheduler.tell_later(self.interval, self.actor_ref, RunPoolCycle())
            case TasksQueued():
                self._round()
            case ProviderCallFinished():
                self._finished(message)

    def _round(self) -> None:
        try:
            for kind, op in _KINDS.items():
                for _ in range(self.batch):
                    task = self.store.pop_task(kind)
                    if task is None:
                        break
                    self._dispatch(kind, op, task)
        except redis.RedisError as exc:
            log.error("[!] [tasks] %s: %s", redis_failure(exc), exc)

    def _dispatch(self, kind: str, op: ProviderOp, task: str) -> None:
        vm, _, arg = task.partition(":")
        pool = self.store.vm_field(vm, "template")
        provider_name = self.pool_providers.get(pool or "")
        provider = (self.directory.get(Address.provider(provider_name).name)
                    if provider_name else None)
        if provider is None:
            log.error("[!] [tasks] %s task '%s': VM has no known pool or provider", kind, task)
            return
        request: CreateDisk | CreateSnapshot | RevertSnapshot
        value: int | str = arg
        if op is ProviderOp.CREATE_DISK:
            try:
                value = int(arg)
            except ValueError:
                log.error("[!] [tasks] disk task '%s' has a bad size", task)
                return
            request = CreateDisk(value)
        elif op is ProviderOp.CREATE_SNAPSHOT:
            request = CreateSnapshot(arg)
        else:
            request = RevertSnapshot(arg)
        self.call_ids += 1
        self.args[self.call_ids] = (kind, value, task)
        provider.tell(CallProvider(request=request, pool=pool or "", vm=vm,
                                   reply_to=self.actor_ref, call_id=self.call_ids))
        log.info("[*] [disk_manager] '%s' %s task started (%s)", vm, kind, arg)

    def _finished(self, msg: ProviderCallFinished) -> None:
        vm = msg.vm or ""
        try:
            self._record(msg)
        finally:
            if vm in self.retry_after and not (msg.failure is not None and msg.failure.busy):
                self.retry_after.discard(vm)
                self._round()  # a task put back for this VM can run now

    def _record(self, msg: ProviderCallFinished) -> None:
        kind, value, task = self.args.pop(msg.call_id, ("?", None, ""))
        vm = msg.vm or ""
        if msg.failure is not None and msg.failure.busy and task:
            # Another call on this VM (say its disk task) is still running: nothing was
            # attempted. Put the task back; it runs when a call on the VM ends, or next round.
            try:
                self.store.push_task(kind, task)
            except redis.RedisError as exc:
                log.error("[!] [tasks] could not queue %s of '%s' again: %s", kind, vm, exc)
                return
            self.retry_after.add(vm)
            log.info("[*] [tasks] %s of '%s' waits for another call on the VM", kind, vm)
            return
        if msg.failure is not None:
            log.error("[!] [tasks] %s of '%s' failed: %s", kind, vm, msg.failure.message)
            return
        if not msg.result:
            log.error("[!] [tasks] %s of '%s' was refused by the provider", kind, vm)
            return
        try:
            if msg.op is ProviderOp.CREATE_DISK:
                self.store.append_disk(vm, int(value))
            elif msg.op is ProviderOp.CREATE_SNAPSHOT:
                self.store.set_vm_fields(
                    vm, {f"snapshot:{value}": timefmt.format_epoch(self.clock.now())})
        except redis.RedisError as exc:
            log.error("[!] [tasks] could not record %s of '%s': %s", kind, vm, exc)
            return
        log.info("[+] [tasks] %s of '%s' done in %.2f seconds", kind, vm, msg.seconds)
