"""The replay's page (``vmpooler replay --report FILE.html``): one self-contained HTML file.

:func:`render_page` fills the template ``report.html`` (package data, with ``report.css``
inlined) from the runs' results: a card per policy (warm-hit ratio, misses, waits, cost);
per pool, a chart per policy side by side on one y scale (:func:`.charts.pool_chart`); the
waits of the missed checkouts binned (:func:`.charts.wait_histogram`); and per policy the
totals table, cell for cell the numbers of ``--json`` (``td[data-key]`` in rows
``tr[data-pool]``, formatted to the digits ``--json`` rounds to). The page loads nothing
(no script, font, image or stylesheet from anywhere); its size grows with the pools and the
series' points (:mod:`.series`), not with the checkouts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from importlib import resources
from string import Template
from typing import Any

from vmpooler.actors.replay.charts import WAIT_BINS, chart_top, pool_chart, wait_histogram
from vmpooler.actors.replay.report import RunResult
from vmpooler.actors.replay.series import SeriesRecorder

__all__ = ["PageInfo", "render_page"]

FORMATS: Mapping[str, str] = {
    "checkouts": "{:d}", "hits": "{:d}", "hit_ratio": "{:.4f}", "wait_mean_s": "{:.1f}",
    "wait_p95_s": "{:.1f}", "idle_vm_hours": "{:.2f}", "clones": "{:d}",
    "standby_vm_hours": "{:.2f}", "resumes": "{:d}", "cost_vm_hours": "{:.2f}",
}
"""Each ``--json`` field and how the totals table writes it (the digits it is rounded to)."""

HEADERS: Mapping[str, str] = {
    "checkouts": "checkouts", "hits": "hits", "hit_ratio": "hit ratio",
    "wait_mean_s": "wait mean s", "wait_p95_s": "wait p95 s", "idle_vm_hours": "idle VM-h",
    "clones": "clones", "standby_vm_hours": "standby VM-h", "resumes": "resumes",
    "cost_vm_hours": "cost VM-h",
}


@dataclass(frozen=True, slots=True)
class PageInfo:
    """What the page says about how the runs were made."""

    trace: str
    """The trace's file name, as given."""
    clone_time: float
    resume_time: float
    version: str
    """vmpooler's version."""


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%a %Y-%m-%d %H:%M UTC")


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def _per(interval: float) -> str:
    """``5 min``, ``hour``, ``6 h``, ``day``: what one point of the series covers."""
    whole = int(interval)
    if whole >= 86400 and whole % 86400 == 0:
        return "day" if whole == 86400 else f"{whole // 86400} days"
    if whole % 3600 == 0:
        return "hour" if whole == 3600 else f"{whole // 3600} h"
    return f"{whole // 60} min" if whole % 60 == 0 else f"{whole} s"


def _template(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _card(result: RunResult) -> str:
    doc = result.document()["total"]
    misses = doc["checkouts"] - doc["hits"]
    rows = [("checkouts", f"{doc['checkouts']:,}"), ("missed", f"{misses:,}"),
            ("wait mean / p95", f"{doc['wait_mean_s']:.0f} s / {doc['wait_p95_s']:.0f} s"),
            ("idle VM-hours", f"{doc['idle_vm_hours']:,.1f}"),
            ("clones", f"{doc['clones']:,}")]
    if doc["standby_vm_hours"]:
        rows.append(("standby VM-hours", f"{doc['standby_vm_hours']:,.1f}"))
    rows.append(("cost VM-hours", f"{doc['cost_vm_hours']:,.1f}"))
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
    return (f'<div class="panel card" data-policy="{escape(result.policy)}">'
            f"<h3>{escape(result.policy)}</h3>"
            f'<div class="big">{doc["hit_ratio"] * 100:.1f}%</div>'
            f'<div class="muted">of checkouts found a ready VM</div><dl>{items}</dl></div>')


def _caption(result: RunResult, recorder: SeriesRecorder, pool: str) -> str:
    series = recorder.series[pool]
    checkouts, missed = sum(series.checkouts), sum(series.misses)
    warm = f", {(checkouts - missed) / checkouts * 100:.1f}% warm" if checkouts else ""
    target = " (demand target dashed)" if any(t is not None for t in series.target) else ""
    return (f"<b>{escape(result.policy)}</b>: {checkouts:,} checkouts, {missed:,} missed"
            f"{warm}{target}")


def _pools(results: Sequence[RunResult], recorders: Sequence[SeriesRecorder]) -> str:
    out = []
    for pool in recorders[0].pools:
        top = chart_top(recorders, pool)
        figures = "".join(
            f"<figure><figcaption>{_caption(r, rec, pool)}</figcaption>"
            f"{pool_chart(rec, pool, top=top, policy=r.policy)}</figure>"
            for r, rec in zip(results, recorders, strict=True))
        out.append(f'<article class="panel pool" data-pool="{escape(pool)}">'
                   f'<h3>{escape(pool)}</h3><div class="runs">{figures}</div></article>')
    return "".join(out)


def _cells(doc: Mapping[str, Any]) -> str:
    return "".join(f'<td data-key="{key}">{fmt.format(doc[key])}</td>'
                   for key, fmt in FORMATS.items())


def _totals(result: RunResult) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADERS.values())
    total = ' class="total"'
    rows = "".join(
        f'<tr data-pool="{escape(name)}"{total if name == "total" else ""}>'
        f"<td>{escape(name)}</td>{_cells(doc)}</tr>"
        for name, doc in result.document().items())
    return (f'<div class="panel table-wrap"><table class="totals" '
            f'data-policy="{escape(result.policy)}"><caption>{escape(result.policy)}</caption>'
            f"<thead><tr><th>pool</th>{head}</tr></thead><tbody>{rows}</tbody></table></div>")


def _notes(results: Sequence[RunResult]) -> str:
    notes = list(dict.fromkeys(note for r in results for note in r.notes))
    for r in results:
        if r.unserved:
            notes.append(f"{r.policy}: {r.unserved} missed checkout(s) still had no VM when "
                         "the replay stopped (their wait is counted up to then)")
    if not notes:
        return ""
    items = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return f'<section id="notes"><h2>Notes</h2><ul class="notes">{items}</ul></section>'


def _meta(results: Sequence[RunResult], recorder: SeriesRecorder, info: PageInfo) -> str:
    standby = (f", a standby VM-hour at {results[0].standby_cost:g} of a running one"
               if any(r.total().standby_vm_seconds for r in results) else "")
    return escape(
        f"{info.trace}: {_utc(recorder.start)} to {_utc(recorder.end)} "
        f"({_duration(recorder.end - recorder.start)}); clones take {info.clone_time:g} s, "
        f"resumes {info.resume_time:g} s{standby}; one point per {_per(recorder.interval)}.")


def render_page(results: Sequence[RunResult], info: PageInfo) -> str:
    """The page of ``results`` (one per policy, each with its series: a result without
    raises ``ValueError``)."""
    recorders = [r.series for r in results if r.series is not None]
    if not results or len(recorders) != len(results):
        raise ValueError("every result needs its series for the page")
    interval = _per(recorders[0].interval)
    legend = (f'<span><span class="key checkouts"></span>checkouts per {interval}</span>'
              '<span><span class="key ready"></span>ready VMs (mean; band: fewest to most)'
              '</span><span><span class="key target"></span>demand target</span>'
              '<span><span class="key miss"></span>missed checkouts</span>')
    wait_legend = "".join(f'<span><span class="key policy-{i}"></span>{escape(r.policy)}'
                          "</span>" for i, r in enumerate(results))
    warm = "; ".join(f"{r.policy}: {r.total().hits:,} checkouts found a ready VM at once, "
                     f"{len(r.total().waits):,} waited" for r in results)
    names = ", ".join(r.policy for r in results)
    fields = {
        "title": escape(f"Replay of {info.trace.rsplit('/', 1)[-1]} ({names})"),
        "version": escape(info.version),
        "style": _template("report.css"),
        "meta": _meta(results, recorders[0], info),
        "cards": "".join(_card(r) for r in results),
        "legend": legend,
        "pools": _pools(results, recorders),
        "wait_legend": wait_legend,
        "waits": wait_histogram({r.policy: r.total().waits for r in results}),
        "wait_note": escape(f"{warm}. Bins: {', '.join(label for _, label in WAIT_BINS)}."),
        "totals": "".join(_totals(r) for r in results),
        "notes": _notes(results),
    }
    return Template(_template("report.html")).substitute(fields)
