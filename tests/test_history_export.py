"""``vmpooler history export``: the checkout log written back as a trace ``replay`` reads."""

from __future__ import annotations

import io
from pathlib import Path

import redis

from tests.harness import log_checkout
from vmpooler.actors.sizing.trace import Checkout, read_trace
from vmpooler.actors.storage import schema, timefmt
from vmpooler.actors.storage.demand_export import DemandLog
from vmpooler.web.cli.history_export import write_rows

T0 = 1_757_000_000.0


def test_the_key_is_vmpoolers_spelling() -> None:
    assert schema.demand("debian-12") == "vmpooler__demand__debian-12"


def _held(client: redis.Redis, vm: str, start: float, seconds: float | None) -> None:
    fields = {"checkout": timefmt.format_epoch(start)}
    if seconds is not None:
        fields["destroy"] = timefmt.format_epoch(start + seconds)
    client.hset(schema.vm(vm), mapping=fields)


def test_export_round_trip(redis_client: redis.Redis, tmp_path: Path) -> None:
    log_checkout(redis_client, "a", T0, vm="vm-1")
    _held(redis_client, "vm-1", T0, 600)
    log_checkout(redis_client, "b", T0 + 5, vm="vm-2")
    _held(redis_client, "vm-2", T0 + 5, None)  # still out: no destroy yet
    log_checkout(redis_client, "a", T0 + 10)  # found no VM
    log_checkout(redis_client, "a", T0 + 10, miss=2)
    log_checkout(redis_client, "a", T0 - 3600, vm="old")  # before --since
    rows = DemandLog(redis_client).rows(["a", "b"], since=T0)
    out = tmp_path / "history.csv"
    with out.open("w", newline="") as handle:
        assert write_rows(rows, handle) == 4
    assert out.read_text().splitlines()[0] == "queued_at,pool,duration_s"
    assert read_trace(out) == [
        Checkout(T0, "a", 600.0),
        Checkout(T0 + 5, "b", None),
        Checkout(T0 + 10, "a", None),
        Checkout(T0 + 10, "a", None),
    ]


def test_only_the_pools_asked_for(redis_client: redis.Redis) -> None:
    log_checkout(redis_client, "a", T0, vm="vm-1")
    log_checkout(redis_client, "b", T0, vm="vm-2")
    text = io.StringIO()
    write_rows(DemandLog(redis_client).rows(["b"]), text)
    assert [line.split(",")[1] for line in text.getvalue().splitlines()[1:]] == ["b"]
