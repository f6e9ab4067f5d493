"""The periodic actors' shared habits (actors/service/periodic.py): one armed timer per kind
of tick, and an outage logged once."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pykka
import pytest

from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.actors.service.periodic import OutageLog, Ticks


@dataclass(frozen=True)
class Tick:
    n: int


@dataclass(frozen=True)
class Other:
    n: int


class Recorder(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[object] = []

    def on_receive(self, message: object) -> object:
        if message == "seen":
            return list(self.seen)
        self.seen.append(message)
        return None


@pytest.fixture
def recorder():
    ref = Recorder.start()
    yield ref
    ref.stop()


def test_arming_a_kind_again_replaces_its_timer_and_leaves_other_kinds(recorder):
    clock = FakeClock()
    ticks = Ticks(clock, recorder)
    ticks.arm(10, Tick(1))
    ticks.arm(5, Other(1))
    ticks.arm(20, Tick(2))  # replaces Tick(1)
    assert [m for _, m in clock.pending()] == [Other(1), Tick(2)]
    clock.advance(30)
    assert recorder.ask("seen") == [Other(1), Tick(2)]


def test_cancel_all_delivers_nothing(recorder):
    clock = FakeClock()
    ticks = Ticks(clock, recorder)
    ticks.arm(1, Tick(1))
    ticks.arm(2, Other(1))
    ticks.cancel_all()
    clock.advance(10)
    assert recorder.ask("seen") == []


def test_an_outage_is_logged_once_and_its_end_once(caplog):
    log = logging.getLogger("vmpooler.test.periodic")
    outage = OutageLog(log, "beat", failed="not written", recovered="written again",
                       interval=5)
    with caplog.at_level(logging.DEBUG, logger=log.name):
        outage.succeeded()
        for _ in range(3):
            outage.failed(ConnectionError("refused"))
        outage.succeeded()
        outage.succeeded()
        outage.failed(ConnectionError("down again"))
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (logging.ERROR, "[!] [beat] not written: redis unavailable: refused; trying again "
                        "every 5s"),
        (logging.INFO, "[*] [beat] written again"),
        (logging.ERROR, "[!] [beat] not written: redis unavailable: down again; trying again "
                        "every 5s"),
    ]
