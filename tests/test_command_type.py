"""The command stream's one type, :class:`Command`: what the API writes is what a manager
reads, field for field, and entries written by the previous release (string literals on
both sides) decode to the same commands."""

from __future__ import annotations

import pytest
import redis

from vmpooler.actors.messages import Command, CommandKind
from vmpooler.actors.service.command_stream import STREAM
from vmpooler.web.commands import StreamCommands


def test_a_command_round_trips_through_its_fields() -> None:
    for command in (Command(CommandKind.POOL_CHANGED, "debian", "checkout", id="c1"),
                    Command(CommandKind.TASKS_QUEUED, id="c2"),
                    Command(CommandKind.REQUEST_CHANGED, "r-17", "created", id="c3")):
        assert Command.from_fields(command.to_fields()) == command
    fields = Command(CommandKind.REQUEST_CHANGED, "r-17", "created", id="c3").to_fields()
    assert list(fields.items()) == [("id", "c3"), ("kind", "request_changed"),
                                    ("pool", "r-17"), ("reason", "created")]
    assert Command(CommandKind.TASKS_QUEUED).id != Command(CommandKind.TASKS_QUEUED).id


def test_an_entry_of_the_previous_release_decodes(redis_client: redis.Redis) -> None:
    # the fields as the previous release's StreamCommands wrote them
    redis_client.xadd(STREAM, {"id": "6f1c", "kind": "pool_changed", "pool": "debian",
                               "reason": "checked out two VMs"})
    redis_client.xadd(STREAM, {"id": "6f1d", "kind": "tasks_queued", "pool": "",
                               "reason": ""})
    redis_client.xadd(STREAM, {"kind": "request_changed", "pool": "r-1"})  # no id, no reason
    (e1, f1), (e2, f2), (e3, f3) = redis_client.xrange(STREAM)
    assert Command.from_fields(f1, entry_id=e1) == Command(
        CommandKind.POOL_CHANGED, "debian", "checked out two VMs", id="6f1c")
    assert Command.from_fields(f2, entry_id=e2) == Command(CommandKind.TASKS_QUEUED, id="6f1d")
    assert Command.from_fields(f3, entry_id=e3) == Command(
        CommandKind.REQUEST_CHANGED, "r-1", "", id=e3)
    for fields in ({"id": "x", "kind": "reboot", "pool": "a"}, {"id": "y", "pool": "a"}):
        with pytest.raises(ValueError, match="unknown command"):
            Command.from_fields(fields)


def test_the_api_writes_the_fields_a_manager_reads(redis_client: redis.Redis) -> None:
    sender = StreamCommands(redis_client)
    sender.pool_changed("debian", "returned")
    sender.tasks_queued()
    sender.request_changed("r-2", "deleted")
    read = [Command.from_fields(fields) for _eid, fields in redis_client.xrange(STREAM)]
    assert [(c.kind, c.subject, c.reason) for c in read] == [
        (CommandKind.POOL_CHANGED, "debian", "returned"), (CommandKind.TASKS_QUEUED, "", ""),
        (CommandKind.REQUEST_CHANGED, "r-2", "deleted")]
    assert all(set(fields) == {"id", "kind", "pool", "reason"}
               for _eid, fields in redis_client.xrange(STREAM))
    assert len({c.id for c in read}) == 3
