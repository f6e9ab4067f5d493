"""Waiting until a system of actors has nothing left to do (for a fake clock's driver).

With a :class:`~vmpooler.actors.runtime.clock.FakeClock`, time moves only when its driver
advances it; before each move the driver waits until every actor has handled its mail and
every blocking call has returned (or is parked, waiting for simulated time), so that what
happens at one moment is done before the next. This is that wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import pykka

from vmpooler.actors.runtime.executor import ActorExecutor
from vmpooler.actors.runtime.pooled import PooledActor

__all__ = ["IdleTimeoutError", "all_asleep", "wait_idle"]


class IdleTimeoutError(RuntimeError):
    """The actors did not go idle within the time allowed."""


def all_asleep(in_flight: int, asleep: int, workers: int) -> bool:
    """Whether a worker pool's ``in_flight`` calls all wait for simulated time: each is one
    of the ``asleep`` ones, or queued behind ``workers`` asleep ones (every thread taken)."""
    return in_flight <= asleep or asleep >= workers


def _waiting(ref: pykka.ActorRef[Any]) -> int:
    """Messages in the actor's inbox (pykka's and ours both have ``qsize``)."""
    return int(cast("Any", ref.actor_inbox).qsize())


def _ping_all(refs: Iterable[pykka.ActorRef[Any]], timeout: float,
              executor: ActorExecutor | None) -> bool:
    """Ask each actor a ``"ping"`` (answered once its earlier mail is handled; with
    ``executor``, only the actors with a thread of their own: the executor says whether
    the pooled ones are idle); True when every inbox is empty afterwards."""
    refs = list(refs)
    futures = []
    for ref in refs:
        if executor is not None and issubclass(ref.actor_class, PooledActor):
            continue
        try:
            futures.append(ref.ask("ping", block=False))
        except pykka.ActorDeadError:
            continue  # an actor that just finished (a request's)
    for future in futures:
        try:
            future.get(timeout=timeout)
        except pykka.ActorDeadError:
            continue
    return all(not _waiting(ref) for ref in refs) and (
        executor is None or executor.idle())


def _quiet(refs: list[pykka.ActorRef[Any]], executor: ActorExecutor | None) -> bool:
    """Cheap, asks nothing: every inbox is empty and the executor runs nothing."""
    return (executor is None or executor.idle()) and all(
        not _waiting(ref) for ref in refs)


def wait_idle(
    refs: Callable[[], Iterable[pykka.ActorRef[Any]]],
    *,
    settled: Callable[[], bool] = lambda: True,
    executor: ActorExecutor | None = None,
    timeout: float = 30.0,
) -> None:
    """Return once every actor of ``refs()`` has an empty inbox, having handled all its
    earlier mail, and ``settled()`` is true (say, no blocking call is running), twice in a
    row with nothing in between. With ``executor``, the actors it runs are not asked: it is
    idle, or not. Raises :class:`IdleTimeoutError` after ``timeout`` real seconds.

    While the actors are visibly busy (mail waiting, the executor running) it only looks
    and asks nothing, so it takes little processor time from them: it sleeps until the
    executor's last turn ends, or 0.2 ms when others are busy. Any thread
    may call it but an actor's own (it would wait for itself).
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    quiet = 0
    while True:
        current = list(refs())
        if _quiet(current, executor) and _ping_all(current, timeout, executor) and settled():
            quiet += 1
            if quiet == 2:
                return
            continue
        quiet = 0
        if time.monotonic() > deadline:
            raise IdleTimeoutError(f"the actors were still busy after {timeout:.0f}s")
        if executor is not None and not executor.idle():
            executor.wait_idle(0.005)  # woken as soon as its last turn ends
        else:
            pause.wait(0.0002)
