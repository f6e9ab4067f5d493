"""What a scenario did, recorded inside its process for ``same_behaviour.py``.

* :class:`RedisTap`: every command each redis-server of the process executed, read from
  ``MONITOR`` (commands run by Lua scripts included, marked ``lua:``). A tap starts on a
  server before the process's first connection to it (a hook on redis-py's
  ``AbstractConnection.connect``), so servers a scenario does not start itself (the replay's
  private one) are recorded too.
* :class:`MessageTap`: the messages told or asked of pykka actors (a hook on
  ``pykka.ActorRef.tell`` and ``ask``), by type name (a relayed one by what it carries);
  proxy calls by method name. Not counted: messages sent while a driver waits for the
  actors to go idle (:func:`MessageTap.quiet`; how many pings that takes is timing).
* :class:`MetricSink`: a metrics backend keeping ``(kind, name, tags)`` counts.
* :class:`Normaliser` and :func:`redis_state`: the run-specific parts (VM names, request
  ids, tokens, times, manager ids, lease values) replaced by placeholders.
Only redis-py, pykka and the metrics duck type are used, so the probe records any build.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pykka
import redis
import redis.connection

__all__ = ["MessageTap", "MetricSink", "Normaliser", "RedisTap", "command_counts",
           "redis_state"]

_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LINE = re.compile(r"^\+\d+\.\d+ \[(\d+) ([^\]]+)\] (.*)$")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "x" and i + 3 < len(text):
                out.append(chr(int(text[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


class _Monitor:
    """One ``MONITOR`` connection and the thread reading it."""

    def __init__(self, host: str, port: int, password: str | None) -> None:
        self.host, self.port, self.password = host, port, password
        self.commands: list[tuple[bool, list[str]]] = []  # (from a script, args)
        self._sock = socket.create_connection((host, port), timeout=10)
        self._file = self._sock.makefile("rb")
        if password:
            self._sock.sendall(_pack(["AUTH", password]))
            self._file.readline()
        self._sock.sendall(_pack(["MONITOR"]))
        if not self._file.readline().startswith(b"+OK"):
            raise RuntimeError(f"MONITOR refused by {host}:{port}")
        self._sock.settimeout(None)
        self._marks: dict[str, threading.Event] = {}
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name=f"monitor-{port}")
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in self._file:
                match = _LINE.match(raw.decode("utf-8", "replace").rstrip("\r\n"))
                if match is None:
                    continue
                args = [_unescape(a) for a in _ARG.findall(match.group(3))]
                if len(args) == 2 and args[0].upper() == "ECHO" and args[1] in self._marks:
                    self._marks[args[1]].set()
                    continue
                self.commands.append((match.group(2) == "lua", args))

    def finish(self, timeout: float = 30.0) -> None:
        """Wait until every command sent before this call has been read, then close (a
        server already gone has nothing more to say)."""
        mark = f"same-behaviour-mark-{id(self)}"
        self._marks[mark] = done = threading.Event()
        with contextlib.suppress(OSError), \
                socket.create_connection((self.host, self.port), timeout=5) as client:
            if self.password:
                client.sendall(_pack(["AUTH", self.password]))
            client.sendall(_pack(["ECHO", mark]))
            done.wait(timeout)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout)


def _pack(args: list[str]) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class RedisTap:
    """Monitors every redis-server the process connects to over TCP (install once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.monitors: dict[tuple[str, int], _Monitor] = {}
        self._original = redis.connection.AbstractConnection.connect

    def install(self) -> RedisTap:
        tap, original = self, self._original

        def connect(conn: Any) -> Any:
            host, port = getattr(conn, "host", None), getattr(conn, "port", None)
            if host is not None and port is not None:
                tap.watch(str(host), int(port), getattr(conn, "password", None))
            return original(conn)

        redis.connection.AbstractConnection.connect = connect  # type: ignore[method-assign]
        return self

    def watch(self, host: str, port: int, password: str | None = None) -> None:
        """Start monitoring ``host:port`` unless it is already monitored."""
        with self._lock:
            if (host, port) not in self.monitors:
                try:
                    self.monitors[(host, port)] = _Monitor(host, port, password)
                except OSError:
                    return  # not up yet: the connection fails too, and the next one tries

    def finish(self) -> list[tuple[bool, list[str]]]:
        """Stop every monitor; every command recorded, server by server."""
        redis.connection.AbstractConnection.connect = self._original  # type: ignore[method-assign]
        out: list[tuple[bool, list[str]]] = []
        with self._lock:
            monitors, self.monitors = list(self.monitors.values()), {}
        for monitor in monitors:
            monitor.finish()
            out.extend(monitor.commands)
        return out


_NO_KEY = {"PING", "INFO", "MULTI", "EXEC", "DISCARD", "CLIENT", "CONFIG", "SCRIPT", "TIME",
           "DBSIZE", "FLUSHALL", "FLUSHDB", "COMMAND", "SHUTDOWN", "UNWATCH", "MONITOR",
           "ECHO", "SAVE", "BGSAVE", "ROLE", "MEMORY", "SLOWLOG", "LATENCY", "FUNCTION"}
_ALL_KEYS = {"DEL", "UNLINK", "EXISTS", "MGET", "TOUCH", "WATCH", "SINTER", "SUNION", "SDIFF",
             "PFCOUNT", "SINTERCARD"}
_TWO_KEYS = {"SMOVE", "RENAME", "RENAMENX", "RPOPLPUSH", "LMOVE", "BLMOVE", "COPY",
             "SUNIONSTORE", "SINTERSTORE", "SDIFFSTORE"}
_SUBCOMMAND = {"CLIENT", "CONFIG", "SCRIPT", "MEMORY", "FUNCTION", "OBJECT", "XINFO",
               "XGROUP", "COMMAND"}
_CONNECTION_SETUP = {"HELLO", "AUTH", "SELECT", "READONLY", "CLIENT SETINFO",
                     "CLIENT SETNAME"}
"""Sent once per new connection: how many connections a pool opens depends on threads."""
_ONCE = {"SCRIPT LOAD"}
"""How often each script is loaded depends on which threads first ran it: counted once."""
_BLOCKING = {"BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX", "BLMOVE", "BRPOPLPUSH", "BLMPOP"}


def _keys(name: str, args: list[str]) -> list[str]:
    rest = args[1:]
    if name in _NO_KEY:
        return []
    if name in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL"):
        count = int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else 0
        return rest[2:2 + count]
    if name in ("XREAD", "XREADGROUP"):
        upper = [a.upper() for a in rest]
        if "STREAMS" in upper:
            after = rest[upper.index("STREAMS") + 1:]
            return after[:len(after) // 2]
        return []
    if name == "MSET":
        return rest[::2]
    if name in ("SCAN", "KEYS"):
        upper = [a.upper() for a in rest]
        return [rest[upper.index("MATCH") + 1]] if "MATCH" in upper else rest[:1]
    if name in _ALL_KEYS:
        return rest
    if name in _TWO_KEYS:
        return rest[:2]
    return rest[:1]


def _lease_only(keys: list[str]) -> bool:
    return bool(keys) and all(k.startswith("vmpooler__lease__") for k in keys)


def command_counts(commands: list[tuple[bool, list[str]]], norm: Normaliser
                   ) -> dict[str, int]:
    """``"COMMAND key-pattern..."`` -> how many times; ``lua:`` for commands a script ran.
    Connection setup is dropped. Counted once however many times they ran, since that
    follows thread timing, not behaviour: a blocking read (``BLOCK`` or a ``B*POP``: the
    wall clock), ``SCRIPT LOAD`` (which thread first ran a script), and a command on lease
    keys only (taking and renewing leases, the fence check inside a fenced script: the
    fenced writes themselves are counted). An ``EVALSHA`` that ran no command is left
    out: it is the one refused with NOSCRIPT that redis-py sends again after loading the
    script, once per thread that raced to run a script first (a script's commands follow
    its ``EVALSHA`` in the monitor's stream, nothing runs between)."""
    counts: collections.Counter[str] = collections.Counter()
    polls: set[str] = set()
    for n, (from_script, args) in enumerate(commands):
        if not args:
            continue
        name = args[0].upper()
        if name == "EVALSHA" and not (n + 1 < len(commands) and commands[n + 1][0]):
            continue  # ran nothing: NOSCRIPT, sent again after SCRIPT LOAD
        if name in _SUBCOMMAND and len(args) > 1:
            name = f"{name} {args[1].upper()}"
        if name in _CONNECTION_SETUP:
            continue
        keys = _keys(name.split(" ")[0], args)
        entry = " ".join([("lua:" if from_script else "") + name, *(norm.key(k) for k in keys)])
        if name in _ONCE or _lease_only(keys):
            polls.add(f"{entry} (once or more)")
        elif name in _BLOCKING or "BLOCK" in (a.upper() for a in args[1:]):
            polls.add(f"{entry} (polled)")
        else:
            counts[entry] += 1
    for entry in polls:
        counts[entry] = 1
    return dict(counts)


class Normaliser:
    """Replaces what differs from run to run by placeholders, in keys and values alike."""

    _UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
    _ISO = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?: ?[+-]\d\d:?\d\d|Z)?")
    _HEX = re.compile(r"\b[0-9a-f]{16,}\b")
    _NUMBER = re.compile(r"(?<![A-Za-z])\d{5,}(?:\.\d+)?|\d+\.\d+")
    _TOKEN = re.compile(r"[A-Za-z0-9-]+")

    def __init__(self, vms: set[str] | None = None, extra: Mapping[str, str] | None = None,
                 pools: set[str] | None = None) -> None:
        self.vms = set(vms or ())
        self.pools = set(pools or ())
        """Names folded into ``<pool>`` (in keys only, :meth:`key`)."""
        self._host = socket.gethostname()
        self._extra = dict(extra or {})

    def learn_vms(self, commands: list[tuple[bool, list[str]]]) -> None:
        """Every name that appears in a ``vmpooler__vm__<name>`` key is a VM's."""
        for _lua, args in commands:
            for arg in args:
                if arg.startswith("vmpooler__vm__"):
                    self.vms.add(arg[len("vmpooler__vm__"):])

    def __call__(self, text: str) -> str:
        for literal, placeholder in self._extra.items():
            text = text.replace(literal, placeholder)
        text = self._UUID.sub("<uuid>", text)
        text = self._ISO.sub("<time>", text)
        if self._host:
            text = re.sub(re.escape(self._host) + r":\d+:", "<manager>:", text)
        if self.vms:
            text = self._TOKEN.sub(lambda m: "<vm>" if m.group() in self.vms else m.group(),
                                   text)
        text = self._HEX.sub("<hex>", text)
        return self._NUMBER.sub("<n>", text)

    def key(self, key: str) -> str:
        """A key normalised, pool names (whole ``__`` segments) folded into ``<pool>``:
        which pool got a clone slot first, or which VM a checkout drew, varies from run to
        run (Redis's SPOP) and moves counts between pools, not their sum."""
        return "__".join("<pool>" if part in self.pools else part
                         for part in self(key).split("__"))


def redis_state(client: redis.Redis, norm: Normaliser) -> dict[str, int]:
    """Every key, its type and its normalised content, as a multiset of JSON lines."""
    state: collections.Counter[str] = collections.Counter()
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        content: Any
        if kind == "string":
            content = norm(client.get(key) or "")
        elif kind == "hash":
            content = sorted((norm(f), norm(v)) for f, v in client.hgetall(key).items())
        elif kind == "set":
            content = sorted(norm(m) for m in client.smembers(key))
        elif kind == "zset":
            if key.startswith("vmpooler__history__pool__"):
                # samples: the first races the pools' first clones at start
                content = f"{client.zcard(key)} samples"
            else:
                content = sorted((norm(m), norm(repr(s))) for m, s in
                                 client.zrange(key, 0, -1, withscores=True))
        elif kind == "list":
            content = [norm(v) for v in client.lrange(key, 0, -1)]
        elif kind == "stream":
            content = sorted(json.dumps(sorted((norm(f), norm(v)) for f, v in fields.items()))
                             for _id, fields in client.xrange(key))
        else:
            content = kind
        state[json.dumps([kind, norm(key), content])] += 1
    return dict(state)


class MessageTap:
    """Counts messages to pykka actors by (``tell``/``ask``, type name)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._saved = (pykka.ActorRef.tell, pykka.ActorRef.ask)

    @classmethod
    def name(cls, message: Any) -> str:
        kind = type(message).__name__
        if kind == "Relayed":
            return cls.name(message.message)
        if kind in ("ProxyCall", "ProxyGetAttr", "ProxySetAttr"):
            return f"{kind}:{'.'.join(getattr(message, 'attr_path', ()))}"
        if isinstance(message, str):
            return f"str:{message[:40]}"
        return kind

    def _count(self, how: str, message: Any) -> None:
        if getattr(self._local, "quiet", 0):
            return
        with self._lock:
            self.counts[f"{how} {self.name(message)}"] += 1

    def install(self) -> MessageTap:
        tap = self
        tell, ask = self._saved

        def counted_tell(ref: Any, message: Any) -> Any:
            tap._count("tell", message)
            return tell(ref, message)

        def counted_ask(ref: Any, message: Any, *args: Any, **kwargs: Any) -> Any:
            tap._count("ask", message)
            return ask(ref, message, *args, **kwargs)

        pykka.ActorRef.tell = counted_tell  # type: ignore[method-assign]
        pykka.ActorRef.ask = counted_ask  # type: ignore[method-assign,assignment]
        return self

    def uninstall(self) -> None:
        pykka.ActorRef.tell, pykka.ActorRef.ask = self._saved  # type: ignore[method-assign]

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Messages this thread sends meanwhile are not counted."""
        self._local.quiet = getattr(self._local, "quiet", 0) + 1
        try:
            yield
        finally:
            self._local.quiet -= 1


class MetricSink:
    """A metrics backend (``increment``/``gauge``/``timing``/``close``) that counts calls by
    (kind, name, tags); values are not kept (timings follow the wall clock)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()

    def _emit(self, kind: str, name: str, tags: Mapping[str, str] | None) -> None:
        with self._lock:
            self.calls.append((kind, name, dict(tags or {})))

    def increment(self, name: str, *, tags: Mapping[str, str] | None = None,
                  value: int = 1) -> None:
        self._emit("increment", name, tags)

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None) -> None:
        self._emit("gauge", name, tags)

    def timing(self, name: str, seconds: float, *,
               tags: Mapping[str, str] | None = None) -> None:
        self._emit("timing", name, tags)

    def close(self) -> None:
        """Nothing to release; recording goes on."""

    def counts(self, norm: Normaliser) -> dict[str, int]:
        with self._lock:
            calls = list(self.calls)
        return dict(collections.Counter(
            f"{kind} {name} {norm(json.dumps(sorted(tags.items())))}"
            for kind, name, tags in calls))
