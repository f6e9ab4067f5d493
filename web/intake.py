"""Where an HTTP/1.x request ends, decided from its bytes as they arrive.

The API's worker (:mod:`vmpooler.web.worker`) reads every request whole in its event loop
before a thread takes it, so a slow or silent client holds a socket, never a thread.
:class:`RequestIntake` is that reading's bookkeeping, with no socket in it: :meth:`feed`
it bytes and it says whether the request is complete, needs more, or must be refused (and
with which status). It frames a request exactly as far as needed to know its length:

* the head ends at the first empty line (``CRLF CRLF``, or a bare ``LF LF``);
* ``Transfer-Encoding`` naming ``chunked`` last: the body is chunked, and ends after the
  ``0`` chunk and its trailer section;
* else ``Content-Length``: that many bytes;
* else no body (RFC 9112 §6.3).

What it cannot frame but gunicorn's parser will refuse on its own without waiting for more
bytes (two differing ``Content-Length`` values, one that is not a number, a
``Transfer-Encoding`` that is not chunked) is handed on as complete: gunicorn answers 400.
What it refuses itself, each with a status: a method that is not an HTTP token (400), a
request line longer than ``max_line`` (414), a head longer than ``max_head`` (431), a body
longer than ``max_body`` (413), a malformed chunk size line (400).

``Expect: 100-continue``: :meth:`feed` says when to send ``100 Continue`` (once, when the
head is complete and the body is not), and the line is taken out of the bytes handed on,
so gunicorn does not send a second one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["IntakeLimits", "Refusal", "RequestIntake", "Verdict", "whole_simple_request"]

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_CHUNK_LINE_MAX = 1024
_LENGTH = re.compile(rb"\ncontent-length:[ \t]*([0-9]{1,18})[ \t]*\r?\n")


@dataclass(frozen=True, slots=True)
class IntakeLimits:
    """The largest request line, head and body accepted, in bytes."""

    max_line: int = 8190
    max_head: int = 64 * 1024
    max_body: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused before any thread saw it: the status, its reason phrase, why."""

    status: int
    reason: str
    message: str


class Verdict(Enum):
    """What :meth:`RequestIntake.feed` concluded."""

    MORE = "more"
    """Not complete yet: wait for more bytes."""
    CONTINUE = "continue"
    """Not complete; the client waits for ``100 Continue`` before sending its body."""
    COMPLETE = "complete"
    """The request is all here: :meth:`RequestIntake.take` gives its bytes."""
    REFUSED = "refused"
    """Refused: :attr:`RequestIntake.refusal` says with what."""


class RequestIntake:
    """Accumulates one request's bytes (and anything pipelined behind them).

    Not thread-safe: one event loop owns it. After ``COMPLETE`` or ``REFUSED`` further
    :meth:`feed` calls only append bytes and repeat the verdict.
    """

    __slots__ = ("_body_start", "_buffer", "_chunk_at", "_continue_sent", "_end",
                 "_expect_span", "_framing", "_length", "_limits", "_line_seen", "_line_start",
                 "_method_seen", "_scan_from", "refusal")

    def __init__(self, limits: IntakeLimits) -> None:
        self._limits = limits
        self._buffer = bytearray()
        self._body_start = -1  # index just past the head, once known
        self._framing = ""  # "none", "length", "chunked" or "gunicorn", once known
        self._length = 0  # Content-Length when framing is "length"
        self._chunk_at = 0  # where the next chunk size line starts (chunked)
        self._end = -1  # index just past the request, once complete
        self._expect_span: tuple[int, int] | None = None
        self._continue_sent = False
        self._line_start = -1  # where the request line starts, past leading blank lines
        self._method_seen = False
        self._line_seen = False
        self._scan_from = 0  # bytes before this were looked at already
        self.refusal: Refusal | None = None

    @property
    def started(self) -> bool:
        """Whether any byte of the request arrived."""
        return bool(self._buffer)

    def __len__(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> Verdict:
        """Add ``data`` and say where the request stands."""
        self._buffer += data
        if self.refusal is not None:
            return Verdict.REFUSED
        if self._end >= 0:
            return Verdict.COMPLETE
        verdict = self._advance()
        if verdict is Verdict.MORE and self._wants_continue():
            self._continue_sent = True
            return Verdict.CONTINUE
        return verdict

    def take(self) -> bytes:
        """The bytes to hand on (the request, anything after it, no ``Expect`` line)."""
        data = bytes(self._buffer)
        if self._expect_span is not None:
            start, end = self._expect_span
            data = data[:start] + data[end:]
        return data

    # -- framing ----------------------------------------------------------------------
    def _refuse(self, status: int, reason: str, message: str) -> Verdict:
        self.refusal = Refusal(status, reason, message)
        return Verdict.REFUSED

    def _advance(self) -> Verdict:
        if self._body_start < 0:
            verdict = self._read_head()
            if verdict is not None:
                return verdict
        if self._framing == "chunked":
            return self._read_chunks()
        if self._framing == "length":
            if len(self._buffer) - self._body_start >= self._length:
                self._end = self._body_start + self._length
                return Verdict.COMPLETE
            return Verdict.MORE
        self._end = self._body_start
        return Verdict.COMPLETE

    def _read_head(self) -> Verdict | None:
        """Find the end of the head and the framing; None once both are known.

        Incremental: each byte of the head is looked at a bounded number of times, however
        the bytes are split between calls."""
        buffer, limits = self._buffer, self._limits
        if self._line_start < 0:
            start = self._scan_from
            while start < len(buffer) and buffer[start] in b"\r\n":  # RFC 9112 §2.2
                start += 1
            self._scan_from = start
            if start == len(buffer):
                if start > limits.max_head:
                    return self._refuse(431, "Request Header Fields Too Large",
                                        f"the request head is larger than {limits.max_head} "
                                        "bytes")
                return Verdict.MORE
            self._line_start = start
        start = self._line_start
        if not self._method_seen:
            method = _TOKEN.match(buffer, start)
            method_end = method.end() if method else start
            if method_end < len(buffer):
                if buffer[method_end] != 0x20:
                    return self._refuse(400, "Bad Request", "the request line is not HTTP")
                self._method_seen = True
        if not self._line_seen:
            line_end = buffer.find(b"\n", self._scan_from)
            if line_end < 0:
                self._scan_from = len(buffer)
                if len(buffer) - start > limits.max_line:
                    return self._refuse(414, "URI Too Long", "the request line is longer than "
                                        f"{limits.max_line} bytes")
                return Verdict.MORE
            if line_end - start > limits.max_line:
                return self._refuse(414, "URI Too Long",
                                    f"the request line is longer than {limits.max_line} bytes")
            self._line_seen = True
            self._scan_from = line_end
        end, sep = _head_end(buffer, max(start, self._scan_from - 3))
        if end < 0 or end > limits.max_head:
            self._scan_from = len(buffer)
            if end > limits.max_head or len(buffer) > limits.max_head:
                return self._refuse(431, "Request Header Fields Too Large",
                                    f"the request head is larger than {limits.max_head} bytes")
            return Verdict.MORE
        self._body_start = end + sep
        return self._frame(start, end + sep // 2)

    def _frame(self, start: int, stop: int) -> Verdict | None:
        """Read the framing headers of the head ``buffer[start:stop]`` (each line with its
        line feed)."""
        lengths: set[bytes] = set()
        chunked = False
        other_coding = False
        version_11 = False
        offset = start
        for number, raw in enumerate(bytes(self._buffer[start:stop]).split(b"\n")):
            line = raw.rstrip(b"\r")
            line_start, offset = offset, offset + len(raw) + 1
            if number == 0:
                version_11 = line.endswith(b"HTTP/1.1")
                continue
            name, colon, value = line.partition(b":")
            if not colon:
                continue
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                lengths.add(value)
            elif name == b"transfer-encoding":
                codings = [c.strip().lower() for c in value.split(b",") if c.strip()]
                chunked = bool(codings) and codings[-1] == b"chunked"
                other_coding = not chunked
            elif name == b"expect" and value.lower() == b"100-continue" and version_11:
                self._expect_span = (line_start, min(offset, stop))
        if other_coding or (chunked and lengths) or len(lengths) > 1:
            return self._hand_on()  # gunicorn refuses these at once: nothing to wait for
        if chunked:
            self._framing = "chunked"
            self._chunk_at = self._body_start
            return None
        if lengths:
            value = next(iter(lengths))
            if not value.isdigit():
                return self._hand_on()
            if len(value) > 18 or int(value) > self._limits.max_body:
                return self._refuse(413, "Content Too Large",
                                    f"the request body is larger than {self._limits.max_body} "
                                    "bytes")
            self._length = int(value)
            self._framing = "length"
            return None
        self._framing = "none"
        return None

    def _hand_on(self) -> Verdict:
        self._framing = "gunicorn"
        self._end = len(self._buffer)
        return Verdict.COMPLETE

    def _read_chunks(self) -> Verdict:
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n", self._chunk_at)
            if line_end < 0:
                if len(buffer) - self._chunk_at > _CHUNK_LINE_MAX:
                    return self._refuse(400, "Bad Request", "a chunk size line is too long")
                return Verdict.MORE
            size_text = bytes(buffer[self._chunk_at:line_end]).split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size_text):
                return self._refuse(400, "Bad Request", "a chunk size is not a number")
            size = int(size_text, 16)
            if size == 0:
                return self._read_trailers(line_end + 2)
            data_end = line_end + 2 + size + 2
            if data_end - self._body_start > self._limits.max_body:
                return self._refuse(413, "Content Too Large",
                                    f"the request body is larger than {self._limits.max_body} "
                                    "bytes")
            if len(buffer) < data_end:
                return Verdict.MORE
            self._chunk_at = data_end

    def _read_trailers(self, at: int) -> Verdict:
        buffer = self._buffer
        if buffer.startswith(b"\r\n", at):
            self._end = at + 2
            return Verdict.COMPLETE
        end = buffer.find(b"\r\n\r\n", at)
        if end < 0:
            if len(buffer) - at > self._limits.max_head:
                return self._refuse(431, "Request Header Fields Too Large",
                                    "the trailer section is too large")
            return Verdict.MORE
        self._end = end + 4
        return Verdict.COMPLETE

    def _wants_continue(self) -> bool:
        return (self._expect_span is not None and not self._continue_sent
                and self._body_start >= 0 and self._end < 0)


def _head_end(buffer: bytearray, start: int) -> tuple[int, int]:
    """Index of the empty line ending the head and its length, or ``(-1, 0)``."""
    crlf = buffer.find(b"\r\n\r\n", start)
    lf = buffer.find(b"\n\n", start)
    if crlf >= 0 and (lf < 0 or crlf + 1 <= lf):
        return crlf, 4
    if lf >= 0:
        return lf, 2
    return -1, 0


def whole_simple_request(data: bytes, limits: IntakeLimits) -> bool:
    """Whether ``data`` is exactly one whole request framed the simple way: an upper-case
    method, a request line within ``limits``, a head ending in ``CRLF CRLF``, no
    ``Transfer-Encoding`` and no ``Expect``, and either no ``Content-Length`` or one whose
    body is all there, within ``limits``.

    The fast path of :class:`RequestIntake`, in a few C-level scans: what it accepts, the
    intake would find COMPLETE with the same bytes to hand on; anything else (False) goes
    through the intake. Most requests of most clients are this simple."""
    space = data.find(b" ", 0, 21)
    if space < 1 or not data[:space].isalpha() or not data[:space].isupper():
        return False
    end = data.find(b"\r\n\r\n")
    if end < 0 or end + 4 > limits.max_head or data.find(b"\n") > limits.max_line:
        return False
    head = data[:end + 2].lower()
    if b"\ntransfer-encoding:" in head or b"\nexpect:" in head:
        return False
    lengths = head.count(b"\ncontent-length:")
    if lengths == 0:
        return len(data) == end + 4
    if lengths > 1:
        return False
    match = _LENGTH.search(head)
    if match is None:
        return False
    length = int(match.group(1))
    return length <= limits.max_body and len(data) == end + 4 + length
