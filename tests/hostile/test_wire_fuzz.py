"""Every route of a real ``vmpooler run`` and ``vmpooler api``, over raw TCP, with hostile
path values, ids, bodies and headers, then the same requests slow (interleaved halves),
truncated and oversized.

What must hold: no answer is a 5xx other than 503 (an empty pool, a refused connection),
every API answer is JSON, no traceback reaches the log, no key of Redis carries a hostile
id, and a well-formed request is still answered within a second afterwards. The routes come
from the application itself (``falcon.inspect``), so a new route is fuzzed without a change
here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from unittest import mock

import falcon.inspect
import pytest
import redis

from tests.harness import wait_until
from tests.hostile.service import Service
from vmpooler.actors.config import load_config
from vmpooler.web.api_context import ApiContext
from vmpooler.web.app import create_app

pytestmark = pytest.mark.integration

MARK = "inj"
SERVER_TOKEN = re.compile(r"^vmpooler__token__[a-z0-9]{32}$")  # a name POST /token drew
"""In every hostile value that no key of Redis may ever carry."""
SEGMENTS = [
    "vm__inj", "inj__", "%0Ainj", "inj%0D%0AX-Forged:%201", "..%2F..%2Finj", "inj%00",
    "inj%20x", "%C3%BCinj", "%FF%FEinj", "vmpooler__ready__alpha", "*", "inj?x=1",
    "alpha+alpha+alpha", "1e300", "-1", "%7B%7Dinj", "%25inj", "a" * 300 + "inj",
    "alpha", "beta", "alpha-alpha", "inj.example.test",
]
BODIES: list[bytes] = [
    b"", b"null", b"[]", b"{}", b'"inj"', b"{", b"\xff\xfe",
    b'{"request_id": "vm__inj", "alpha": 1}', b'{"request_id": "inj\\n", "alpha": 1}',
    b'{"alpha": 1e300}', b'{"alpha": ' + b"9" * 4000 + b"}", b'{"alpha": -1}',
    b'{"inj__": 1}', b'{"alpha": "inj"}', b'{"tags": {"inj__": "x\\ny"}, "lifetime": 1e300}',
    b'{"tags": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}}',
    json.dumps({f"inj{i}": i for i in range(300)}).encode(),
    b'{"alpha": "/templates/inj", "beta": 0}', b'{"\\ud800": 1}',
    b'{"lifetime": 100000000}', b'{"lifetime": ' + b"9" * 400 + b"}", b'{"lifetime": "1e300"}',
    b'{"lifetime": -1e300}', b'{"tags": {"jenkins_build_url": "http://inj/\\n/x"}}',
]
HEADERS: list[dict[str, str]] = [
    {}, {"X-AUTH-TOKEN": "inj__token"}, {"X-AUTH-TOKEN": "x" * 4000},
    {"Authorization": "Basic aW5qOmluaq=="}, {"Authorization": "Bearer inj"},
    {"Content-Type": "text/plain"}, {"X-Forwarded-For": "inj, 10.0.0.1"},
    {"Content-Type": "application/json; charset=inj"},
]
NOT_JSON = ("/dashboard", "/prometheus")


@dataclass
class Raw:
    status: int
    headers: dict[str, str]
    body: bytes


def encode(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: pooler", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse(data: bytes) -> Raw:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Raw(status, headers, body)


def read_one(sock: socket.socket, method: str = "GET") -> Raw:
    """One answer; its body as ``Content-Length`` says (none to a HEAD)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before an answer: {data[:200]!r}")
        data += chunk
    answer = parse(data)
    length = 0 if method == "HEAD" else int(answer.headers.get("content-length", "0"))
    while len(answer.body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer.body += chunk
    return answer


def exchange(service: Service, method: str, request: bytes, timeout: float = 10) -> Raw:
    with socket.create_connection((service.host, service.port), timeout=timeout) as sock:
        sock.sendall(request)
        return read_one(sock, method)


@cache
def routes(config_path: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(template, methods) of every route of the app serving ``config_path``."""
    with mock.patch.dict(os.environ, {"VMPOOLER_DEBUG": "1"}):  # the services' dummy auth
        config = load_config(config_path)
    app = create_app(ApiContext(config=config, redis=redis.Redis(port=1)))
    return tuple((route.path, tuple(sorted({m.method for m in route.methods if not m.internal})))
                 for route in falcon.inspect.inspect_routes(app))


def generated(service: Service, rng: random.Random, token: str,
              real: list[str]) -> Iterator[tuple[str, str, bytes]]:
    """(method, target, request bytes): every route and method, every hostile segment (and
    the ``real`` ids: a VM, a request, a token) in every parameter, with a random body and
    header set each (a valid ``token`` in a third of them, so that what needs one is
    reached)."""
    headers = [*HEADERS, *[{"X-AUTH-TOKEN": token}] * (len(HEADERS) // 2)]
    for template, methods in routes(str(service.config_path)):
        fields = [part for part in template.split("/") if part.startswith("{")]
        values = [*SEGMENTS, *real, *real] if fields else [""]
        for method in methods:
            for value in values:
                target = "/".join(value if part.startswith("{") else part
                                  for part in template.split("/")) or "/"
                if rng.random() < 0.2:
                    target += "?view=" + rng.choice(SEGMENTS) + "&from=inj&pool=" + value
                body = rng.choice(BODIES) if method in ("POST", "PUT") else b""
                yield method, target, encode(method, target, rng.choice(headers), body)


def check(target: str, answer: Raw) -> None:
    assert answer.status < 500 or answer.status == 503, (target, answer.status, answer.body)
    if target.split("?")[0].startswith(NOT_JSON) or answer.status == 302:
        return
    assert answer.headers.get("content-type", "").startswith("application/json"), (
        target, answer.status, answer.headers)
    json.loads(answer.body)


def redis_keys(service: Service) -> list[str]:
    client = service.redis_client()
    try:
        return list(client.scan_iter(count=1000))
    finally:
        client.close()


def test_every_route_under_hostile_values(service: Service) -> None:
    rng = random.Random(18)
    basic = "Basic " + base64.b64encode(b"fuzzer:secret").decode()
    token = service.request("POST", "/api/v3/token", headers={"Authorization": basic}).json
    auth = {"X-AUTH-TOKEN": token["token"]}
    wait_until(lambda: service.request("GET", "/api/v3/status").json["pools"]["beta"]["ready"],
               30, "beta to hold a ready VM")
    vm = service.request("POST", "/api/v3/vm/beta", headers=auth).json["beta"]["hostname"]
    request = service.request("POST", "/api/v3/ondemandvm/beta", headers=auth).json
    real = [vm.split(".")[0], request["request_id"], token["token"]]
    for body in BODIES:  # every body on the real VM, each followed by a read of it
        path = f"/api/v3/vm/{real[0]}"
        check(path, exchange(service, "PUT", encode("PUT", path, auth, body)))
        check(path, exchange(service, "GET", encode("GET", path, {}, b"")))
    sent = list(generated(service, rng, token["token"], real))
    assert len(sent) > 400
    for method, target, request in sent:
        check(target, exchange(service, method, request))
    # slow: every request arrives in two halves, interleaved with a hundred others
    sample = rng.sample(sent, 100)
    sockets = [socket.create_connection((service.host, service.port), timeout=10)
               for _ in sample]
    try:
        halves = [len(request) // 2 for _, _, request in sample]
        for sock, (_, _, request), half in zip(sockets, sample, halves, strict=True):
            sock.sendall(request[:half])
        for sock, (_, _, request), half in zip(sockets, sample, halves, strict=True):
            sock.sendall(request[half:])
        for sock, (method, target, _) in zip(sockets, sample, strict=True):
            check(target, read_one(sock, method))
    finally:
        for sock in sockets:
            sock.close()
    # truncated: a prefix, then the client goes away
    for _, _, request in rng.sample(sent, 100):
        with socket.create_connection((service.host, service.port), timeout=10) as sock:
            sock.sendall(request[:rng.randrange(1, len(request))])
    assert service.request("GET", "/api/v3/vm", timeout=1.0).status == 200
    for value in real:  # whatever the fuzz did to them, they are still described
        check(f"/api/v3/vm/{value}", exchange(service, "GET", encode(
            "GET", f"/api/v3/vm/{value}", {}, b"")))
        check(f"/api/v3/ondemandvm/{value}", exchange(service, "GET", encode(
            "GET", f"/api/v3/ondemandvm/{value}", {}, b"")))
    def unmarked(key: str) -> str:
        """The key without the names the service drew itself, which may hold the mark by
        chance: the real VM, request and token, and tokens the fuzz's valid logins made
        (``vmpooler__token__…jinj…`` was one)."""
        for value in real:
            key = key.replace(value, "")
        return SERVER_TOKEN.sub("", key)

    hostile = [key for key in redis_keys(service) if MARK in unmarked(key) or "\n" in key]
    assert not hostile, hostile[:10]
    assert "Traceback" not in service.log_text()


OVERSIZED = {
    "body": (b"POST /api/v3/vm HTTP/1.1\r\nHost: p\r\nContent-Length: 2000000\r\n\r\n"
             + b"{" * 2_000_000, 413),
    "chunked body": (b"POST /api/v3/ondemandvm HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: "
                     b"chunked\r\n\r\n" + b"100000\r\n" + b"{" * 0x100000 + b"\r\n" * 2, 413),
    "request line": (b"GET /api/v3/vm/" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", 414),
    "head": (b"GET /api/v3/vm HTTP/1.1\r\n" + b"X-Inj: " + b"b" * 8000 + b"\r\n" * 1
             + b"X-More: c\r\n" * 9000 + b"\r\n", 431),
    "content length": (b"POST /api/v3/vm HTTP/1.1\r\nContent-Length: " + b"9" * 5000
                       + b"\r\n\r\n", 413),
    "not http": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)), 400),
    "header field": (b"GET /api/v3/vm HTTP/1.1\r\nX-Big: " + b"d" * 20000 + b"\r\n\r\n", 431),
}


@pytest.mark.parametrize("kind", list(OVERSIZED))
def test_oversized_requests_get_a_json_refusal(service: Service, kind: str) -> None:
    request, status = OVERSIZED[kind]
    with socket.create_connection((service.host, service.port), timeout=10) as sock:
        # refused before the client finished sending: the answer is waiting all the same
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        answer = read_one(sock)
    assert answer.status == status, (kind, answer.status, answer.body[:200])
    assert json.loads(answer.body)["ok"] is False
    assert service.request("GET", "/api/v3/vm", timeout=1.0).status == 200
