"""The provider's eyes on vCenter: every task in flight and every pool folder, through one
property collector on one session of its own.

:class:`VcenterWatch` keeps, on a session that is not one of the pool's, a ``ListView`` of the
tasks being waited for with a property filter over it, a property filter per pool folder
(its VMs and their names), and one thread that waits in ``WaitForUpdatesEx`` for any of them
to change. A task waiter calls :meth:`VcenterWatch.follow` and reads what vCenter says of its
task from the :class:`~vmpooler.providers.vsphere.tasks.Following` it gets back; a pool's
listing reads the folder's :attr:`VcenterWatch.members`. Nobody polls.

vCenter calls: following a task costs one ``ModifyListView`` (it is added to the view; its
removal rides along with a later addition); watching a folder costs one ``CreateFilter``,
once. The ``WaitForUpdatesEx`` calls are shared by all: one per batch of changes vCenter
reports (a task queued, running or ended; a VM made or destroyed), and one every
``max_wait`` seconds when nothing changes. So the calls per task do not grow with the tasks in
flight, and listing a watched pool costs none. Logging in again and re-creating the view
and filter cost three more calls each time the watch's session is lost (folders are then
listed directly again, and watched afresh).

Tasks vCenter no longer knows (it restarted, or forgot them) are reported as ``None``:
:class:`~vmpooler.providers.errors.TaskLostError` territory for the waiter. When the watch
cannot reach vCenter ``failures`` times in a row (pausing 1, 2, 4, 5 s between tries), every
follower gets the last error; the watch keeps trying for later followers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pyVmomi import vim, vmodl

from vmpooler.providers.errors import ProviderError, TransientProviderError
from vmpooler.providers.vsphere.faults import translate
from vmpooler.providers.vsphere.members import VM_PATHS, FolderMembers
from vmpooler.providers.vsphere.sessions import Session
from vmpooler.providers.vsphere.tasks import FIELDS, Following, TaskSeen

__all__ = ["VcenterWatch"]

log = logging.getLogger(__name__)

_PC = vmodl.query.PropertyCollector
_PAUSES = (0.0, 1.0, 2.0, 4.0, 5.0)


class VcenterWatch:
    """Watches tasks and pool folders for one provider; see the module docstring.
    Thread-safe.

    ``open_session`` logs in a session the watch keeps for itself.
    """

    def __init__(self, name: str, open_session: Callable[[], Session], *,
                 server: str = "", username: str = "", max_wait: int = 10,
                 failures: int = 3) -> None:
        self.name = name
        self._open_session = open_session
        self._server = server
        self._username = username
        self.max_wait = max_wait
        self.failures_allowed = failures
        self._lock = threading.Lock()  # the state below
        self._view_lock = threading.RLock()  # calls that create or change the view
        self._wake = threading.Condition(self._lock)
        self._followers: dict[str, list[Following]] = {}
        self._to_add: set[str] = set()
        self._to_remove: set[str] = set()
        self._props: dict[str, dict[str, Any]] = {}
        self._session: Session | None = None
        self._view: Any = None
        self._version = ""
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stopped = threading.Event()
        self._changes = 0  # follows and unfollows so far
        self._all_ended_at = -1  # the value of _changes when every task followed had ended
        self.members = FolderMembers()
        """The VMs of the watched pool folders (see :meth:`watch_folder`)."""

    # -- followers ------------------------------------------------------------------------------
    def follow(self, moid: str) -> Following:
        """Start following task ``moid``: what vCenter says of it goes to the result."""
        following = Following(moid, self.unfollow)
        with self._lock:
            if self._closed:
                raise TransientProviderError("the provider is closed")
            self._followers.setdefault(moid, []).append(following)
            self._to_remove.discard(moid)
            self._to_add.add(moid)
            self._changes += 1
            self._start_thread()
            self._wake.notify_all()
        self._flush()  # at once: the watch's wait in progress sees it
        return following

    def _start_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"{self.name}-watch")
            self._thread.start()

    # -- folders --------------------------------------------------------------------------------
    def watch_folder(self, pool: str, folder: str) -> str:
        """Watch the VMs of folder ``folder`` (an id) for ``pool``: one ``CreateFilter`` on
        the watch's session (logging it in first if needed), and the wait in progress
        cancelled (one call) so that the next one, from version "", answers the folder's
        complete state: :attr:`members` then knows the pool (see
        :meth:`FolderMembers.wait_synced`). Returns the filter's id. Raises what vCenter
        raises (the caller lists directly meanwhile)."""
        with self._view_lock:
            self._ensure_view()
            with self._lock:
                session = self._session
            if session is None:
                raise TransientProviderError("the vCenter watch has no session")
            traversal = _PC.TraversalSpec(name="vms", type=vim.Folder, path="childEntity",
                                          skip=False)
            made = session.content.propertyCollector.CreateFilter(_PC.FilterSpec(
                objectSet=[_PC.ObjectSpec(obj=session.ref(vim.Folder, folder), skip=True,
                                          selectSet=[traversal])],
                propSet=[_PC.PropertySpec(type=vim.VirtualMachine, pathSet=list(VM_PATHS))],
            ), partialUpdates=False)
            self.members.filtering(made._moId, pool)
            with self._lock:
                self._version = ""  # the next wait answers every filter's complete state
                self._start_thread()
                self._wake.notify_all()
            self._cancel_wait(session)  # the next wait starts from version ""
        return str(made._moId)

    def unfollow(self, following: Following) -> None:
        """Stop following (the task leaves the view with the next change to it)."""
        with self._lock:
            followers = self._followers.get(following.moid, [])
            if following in followers:
                followers.remove(following)
            self._changes += 1
            self._wake.notify_all()
            if not followers:
                self._followers.pop(following.moid, None)
                self._props.pop(following.moid, None)
                if following.moid in self._to_add:
                    self._to_add.discard(following.moid)
                else:
                    self._to_remove.add(following.moid)

    def followed(self) -> int:
        """How many tasks are followed now (for tests and status)."""
        with self._lock:
            return len(self._followers)

    def close(self) -> None:
        """Stop the watch: its thread ends and its session is logged out."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        self._stopped.set()
        with self._view_lock:
            session = self._session
        if session is not None:
            self._cancel_wait(session)  # now, not up to max_wait later
        self._drop()

    def _cancel_wait(self, session: Session) -> None:
        """End the wait in progress on ``session`` (one call; a failure is only logged)."""
        try:
            session.content.propertyCollector.CancelWaitForUpdates()
        except Exception:
            log.debug("[%s] vCenter watch wait not cancelled", self.name, exc_info=True)

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while True:
            with self._lock:
                # Nothing to wait for: no task followed, or every one ended (its waiter is
                # about to leave): no wait stays open on vCenter meanwhile.
                self._wake.wait_for(lambda: self._closed or self.members.any_watched() or (
                    bool(self._followers) and self._changes != self._all_ended_at))
                if self._closed:
                    return
            try:
                self._ensure_view()
                self._flush(raising=True)
                update, unseeded = self._wait()
                failures = 0
            except vmodl.fault.RequestCanceled:
                continue  # a folder to watch: wait again, from version ""
            except Exception as exc:
                if self._closed:
                    return
                failures += 1
                self._failed(exc, failures)
                self._stopped.wait(_PAUSES[min(failures - 1, len(_PAUSES) - 1)])
                continue
            if update is not None:
                self._apply(update, unseeded)

    def _failed(self, exc: Exception, failures: int) -> None:
        self._drop()
        if not isinstance(exc, ProviderError | vmodl.MethodFault | OSError):
            log.warning("[%s] vCenter watch failed", self.name, exc_info=True)
        error = translate(exc, server=self._server, username=self._username)
        if failures < self.failures_allowed:
            log.debug("[%s] vCenter watch: %s; trying again", self.name, error)
            return
        log.info("[%s] vCenter watch cannot reach vCenter (%s): %d waits end", self.name, error,
                 self.followed())
        with self._lock:
            followers = [f for group in self._followers.values() for f in group]
        for following in followers:
            following.fail(error)

    def _ensure_view(self) -> None:
        with self._view_lock:
            if self._view is not None:
                return
            session = self._open_session()
            try:
                content = session.content
                view = content.viewManager.CreateListView(obj=[])
                traversal = _PC.TraversalSpec(name="tasks", type=vim.view.ListView, path="view",
                                              skip=False)
                content.propertyCollector.CreateFilter(_PC.FilterSpec(
                    objectSet=[_PC.ObjectSpec(obj=view, skip=True, selectSet=[traversal])],
                    propSet=[_PC.PropertySpec(type=vim.Task, pathSet=["info"])],
                ), partialUpdates=False)
            except BaseException:
                session.close()
                raise
            with self._lock:
                self._session, self._view, self._version = session, view, ""
                self._to_add = set(self._followers)
                self._to_remove.clear()
                self._props.clear()

    def _drop(self) -> None:
        with self._view_lock:
            session, self._session, self._view = self._session, None, None
            self.members.forget()
        if session is not None:
            session.close()  # its view and filter end with it

    def _flush(self, *, raising: bool = False) -> None:
        """Send the pending additions and removals to the view, when there is one."""
        with self._view_lock:
            with self._lock:
                session, view = self._session, self._view
                add, remove = sorted(self._to_add), sorted(self._to_remove)
                if view is None or session is None or not (add or remove):
                    return
                self._to_add.clear()
                self._to_remove.clear()
            try:
                lost = self._modify(session, view, add, remove)
            except Exception:
                with self._lock:  # tried again with the next change or by the thread
                    self._to_add.update(m for m in add if m in self._followers)
                    self._to_remove.update(m for m in remove if m not in self._followers)
                if raising:
                    raise
                log.debug("[%s] task view not changed now", self.name, exc_info=True)
                return
        for moid in lost:
            self._publish(moid, None)

    @staticmethod
    def _modify(session: Session, view: Any, add: list[str], remove: list[str]) -> list[str]:
        """``ModifyListView``; the tasks of ``add`` vCenter does not know (returned by
        vCenter, or named by the simulator's ManagedObjectNotFound one at a time)."""
        lost: list[str] = []
        while True:
            try:
                refused = view.ModifyListView(
                    add=[session.ref(vim.Task, m) for m in add],
                    remove=[session.ref(vim.Task, m) for m in remove]) or ()
                return lost + [ref._moId for ref in refused]
            except vmodl.fault.ManagedObjectNotFound as exc:
                gone = getattr(exc.obj, "_moId", None)
                if gone not in add:
                    raise  # the view itself: the session's objects are gone
                add = [m for m in add if m != gone]
                remove = []
                lost.append(gone)

    def _wait(self) -> tuple[Any, set[str]]:
        """One ``WaitForUpdatesEx``: its update (None when nothing changed) and, when it
        answered from version "" (every filter's complete state), the folder filters it
        seeds (else an empty set)."""
        with self._lock:
            session, version = self._session, self._version
        if session is None:
            raise TransientProviderError("the vCenter watch has no session")
        unseeded = self.members.unseeded() if version == "" else set()
        update = session.content.propertyCollector.WaitForUpdatesEx(
            version=version, options=_PC.WaitOptions(maxWaitSeconds=self.max_wait))
        if update is not None:
            with self._lock:
                if self._session is session and self._version == version:
                    self._version = update.version  # (else a folder asked for "" again)
        return update, (unseeded if update is not None else set())

    def _apply(self, update: Any, unseeded: set[str]) -> None:
        touched: dict[str, TaskSeen | None] = {}
        members = self.members
        complete: dict[str, dict[str, dict[str, Any]]] = {f: {} for f in unseeded}
        with self._lock:
            for filter_update in update.filterSet or ():
                filter_id = filter_update.filter._moId
                if members.is_filter(filter_id):
                    for change in filter_update.objectSet or ():
                        props = {p.name: (None if p.op in ("remove", "indirectRemove")
                                          else p.val) for p in change.changeSet or ()}
                        if filter_id in complete:
                            if change.kind != "leave":
                                complete[filter_id].setdefault(
                                    change.obj._moId, {}).update(props)
                        else:
                            members.change(filter_id, str(change.kind), change.obj._moId,
                                           props)
                    continue
                for change in filter_update.objectSet or ():
                    moid = change.obj._moId
                    if moid not in self._followers:
                        continue
                    if change.kind == "leave":
                        self._props.pop(moid, None)
                        touched[moid] = None
                        continue
                    props = self._props.setdefault(moid, {})
                    for prop in change.changeSet or ():
                        if prop.name == "info" and prop.val is not None:
                            props.update({f: getattr(prop.val, f, None) for f in FIELDS})
                        elif prop.name.startswith("info.") and prop.name[5:] in FIELDS:
                            props[prop.name[5:]] = (None if prop.op in ("remove",
                                                    "indirectRemove") else prop.val)
                    if props.get("state"):
                        touched[moid] = TaskSeen(**props)
            if all(self._props.get(moid, {}).get("state") in ("success", "error")
                   for moid in self._followers):
                self._all_ended_at = self._changes
        for filter_id, found in complete.items():
            members.seed(filter_id, found)
        for moid, seen in touched.items():
            self._publish(moid, seen)

    def _publish(self, moid: str, seen: TaskSeen | None) -> None:
        with self._lock:
            followers = list(self._followers.get(moid, ()))
        for following in followers:
            following.see(seen)

