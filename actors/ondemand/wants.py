"""``Wants``: what one request asks of the on-demand manager (clone slots, one
:class:`WantRequestVms` per ask) and the mirror of its queued clones in
``vmpooler__odcreate__task``. Used by the request's actor only, inside its mailbox."""

from __future__ import annotations

from collections.abc import Callable

from vmpooler.actors.messages import WantRequestVms
from vmpooler.actors.ondemand.ledger import EntryKey, Ledger, TaskMirror
from vmpooler.actors.storage.request_store import Entry, RequestOrigin, RequestStore

__all__ = ["Wants"]


class Wants:
    """The asks of request ``request_id``, told to its manager through ``tell`` (which never
    raises: a manager being restarted drops the message, and the request sends its wants
    again when told :class:`ResendWants`).

    ``origin`` (who asked, how urgently, with what share) is set by the claim; until then a
    request counts as a user of its own. ``tasks`` mirrors the queued clones
    (:class:`TaskMirror`); its ``score`` is the time they were queued."""

    def __init__(self, request_id: str, store: RequestStore,
                 tell: Callable[[object], None]) -> None:
        self.request_id = request_id
        self.tell = tell
        self.tasks = TaskMirror(store, request_id)
        self.origin: RequestOrigin | None = None  # who asked (from the claim)
        self.traceparent = ""  # the request actor's span: its asks carry it

    def ask_for_missing(self, vms: Ledger) -> None:
        """Ask for the VMs neither delivered, on their way nor queued (they count as queued
        from now on); nothing is told when none is missing."""
        wants = vms.take_missing()
        if wants:
            self.tell(self.message(tuple(wants)))

    def resend(self, vms: Ledger) -> None:
        """The granter changed: everything still queued is sent again, replacing what the
        granter had (none while in grace: nothing is queued then)."""
        queued = vms.queued_counts()
        self.tell(self.message(
            tuple(key for key, n in queued.items() for _ in range(n)), whole=True))

    def withdraw(self, vms: Ledger) -> None:
        """Forget every queued clone and tell the manager so (an empty ask)."""
        vms.queued.clear()
        self.tell(WantRequestVms(self.request_id, ()))

    def message(self, wants: tuple[EntryKey, ...], *, whole: bool = False,
                ) -> WantRequestVms:
        """The ask for ``wants`` (one key per VM), carrying the request's origin; ``whole``:
        it replaces everything asked before."""
        origin = self.origin or RequestOrigin(self.request_id)
        user = "" if origin.user == self.request_id else origin.user  # a user of its own
        return WantRequestVms(self.request_id, wants, user, origin.priority, origin.share,
                              whole=whole, traceparent=self.traceparent)

    def sync(self, vms: Ledger, *, finished: bool, stale: tuple[Entry, ...] = ()) -> None:
        """Mirror the queued clones in ``vmpooler__odcreate__task`` (none once ``finished``);
        ``stale`` entries' members of any count are replaced. Never raises
        (:meth:`TaskMirror.sync`)."""
        self.tasks.sync({} if finished else vms.queued_counts(), stale)
