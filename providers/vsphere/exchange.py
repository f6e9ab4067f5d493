"""Exchanges with vCenter: a session borrowed per exchange, retried once, tasks awaited.

:class:`Vcenter` is what the provider's methods go through. ``call(exchange)`` runs
``exchange(session)`` on a borrowed session. An exchange that meets an expired session
logs in again and runs once more; one that meets a stale remembered object forgets the
inventory memory and runs once more; a reused session whose connection broke is replaced
(with every idle one: they share its fate) and the exchange runs once more on a fresh
session. Everything else is translated by :mod:`~vmpooler.providers.vsphere.faults`.

``task(submit)`` submits a task (never twice, even when the exchange is retried: see
``Vcenter.start``) and waits for it through the provider's
:class:`~vmpooler.providers.vsphere.watch.VcenterWatch`, *without* holding a session, so long
clones never starve short calls and nothing polls; it returns the id of the task's result.
The module's functions are the reads several operations share.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from pyVmomi import vim, vmodl

from vmpooler.providers import progress
from vmpooler.providers.errors import (
    ProviderError,
    TaskLostError,
    TransientProviderError,
    is_permanent,
)
from vmpooler.providers.vsphere import clone
from vmpooler.providers.vsphere.collector import retrieve
from vmpooler.providers.vsphere.faults import StaleReferenceError, is_connection_error, translate
from vmpooler.providers.vsphere.inventory import Inventory
from vmpooler.providers.vsphere.sessions import SessionPool, is_expired
from vmpooler.providers.vsphere.settings import VsphereSettings
from vmpooler.providers.vsphere.task_spans import trace_task
from vmpooler.providers.vsphere.tasks import NOTHING, Following
from vmpooler.providers.vsphere.vm_ready_checks import GUEST_PROPERTIES
from vmpooler.providers.vsphere.watch import VcenterWatch

__all__ = [
    "UNSEEN",
    "USER_FIELD",
    "Started",
    "Vcenter",
    "guest_of",
    "port_group",
    "snapshot_id",
    "user_field",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
TASK_TIMEOUT = 3600.0
"""Seconds a task may run (from its start, not from when vCenter queued it)."""
UNSEEN: Any = object()
"""``Started.info`` of a task started but not looked at yet: the watch will tell."""
USER_FIELD = "vmpooler_user"
"""The custom attribute ``tag_vm_user`` sets."""


class Started(NamedTuple):
    """What :meth:`Vcenter.start` did: the submitted ``task``'s id and first look at its
    ``info``; or, with ``task`` None, the ``result`` id ``adopt`` found (None: no task)."""

    task: str | None
    info: Any
    result: str | None


class _RetryError(Exception):
    """Internal: the exchange met a broken reused session; run it once more."""


class Vcenter:
    """Runs exchanges for one provider (thread-safe: each borrows its own session)."""

    def __init__(self, config: VsphereSettings, sessions: SessionPool, inventory: Inventory,
                 *, watch: VcenterWatch | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``watch`` follows the tasks (by default one on a session of its own from
        ``sessions``); ``clock`` times the tasks' runs."""
        self.config = config
        self.sessions = sessions
        self.inventory = inventory
        self.watch = watch if watch is not None else VcenterWatch(
            config.name, sessions.open_session, server=config.server,
            username=config.username)
        self._clock = clock

    def _run(self, exchange: Callable[[Any], _T], *, may_retry: bool = True) -> _T:
        s = self.config
        for attempt in (1, 2):
            with self.sessions.session() as session:
                reused = session.used
                session.used = True
                try:
                    self.inventory.sync(session)
                    return exchange(session)
                except Exception as exc:
                    if attempt == 1 and is_expired(exc):
                        log.info("[%s] vCenter session expired; logging in again", s.name)
                        self.sessions.relogin(session)
                        continue
                    if not _from_vcenter(exc):
                        raise  # a bug of ours: the core classifies it (permanent)
                    error = translate(exc, server=s.server, username=s.username)
                    if attempt == 1 and isinstance(error, StaleReferenceError):
                        self.inventory.forget()
                        continue
                    if may_retry and attempt == 1 and reused and is_connection_error(exc):
                        raise _RetryError from exc  # this session is broken: try a fresh one
                    raise error from exc
        raise TransientProviderError("vCenter call failed twice")  # pragma: no cover

    def call(self, exchange: Callable[[Any], _T]) -> _T:
        """``exchange(session)``'s result; its error as a ProviderError."""
        try:
            return self._run(exchange)
        except _RetryError:
            self.sessions.discard_idle()
            return self._run(exchange, may_retry=False)

    def settle(self, moid: str, info: Any, what: str, *,
               adopt: Callable[[Any], str | None] | None = None) -> str | None:
        """Wait for task ``moid`` (``info`` is a first look at it, :data:`UNSEEN` for none)
        and return its result's id; raise its fault, translated.

        The wait follows the task through the provider's :class:`VcenterWatch` (no session
        held, no polling) and tells the core when the task is queued by vCenter and when it
        runs (:mod:`vmpooler.providers.progress`): a queued task is not a slow one. The
        task may run for :data:`TASK_TIMEOUT` seconds from its start. When the watch cannot
        reach vCenter several times in a row, the wait ends with its error.

        A task vCenter no longer knows (or whose id now names another task, queued at
        another time: vCenter restarted and counts its tasks afresh) vanished with the
        vCenter that ran it: ``adopt(session)`` (if given) is asked for what it would have
        made, else :class:`TaskLostError` (not a sign of vCenter's ill health)."""
        with self.watch.follow(moid) as following:
            return self._follow(following, info, what, adopt)

    def _follow(self, following: Following, info: Any, what: str,
                adopt: Callable[[Any], str | None] | None) -> str | None:
        moid = following.moid
        first = None
        told_queued = False
        running_since: float | None = None
        while True:
            if info is not None and info is not UNSEEN and info is not NOTHING:
                if first is None:
                    first = info
                elif not _same_task(first, info):
                    info = None
            if info is None:
                found = None if adopt is None else self.call(adopt)
                if found is not None:
                    log.info("[%s] %s: task %s lost; adopting %s", self.config.name, what,
                             moid, found)
                    return found
                raise TaskLostError(f"{what}: vCenter lost task {moid}")
            if info is not UNSEEN and info is not NOTHING:
                if info.state == "queued" and not told_queued:
                    told_queued = True
                    progress.queued()
                elif info.state != "queued" and running_since is None:
                    running_since = self._clock()
                    progress.running(_queued_seconds(info))
                if info.state in ("success", "error"):
                    trace_task(info, moid, what)
                if info.state == "success":
                    return getattr(info.result, "_moId", None)
                if info.state == "error":
                    raise translate(info.error, server=self.config.server,
                                    username=self.config.username)
            left = None if running_since is None else (
                TASK_TIMEOUT - (self._clock() - running_since))
            if left is not None and left <= 0:
                raise TransientProviderError(
                    f"{what}: task {moid} unfinished {TASK_TIMEOUT:.0f}s after it started")
            info = following.next(left)

    def start(self, submit: Callable[[Any], Any], what: str, *,
              adopt: Callable[[Any], str | None] | None = None) -> Started:
        """Submit ``submit(session)``'s task and look at it once; never submit it twice.

        When the exchange is retried (an expired session, a stale memory, a broken
        connection) after ``submit`` returned its task, the retry looks at that task again
        (its id stays valid in a new session) instead of submitting anew. ``adopt(session)``
        (if given) is asked for the id of what the task would have made (a clone: the VM of
        that name in its folder) when that task cannot be found (then None means a
        TransientProviderError: it is never submitted again here), and when ``submit`` was
        entered but no task came back (then None lets ``submit`` run again). An id from
        ``adopt`` is the result, and nothing is submitted. ``Started.task`` is None when
        ``submit`` returned no task (or ``adopt`` found the result: ``Started.result``).
        A task started whose every look failed transiently comes back with ``info``
        :data:`UNSEEN` (settle it: it runs on in vCenter), never as an error that would
        suggest nothing was started.
        """
        moid: str | None = None
        entered = False

        def exchange(session: Any) -> Started:
            nonlocal moid, entered
            if moid is not None:  # a retry: the task was started already
                info = _look(session, moid)
                if info is not None:
                    return Started(moid, info, None)
                found = None if adopt is None else adopt(session)
                if found is None:
                    raise TaskLostError(f"{what}: vCenter lost task {moid}")
                return Started(None, None, found)
            if entered and adopt is not None:  # sent, perhaps, but no task seen back
                found = adopt(session)
                if found is not None:
                    return Started(None, None, found)
            entered = True
            task = submit(session)
            if task is None:
                return Started(None, None, None)
            moid = task._moId
            return Started(moid, UNSEEN, None)  # the watch looks (no call of our own)

        try:
            return self.call(exchange)
        except ProviderError as exc:
            if moid is None or is_permanent(exc):
                raise
            # The task was started and runs on: only the look at it failed. settle() polls.
            log.info("[%s] %s: task %s not looked at (%s)", self.config.name, what, moid, exc)
            return Started(moid, UNSEEN, None)

    def task(self, submit: Callable[[Any], Any], what: str, *,
             adopt: Callable[[Any], str | None] | None = None) -> str | None:
        """Submit ``submit(session)``'s task (at most once, see :meth:`start`) and wait for
        it; the id of its result. None also when ``submit`` returned no task."""
        started = self.start(submit, what, adopt=adopt)
        if started.task is None:
            return started.result
        return self.settle(started.task, started.info, what, adopt=adopt)


def _same_task(first: Any, now: Any) -> bool:
    """Whether two looks at one task id saw the same task (not one a restarted vCenter
    numbered alike): same operation, queued at the same time."""
    return (getattr(first, "descriptionId", None) == getattr(now, "descriptionId", None)
            and getattr(first, "queueTime", None) == getattr(now, "queueTime", None))


def _look(session: Any, moid: str) -> Any:
    """Task ``moid``'s ``info`` (None when vCenter no longer knows it): one call."""
    try:
        return (retrieve(session, session.ref(vim.Task, moid), ["info"]) or {}).get("info")
    except StaleReferenceError:
        return None


def _queued_seconds(info: Any) -> float:
    """Seconds vCenter queued the task before running it (0 when it does not say)."""
    queued, started = getattr(info, "queueTime", None), getattr(info, "startTime", None)
    if queued is None or started is None:
        return 0.0
    try:
        return max(0.0, float((started - queued).total_seconds()))
    except (TypeError, AttributeError):
        return 0.0


def _from_vcenter(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError | vmodl.MethodFault) or is_connection_error(exc)


def guest_of(session: Any, ref: Any | None) -> dict[str, Any] | None:
    """The VM's guest properties (:data:`GUEST_PROPERTIES`), None for no VM."""
    return None if ref is None else retrieve(session, ref, GUEST_PROPERTIES)


def snapshot_id(session: Any, ref: Any, name: str) -> str | None:
    """The id of the VM's snapshot ``name``, or None."""
    tree = (retrieve(session, ref, ["snapshot.rootSnapshotList"]) or {}).get(
        "snapshot.rootSnapshotList")
    found = clone.find_snapshot(tree, name)
    return None if found is None else found._moId


def port_group(session: Any, network: Any) -> tuple[str, str]:
    """A distributed port group's (switch uuid, port group key)."""
    props = retrieve(session, network, ["key", "config.distributedVirtualSwitch"]) or {}
    switch = retrieve(session, props["config.distributedVirtualSwitch"], ["uuid"]) or {}
    return str(switch["uuid"]), str(props["key"])


def user_field(session: Any) -> int:
    """The key of the custom attribute :data:`USER_FIELD`, created when missing."""
    manager = session.content.customFieldsManager
    for _ in range(2):
        fields = (retrieve(session, manager, ["field"]) or {}).get("field") or ()
        for definition in fields:
            if definition.name == USER_FIELD and definition.managedObjectType in (
                    None, vim.VirtualMachine):
                return int(definition.key)
        try:
            return int(manager.AddCustomFieldDef(name=USER_FIELD,
                                                 moType=vim.VirtualMachine).key)
        except vim.fault.DuplicateName:  # another manager made it meanwhile
            continue
    raise TransientProviderError(f"custom attribute {USER_FIELD} could not be created")
