"""Playing the sequence on both sides and listing every difference.

For each step, on each side: its seed, every token's ``last`` set to an old time, a dump of
Redis, the request, another dump; the answer (status, ``Content-Type``, ``Location``, the body
flattened to JSON paths, the headers the step names) and the Redis changes are normalised by
the side's :class:`Normaliser` and compared. A status that differs
is one difference (the bodies of a 500 and a 400 say nothing more); otherwise each JSON path,
each named header and each Redis change that differs is one.

Times of the rate limiter: ``X-RateLimit-Reset`` (an epoch) is read relative to when the
answer arrived (``now+<seconds>``), and it, ``Retry-After`` and the body's ``retry_after``
(seconds left in the window) count as equal when both sides give whole numbers at most
:data:`TTL_SLACK` seconds apart: the two sides count at slightly different moments. A missing
header, a non-number or a window of another length still differs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from tests.differential import keyspace
from tests.differential.client import Answer, send
from tests.differential.normalise import Normaliser, flatten
from tests.differential.step import Step

__all__ = ["TTL_SLACK", "Difference", "Outcome", "Side", "compare_keyspaces", "play", "run"]

TTL_SLACK = 3
"""Seconds by which the two sides' rate-limit times may differ."""
_RESET = "x-ratelimit-reset"
_TIMED_HEADERS = frozenset({_RESET, "retry-after"})
_TIMED_BODY = frozenset({"$.retry_after"})


@dataclass(frozen=True)
class Difference:
    """One way the two sides differ at one step. ``aspect`` is ``status``, ``content-type``,
    ``location``, ``body`` (``where`` is a JSON path), ``header`` (``where`` is its lower-case
    name) or ``redis`` (``where`` is ``<key> <item>``, see
    :mod:`tests.differential.keyspace`)."""

    step: str
    aspect: str
    where: str
    ruby: str
    ours: str

    def __str__(self) -> str:
        return f"{self.step} [{self.aspect}] {self.where}: ruby={self.ruby} ours={self.ours}"


@dataclass
class Side:
    """One API and its Redis; ``captured`` holds the values captured from its answers."""

    name: str
    port: int
    redis: redis.Redis
    norm: Normaliser


@dataclass(frozen=True)
class Outcome:
    """A step's normalised result on one side."""

    status: int
    content_type: str
    location: str
    body: dict[str, Any] | None
    headers: dict[str, str]
    changes: dict[tuple[str, str], str]
    raw: Answer


def _capture(body: Any, path: str) -> str | None:
    for part in path.split("."):
        if not isinstance(body, dict) or part not in body:
            return None
        body = body[part]
    return body if isinstance(body, str) else None


def _header(answer: Answer, name: str) -> str:
    """The answer's header ``name`` as compared: ``<absent>``, ``now+<s>`` for an epoch
    ``X-RateLimit-Reset``, else its value."""
    value = answer.headers.get(name)
    if value is None:
        return "<absent>"
    if name == _RESET and value.strip().lstrip("-").isdigit():
        return f"now+{int(value) - int(answer.received_at)}"
    return value


def _seconds(value: Any) -> int | None:
    """The whole number of seconds ``value`` holds (``599``, ``"599"``, ``"now+599"``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.removeprefix("now+")):
        return int(value.removeprefix("now+"))
    return None


def _same_time(theirs: Any, mine: Any) -> bool:
    """Whether two rate-limit times agree: the same kind of value (a JSON number, a header
    number, a ``now+`` header), whole seconds at most :data:`TTL_SLACK` apart."""
    a, b = _seconds(theirs), _seconds(mine)
    if a is None or b is None or type(theirs) is not type(mine):
        return False
    if isinstance(theirs, str) and theirs.startswith("now+") != mine.startswith("now+"):
        return False
    return abs(a - b) <= TTL_SLACK


def _unsee_token_use(client: redis.Redis) -> None:
    """Set every token's ``last`` to a fixed old time, so that a request using the token
    changes it even within the second of the previous one (times have 1 s resolution)."""
    for key in client.scan_iter(match="vmpooler__token__*"):
        if client.hexists(key, "last"):
            client.hset(key, "last", "2000-01-01 00:00:00 +0000")


def play(step: Step, side: Side) -> Outcome:
    """Run ``step`` on ``side``: seed, request, capture, normalise."""
    if step.seed is not None:
        step.seed(side.redis)
    _unsee_token_use(side.redis)
    captured = side.norm.captured
    before = keyspace.dump(side.redis)
    answer = send(side.port, step.method, step.resolved_path(captured), body=step.payload(),
                  token=step.resolved_token(captured), basic=step.basic)
    after = keyspace.dump(side.redis)
    parsed = answer.json if answer.is_json else None
    for name, path in step.capture.items():
        value = _capture(parsed, path)
        if value is not None:
            side.norm.learn(name, value)
    side.norm.interchangeable(step.either)
    text = side.norm.text
    body: dict[str, Any] | None = None
    if step.compare_body:
        if answer.is_json:
            body = flatten(side.norm.json(parsed))
        else:
            body = {"$": "<text> " + text(answer.body.decode("utf-8", "replace")[:120])}
    found = keyspace.changes(before, after, text, side.norm.score)
    headers = {name.lower(): text(_header(answer, name.lower())) for name in step.headers}
    return Outcome(answer.status, answer.content_type, text(answer.location), body, headers,
                   {(key, item): value for key, item, value in found}, answer)


def compare(step: Step, ruby: Outcome, ours: Outcome) -> list[Difference]:
    """The differences between the two outcomes of ``step``."""
    if ruby.status != ours.status:
        return [Difference(step.id, "status", "", str(ruby.status), str(ours.status))]
    out: list[Difference] = []
    if step.compare_body and ruby.content_type != ours.content_type:
        out.append(Difference(step.id, "content-type", "", ruby.content_type,
                              ours.content_type))
    if ruby.location != ours.location:
        out.append(Difference(step.id, "location", "", ruby.location, ours.location))
    if ruby.body is not None and ours.body is not None:
        for path in sorted(ruby.body.keys() | ours.body.keys()):
            theirs, mine = ruby.body.get(path, "<absent>"), ours.body.get(path, "<absent>")
            if path in _TIMED_BODY and _same_time(theirs, mine):
                continue
            if theirs != mine or type(theirs) is not type(mine):
                out.append(Difference(step.id, "body", path, repr(theirs), repr(mine)))
    for name in sorted(ruby.headers.keys() | ours.headers.keys()):
        theirs, mine = ruby.headers[name], ours.headers[name]
        if theirs != mine and not (name in _TIMED_HEADERS and _same_time(theirs, mine)):
            out.append(Difference(step.id, "header", name, theirs, mine))
    for key, item in sorted(ruby.changes.keys() | ours.changes.keys()):
        theirs = ruby.changes.get((key, item), "<unchanged>")
        mine = ours.changes.get((key, item), "<unchanged>")
        if theirs != mine:
            out.append(Difference(step.id, "redis", f"{key} {item}", theirs, mine))
    return out


def compare_keyspaces(step_id: str, ruby: Side, ours: Side, ruby_before: keyspace.Dump,
                      ours_before: keyspace.Dump) -> list[Difference]:
    """The differences between what each side's Redis holds now compared with its
    ``*_before`` dump (an empty dump compares the whole key space), as step ``step_id``."""
    found = {}
    for side, before in ((ruby, ruby_before), (ours, ours_before)):
        changed = keyspace.changes(before, keyspace.dump(side.redis), side.norm.text,
                                   side.norm.score)
        found[side.name] = {(key, item): value for key, item, value in changed}
    out = []
    for key, item in sorted(found[ruby.name].keys() | found[ours.name].keys()):
        theirs = found[ruby.name].get((key, item), "<unchanged>")
        mine = found[ours.name].get((key, item), "<unchanged>")
        if theirs != mine:
            out.append(Difference(step_id, "redis", f"{key} {item}", theirs, mine))
    return out


def run(steps: Iterable[Step], ruby: Side, ours: Side,
        outcomes: dict[str, tuple[Outcome, Outcome]] | None = None) -> list[Difference]:
    """Play every step on both sides, in order; all differences found. ``outcomes``, if
    given, receives each step's (ruby, ours) outcomes by step id."""
    out: list[Difference] = []
    for step in steps:
        theirs, mine = play(step, ruby), play(step, ours)
        if outcomes is not None:
            outcomes[step.id] = (theirs, mine)
        out += compare(step, theirs, mine)
    return out
