"""The provider's EC2 API: two boto3 clients and one way to call them.

:class:`Ec2` keeps a client for everything but launches, with botocore's retry mode
(``adaptive`` by default: client-side rate limiting on top of the standard retries of
throttling, 5xx and connection errors) and ``max_attempts``, and a client for
``RunInstances`` that never retries by itself: a launch whose answer was lost may have
happened, so :meth:`Ec2.launch` looks before it launches again (and sends the same
``ClientToken``, which EC2 honours). Every error leaves as a
:class:`~vmpooler.providers.errors.ProviderError` (:mod:`.faults`). boto3 clients are
thread-safe; one :class:`Ec2` serves every worker thread.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config

from vmpooler.providers.aws.faults import CAPACITY, THROTTLING, error_code, translate
from vmpooler.providers.aws.settings import AwsSettings
from vmpooler.providers.base import ConnectionPoolHealth
from vmpooler.providers.errors import ConnectionLostError, TransientProviderError

__all__ = ["Ec2"]

log = logging.getLogger(__name__)

Lookup = Callable[[], str | None]
"""Looks for the instance a lost launch may have made: its id, or None."""


@functools.cache
def _loader() -> botocore.loaders.Loader:
    """botocore's reader of service models, shared by every provider of the process: EC2's
    model is read once, not at each provider's (re)build."""
    return botocore.loaders.create_loader()


class Ec2:
    """The EC2 API of one provider; see the module docstring. Thread-safe."""

    def __init__(self, settings: AwsSettings, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """Builds the clients (no request is sent). ``sleep`` paces :meth:`launch`'s
        retries."""
        core = botocore.session.get_session()
        core.register_component("data_loader", _loader())
        session = boto3.session.Session(aws_access_key_id=settings.access_key,
                                        aws_secret_access_key=settings.secret_key,
                                        region_name=settings.region, botocore_session=core)
        self.size = max(10, settings.pool_size)
        common: dict[str, Any] = {
            "connect_timeout": min(10.0, settings.api_timeout),
            "read_timeout": settings.api_timeout,
            "max_pool_connections": self.size,
        }
        self.client = session.client("ec2", endpoint_url=settings.endpoint_url, config=Config(
            retries={"mode": settings.retry_mode, "max_attempts": settings.max_attempts},
            **common))
        self._launcher = session.client("ec2", endpoint_url=settings.endpoint_url,
                                        config=Config(retries={"total_max_attempts": 1},
                                                      **common))
        self._attempts = settings.max_attempts
        self._sleep = sleep
        self._lock = threading.Lock()
        self._in_flight = 0

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def health(self) -> ConnectionPoolHealth:
        """The HTTP connections to EC2: ``size`` the most each client keeps, ``in_use`` the
        calls in flight now (retries and back-off included), ``waiting`` those beyond
        ``size``. Never blocks."""
        with self._lock:
            busy = self._in_flight
        return ConnectionPoolHealth(size=self.size, available=max(0, self.size - busy),
                                    in_use=min(busy, self.size),
                                    waiting=max(0, busy - self.size))

    def call(self, operation: str, what: str, **params: Any) -> dict[str, Any]:
        """``operation`` (boto3's snake_case name) with ``params``; its answer. Raises the
        translated ProviderError (``what`` names the object in its message)."""
        try:
            with self._counted():
                answer: dict[str, Any] = getattr(self.client, operation)(**params)
        except Exception as exc:
            raise translate(exc, f"{operation} of {what}") from exc
        return answer

    def instances(self, filters: Sequence[Mapping[str, Any]], what: str) -> list[dict[str, Any]]:
        """Every instance ``DescribeInstances`` finds with ``filters`` (all pages)."""
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Filters": list(filters)}
            if token:
                params["NextToken"] = token
            page = self.call("describe_instances", what, **params)
            for reservation in page.get("Reservations", ()):
                found.extend(reservation.get("Instances", ()))
            token = page.get("NextToken")
            if not token:
                return found

    def launch(self, params: Mapping[str, Any], what: str, lookup: Lookup) -> str:
        """``RunInstances`` with ``params`` (which carry a ``ClientToken``); the new
        instance's id. Throttled launches are tried again (up to ``max_attempts``, pausing
        0.2, 0.4, … s, at most 5 s); a launch whose answer was lost (connection dropped,
        read timed out) is first looked for with ``lookup`` and only sent again when no
        instance is found. Capacity errors are not retried here (the pool backs off)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._counted():
                    answer = self._launcher.run_instances(**params)
                return str(answer["Instances"][0]["InstanceId"])
            except Exception as exc:
                error = translate(exc, f"RunInstances of {what}")
                code = error_code(exc)
                if attempt >= self._attempts or code in CAPACITY:
                    raise error from exc
                if isinstance(error, ConnectionLostError):
                    found = lookup()
                    if found is not None:
                        log.info("launch of %s was answered by no one, but made %s", what,
                                 found)
                        return found
                elif code not in THROTTLING or not isinstance(error, TransientProviderError):
                    raise error from exc
                self._sleep(min(5.0, 0.1 * 2 ** attempt))

    def close(self) -> None:
        """Close both clients' connections (calls after this open new ones)."""
        self.client.close()
        self._launcher.close()
