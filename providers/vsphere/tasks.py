"""Following a provider's vCenter tasks: every task in flight, one property collector, one
session of its own.

:class:`TaskWatch` keeps a ``ListView`` of the tasks being waited for and a property filter
over it on a session of its own (never one of the pool's), and one thread that waits in
``WaitForUpdatesEx`` for any of them to change. A waiter calls :meth:`TaskWatch.follow` and
reads what vCenter says of its task from the :class:`Following` it gets back; nobody polls.

vCenter calls: following a task costs one ``ModifyListView`` (it is added to the view; its
removal rides along with a later addition), and the ``WaitForUpdatesEx`` calls are shared by
all tasks in flight: one per batch of changes vCenter reports (a state change: queued,
running, ended), and one every ``max_wait`` seconds when nothing changes. So the calls per
task do not grow with the number of tasks in flight. Logging in again and re-creating the
view and filter cost three more calls each time the watch's session is lost.

Tasks vCenter no longer knows (it restarted, or forgot them) are reported as ``None``:
:class:`~vmpooler.providers.errors.TaskLostError` territory for the waiter. When the watch
cannot reach vCenter ``failures`` times in a row (pausing 1, 2, 4, 5 s between tries), every
follower gets the last error; the watch keeps trying for later followers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyVmomi import vim, vmodl

from vmpooler.providers.errors import ProviderError, TransientProviderError
from vmpooler.providers.vsphere.connection import Session
from vmpooler.providers.vsphere.faults import translate

__all__ = ["NOTHING", "Following", "TaskSeen", "TaskWatch"]

log = logging.getLogger(__name__)

_PC = vmodl.query.PropertyCollector
_PATHS = {
    "info.state": "state", "info.error": "error", "info.result": "result",
    "info.queueTime": "queueTime", "info.startTime": "startTime",
    "info.completeTime": "completeTime", "info.descriptionId": "descriptionId",
}
_PAUSES = (0.0, 1.0, 2.0, 4.0, 5.0)
NOTHING: Any = object()
"""What :meth:`Following.next` returns when nothing new was seen within its timeout."""


@dataclass(frozen=True, slots=True)
class TaskSeen:
    """What vCenter said of one task, named as ``TaskInfo`` names it: ``state`` is
    ``queued``, ``running``, ``success`` or ``error``; times are vCenter's datetimes."""

    state: str
    error: Any = None
    result: Any = None
    queueTime: Any = None  # noqa: N815 (TaskInfo's names: a waiter reads either)
    startTime: Any = None  # noqa: N815
    completeTime: Any = None  # noqa: N815
    descriptionId: str | None = None  # noqa: N815


class Following:
    """One task followed by a :class:`TaskWatch`; use as a context manager (leaving stops
    following). Thread-safe: the watch writes, the waiter reads."""

    def __init__(self, moid: str, watch: TaskWatch) -> None:
        self.moid = moid
        self._watch = watch
        self._cond = threading.Condition()
        self._latest: Any = NOTHING
        self._error: ProviderError | None = None

    def __enter__(self) -> Following:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._watch.unfollow(self)

    def see(self, seen: TaskSeen | None) -> None:
        """From the watch: the task as it is now (None: vCenter no longer knows it)."""
        with self._cond:
            self._latest = seen
            self._cond.notify_all()

    def fail(self, error: ProviderError) -> None:
        """From the watch: it could not reach vCenter; the next read raises ``error``."""
        with self._cond:
            self._error = error
            self._cond.notify_all()

    def next(self, timeout: float | None = None) -> Any:
        """The task as last seen since the previous read, waiting up to ``timeout`` seconds
        (None: for ever) for news: a :class:`TaskSeen`, None (vCenter no longer knows the
        task) or :data:`NOTHING` (no news in time). Raises the watch's error, if any."""
        with self._cond:
            self._cond.wait_for(lambda: self._latest is not NOTHING or self._error is not None,
                                timeout=timeout)
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            latest, self._latest = self._latest, NOTHING
            return latest


class TaskWatch:
    """Follows tasks for one provider; see the module docstring. Thread-safe.

    ``open_session`` logs in a session the watch keeps for itself; ``pause`` waits between
    failed tries (injectable for tests; it returns early when the watch is closed).
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

    # -- followers ------------------------------------------------------------------------------
    def follow(self, moid: str) -> Following:
        """Start following task ``moid``: what vCenter says of it goes to the result."""
        following = Following(moid, self)
        with self._lock:
            if self._closed:
                raise TransientProviderError("the provider is closed")
            self._followers.setdefault(moid, []).append(following)
            self._to_remove.discard(moid)
            self._to_add.add(moid)
            self._changes += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"{self.name}-tasks")
                self._thread.start()
            self._wake.notify_all()
        self._flush()  # at once: the watch's wait in progress sees it
        return following

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
            try:  # end the wait in progress now (else vCenter holds it up to max_wait)
                session.content.propertyCollector.CancelWaitForUpdates()
            except Exception:
                log.debug("[%s] task watch wait not cancelled", self.name, exc_info=True)
        self._drop()

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while True:
            with self._lock:
                # Nothing to wait for: no task followed, or every one ended (its waiter is
                # about to leave): no wait stays open on vCenter meanwhile.
                self._wake.wait_for(lambda: self._closed or (
                    bool(self._followers) and self._changes != self._all_ended_at))
                if self._closed:
                    return
            try:
                self._ensure_view()
                self._flush(raising=True)
                update = self._wait()
                failures = 0
            except Exception as exc:
                if self._closed:
                    return
                failures += 1
                self._failed(exc, failures)
                self._stopped.wait(_PAUSES[min(failures - 1, len(_PAUSES) - 1)])
                continue
            if update is not None:
                self._apply(update)

    def _failed(self, exc: Exception, failures: int) -> None:
        self._drop()
        if not isinstance(exc, ProviderError | vmodl.MethodFault | OSError):
            log.warning("[%s] task watch failed", self.name, exc_info=True)
        error = translate(exc, server=self._server, username=self._username)
        if failures < self.failures_allowed:
            log.debug("[%s] task watch: %s; trying again", self.name, error)
            return
        log.info("[%s] task watch cannot reach vCenter (%s): %d waits end", self.name, error,
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
                    propSet=[_PC.PropertySpec(type=vim.Task, pathSet=list(_PATHS))],
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

    def _wait(self) -> Any:
        with self._lock:
            session, version = self._session, self._version
        if session is None:
            raise TransientProviderError("task watch has no session")
        update = session.content.propertyCollector.WaitForUpdatesEx(
            version=version, options=_PC.WaitOptions(maxWaitSeconds=self.max_wait))
        if update is not None:
            with self._lock:
                if self._session is session:
                    self._version = update.version
        return update

    def _apply(self, update: Any) -> None:
        touched: dict[str, TaskSeen | None] = {}
        with self._lock:
            for filter_update in update.filterSet or ():
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
                        if prop.name in _PATHS:
                            props[_PATHS[prop.name]] = (None if prop.op in ("remove",
                                                        "indirectRemove") else prop.val)
                    if props.get("state"):
                        touched[moid] = TaskSeen(**props)
            if all(self._props.get(moid, {}).get("state") in ("success", "error")
                   for moid in self._followers):
                self._all_ended_at = self._changes
        for moid, seen in touched.items():
            self._publish(moid, seen)

    def _publish(self, moid: str, seen: TaskSeen | None) -> None:
        with self._lock:
            followers = list(self._followers.get(moid, ()))
        for following in followers:
            following.see(seen)

