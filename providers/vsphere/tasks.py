"""What the vCenter watch says of one task: :class:`TaskSeen`, and the :class:`Following`
a waiter reads it from (see :mod:`~vmpooler.providers.vsphere.watch`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vmpooler.providers.errors import ProviderError

__all__ = ["FIELDS", "NOTHING", "Following", "TaskSeen", "Unfollow"]

FIELDS = ("state", "error", "result", "queueTime", "startTime", "completeTime",
          "descriptionId")
"""The fields of a task's ``info`` the watch keeps (a :class:`TaskSeen`'s)."""
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


Unfollow = Callable[["Following"], None]


class Following:
    """One task followed by the watch; use as a context manager (leaving stops
    following). Thread-safe: the watch writes, the waiter reads."""

    def __init__(self, moid: str, unfollow: Unfollow) -> None:
        self.moid = moid
        self._unfollow = unfollow
        self._cond = threading.Condition()
        self._latest: Any = NOTHING
        self._error: ProviderError | None = None

    def __enter__(self) -> Following:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._unfollow(self)

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
