"""On-demand requests take a pool's suspended standby VMs before they clone.

:class:`StandbyForRequests` gives a request the tier's oldest suspended VM: one script moves
it to ``pending`` as the request's VM (its ``clone`` stamp now, so its pending timeout counts
from here), then it is resumed; once resumed, its readiness check and everything after are a
cloned request VM's (``Outcomes``, ``OnDemandVms``). A resume that fails leaves the VM to the
pending check, which retires it after the pool's timeout (its request then clones). Used only
on the pool actor's thread.
"""

from __future__ import annotations

import logging

from vmpooler.actors.messages import CheckPending, ProviderCallFinished, ResumeVm
from vmpooler.actors.pool.standby import Standby

__all__ = ["StandbyForRequests"]

log = logging.getLogger(__name__)


class StandbyForRequests:
    """The request side of one pool's standby tier."""

    def __init__(self, standby: Standby) -> None:
        self.standby = standby
        self.requested: dict[str, float] = {}  # VMs given to requests, their resume in flight

    def take(self, request: tuple[str, str], request_fence: str) -> str | None:
        """Give an on-demand request (``(request_id, alias)``) the oldest suspended VM, if
        any, and resume it. Returns its name, or None (the caller clones; with
        ``request_fence`` no longer the request's lease, nothing is taken and the clone the
        caller tries is refused the same way)."""
        tier = self.standby
        if not tier.enabled:
            return None
        name = tier.policy.name
        for member in tier.resting():
            if member.state != "suspended" or member.vm in tier.calls.busy:
                continue
            taken = tier.store.take_for_request(name, member.vm, now=tier.io.clock.now(),
                                                request=request, request_fence=request_fence)
            if taken == -2:
                return None
            if taken != 1:
                continue
            tier.forget(member.vm)
            self.requested[member.vm] = tier.io.clock.monotonic()
            tier.calls.send(ResumeVm(), member.vm)
            log.info("[>] [%s] '%s' moved from 'standby' to 'pending' for request '%s'",
                     name, member.vm, request[0])
            return member.vm
        return None

    def resumed(self, msg: ProviderCallFinished) -> bool:
        """The answer to the resume of a VM given to a request (False: not one of those).
        A success sends its readiness check at once."""
        vm = msg.vm or ""
        if self.requested.pop(vm, None) is None:
            return False
        tier = self.standby
        tags = {"pool": tier.policy.name}
        if msg.failure is None and msg.result:
            tier.io.metrics.increment("standby.resume", tags={**tags, "result": "success"})
            tier.calls.send(CheckPending(), vm)
        elif msg.failure is not None and not msg.failure.circuit_open:
            tier.io.metrics.increment("standby.resume", tags={**tags, "result": "failure"})
            log.error("[!] [%s] '%s' resume for its request failed: %s: %s", tags["pool"], vm,
                      msg.failure.error_class, msg.failure.message)
        return True
