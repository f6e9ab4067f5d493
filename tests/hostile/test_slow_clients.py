"""Slow, stalled and idle connections against a real ``vmpooler run`` and ``vmpooler api``.

gunicorn's gthread worker gave each connection a thread that then blocked reading it: eight
connections sending a header line every few seconds made the API unavailable. Here 10x the
thread count and then 500 connections stall at each stage of a request, and a well-formed
request from another client must still be answered within a second (the client's socket
timeout: no answer in time fails the test). Then the read deadline and the connection cap
of a service configured small, and what they count in the metrics.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import wait_until
from tests.hostile.service import Service, start_service

pytestmark = pytest.mark.integration

STALLS = {
    "silent": b"",
    "half a head": b"GET /api/v3/status HTTP/1.1\r\nHost: pooler\r\nX-Slow: 1\r\n",
    "half a body": b"POST /api/v3/vm HTTP/1.1\r\nHost: pooler\r\nContent-Type: application/json"
                   b"\r\nContent-Length: 900\r\n\r\n{\"alpha\"",
}


def stall(service: Service, count: int, payload: bytes) -> list[socket.socket]:
    held = []
    for _ in range(count):
        sock = socket.create_connection((service.host, service.port), timeout=5)
        if payload:
            sock.sendall(payload)
        held.append(sock)
    return held


def release(held: list[socket.socket]) -> None:
    for sock in held:
        sock.close()


def answered_within_a_second(service: Service) -> None:
    for method, path in (("GET", "/api/v3/vm"), ("GET", "/api/v3/status"),
                         ("GET", "/healthcheck")):
        assert service.request(method, path, timeout=1.0).status == 200


@pytest.mark.parametrize("count", [80, 500])
@pytest.mark.parametrize("kind", list(STALLS))
def test_stalled_connections_do_not_delay_other_clients(service: Service, kind: str,
                                                        count: int) -> None:
    held = stall(service, count, STALLS[kind])
    try:
        answered_within_a_second(service)
    finally:
        release(held)
    assert service.alive()


def samples(service: Service) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = service.request("GET", "/prometheus").body.decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def refused(service: Service, reason: str) -> float:
    return sum(value for (name, labels), value in samples(service).items()
               if name == "vmpooler_api_connections_refused_total"
               and ("reason", reason) in labels)


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``vmpooler run`` allowing 1 s per request and 30 connections."""
    service = start_service(tmp_path_factory.mktemp("strict"), "run", {
        ":config": {"api_read_timeout": 1, "api_max_connections": 30}})
    yield service
    service.stop()


def closed_by_server(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_request_that_does_not_arrive_in_time_is_answered_408_and_counted(
        strict: Service) -> None:
    late = stall(strict, 1, STALLS["half a head"])[0]
    silent = stall(strict, 1, b"")[0]
    try:
        answer = closed_by_server(late)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert answer.endswith(b'"error": "Request Timeout: the request did not arrive '
                               b'within 1 s"\n}')
        assert closed_by_server(silent) == b""
    finally:
        release([late, silent])
    wait_until(lambda: refused(strict, "read_timeout") >= 1
               and refused(strict, "idle_timeout") >= 1, 15, "the refusals to be counted")


def test_beyond_the_connection_cap_the_longest_waiting_make_room(strict: Service) -> None:
    held = stall(strict, 90, STALLS["half a body"])
    try:
        answered_within_a_second(strict)
        assert closed_by_server(held[0]) == b""  # the longest waiting went first
    finally:
        release(held)
    wait_until(lambda: refused(strict, "evicted") >= 60, 15, "the evictions to be counted")


def test_oversized_requests_are_refused_before_any_thread(strict: Service) -> None:
    answer = strict.request("POST", "/api/v3/vm", b"{" * 10,
                            headers={"Content-Length": str(2 * 1024 * 1024)})
    assert (answer.status, answer.json) == (
        413, {"ok": False, "error": "Content Too Large: the request body is larger than "
                                    "1048576 bytes"})
    wait_until(lambda: refused(strict, "too_large") >= 1, 15, "the refusal to be counted")
