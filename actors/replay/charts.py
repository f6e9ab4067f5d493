"""The SVG charts of a replay's page, drawn as text (no library, nothing fetched).

:func:`pool_chart` draws one pool's run over the window: its ready VMs (the band from the
fewest to the most in each interval, and the time-weighted mean as a line), its demand
target (a dashed step line, where one was published) and its misses (red marks on that
chart's time axis, with a tooltip); below it, in a strip on a scale of its own, its
checkouts per interval (bars). :func:`wait_histogram` draws the waits
of the missed checkouts in fixed bins, one bar per policy in each bin. Both return one
``<svg>`` element that scales to its container (``viewBox``, no fixed size) and say what
they show in ``aria-label``; every value is numeric, every name escaped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from vmpooler.actors.replay.series import SeriesRecorder

__all__ = ["WAIT_BINS", "chart_top", "nice_ceiling", "pool_chart", "scale", "wait_bins",
           "wait_histogram"]

WIDTH, HEIGHT = 640, 210
LEFT, RIGHT, TOP, BOTTOM = 34, 8, 8, 22
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
# a pool's chart: the ready VMs and target above, the checkouts in a strip of their own below
MAIN_H, GAP, STRIP_H = 140, 12, 36
MAIN_BASE = TOP + MAIN_H
STRIP_BASE = MAIN_BASE + GAP + STRIP_H
POOL_HEIGHT = STRIP_BASE + BOTTOM

WAIT_BINS: tuple[tuple[float, str], ...] = (
    (15, "< 15 s"), (30, "15–30 s"), (60, "30–60 s"), (120, "1–2 min"), (300, "2–5 min"),
    (600, "5–10 min"), (1800, "10–30 min"), (3600, "30–60 min"), (math.inf, "≥ 1 h"))
"""The histogram's bins: (upper bound in seconds, exclusive; label)."""

_TIME_STEPS = (600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400)


def nice_ceiling(value: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, … at or above ``value`` (1 for 0)."""
    if value <= 1:
        return 1
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return int(step * magnitude)
    return int(10 * magnitude)


def scale(most: float) -> tuple[int, int]:
    """The y axis for values up to ``most``: ``(top, step)``, a step of 1, 2, 5, 10, 20, …
    and the top at most four steps, at or above ``most`` (``(1, 1)`` for 0)."""
    step = nice_ceiling(most / 4)
    return max(1, math.ceil(most / step)) * step, step


def _n(value: float) -> str:
    """A coordinate, one decimal at most."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _y(value: float, top: float, base: float = TOP + PLOT_H, height: float = PLOT_H) -> float:
    return base - value / top * height


def _y_axis(top: int, base: float = TOP + PLOT_H, height: float = PLOT_H,
            step: int | None = None) -> list[str]:
    step = step or scale(top)[1]
    out = []
    for tick in range(0, top + 1, step):
        y = _n(_y(tick, top, base, height))
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}"/>'
                   f'<text class="tick" x="{LEFT - 4}" y="{y}" dy="0.35em" '
                   f'text-anchor="end">{tick}</text>')
    return out


def _time_axis(start: float, end: float) -> list[str]:
    span = max(end - start, 1.0)
    step = next((s for s in _TIME_STEPS if span / s <= 8), _TIME_STEPS[-1])
    first = math.ceil(start / step) * step
    out = [f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}"/>'
           for y in (MAIN_BASE, STRIP_BASE)]
    tick = first
    while tick <= end:
        x = _n(LEFT + (tick - start) / span * PLOT_W)
        moment = datetime.fromtimestamp(tick, UTC)
        label = (moment.strftime("%a %m-%d") if step >= 86400 or moment.hour == 0
                 else moment.strftime("%H:%M"))
        out.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{TOP}" y2="{STRIP_BASE}"/>'
                   f'<text class="tick" x="{x}" y="{POOL_HEIGHT - 6}" text-anchor="middle">'
                   f"{label}</text>")
        tick += step
    return out


def _span_label(low: float, high: float) -> str:
    a, b = datetime.fromtimestamp(low, UTC), datetime.fromtimestamp(high, UTC)
    return f"{a:%a %Y-%m-%d %H:%M}–{b:%H:%M} UTC"


def pool_chart(recorder: SeriesRecorder, pool: str, *, top: tuple[int, int],
               policy: str) -> str:
    """One pool's chart for one policy's run: ready VMs and target on a y axis from 0 to
    ``top[0]``, checkouts per interval in the strip below from 0 to ``top[1]`` (give both
    policies' charts of a pool the same ``top``, :func:`chart_top`, so they compare at a
    glance)."""
    series = recorder.series[pool]
    span = max(recorder.end - recorder.start, 1.0)
    vms, most = top

    def x(t: float) -> float:
        return LEFT + (t - recorder.start) / span * PLOT_W

    def y(value: float) -> str:
        return _n(_y(value, vms, MAIN_BASE, MAIN_H))

    parts = [*_y_axis(vms, MAIN_BASE, MAIN_H),
             *_y_axis(most, STRIP_BASE, STRIP_H, step=most),
             *_time_axis(recorder.start, recorder.end)]
    bars: list[str] = []
    upper: list[str] = []
    lower: list[str] = []
    mean: list[str] = []
    target: list[str] = []
    misses: list[str] = []
    for i in range(recorder.count):
        low, high = recorder.bounds(i)
        x0, x1 = x(low), x(high)
        centre = _n((x0 + x1) / 2)
        if series.checkouts[i]:  # a bar up from the axis: one path for them all
            height = _n(series.checkouts[i] / most * STRIP_H)
            bars.append(f"M{_n(x0)} {STRIP_BASE}v-{height}h{_n(max(0.8, x1 - x0 - 0.4))}"
                        f"v{height}z")
        ready_mean = recorder.ready_mean(pool, i)
        low_seen, high_seen = series.ready_min[i], series.ready_max[i]
        if ready_mean is not None and low_seen is not None and high_seen is not None:
            upper.append(f"{centre},{y(high_seen)}")
            lower.append(f"{centre},{y(low_seen)}")
            mean.append(f"{centre},{y(ready_mean)}")
        if series.target[i] is not None:
            target.append(f"{'L' if target else 'M'}{_n(x0)},{y(series.target[i] or 0)}"
                          f"H{_n(x1)}")
        if series.misses[i]:
            size = min(7.0, 3.0 + series.misses[i])
            misses.append(
                f'<path class="miss" data-count="{series.misses[i]}" '
                f'd="M{centre},{_n(MAIN_BASE - 2 * size)}l{_n(-size)},{_n(2 * size)}'
                f'h{_n(2 * size)}z"><title>{series.misses[i]} missed '
                f"checkout(s), {_span_label(low, high)}</title></path>")
    if bars:
        parts.append(f'<path class="checkouts" d="{"".join(bars)}"/>')
    if upper:
        band = " ".join(upper + lower[::-1])
        parts.append(f'<polygon class="ready-band" points="{band}"/>')
        parts.append(f'<polyline class="ready" points="{" ".join(mean)}"/>')
    if target:
        parts.append(f'<path class="target" d="{"".join(target)}"/>')
    parts.append(f'<g class="misses">{"".join(misses)}</g>')
    checkouts, missed = sum(series.checkouts), sum(series.misses)
    seen = [v for v in series.ready_max if v is not None]
    label = (f"{pool}, {policy}: {checkouts} checkouts, {missed} missed; ready VMs "
             f"{min((v for v in series.ready_min if v is not None), default=0)} to "
             f"{max(seen, default=0)}")
    return (f'<svg class="pool-chart" data-pool="{escape(pool)}" data-policy="{escape(policy)}"'
            f' viewBox="0 0 {WIDTH} {POOL_HEIGHT}" role="img" aria-label="{escape(label)}">'
            f'{"".join(parts)}</svg>')


def chart_top(recorders: Sequence[SeriesRecorder], pool: str) -> tuple[int, int]:
    """The y axes' tops for ``pool`` over every run: the most of its ready VMs and target,
    and the most checkouts in an interval, each rounded up (:func:`scale`)."""
    vms = checkouts = 0
    for recorder in recorders:
        series = recorder.series[pool]
        vms = max(vms, *(v or 0 for v in series.ready_max), *(v or 0 for v in series.target))
        checkouts = max(checkouts, *series.checkouts)
    return scale(vms)[0], scale(checkouts)[0]


def wait_bins(waits: Sequence[float]) -> list[int]:
    """How many of ``waits`` (seconds) fall in each of :data:`WAIT_BINS`."""
    counts = [0] * len(WAIT_BINS)
    for wait in waits:
        counts[next(i for i, (bound, _) in enumerate(WAIT_BINS) if wait < bound)] += 1
    return counts


def wait_histogram(waits: Mapping[str, Sequence[float]]) -> str:
    """The waits of each policy's missed checkouts (``{policy: waits}``), binned."""
    counts = {policy: wait_bins(values) for policy, values in waits.items()}
    top = scale(max((max(c) for c in counts.values()), default=0))[0]
    slot = PLOT_W / len(WAIT_BINS)
    width = (slot - 8) / max(1, len(counts))
    parts = _y_axis(top)
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + PLOT_H}" '
                 f'y2="{TOP + PLOT_H}"/>')
    for b, (_bound, label) in enumerate(WAIT_BINS):
        x0 = LEFT + b * slot + 4
        for p, (policy, values) in enumerate(counts.items()):
            count = values[b]
            height = count / top * PLOT_H
            xs = _n(x0 + p * width)
            parts.append(
                f'<rect class="policy-{p}" data-policy="{escape(policy)}" x="{xs}" '
                f'y="{_n(TOP + PLOT_H - height)}" width="{_n(width - 1)}" '
                f'height="{_n(height)}"><title>{escape(policy)}: {count} wait(s) of '
                f"{label}</title></rect>")
            if count:
                parts.append(f'<text class="count" x="{_n(x0 + (p + 0.5) * width)}" '
                             f'y="{_n(TOP + PLOT_H - height - 3)}" text-anchor="middle">'
                             f"{count}</text>")
        parts.append(f'<text class="tick" x="{_n(x0 + slot / 2 - 4)}" y="{HEIGHT - 6}" '
                     f'text-anchor="middle">{label}</text>')
    summary = "; ".join(f"{policy}: {len(values)} waits" for policy, values in waits.items())
    return (f'<svg class="wait-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            f'aria-label="{escape("waits of missed checkouts, " + summary)}">'
            f'{"".join(parts)}</svg>')
