"""A pool actor's provider calls: at most one outstanding call per VM.

The pool actor sends its provider work as :class:`~vmpooler.actors.messages.CallProvider`
messages to the pool's provider actor, which answers with ``ProviderCallFinished``
addressed to the pool actor. :class:`ProviderCalls` remembers which VM has a call in flight
(and since when), so no per-VM step of a cycle asks twice, and forgets a call whose answer
is overdue. It is used only on the pool actor's thread.
"""

from __future__ import annotations

import logging
from collections.abc import KeysView
from typing import Any

import pykka

from vmpooler.actors.messages import CallProvider, ProviderFailure, ProviderOp, ProviderRequest
from vmpooler.actors.messages.address import Address
from vmpooler.actors.runtime.clock import Clock
from vmpooler.actors.runtime.supervisor import ActorDirectory

__all__ = ["ProviderCalls", "log_failure"]

log = logging.getLogger(__name__)


def log_failure(failure: ProviderFailure, message: str, *args: object,
                level: int = logging.ERROR) -> None:
    """Log a failed call, at debug level when the circuit breaker refused it: the provider
    actor logs the breaker's state changes once, instead of one line per call."""
    log.log(logging.DEBUG if failure.circuit_open else level, message, *args)


class ProviderCalls:
    """The calls one pool actor has in flight, by VM, and the way to send more.

    ``lost_after`` is how many seconds (monotonic) an answer may be overdue before it is
    presumed lost (its provider actor crashed): :meth:`expire_lost` then forgets the call, so
    the next cycle asks again.
    """

    def __init__(self, *, pool: str, provider: str, directory: ActorDirectory, clock: Clock,
                 reply_to: pykka.ActorRef[Any], lost_after: float) -> None:
        self.pool = pool
        self.provider_name = provider
        self.directory = directory
        self.clock = clock
        self.reply_to = reply_to
        self.lost_after = lost_after
        self._busy: dict[str, ProviderOp] = {}  # vm -> the op whose answer is awaited
        self._since: dict[str, float] = {}  # vm -> monotonic time the call was sent
        self._ids = 0

    @property
    def busy(self) -> KeysView[str]:
        """The VMs with a call in flight (a live view)."""
        return self._busy.keys()

    def provider(self) -> pykka.ActorRef[Any] | None:
        """The pool's provider actor, looked up now (None while it is not running)."""
        return self.directory.get(Address.provider(self.provider_name).name)

    def call(self, request: ProviderRequest, vm: str | None, *,
             traceparent: str = "") -> CallProvider:
        """A new call message answered to the pool actor (each with its own ``call_id``);
        nothing is sent or recorded."""
        self._ids += 1
        return CallProvider(request=request, pool=self.pool, vm=vm, reply_to=self.reply_to,
                            call_id=self._ids, traceparent=traceparent)

    def send(self, request: ProviderRequest, vm: str, *, traceparent: str = "") -> bool:
        """Send a provider call for ``vm`` unless one is outstanding. True if sent.
        ``traceparent``: the span the provider's span of the call hangs under."""
        if vm in self._busy:
            return False
        provider = self.provider()
        if provider is None:
            return False
        self._busy[vm] = request.op
        self._since[vm] = self.clock.monotonic()
        try:
            provider.tell(self.call(request, vm, traceparent=traceparent))
        except pykka.ActorDeadError:
            del self._busy[vm]
            del self._since[vm]
            return False
        return True

    def finished(self, vm: str) -> None:
        """The call for ``vm`` was answered (nothing happens if none was recorded)."""
        self._busy.pop(vm, None)
        self._since.pop(vm, None)

    def expire_lost(self, mono: float) -> None:
        """Forget provider calls whose answer is overdue: their provider actor crashed, and
        the restarted one will answer the next call for the same VM."""
        lost = [vm for vm, since in self._since.items() if mono - since > self.lost_after]
        for vm in lost:
            log.warning("[!] [%s] no answer to %s of '%s'; it will be retried", self.pool,
                        self._busy[vm].value, vm)
            self._busy.pop(vm, None)
            self._since.pop(vm, None)
