"""Falcon middleware of the API: request timing, request log and rate limiter.

:func:`build_middleware` gives the stack ``create_app`` installs, outermost first (Falcon
calls ``process_request`` in list order and ``process_response`` in reverse, and runs every
``process_response`` even when a ``process_request`` raised):

1. :class:`RequestTimer`, always: one start stamp per request, and per response the
   ``http_request`` timing and every other observer of the duration (the Prometheus HTTP
   families, :mod:`vmpooler.web.api_prometheus`);
2. :class:`RequestLogger` if ``request_logger`` is set (reference §1.7);
3. :class:`RateLimiter` if ``rate_limiting_enabled`` is set (reference §1.6);

and first of all :class:`RequestSpan` when tracing is on (docs/tracing.md).

As in vmpooler's Rack stack (§1.1), ``/healthcheck`` is neither rate limited nor logged, and
a rejected (429) request is still logged. ``/api/v3/openapi.json`` (ours) is not limited;
``/api/v3/readiness`` (ours, a probe) is neither limited nor logged.

Divergences from vmpooler 3.9.1:

* the limiter decides in one Redis round trip (a Lua script, see
  :mod:`vmpooler.actors.storage.ratelimit_store`), so concurrent requests cannot overshoot the limit
  as vmpooler's GET-then-pipeline could;
* only a valid token gets its own counter and the ``authenticated`` class; a made-up or empty
  token header counts by address as ``global_per_ip`` (vmpooler gave every header value a
  fresh counter: a random token per request was never limited);
* behind ``trusted_proxies`` the address is the forwarded client's
  (:mod:`vmpooler.web.clientaddr`);
* an IPv6 client is counted by its network of ``ipv6_prefix_length`` bits (default /64), an
  IPv4-mapped one by its IPv4 address (vmpooler: each address apart);
* **fixed window**: a counter's TTL is set when it is created, not refreshed by every
  accepted request (vmpooler's sliding expiry eventually rejected slow, steady clients);
* the request log line ends with ``Body: <n> bytes`` where vmpooler printed the Rack body
  object's ``inspect`` (useless, and a way to leak tokens into logs), and its path has the
  token of ``/api/v3/token/<token>`` masked (control characters are escaped by the log
  formatter, :mod:`vmpooler.web.logsafe`);
* the timer (``http_request`` timing tagged ``method`` and ``status``) is ours.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import falcon
import redis

from vmpooler.actors.storage.ratelimit_store import Bucket, RateLimitStore
from vmpooler.actors.tracing import Span
from vmpooler.web.api_context import ApiContext
from vmpooler.web.api_errors import ApiError
from vmpooler.web.clientaddr import TrustedProxies
from vmpooler.web.logsafe import redact_path
from vmpooler.web.tokens import TOKEN_HEADER, well_formed

__all__ = [
    "EXEMPT_PATHS",
    "RateLimiter",
    "RequestLogger",
    "RequestObserver",
    "RequestSpan",
    "RequestTimer",
    "build_middleware",
    "limit_class",
]

log = logging.getLogger(__name__)
request_log = logging.getLogger("vmpooler.web.requests")

#: Paths the rate limiter never counts (compared after trailing-slash stripping).
EXEMPT_PATHS: frozenset[str] = frozenset({"/healthcheck", "/api/v3/openapi.json",
                                          "/api/v3/readiness"})
#: Paths the request logger never logs (vmpooler mounted ``/healthcheck`` outside its
#: logger; the readiness probe is polled as often).
UNLOGGED_PATHS: frozenset[str] = frozenset({"/healthcheck", "/api/v3/readiness"})

_START = "vmpooler_request_started"

RequestObserver = Callable[[falcon.Request, falcon.Response, float], None]
"""Called with each finished request, its response and its duration in seconds."""


def limit_class(method: str, path: str, valid_token: bool) -> str:
    """The class of a request: ``vm_creation`` (POST with ``/vm`` in the path, so disk and
    snapshot POSTs too, but not ``/ondemandvm``), ``vm_deletion`` (DELETE with ``/vm``),
    ``authenticated`` (it carries a valid API token) or ``global_per_ip``.

    Divergence from vmpooler 3.9.1: vmpooler's ``authenticated`` was any request with the
    token header present, even empty or made up, so any client could buy the higher limit.
    """
    if "/vm" in path:
        if method == "POST":
            return "vm_creation"
        if method == "DELETE":
            return "vm_deletion"
    return "authenticated" if valid_token else "global_per_ip"


class RequestTimer:
    """Times every request once and hands the duration to each observer: first
    ``metrics.timing("http_request", seconds, tags={"method", "status"})`` through
    ``ctx.metrics``, then ``observers`` in order. An observer that raises is logged at debug
    level and skipped: timing never fails a request."""

    def __init__(self, ctx: ApiContext, observers: Sequence[RequestObserver] = (),
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self._ctx = ctx
        self._timer = timer
        self._observers: tuple[RequestObserver, ...] = (self._timing, *observers)

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Note when the request started."""
        setattr(req.context, _START, self._timer())

    def process_response(self, req: falcon.Request, resp: falcon.Response,
                         resource: object, req_succeeded: bool) -> None:
        """Tell the observers (skipped if the request never reached ``process_request``)."""
        started = getattr(req.context, _START, None)
        if started is None:
            return
        seconds = max(0.0, self._timer() - started)
        for observe in self._observers:
            try:
                observe(req, resp, seconds)
            except Exception:  # a metrics backend must never break a response
                log.debug("[!] [api] request timing observer failed", exc_info=True)

    def _timing(self, req: falcon.Request, resp: falcon.Response, seconds: float) -> None:
        self._ctx.metrics.timing("http_request", seconds,
                                 tags={"method": req.method, "status": str(resp.status_code)})


_SPAN = "vmpooler_request_span"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class RequestSpan:
    """One server span per request, named ``<METHOD> <route template>``
    (``POST /api/v3/ondemandvm``, ``GET /api/v3/vm/{hostname}``; the method alone when no
    route matched), never the raw path: a token or a VM name in the path stays out of the
    trace, and the names stay few (a method other than the usual ones is ``_OTHER``, as
    OpenTelemetry's conventions say). Attributes: ``http.request.method``, ``http.route``,
    ``http.response.status_code``; a 5xx marks it failed. It is the current span while the
    request runs, so the Redis scripts' spans and the commands sent to the manager hang
    under it."""

    def __init__(self, ctx: ApiContext) -> None:
        self._tracer = ctx.tracer

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Start the request's span and make it current."""
        method = req.method if req.method in _METHODS else "_OTHER"
        span = self._tracer.start(method, kind="server",
                                  attributes={"http.request.method": method})
        span.__enter__()
        setattr(req.context, _SPAN, span)

    def process_response(self, req: falcon.Request, resp: falcon.Response,
                         resource: object, req_succeeded: bool) -> None:
        """Name the span after the route, note the status and end it."""
        span: Span | None = getattr(req.context, _SPAN, None)
        if span is None:
            return
        template = req.uri_template
        if template:
            method = req.method if req.method in _METHODS else "_OTHER"
            span.rename(f"{method} {template}")
            span.set("http.route", template)
        status = resp.status_code
        span.set("http.response.status_code", status)
        if status >= 500:
            span.fail(f"HTTP {status}")
        span.__exit__(None, None, None)


def _body_length(resp: falcon.Response) -> str:
    """The response body size in bytes, or ``stream`` when it is not known up front."""
    if resp.stream is not None:
        return "stream"
    body = resp.render_body()
    return str(len(body) if body is not None else 0)


class RequestLogger:
    """One INFO line per response on ``vmpooler.web.requests``:
    ``[ ] API: Method: <verb>, Status: <code>, Path: <path>, Body: <n> bytes``.

    The path is the decoded one (as vmpooler logged it) with the token of
    ``/api/v3/token/<token>`` masked (:func:`~vmpooler.web.logsafe.redact_path`); its control
    characters are escaped by the log formatter (:mod:`vmpooler.web.logsafe`). No header, query
    string or body is logged."""

    def __init__(self, unlogged: Iterable[str] = UNLOGGED_PATHS) -> None:
        self._unlogged = frozenset(unlogged)

    def process_response(self, req: falcon.Request, resp: falcon.Response,
                         resource: object, req_succeeded: bool) -> None:
        """Log the finished request."""
        if req.path in self._unlogged or not request_log.isEnabledFor(logging.INFO):
            return
        request_log.info("[ ] API: Method: %s, Status: %d, Path: %s, Body: %s bytes",
                         req.method, resp.status_code, redact_path(req.path), _body_length(resp))


class RateLimiter:
    """vmpooler's rate limiter (reference §1.6), one Redis round trip per request.

    Each request is counted under ``vmpooler__ratelimit__<class>__<client>`` against
    ``ctx.config.rate_limits[<class>]`` (``limit`` requests per ``period`` seconds, vmpooler's
    defaults merged with the ``:rate_limits:`` section). The client is
    ``token:<X-AUTH-TOKEN>`` **only when that token exists** (the Lua script checks
    ``vmpooler__token__<token>`` in the same round trip; a header that is not a well-formed
    token is not even looked up); otherwise ``ip:<address>``, the address being the peer's or,
    behind ``trusted_proxies``, the forwarded one, an IPv6 address as its network of
    ``ipv6_prefix_length`` bits (``ip:2001:db8:1:2::/64``, :mod:`vmpooler.web.clientaddr`).
    The class follows the counter (:func:`limit_class`): a made-up or empty token is
    ``global_per_ip`` by address, never ``authenticated``. Over the limit the request is
    answered 429 with ``X-RateLimit-Limit``, ``X-RateLimit-Remaining: 0``,
    ``X-RateLimit-Reset`` (epoch of the window's end), ``Retry-After`` (seconds) and
    ``{"ok": false, "error": "Rate limit exceeded", "limit", "period", "retry_after"}``;
    accepted responses get no rate-limit headers (as in vmpooler). A rejected request does
    not count. The window is fixed (see :mod:`vmpooler.actors.storage.ratelimit_store`).

    Redis errors fail open: the request proceeds and a warning is logged at most once per
    ``warn_every`` seconds.
    """

    def __init__(self, ctx: ApiContext, *, store: RateLimitStore | None = None,
                 exempt: Iterable[str] = EXEMPT_PATHS, proxies: TrustedProxies | None = None,
                 warn_every: float = 60.0) -> None:
        self._ctx = ctx
        self._store = store if store is not None else RateLimitStore(ctx.redis)
        self._exempt = frozenset(exempt)
        self._proxies = (proxies if proxies is not None
                         else TrustedProxies.of(ctx.config.settings))
        self._warn_every = warn_every
        self._warned_at: float | None = None
        self._lock = threading.Lock()

    def _bucket(self, cls: str, client: str) -> Bucket | None:
        settings = self._ctx.config.rate_limits.get(cls)
        if not settings:
            return None
        return Bucket(cls, client, int(settings["limit"]), int(settings["period"]))

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Count the request; raise a 429 :class:`ApiError` if it is over its limit."""
        if req.path in self._exempt:
            return
        address = self._proxies.client_key(req)
        by_address = self._bucket(limit_class(req.method, req.path, False), f"ip:{address}")
        if by_address is None:
            return
        token = req.get_header(TOKEN_HEADER)
        by_token = None
        if well_formed(token):
            by_token = self._bucket(limit_class(req.method, req.path, True), f"token:{token}")
        try:
            decision = self._store.count(by_address, token=token, by_token=by_token)
        except redis.RedisError as exc:
            self._fail_open(exc)
            return
        if decision.allowed:
            return
        bucket = decision.bucket or by_address
        ttl = max(0, decision.ttl)
        raise ApiError(429, _rejection(bucket.limit, bucket.period, ttl), headers={
            "X-RateLimit-Limit": str(bucket.limit),
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(int(self._ctx.clock.now()) + ttl),
            "Retry-After": str(ttl),
        })

    def _fail_open(self, exc: redis.RedisError) -> None:
        now = self._ctx.clock.monotonic()
        with self._lock:
            if self._warned_at is not None and now - self._warned_at < self._warn_every:
                return
            self._warned_at = now
        log.warning("[!] [api] rate limiter cannot reach Redis, letting requests through: %s",
                    exc)


def _rejection(limit: int, period: int, ttl: int) -> dict[str, Any]:
    return {"ok": False, "error": "Rate limit exceeded", "limit": limit, "period": period,
            "retry_after": ttl}


def build_middleware(ctx: ApiContext,
                     observers: Sequence[RequestObserver] = ()
                     ) -> list[RequestSpan | RequestTimer | RequestLogger | RateLimiter]:
    """The middleware stack for ``ctx``: the request span when ``ctx.tracer`` is enabled,
    the timer (with ``observers``) always, the logger and the limiter when
    ``request_logger`` / ``rate_limiting_enabled`` are set."""
    stack: list[RequestSpan | RequestTimer | RequestLogger | RateLimiter] = []
    if ctx.tracer.enabled:
        stack.append(RequestSpan(ctx))
    stack.append(RequestTimer(ctx, observers))
    if ctx.config.settings.request_logger:
        stack.append(RequestLogger())
    if ctx.config.settings.rate_limiting_enabled:
        stack.append(RateLimiter(ctx))
    return stack
