"""A pool of logged-in vCenter sessions, shared by the provider's worker threads.

Each :class:`Session` is one pyvmomi ``ServiceInstance`` (its own HTTP connection and
session cookie) and is used by one thread at a time. :class:`SessionPool` opens sessions
lazily up to ``connection_pool_size`` and lends them out; a caller waits at most
``connection_pool_timeout`` seconds for one. A session whose connection broke is thrown
away (the next caller opens a fresh one); an expired session logs in again in place.

Metrics (tagged ``provider``): ``connect.open`` / ``connect.fail`` per login attempt (as
vmpooler's provider), ``connection_available`` (gauge) and ``connection_waited`` (timing,
seconds) per checkout, tagged ``type: provider_connection_pool`` as vmpooler's pool is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim

from vmpooler.providers.base import ConnectionPoolHealth, MetricsSink
from vmpooler.providers.errors import TransientProviderError
from vmpooler.providers.vsphere.faults import is_connection_error, translate
from vmpooler.providers.vsphere.settings import VsphereSettings

__all__ = ["Session", "SessionPool", "is_expired", "smart_connect"]

log = logging.getLogger(__name__)

Connector = Callable[[VsphereSettings], Any]
"""Opens one logged-in ``vim.ServiceInstance`` (or raises what pyvmomi raises)."""


def smart_connect(settings: VsphereSettings) -> Any:
    """Log in with pyvmomi's ``SmartConnect``; the socket timeout is ``vsphere_timeout``."""
    return SmartConnect(
        host=settings.server, port=settings.port, user=settings.username,
        pwd=settings.password, disableSslCertValidation=settings.insecure,
        httpConnectionTimeout=settings.socket_timeout,
    )


class Session:
    """One logged-in vCenter session. Not thread-safe: the pool lends it to one thread.

    ``content`` is the ``ServiceContent`` read at login; ``instance_uuid`` identifies the
    vCenter (a replaced or reinstalled vCenter has a new one); ``calls`` counts the SOAP
    methods this session invoked after logging in, by name; ``used`` is False until a first
    exchange ran on it (a fresh session's connection failure is not worth retrying at once);
    ``generation`` is the pool's count of broken connections when it logged in (a session
    of a later generation may be talking to a rebuilt vCenter: see ``Inventory.sync``).
    """

    def __init__(self, si: Any, calls: Counter[str], generation: int = 0) -> None:
        self.used = False
        self.generation = generation
        self.si = si
        self.stub = si._stub
        self.calls = calls
        _count_calls(self.stub, calls)
        self.content = si.RetrieveContent()
        self.instance_uuid = str(self.content.about.instanceUuid)

    def ref(self, kind: type, moid: str) -> Any:
        """The managed object ``kind`` with id ``moid``, bound to this session."""
        return kind(moid, self.stub)

    def close(self) -> None:
        try:
            Disconnect(self.si)
        except Exception:  # the connection may already be gone
            log.debug("disconnect failed", exc_info=True)


def _count_calls(stub: Any, calls: Counter[str]) -> None:
    """Wrap the stub's two entry points so every SOAP request is counted by method name."""
    invoke, accessor = stub.InvokeMethod, stub.InvokeAccessor

    def counted_method(mo: Any, info: Any, args: Any, *rest: Any) -> Any:
        calls[info.wsdlName] += 1
        return invoke(mo, info, args, *rest)

    def counted_accessor(mo: Any, info: Any, *rest: Any) -> Any:
        calls["RetrieveProperties"] += 1
        return accessor(mo, info, *rest)

    stub.InvokeMethod, stub.InvokeAccessor = counted_method, counted_accessor


class SessionPool:
    """Lends logged-in sessions; see the module docstring. Thread-safe."""

    def __init__(
        self,
        settings: VsphereSettings,
        metrics: MetricsSink,
        *,
        connect: Connector = smart_connect,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.calls: Counter[str] = Counter()
        self.logins = 0  # successful logins of pooled sessions so far
        self.other_logins = 0  # and of sessions kept outside the pool (the task watch)
        self.generation = 0  # broken connections seen so far (see Session.generation)
        self._connect = connect
        self._sleep = sleep
        self._clock = clock
        self._cond = threading.Condition()
        self._idle: list[Session] = []
        self._open = 0  # sessions that exist (idle or lent) or are being opened
        self._waiting = 0
        self._closed = False
        self._tags = {"provider": settings.name}
        self._pool_tags = {"type": "provider_connection_pool", "provider": settings.name}

    # -- lending ------------------------------------------------------------------------------
    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session for the duration of the ``with`` block.

        Raises TransientProviderError when none is free within ``connection_pool_timeout``
        seconds, and the login's error (translated) when a new one cannot be opened. When
        the block raises a connection error, the session is discarded, not returned.
        """
        session = self._checkout()
        broken = False
        try:
            yield session
        except BaseException as exc:
            broken = is_connection_error(exc) or _caused_by_connection(exc)
            raise
        finally:
            self._checkin(session, broken=broken)

    def _checkout(self) -> Session:
        started = self._clock()
        size = self.settings.session_pool_size
        with self._cond:
            self._waiting += 1
            try:
                if not self._cond.wait_for(lambda: self._idle or self._open < size,
                                           timeout=self.settings.session_wait):
                    raise TransientProviderError(
                        f"no vCenter session free within {self.settings.session_wait:.0f}s "
                        f"({size} in use)")
                if self._idle:
                    session: Session | None = self._idle.pop()
                else:
                    session = None
                    self._open += 1
            finally:
                self._waiting -= 1
            available = len(self._idle) + size - self._open
        self.metrics.gauge("connection_available", available, tags=self._pool_tags)
        self.metrics.timing("connection_waited", self._clock() - started, tags=self._pool_tags)
        if session is not None:
            return session
        try:
            return self._login()
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def _checkin(self, session: Session, *, broken: bool) -> None:
        if broken:
            session.close()
        with self._cond:
            if broken:
                self.generation += 1
            if broken or self._closed:
                self._open -= 1
            else:
                self._idle.append(session)
            self._cond.notify()
        if self._closed and not broken:
            session.close()

    # -- logging in ---------------------------------------------------------------------------
    def _login(self, *, pooled: bool = True) -> Session:
        """Open one session, retrying connection failures ``max_tries`` times with vmpooler's
        ``try x retry_factor`` seconds between tries; a refused login is not retried.
        ``logins`` counts the pool's sessions; ``other_logins`` those it did not lend."""
        s = self.settings
        for attempt in range(1, s.login_tries + 1):
            try:
                session = Session(self._connect(s), self.calls, self.generation)
            except Exception as exc:
                self.metrics.increment("connect.fail", tags=self._tags)
                error = translate(exc, server=s.server, username=s.username)
                if error.permanent or attempt >= s.login_tries:
                    # A refused login is worth a warning each time; an unreachable vCenter
                    # is told once by the circuit breaker, not at every attempt.
                    level = logging.WARNING if error.permanent else logging.DEBUG
                    log.log(level, "[!] [%s] cannot log in to %s: %s", s.name, s.url, error)
                    raise error from exc
                self._sleep(attempt * s.login_retry_factor)
                continue
            self.metrics.increment("connect.open", tags=self._tags)
            with self._cond:
                if pooled:
                    self.logins += 1
                else:
                    self.other_logins += 1
            log.info("[*] [%s] logged in to %s as %r", s.name, s.url, s.username)
            return session
        raise AssertionError("unreachable")

    def open_session(self) -> Session:
        """A logged-in session outside the pool, for a caller that keeps it (the task
        watch): not counted against ``connection_pool_size``; the caller closes it."""
        return self._login(pooled=False)

    def relogin(self, session: Session) -> Session:
        """Replace an expired session's login in place (same slot in the pool)."""
        session.close()
        fresh = self._login()
        session.si, session.stub, session.content = fresh.si, fresh.stub, fresh.content
        session.instance_uuid, session.generation = fresh.instance_uuid, fresh.generation
        return session

    def discard_idle(self) -> None:
        """Log out and drop every idle session (their connections are presumed broken)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self.generation += 1
            self._cond.notify_all()
        for session in idle:
            session.close()

    # -- state --------------------------------------------------------------------------------
    def health(self) -> ConnectionPoolHealth:
        """How many sessions are lent, free and awaited (no network)."""
        size = self.settings.session_pool_size
        with self._cond:
            in_use = self._open - len(self._idle)
            return ConnectionPoolHealth(size=size, available=size - in_use, in_use=in_use,
                                        waiting=self._waiting)

    def close(self) -> None:
        """Log every idle session out; sessions still lent are logged out when returned."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._cond.notify_all()
        for session in idle:
            session.close()


def _caused_by_connection(exc: BaseException) -> bool:
    cause = exc.__cause__ or exc.__context__
    return cause is not None and is_connection_error(cause)


def is_expired(exc: BaseException) -> bool:
    """True for the fault vCenter answers on a session that timed out or was logged out."""
    return isinstance(exc, vim.fault.NotAuthenticated)
