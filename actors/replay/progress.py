"""How far a replay has come, told while it runs (``vmpooler replay`` writes it on stderr).

A replay calls its listener's :meth:`~ProgressListener.begin` once per run (a policy) with
the simulated span it will cover, :meth:`~ProgressListener.at` after each step of its loop
with the simulated time reached, and :meth:`~ProgressListener.done` when the run ends.
:class:`NoProgress` listens to nothing (``--quiet``, and callers that want no output);
:class:`ProgressReport` renders:

* on a terminal, one line redrawn in place (carriage return, at most every ``redraw``
  seconds): ``static [#####.......]  41.7%  Thu 2025-09-04 19:00 UTC  2.1 sim h/s  1m05s left``;
* elsewhere (a pipe, a CI log), a plain line every ``every`` seconds:
  ``replay static: Thu 2025-09-04 19:00 UTC  41.7%  2.1 sim h/s  1m05s left``;

and in both forms one last line at 100% when a run is done. The share counts every run:
two policies are 50% done when the first is. The rate is simulated hours per wall second
since the first :meth:`~ProgressListener.begin`; the time left is the simulated time still to
replay (the runs not begun counted as long as the current one) at that rate. The wall clock
is ``wall`` (``time.monotonic`` unless a test injects another); nothing here reads the
simulated clock but through :meth:`~ProgressListener.at`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol, TextIO

__all__ = ["NoProgress", "ProgressListener", "ProgressReport", "format_left"]

BAR_WIDTH = 24
"""Characters inside the terminal form's bar."""


class ProgressListener(Protocol):
    """What a replay tells about its progress (called on the replay's thread only)."""

    def begin(self, label: str, first: float, last: float) -> None:
        """A run named ``label`` starts; it covers simulated epoch seconds ``first`` to
        ``last``."""

    def at(self, now: float) -> None:
        """The run has reached simulated epoch second ``now`` (may pass ``last``)."""

    def done(self) -> None:
        """The run has ended."""


class NoProgress:
    """A listener that ignores everything."""

    def begin(self, label: str, first: float, last: float) -> None:
        """Ignored."""

    def at(self, now: float) -> None:
        """Ignored."""

    def done(self) -> None:
        """Ignored."""


def format_left(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``42s``; ``--`` when unknown."""
    if seconds is None:
        return "--"
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _hours(value: float) -> str:
    """``12``, ``2.4``, ``0.35``: two significant digits or the whole number."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}" if value < 1 else f"{value:.1f}"


def _moment(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%a %Y-%m-%d %H:%M UTC")


class ProgressReport:
    """Renders progress on ``stream`` (see the module docstring) for ``runs`` runs.

    ``terminal``: redraw one line in place, cut to ``width`` - 1 characters so it never wraps
    (else a line every ``every`` wall seconds); ``wall``: the wall clock, seconds. Writes only
    from the calling thread; flushes after each write.
    """

    def __init__(self, stream: TextIO, *, runs: int = 1, terminal: bool = False,
                 every: float = 5.0, redraw: float = 0.2, width: int = 120,
                 wall: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.runs, self.terminal = stream, max(1, runs), terminal
        self.width = max(20, width)
        self.every, self.redraw, self.wall = every, redraw, wall
        self.label = ""
        self.index = -1  # the current run's place among ``runs``
        self.first = self.last = self.now = 0.0
        self.done_before = 0.0  # simulated seconds of the runs already done
        self.began: float | None = None  # wall time of the first begin
        self.shown = 0.0  # wall time of the last line written

    # -- the listener -----------------------------------------------------------------------
    def begin(self, label: str, first: float, last: float) -> None:
        """Start showing a run (see :class:`ProgressListener`)."""
        self.label, self.index = label, self.index + 1
        self.first, self.last = first, max(first, last)
        self.now = first
        wall = self.wall()
        if self.began is None:
            self.began = wall
        self.shown = wall if not self.terminal else wall - self.redraw

    def at(self, now: float) -> None:
        """Show ``now`` if it is time to (see the module docstring)."""
        self.now = max(self.now, now)
        wall = self.wall()
        if wall - self.shown < (self.redraw if self.terminal else self.every):
            return
        self.shown = wall
        self._write(self.line(wall))

    def done(self) -> None:
        """Show the run at 100%, ending the terminal's line."""
        self.now = max(self.now, self.last)
        self._write(self.line(self.wall()))
        if self.terminal:
            self.stream.write("\n")
            self.stream.flush()
        self.done_before += self.span
        self.shown = self.wall()

    # -- what is shown ----------------------------------------------------------------------
    @property
    def span(self) -> float:
        """The current run's simulated seconds."""
        return self.last - self.first

    def share(self) -> float:
        """0..1 of every run's simulated time done."""
        within = 1.0 if self.span <= 0 else min(1.0, (self.now - self.first) / self.span)
        return min(1.0, (max(0, self.index) + max(0.0, within)) / self.runs)

    def rate(self, wall: float) -> float | None:
        """Simulated seconds per wall second since the first run began (None before any
        wall time passed)."""
        elapsed = wall - (self.began if self.began is not None else wall)
        simulated = self.done_before + min(self.span, max(0.0, self.now - self.first))
        return simulated / elapsed if elapsed > 0 and simulated > 0 else None

    def left(self, wall: float) -> float | None:
        """Wall seconds still to go at the current rate (None when unknown)."""
        rate = self.rate(wall)
        if rate is None:
            return None
        remaining = max(0.0, self.last - max(self.now, self.first))
        remaining += self.span * max(0, self.runs - self.index - 1)
        return remaining / rate

    def line(self, wall: float) -> str:
        """The text shown at wall time ``wall`` (without newline or carriage return)."""
        share = self.share()
        rate = self.rate(wall)
        speed = "-- sim h/s" if rate is None else f"{_hours(rate / 3600)} sim h/s"
        fields = (f"{share * 100:5.1f}%", _moment(min(self.now, self.last)), speed,
                  f"{format_left(self.left(wall))} left")
        if self.terminal:
            filled = round(share * BAR_WIDTH)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            return f"{self.label} [{bar}] " + "  ".join(fields)
        date, percent = fields[1], fields[0].strip()
        return f"replay {self.label}: {date}  {percent}  {speed}  {fields[3]}"

    def _write(self, text: str) -> None:
        if self.terminal:
            self.stream.write(f"\r{text[:self.width - 1]}\x1b[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
