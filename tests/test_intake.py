"""Where a request ends (web/intake.py), against gunicorn's own parser.

The property: however a well-formed request is split into reads, the intake says MORE
until its last byte and COMPLETE on it, and what it hands on parses in gunicorn to the same
method, path, headers and body. Then each refusal, and the ``Expect: 100-continue`` dance.
"""

from __future__ import annotations

import io

from gunicorn.config import Config
from gunicorn.http import get_parser
from hypothesis import given, settings
from hypothesis import strategies as st

from vmpooler.web.intake import IntakeLimits, RequestIntake, Verdict, whole_simple_request

LIMITS = IntakeLimits(max_line=8190, max_head=64 * 1024, max_body=100_000)
TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-", min_size=1,
                max_size=20)
VALUE = st.text("abcdefghijklmnopqrstuvwxyz0123456789 ;,=/._-", max_size=40).map(str.strip)


def parse(data: bytes) -> list[tuple[str, str, list[tuple[str, str]], bytes]]:
    """Every request gunicorn finds in ``data``: method, path, headers, body."""
    found = []
    for request in get_parser(Config(), iter([data]), ("127.0.0.1", 1)):
        found.append((request.method, request.path, request.headers, request.body.read()))
    return found


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A well-formed request as bytes, and its body."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
    path = "/" + "/".join(draw(st.lists(TOKEN, max_size=4)))
    headers = [(f"X-{name}", value) for name, value in draw(st.lists(st.tuples(TOKEN, VALUE),
                                                                       max_size=6))]
    body = draw(st.binary(max_size=3000)) if method in ("POST", "PUT") else b""
    chunked = bool(body) and draw(st.booleans())
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
        sizes = draw(st.lists(st.integers(1, 700), min_size=1, max_size=8))
        encoded, at = b"", 0
        for size in sizes:
            piece = body[at:at + size]
            if piece:
                encoded += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
            at += size
        encoded += f"{len(body[at:]):x}\r\n".encode() + body[at:] + b"\r\n" if body[at:] else b""
        encoded += b"0\r\n\r\n"
        wire_body = encoded
    else:
        if body or draw(st.booleans()):
            headers.append(("Content-Length", str(len(body))))
        wire_body = body
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers)
    return head.encode() + b"\r\n" + wire_body, body


def feed_in_pieces(intake: RequestIntake, data: bytes, cuts: list[int]) -> list[Verdict]:
    verdicts, at = [], 0
    for cut in [*sorted(set(cuts)), len(data)]:
        if cut > at:
            verdicts.append(intake.feed(data[at:cut]))
            at = cut
    return verdicts


@settings(max_examples=300, deadline=None)
@given(requests(), st.lists(st.integers(0, 4000), max_size=12))
def test_a_request_is_complete_on_its_last_byte_and_parses_the_same(
        request: tuple[bytes, bytes], cuts: list[int]) -> None:
    data, body = request
    intake = RequestIntake(LIMITS)
    verdicts = feed_in_pieces(intake, data, [c for c in cuts if c < len(data)])
    assert verdicts[-1] is Verdict.COMPLETE
    assert all(v is Verdict.MORE for v in verdicts[:-1])
    assert intake.take() == data
    [(method, path, _, parsed_body)] = parse(intake.take())
    assert parsed_body == body
    assert (method, path) == (data.split(b" ")[0].decode(), data.split(b" ")[1].decode())


@settings(max_examples=100, deadline=None)
@given(requests(), requests())
def test_pipelined_requests_complete_with_the_first(first: tuple[bytes, bytes],
                                                    second: tuple[bytes, bytes]) -> None:
    intake = RequestIntake(LIMITS)
    assert intake.feed(first[0] + second[0][:5]) is Verdict.COMPLETE
    intake.feed(second[0][5:])
    assert [found[3] for found in parse(intake.take())] == [first[1], second[1]]


def test_bare_line_feeds_and_leading_blank_lines_are_framed() -> None:
    assert RequestIntake(LIMITS).feed(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n") is Verdict.COMPLETE
    intake = RequestIntake(LIMITS)
    assert intake.feed(b"POST / HTTP/1.1\nContent-Length: 2\n\nh") is Verdict.MORE
    assert intake.feed(b"i") is Verdict.COMPLETE


def test_expect_continue_is_asked_once_and_not_handed_on() -> None:
    intake = RequestIntake(LIMITS)
    head = b"POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
    assert intake.feed(head[:20]) is Verdict.MORE
    assert intake.feed(head[20:]) is Verdict.CONTINUE
    assert intake.feed(b"a") is Verdict.MORE
    assert intake.feed(b"bc") is Verdict.COMPLETE
    handed = intake.take()
    assert b"Expect" not in handed
    [(_, _, headers, body)] = parse(handed)
    assert body == b"abc" and ("CONTENT-LENGTH", "3") in headers
    last = RequestIntake(LIMITS)  # the Expect line last in the head
    assert last.feed(b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n"
                     ) is Verdict.CONTINUE
    assert last.feed(b"z") is Verdict.COMPLETE
    assert parse(last.take())[0][3] == b"z"
    old = RequestIntake(LIMITS)  # HTTP/1.0 ignores the expectation (RFC 9110 §10.1.1)
    assert old.feed(b"POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n"
                    ) is Verdict.MORE


def refusal(data: bytes, limits: IntakeLimits = LIMITS, step: int = 0) -> tuple[int, str]:
    intake = RequestIntake(limits)
    pieces = [data[i:i + step] for i in range(0, len(data), step)] if step else [data]
    verdicts = [intake.feed(piece) for piece in pieces]
    assert verdicts[-1] is Verdict.REFUSED, verdicts[-1]
    assert intake.refusal is not None
    return intake.refusal.status, intake.refusal.message


def test_refusals() -> None:
    small = IntakeLimits(max_line=100, max_head=1000, max_body=10)
    assert refusal(b"\x16\x03\x01\x02\x00") == (400, "the request line is not HTTP")
    assert refusal(b"GET\t/ HTTP/1.1\r\n")[0] == 400
    assert refusal(b"GET /" + b"a" * 200, small, step=7)[0] == 414
    assert refusal(b"GET /" + b"a" * 200 + b" HTTP/1.1\r\n", small)[0] == 414
    assert refusal(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 300, small, step=13) == (
        431, "the request head is larger than 1000 bytes")
    assert refusal(b"\r\n" * 600, small)[0] == 431
    assert refusal(b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", small) == (
        413, "the request body is larger than 10 bytes")
    assert refusal(b"POST / HTTP/1.1\r\nContent-Length: " + b"9" * 4000 + b"\r\n\r\n")[0] == 413
    chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert refusal(chunked + b"8\r\n12345678\r\n8\r\n", small)[0] == 413
    assert refusal(chunked + b"zz\r\n")[0] == 400
    assert refusal(chunked + b"1" * 2000)[0] == 400


def test_what_gunicorn_refuses_at_once_is_handed_on() -> None:
    for head in (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                 b"POST / HTTP/1.1\r\nContent-Length: x1\r\n\r\n",
                 b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
                 b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"):
        intake = RequestIntake(LIMITS)
        assert intake.feed(head) is Verdict.COMPLETE, head
        try:
            parse(intake.take())
        except Exception as exc:  # gunicorn's 400 (InvalidHeader, UnsupportedTransferCoding…)
            assert type(exc).__module__ == "gunicorn.http.errors", exc
        else:
            raise AssertionError(f"gunicorn accepted {head!r}")


def test_a_head_fed_byte_by_byte_is_scanned_incrementally() -> None:
    data = b"GET / HTTP/1.1\r\n" + b"X-Filler: " + b"a" * 60000 + b"\r\n\r\n"
    intake = RequestIntake(LIMITS)
    stream = io.BytesIO(data)
    verdicts = [intake.feed(stream.read(1)) for _ in range(len(data))]
    assert verdicts[-1] is Verdict.COMPLETE and verdicts.count(Verdict.COMPLETE) == 1


@settings(max_examples=300, deadline=None)
@given(requests(), st.integers(0, 40))
def test_the_fast_path_agrees_with_the_intake(request: tuple[bytes, bytes], cut: int) -> None:
    data, _ = request
    for candidate in (data, data[:len(data) - cut], data + b"GET / HTTP/1.1\r\n\r\n"):
        if whole_simple_request(candidate, LIMITS):
            intake = RequestIntake(LIMITS)
            assert intake.feed(candidate) is Verdict.COMPLETE
            assert intake.take() == candidate
    simple = b"Transfer-Encoding" not in data
    assert whole_simple_request(data, LIMITS) == simple


def test_the_fast_path_leaves_the_unusual_to_the_intake() -> None:
    for data in (b"get / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
                 b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
                 b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nx",
                 b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                 b"GET / HTTP/1.1\n\n", b"\x16\x03\x01",
                 b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
                 b"POST / HTTP/1.1\r\nContent-Length: 200000\r\n\r\n" + b"x" * 200000):
        assert not whole_simple_request(data, LIMITS), data[:60]
    assert whole_simple_request(b"POST /vm HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}", LIMITS)
