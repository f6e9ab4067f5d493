"""A real OTLP/HTTP trace receiver for the tests: :class:`OtlpReceiver`, an HTTP server on
a free loopback port that decodes each ``POST /v1/traces`` (``ExportTraceServiceRequest``
protobuf, with opentelemetry-proto's classes) into :class:`ReceivedSpan` records."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["OtlpReceiver", "ReceivedSpan", "otlp_receiver"]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: ids in hex (``parent`` '' for a root), its resource's
    ``service.name``, its attributes and events' names."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent: str
    kind: int
    attributes: dict[str, Any]
    events: tuple[str, ...]
    status_code: int  # 0 unset, 1 ok, 2 error
    start: float = 0.0  # epoch seconds
    end: float = 0.0


class OtlpReceiver:
    """Collects every span exported to :attr:`url` (``http://127.0.0.1:<port>/v1/traces``);
    :attr:`posts` counts the export requests, :attr:`headers` holds each one's headers
    (names in lower case)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._take(request, self.path,
                               {k.lower(): v for k, v in self.headers.items()})
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True,
                                        name="otlp-receiver")

    def _take(self, request: ExportTraceServiceRequest, path: str,
              headers: dict[str, str]) -> None:
        found = []
        for resource_spans in request.resource_spans:
            service = next((_value(a.value) for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    found.append(ReceivedSpan(
                        service=service, name=span.name, trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(), parent=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        events=tuple(e.name for e in span.events),
                        status_code=span.status.code,
                        start=span.start_time_unix_nano / 1e9,
                        end=span.end_time_unix_nano / 1e9))
        with self._lock:
            self.posts += 1
            self.headers.append(headers)
            if path == "/v1/traces":
                self.spans.extend(found)

    def named(self, name: str) -> list[ReceivedSpan]:
        """The spans received so far called ``name``."""
        with self._lock:
            return [span for span in self.spans if span.name == name]

    def all(self) -> list[ReceivedSpan]:
        """Every span received so far."""
        with self._lock:
            return list(self.spans)

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A running :class:`OtlpReceiver`, stopped after."""
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()
