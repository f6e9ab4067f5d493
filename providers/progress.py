"""What a long provider call tells the core while it runs: its work queued, then running.

A hypervisor may queue the work a call submitted (vCenter queues tasks per host when busy).
A queued call is not a slow or failing one: the core stops its timeout while the provider
says the work is queued, and arms it afresh when the work starts running. A provider calls
:func:`queued` and :func:`running` from the thread running the call (any number of times;
only changes matter); outside a call the core follows (tests, tools) they do nothing.

The core sets the listener of the call running on the current thread with
:func:`reporting`; a provider needs nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol

__all__ = ["CallProgress", "queued", "reporting", "running"]


class CallProgress(Protocol):
    """The core's listener for one call (see the module docstring)."""

    def queued(self) -> None:
        """The call's work waits in the provider's own queue: no timeout runs meanwhile."""

    def running(self, queued_seconds: float) -> None:
        """The call's work runs, after ``queued_seconds`` in the provider's queue."""


_LISTENER: ContextVar[CallProgress | None] = ContextVar("vmpooler_call_progress", default=None)


def queued() -> None:
    """Tell the core the current call's work is queued by the provider."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.queued()


def running(queued_seconds: float = 0.0) -> None:
    """Tell the core the current call's work runs now, after ``queued_seconds`` queued."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.running(max(0.0, queued_seconds))


@contextlib.contextmanager
def reporting(listener: CallProgress) -> Iterator[None]:
    """Within the block, :func:`queued` and :func:`running` on this thread go to
    ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)
