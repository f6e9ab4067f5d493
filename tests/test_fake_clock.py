"""``FakeClock.next_due``: how far a driver may jump before the next timer is due."""

from __future__ import annotations

from typing import Any

import pykka

from vmpooler.actors.runtime.clock import FakeClock


class _Sink(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


def test_next_due_is_the_soonest_live_timer() -> None:
    clock = FakeClock()
    ref = _Sink.start()
    try:
        assert clock.next_due() is None
        late = clock.tell_later(30, ref, "late")
        soon = clock.tell_later(10, ref, "soon")
        assert clock.next_due() == 10
        clock.advance(4)
        assert clock.next_due() == 6
        soon.cancel()  # a cancelled timer is not waited for
        assert clock.next_due() == 26
        clock.advance(26)
        assert clock.next_due() is None
        assert [m for _, m in clock.delivered] == ["late"]
        late.cancel()
        clock.tell_later(0, ref, "now")
        assert clock.next_due() == 0
    finally:
        ref.stop()
