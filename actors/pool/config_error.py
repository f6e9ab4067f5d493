"""A pool's configuration-error state: a clone failed permanently, so the pool stops cloning.

A permanent clone failure (``ProviderFailure.permanent``: the template, folder, datastore,
cluster or network missing, a privilege lacking, a programming error) will fail again on
every retry. Rather than retry it with back-off forever and log every failure, as vmpooler
does, the pool *enters* the state: it logs why once (one error line), publishes the error in
Redis (the pool's field of ``vmpooler__configerror``: ``/status`` and the dashboard show
it), sets the
``pool.config_error`` gauge to 1, and starts no clone of its own but **trial clones** at
growing intervals: ``check_loop_delay_min`` seconds after the failure, then twice as long
each time, up to ``config_error_retry_interval`` (and never before the pool's clone back-off
allows), so a template replaced for a minute costs a minute, and an operator who grants the
permission or creates the template later sees the pool recover without a restart.

The pool *leaves* the state (one info line, its field deleted, the gauge 0) when a clone
succeeds (a trial's, or an on-demand request's) or when the pool's template or clone target
in effect changes (an override written through the API: the configuration the error was
about is gone). A different permanent error while in the state replaces the published one
(one error line more: the reason changed). Transient failures neither enter nor leave it.

On-demand clones are not held back: each still reaches the provider once and fails at once
with the permanent error (its request gives up without retrying, "Configuration error: ..."),
and one that succeeds ends the state.

The state lives in this object (the pool actor's memory) and in Redis for readers only; a
restarted actor starts outside it and enters it again at its first permanent failure (its
first successful clone deletes a field an earlier actor left behind). Time is the pool's
injected clock. Used only on the pool actor's thread.
"""

from __future__ import annotations

import logging
from collections.abc import KeysView
from dataclasses import dataclass

from vmpooler.actors.messages import ProviderFailure, RunPoolCycle
from vmpooler.actors.pool.context import PoolIO, PoolSettings
from vmpooler.actors.runtime.clock import Timer
from vmpooler.actors.storage import timefmt
from vmpooler.actors.storage.config_error_store import ConfigErrorStore

__all__ = ["ConfigError", "ConfigErrorState"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConfigErrorState:
    """Why a pool is in the configuration-error state: the permanent failure's class and
    message, since when (epoch seconds) and the template and clone target it was about."""

    error_class: str
    message: str
    since: float
    template: str
    clone_target: str


class ConfigError:
    """One pool's configuration-error state and its trial clones.

    ``state`` is None outside the state. ``trial`` is the VM of the trial clone in flight
    (None when none is), ``trial_at`` the monotonic time from which the next may start.
    """

    def __init__(self, policy: PoolSettings, io: PoolIO, *, busy: KeysView[str],
                 store: ConfigErrorStore | None = None) -> None:
        self.policy, self.io = policy, io
        self.busy = busy  # the VMs with a provider call in flight (a live view)
        self.store = store or ConfigErrorStore(self.io.store.client)
        self.interval = self.policy.settings.config_error_retry_interval
        self.state: ConfigErrorState | None = None
        self.trial: str | None = None
        self.trial_at = 0.0
        self.delay = 0.0  # before the next trial; doubles up to ``interval``
        self.timer: Timer | None = None
        self.stale_field = True  # an earlier actor may have left its field behind

    @property
    def active(self) -> bool:
        """Whether the pool is in the configuration-error state."""
        return self.state is not None

    # -- may a clone start? -------------------------------------------------------------------
    def allows_pool_clone(self) -> bool:
        """Whether a clone of the pool's own (not a request's) may start now: always outside
        the state; inside it only the trial, once ``trial_at`` has come and no trial is in
        flight. The caller reports the clone it then starts with :meth:`started`."""
        if self.state is None:
            return True
        if self.trial is not None and self.trial not in self.busy:
            self.trial = None  # its answer was presumed lost (ProviderCalls.expire_lost)
        return self.trial is None and self.io.clock.monotonic() >= self.trial_at

    def started(self, vm: str) -> None:
        """A clone of the pool's own was sent: in the state, it is the trial."""
        if self.state is not None:
            self.trial = vm
            log.info("[*] [%s] configuration error: trial clone '%s'", self.policy.name, vm)

    # -- answers ------------------------------------------------------------------------------
    def succeeded(self, vm: str) -> None:
        """A clone of the pool (its own or a request's) succeeded: the state ends."""
        if self.state is not None:
            self._leave(f"'{vm}' cloned")
        elif self.stale_field:
            self.store.clear(self.policy.name)
            self.stale_field = False

    def failed(self, vm: str, failure: ProviderFailure, *, template: str,
               clone_target: str | None) -> bool:
        """A clone of the pool failed (``template`` and ``clone_target`` are the ones in
        effect). True when the state accounts for the failure, so the caller logs it at
        debug level only: a permanent failure (it enters the state, or keeps or changes it:
        those log their own line). A transient one returns False and, if it was the trial,
        arms the next trial."""
        if vm == self.trial:
            self.trial = None
            self._arm()
        if not failure.permanent:
            return False
        state = self.state
        if state is not None and (state.error_class, state.message) == (
                failure.error_class, failure.message):
            log.debug("[%s] configuration error persists: '%s' failed the same way",
                      self.policy.name, vm)
            return True
        self.state = ConfigErrorState(
            error_class=failure.error_class, message=failure.message,
            since=state.since if state is not None else self.io.clock.now(),
            template=template, clone_target=clone_target or "")
        self._publish()
        if state is None:
            log.error("[!] [%s] configuration error: clone of '%s' failed permanently: %s: %s; "
                      "the pool clones nothing but trial clones (growing to one every %.0fs) "
                      "until a clone succeeds or its template or clone target changes",
                      self.policy.name, vm, failure.error_class, failure.message, self.interval)
            self.delay = 0.0
            self._arm()
        else:
            log.error("[!] [%s] configuration error changed: clone of '%s' failed "
                      "permanently: %s: %s", self.policy.name, vm, failure.error_class,
                      failure.message)
        self._gauge()
        return True

    # -- every cycle --------------------------------------------------------------------------
    def review(self, template: str, clone_target: str | None) -> bool:
        """Called every cycle with the template and clone target in effect: a change ends
        the state (the configuration it was about is gone; True: the caller may clone at
        once); emits ``pool.config_error``."""
        state = self.state
        left = state is not None and (state.template, state.clone_target) != (
            template, clone_target or "")
        if left:
            self._leave(f"template or clone target changed to '{template}'"
                        + (f", '{clone_target}'" if clone_target else ""))
        self._gauge()
        return left

    def cancel(self) -> None:
        """Disarm the trial timer (the actor stops)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # -- inside -------------------------------------------------------------------------------
    def _leave(self, why: str) -> None:
        state = self.state
        assert state is not None
        self.state = None
        self.trial = None
        self.cancel()
        self.store.clear(self.policy.name)
        self.stale_field = False
        self._gauge()
        log.info("[*] [%s] configuration error cleared after %.0fs: %s", self.policy.name,
                 max(0.0, self.io.clock.now() - state.since), why)

    def _arm(self) -> None:
        """The next trial may start after the next delay (``check_loop_delay_min``, then
        doubling up to ``interval``); a cycle is asked for then."""
        if self.state is None:
            return
        self.delay = min(self.interval, max(self.policy.backoff.min, self.delay * 2))
        self.trial_at = self.io.clock.monotonic() + self.delay
        self.cancel()
        self.timer = self.io.scheduler.tell_later(self.delay, self.io.self_ref,
                                                   RunPoolCycle(generation=0))

    def _publish(self) -> None:
        state = self.state
        assert state is not None
        self.store.publish(self.policy.name, error_class=state.error_class, message=state.message,
                           since=timefmt.format_epoch(state.since), template=state.template,
                           clone_target=state.clone_target)
        self.stale_field = False

    def _gauge(self) -> None:
        self.io.metrics.gauge("pool.config_error", 1 if self.state is not None else 0,
                               tags={"pool": self.policy.name})
