"""Hands freed clone slots to the pools waiting for one, first come first served.

The clone limit (``task_limit``) is a counter in Redis that every pool competes for. A pool
that finds no free slot registers here (:class:`WantCloneSlot`) instead of waiting for its
next timed cycle; a pool whose clone finished and that needs no more VMs reports the freed
slot (:class:`CloneSlotFreed`), and the broker wakes the longest-waiting pool with
:class:`RefillPool`. Slots freed by another process are picked up by the pools' periodic
cycles as before.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import pykka

from vmpooler.actors.messages import CloneSlotFreed, RefillPool, WantCloneSlot
from vmpooler.actors.messages.address import Address
from vmpooler.actors.runtime.supervisor import ActorDirectory, SupervisedActor

__all__ = ["SlotBroker"]

log = logging.getLogger(__name__)


class SlotBroker(SupervisedActor):
    """FIFO of pools waiting for a clone slot. Keeps no state worth persisting: after a
    restart, waiting pools find slots through their periodic cycles."""

    def __init__(self, *, directory: ActorDirectory,
                 supervisor: pykka.ActorRef[Any] | None = None) -> None:
        super().__init__(name=Address.slot_broker().name, supervisor=supervisor)
        self.directory = directory
        self.waiting: OrderedDict[str, None] = OrderedDict()

    def handle(self, message: object) -> None:
        match message:
            case WantCloneSlot(pool=pool):
                self.waiting.setdefault(pool, None)
            case CloneSlotFreed(count=count):
                self._wake(count)

    def _wake(self, count: int) -> None:
        for _ in range(count):
            while self.waiting:
                pool, _ = self.waiting.popitem(last=False)
                if self.directory.tell(Address.pool(pool).name, RefillPool(pool)):
                    break
