"""Telling an actor wherever it runs: :class:`Router`.

Several managers may share one Redis; a pool is served by the manager holding its lease,
an on-demand request by the one holding the request's lease. An actor that must reach
another tells an :class:`~vmpooler.actors.messages.address.Address` through its router, which
delivers to the actor registered here when it is alive, and otherwise relays the message
(:class:`~vmpooler.actors.cluster.remote.Remote`) to the manager holding the address's lease.

What a caller may rely on:

* **Never blocks, never raises.** Every method answers at once: True when the message was
  told to a live actor here or handed to the relay, False when it went nowhere (nobody
  runs the address, nobody holds its lease, a Redis error: logged by the relay). Delivery
  through the relay is at most once.
* **One hop.** A message that came from another manager (an actor's ``handle_relayed``
  gets its ``hops``) is passed on with that count; the router relays no message that
  already hopped once (False, nothing sent), so two managers that each think the other
  holds a lease never pass a message back and forth. Telling an actor of this manager is
  never refused.
* **Addresses on the wire are the registry names** (``Address.name``), as before.

A router is a view over this manager's actor directory and its ``Remote``: cheap to build,
safe to share between threads.
"""

from __future__ import annotations

import logging
from typing import Any

from vmpooler.actors.cluster.remote import LocalOnly, Remote
from vmpooler.actors.messages.address import Address
from vmpooler.actors.runtime.supervisor import ActorDirectory

__all__ = ["MAX_HOPS", "Router"]

log = logging.getLogger(__name__)

MAX_HOPS = 1
"""How many times a message may be relayed between managers."""


class Router:
    """This manager's way to its own actors (``directory``) and, through ``remote``, to
    those of the other managers. ``hops`` arguments: how many times the message being
    passed on was already relayed (0: it starts here)."""

    def __init__(self, directory: ActorDirectory, remote: Remote | None = None) -> None:
        self.directory = directory
        self.remote: Remote = remote or LocalOnly()

    @property
    def member(self) -> str:
        """This manager's id."""
        return self.remote.member

    def tell(self, address: Address, message: Any, *, hops: int = 0) -> bool:
        """Tell the actor at ``address`` here if it runs here, else the one in the manager
        holding the address's lease."""
        return self.here(address, message) or self.to_holder(address, message, hops=hops)

    def here(self, address: Address, message: Any) -> bool:
        """Tell the actor at ``address`` in this manager only."""
        return self.directory.tell(address.name, message)

    def to_holder(self, address: Address, message: Any, *, hops: int = 0) -> bool:
        """Tell the actor at ``address`` in the manager holding its lease; False when the
        address has no lease, nobody or this manager holds it, or the message already
        hopped."""
        lease = address.lease
        if lease is None or not self._may_relay(address, message, hops):
            return False
        return self.remote.to_lease_holder(lease.kind, lease.thing, address.name, message,
                                           hops=hops + 1)

    def to_manager(self, manager: str, address: Address, message: Any, *,
                   hops: int = 0) -> bool:
        """Tell the actor at ``address`` in the other manager ``manager``; False when
        ``manager`` is '' or this one, or the message already hopped."""
        if not self._may_relay(address, message, hops):
            return False
        return self.remote.to_manager(manager, address.name, message, hops=hops + 1)

    def everywhere(self, address: Address, message: Any) -> None:
        """Tell the actor at ``address`` here and in every other live manager."""
        self.here(address, message)
        self.remote.to_others(address.name, message, hops=1)

    @staticmethod
    def _may_relay(address: Address, message: Any, hops: int) -> bool:
        if hops < MAX_HOPS:
            return True
        log.debug("[relay] %s for '%s' not relayed again: it hopped %d time(s)",
                  type(message).__name__, address.name, hops)
        return False
