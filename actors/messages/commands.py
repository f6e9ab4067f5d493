"""The API's commands to the managers: :class:`Command`, as the command stream carries it.

``vmpooler api`` writes them (:class:`vmpooler.web.commands.StreamCommands`) and the
managers read them (:mod:`vmpooler.actors.service.command_stream`). A stream entry's fields
are exactly ``id`` (a uuid4: a command seen twice is acted on once), ``kind`` (a
:class:`CommandKind` value), ``pool`` (the subject: the pool's name, the request's id, or ''
for ``tasks_queued``) and ``reason`` — what managers and APIs of every release write and
read — and, only when the API traces the request that sent it, ``traceparent`` (the W3C
trace context, docs/tracing.md), which a manager of an earlier release ignores.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["Command", "CommandKind"]


class CommandKind(StrEnum):
    """What a command says changed."""

    POOL_CHANGED = "pool_changed"  # subject: a pool; its actor runs a cycle now
    TASKS_QUEUED = "tasks_queued"  # no subject; the task actor runs a round now
    REQUEST_CHANGED = "request_changed"  # subject: an on-demand request's id


@dataclass(frozen=True, slots=True)
class Command:
    """One command of the stream. ``subject`` is the pool's name or the request's id ('' for
    ``tasks_queued``); ``id`` is new with every command unless given; ``traceparent`` is
    the W3C trace context of the span that sent it ('' when not traced)."""

    kind: CommandKind
    subject: str = ""
    reason: str = ""
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    traceparent: str = ""

    def to_fields(self) -> dict[str, str]:
        """The stream entry's fields (``traceparent`` only when set)."""
        fields = {"id": self.id, "kind": self.kind.value, "pool": self.subject,
                  "reason": self.reason}
        if self.traceparent:
            fields["traceparent"] = self.traceparent
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, str], *, entry_id: str = "") -> Command:
        """The command of a stream entry's fields; a missing ``id`` is the entry's id
        (``entry_id``), a missing ``pool`` or ``reason`` ''. Raises ``ValueError`` for a
        missing or unknown ``kind``."""
        kind = fields.get("kind", "")
        try:
            known = CommandKind(kind)
        except ValueError:
            raise ValueError(f"unknown command {kind!r}") from None
        return cls(known, fields.get("pool", ""), fields.get("reason", ""),
                   fields.get("id") or entry_id, fields.get("traceparent", ""))
