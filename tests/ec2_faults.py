"""A seeded fault-injecting HTTP proxy in front of an EC2 API (the moto server), for tests
and ``bench/aws_calls.py``; like the vCenter simulator's ``-fault``, each decision comes
from one ``random.Random(seed)``, so a run repeats.

Per request it reads the EC2 ``Action`` and, in this order, may:

* answer ``RequestLimitExceeded`` with HTTP 503 as EC2 does (``throttle`` rate, any action);
* answer ``InsufficientInstanceCapacity`` with HTTP 500 (``capacity`` rate, RunInstances);
* drop the connection without an answer *after* passing the request on (``drop`` rate,
  for the actions in ``drop_actions``): the call happened, its answer is lost;
* hold the answer ``delay`` seconds, longer than the client waits (``timeout`` rate, for
  ``drop_actions`` too);
* answer ``refuse`` (an error code such as ``UnauthorizedOperation``, HTTP 403) to every
  ``RunInstances``;
* answer ``InvalidInstanceID.NotFound`` (HTTP 400) as EC2 does for an instance it does not
  show yet (``not_found`` rate, for the actions in ``not_found_actions``);

and otherwise pass it on. Like EC2 (and unlike moto), it honours ``RunInstances``'
``ClientToken``: a launch repeating a token gets the first launch's answer (waiting for it
when still in flight) instead of a second instance, counted as ``injected["same_token"]``.
It counts every action it saw (``calls``) and what it injected (``injected``). Started on
a free loopback port with :meth:`FaultProxy.start`; ``url`` is the endpoint to give the
provider.
"""

from __future__ import annotations

import http.client
import random
import socket
import sys
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ERROR = ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
          '<Message>{message}</Message></Error></Errors><RequestID>{rid}</RequestID></Response>')


@dataclass
class Faults:
    """What to inject, as rates between 0 and 1 (see the module docstring)."""

    throttle: float = 0.0
    capacity: float = 0.0
    drop: float = 0.0
    timeout: float = 0.0
    delay: float = 2.0
    drop_actions: frozenset[str] = frozenset({"RunInstances"})
    not_found: float = 0.0
    refuse: str | None = None
    not_found_actions: frozenset[str] = frozenset()
    seed: int = 1


@dataclass
class _Launch:
    """One ``ClientToken``'s launch: its answer, once moto gave it."""

    done: threading.Event = field(default_factory=threading.Event)
    answer: tuple[int, list[tuple[str, str]], bytes] = (500, [], b"")


@dataclass
class FaultProxy:
    """The running proxy; ``faults`` may be changed while it runs (under ``lock``)."""

    upstream_port: int
    faults: Faults
    server: ThreadingHTTPServer | None = None
    calls: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: threading.Event = field(default_factory=threading.Event)
    launches: dict[str, _Launch] = field(default_factory=dict)
    _random: random.Random = field(default_factory=random.Random)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._random.seed(self.faults.seed)
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True,
                         name="ec2-fault-proxy").start()
        return self

    def stop(self) -> None:
        self.released.set()  # answers held back go out now
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def set_faults(self, faults: Faults) -> None:
        with self.lock:
            self.faults = faults
            self._random.seed(faults.seed)

    def decide(self, action: str) -> str | None:
        """The fault to inject for one request of ``action`` (None: pass it on)."""
        with self.lock:
            self.calls[action] += 1
            f, draw = self.faults, self._random.random
            fault = None
            if draw() < f.throttle:
                fault = "throttle"
            elif action == "RunInstances" and draw() < f.capacity:
                fault = "capacity"
            elif action == "RunInstances" and f.refuse:
                fault = "refuse"
            elif action in f.drop_actions and draw() < f.drop:
                fault = "drop"
            elif action in f.drop_actions and draw() < f.timeout:
                fault = "timeout"
            elif action in f.not_found_actions and draw() < f.not_found:
                fault = "not_found"
            if fault is not None:
                self.injected[fault] += 1
            return fault


class _QuietServer(ThreadingHTTPServer):
    """Connections the client dropped (its read timeout, a process ending) are no news."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def do_POST(self) -> None:
        self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _serve(self, body: bytes) -> None:
        query = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        action = (query.get("Action") or ["?"])[0]
        fault = self.owner.decide(action)
        if fault == "throttle":
            self._answer(503, "RequestLimitExceeded", "Request limit exceeded.")
            return
        if fault == "capacity":
            self._answer(500, "InsufficientInstanceCapacity",
                         "We currently do not have sufficient capacity in the Availability "
                         "Zone you requested.")
            return
        if fault == "refuse":
            self._answer(403, str(self.owner.faults.refuse), "You are not authorized to "
                         "perform this operation.")
            return
        if fault == "not_found":
            self._answer(400, "InvalidInstanceID.NotFound",
                         "The instance ID does not exist")
            return
        token = (query.get("ClientToken") or [None])[0] if action == "RunInstances" else None
        status, headers, payload = self._launch(token, body) if token else self._forward(body)
        if fault == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "timeout":
            self.owner.released.wait(self.owner.faults.delay)
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection",
                                    "server", "date"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _launch(self, token: str, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        owner = self.owner
        with owner.lock:
            launch = owner.launches.get(token)
            first = launch is None
            if launch is None:
                launch = owner.launches[token] = _Launch()
            else:
                owner.injected["same_token"] += 1
        if first:
            try:
                launch.answer = self._forward(body)
            finally:
                launch.done.set()
        else:
            launch.done.wait(30)
        return launch.answer

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection("127.0.0.1", self.owner.upstream_port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            upstream.close()

    def _answer(self, status: int, code: str, message: str) -> None:
        payload = _ERROR.format(code=code, message=message, rid="fault-proxy").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
