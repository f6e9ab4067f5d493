"""The simulator's profiles for ``bench/vsphere.py``, and its tasks as its SOAP trace shows them.

A profile is how the simulator runs tasks: ``ideal`` finishes every task inside its call (only
the managers' own overhead is measured); ``realistic`` runs them as a vCenter does, asynchronous
and of realistic length (``PROFILES``). For a realistic run this module gives:

* the physical bound of a fill (``fill_bound``): at most min(task_limit, max concurrent tasks)
  clones run at once, so N VMs take ceil(N / slots) waves of the mean clone time, plus the
  power-on when the manager powers VMs on in a task of its own;
* the tasks as vCenter saw them (``read_tasks``): every ``TaskInfo`` in the responses of the
  trace carries the task's ``queueTime``, ``startTime`` and ``completeTime`` (vcsim's own clock),
  so the wait of a clone in vCenter's queue (``queued`` before ``running``) and its run time are
  exact for every task whose end the manager read; ``clone_figures`` sums them up.

Nothing here talks to a process: the functions read a trace file or compute from figures.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CLONE = "VirtualMachine.cloneVm"  # a clone task's descriptionId in vcsim
QUEUED_AFTER = 0.01  # s: a clone that waited longer than this in vCenter's queue was queued
_STATE_RANK = {"queued": 0, "running": 1, "success": 2, "error": 2}
# One TaskInfo as vcsim serialises it: key first, eventChainId last.
_TASK_INFO = re.compile(rb"<key>(task-\d+)</key>(.{0,4000}?)<eventChainId>", re.S)
_FIELD = {name: re.compile(rb"<" + name.encode() + rb">([^<]*)</")
          for name in ("descriptionId", "state", "queueTime", "startTime", "completeTime")}
_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z$")


@dataclass(frozen=True)
class Profile:
    """How the simulator runs tasks: ``flags(seed)`` are its command-line flags."""
    name: str
    task_delay_ms: dict[str, int]  # asynchronous *_Task methods and their mean length
    jitter: float  # each delay drawn uniformly from +-jitter of it
    max_concurrent: int  # asynchronous tasks running at once; 0 = no limit
    fill_timeout: float  # default --fill-timeout (s)

    def flags(self, seed: int) -> list[str]:
        if not self.task_delay_ms:
            return []
        flags = ["-task-delay", ",".join(f"{m}:{ms}" for m, ms in self.task_delay_ms.items()),
                 "-task-jitter", f"{self.jitter:g}", "-fault-seed", str(seed)]
        if self.max_concurrent:
            flags += ["-max-concurrent-tasks", str(self.max_concurrent)]
        return flags


PROFILES = {
    "ideal": Profile("ideal", {}, 0.0, 0, 300.0),
    "realistic": Profile("realistic", {"CloneVM_Task": 20000, "PowerOnVM_Task": 2000,
                                       "PowerOffVM_Task": 2000, "Destroy_Task": 2000},
                         0.3, 8, 1200.0),
}


def fill_bound(profile: Profile, vms: int, task_limit: int,
               power_on_per_vm: float) -> dict[str, Any] | None:
    """The shortest fill of ``vms`` VMs vCenter allows under ``profile``; None for a profile
    without task delays. A uniform jitter keeps the mean, so a wave takes the mean clone time.
    ``power_on_per_vm`` (``PowerOnVM_Task`` calls per VM created in the fill): at 0.5 or more
    the manager powers VMs on in a task of its own, and the bound adds one power-on."""
    clone_ms = profile.task_delay_ms.get("CloneVM_Task")
    if not clone_ms or vms <= 0:
        return None
    slots = min(task_limit, profile.max_concurrent) if profile.max_concurrent else task_limit
    waves = math.ceil(vms / slots)
    after = profile.task_delay_ms.get("PowerOnVM_Task", 0) / 1000 \
        if power_on_per_vm >= 0.5 else 0.0
    return {"slots": slots, "waves": waves, "clone_mean_s": clone_ms / 1000,
            "after_clone_s": after, "seconds": round(waves * clone_ms / 1000 + after, 2)}


@dataclass(frozen=True)
class TaskSeen:
    """The most advanced look at one task in the trace (a later look at the same state wins:
    a queued task's ``startTime`` is the moment it began to run)."""
    key: str
    description: str
    state: str
    queued: datetime
    started: datetime | None
    completed: datetime | None

    @property
    def queue_wait(self) -> float | None:
        return None if self.started is None else (self.started - self.queued).total_seconds()

    @property
    def run_seconds(self) -> float | None:
        if self.started is None or self.completed is None:
            return None
        return (self.completed - self.started).total_seconds()


def parse_time(text: str) -> datetime | None:
    """vcsim's ``2026-12-05T21:53:30.674405331Z`` (nanoseconds cut to microseconds)."""
    m = _TIME.match(text.strip())
    if not m:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    return datetime.fromisoformat(f"{m.group(1)}.{frac}").replace(tzinfo=UTC)


def parse_tasks(data: bytes) -> dict[str, TaskSeen]:
    """Every task some ``TaskInfo`` in ``data`` shows, at its most advanced look."""
    seen: dict[str, TaskSeen] = {}
    for m in _TASK_INFO.finditer(data):
        body = m.group(2)
        fields = {k: (f.group(1).decode() if (f := rx.search(body)) else "")
                  for k, rx in _FIELD.items()}
        queued = parse_time(fields["queueTime"])
        if queued is None or fields["state"] not in _STATE_RANK:
            continue
        task = TaskSeen(m.group(1).decode(), fields["descriptionId"], fields["state"], queued,
                        parse_time(fields["startTime"]), parse_time(fields["completeTime"]))
        old = seen.get(task.key)
        if old is None or _STATE_RANK[task.state] >= _STATE_RANK[old.state]:
            seen[task.key] = task
    return seen


def read_tasks(path: Path, start: int, end: int) -> dict[str, TaskSeen]:
    """``parse_tasks`` of the trace bytes ``[start, end)``."""
    with open(path, "rb") as handle:
        handle.seek(start)
        return parse_tasks(handle.read(max(0, end - start)))


def fcfs_makespan(durations: list[float], slots: int) -> float:
    """When the last of ``durations`` ends if all are queued at 0 and run first come first
    served on ``slots`` slots (what vcsim does with tasks submitted at once)."""
    ends = [0.0] * max(1, slots)
    for d in durations:
        i = min(range(len(ends)), key=ends.__getitem__)
        ends[i] += d
    return max(ends)


_NOT_YET = datetime.max.replace(tzinfo=UTC)  # the end of a task still queued or running


def _peak(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at once (one that ends as another starts is not counted)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals],
                    key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def clone_figures(tasks: dict[str, TaskSeen], vms: int, slots: int) -> dict[str, Any]:
    """Clone tasks seen: how many queued in vCenter and for how long (a task still queued at
    its last look counts as queued, its wait unknown: it is left out of the waits), how
    long the ended ones ran, the most in flight (queued or running) and running at once (a
    task not ended at its last look counts as open to the end), the span from the first
    queued to the last ended, and ``schedule_bound_s``: the ``fcfs_makespan`` of the first
    ``vms`` clones' own run times on ``slots`` slots (the fill had every clone been asked at
    once), None unless all of them ended."""
    clones = sorted((t for t in tasks.values() if t.description == CLONE),
                    key=lambda t: t.queued)
    done = [t for t in clones if t.completed is not None and t.started is not None]
    waits = [w for t in clones if (w := t.queue_wait) is not None]
    runs = [r for t in done if (r := t.run_seconds) is not None]
    queued = sum(1 for w in waits if w > QUEUED_AFTER) \
        + sum(1 for t in clones if t.state == "queued")
    first_runs = [r for t in clones[:vms] if (r := t.run_seconds) is not None]
    ends = [t.completed for t in done if t.completed is not None]

    def r2(x: float | None) -> float | None:
        return round(x, 2) if x is not None else None

    return {
        "clone_tasks_seen": len(clones),
        "clone_tasks_ended": len(done),
        "clone_tasks_failed": sum(1 for t in clones if t.state == "error"),
        "clones_queued": queued,
        "queue_wait_mean_s": r2(sum(waits) / len(waits)) if waits else None,
        "queue_wait_max_s": r2(max(waits)) if waits else None,
        "queue_wait_total_s": r2(sum(waits)) if waits else None,
        "clone_run_mean_s": r2(sum(runs) / len(runs)) if runs else None,
        "clone_run_min_s": r2(min(runs)) if runs else None,
        "clone_run_max_s": r2(max(runs)) if runs else None,
        "peak_clones_in_flight": _peak([(t.queued, t.completed or _NOT_YET) for t in clones]),
        "peak_clones_running": _peak([(t.started, t.completed or _NOT_YET) for t in clones
                                      if t.started is not None]),
        "clone_span_s": r2((max(ends) - clones[0].queued).total_seconds()) if ends else None,
        "schedule_bound_s": r2(fcfs_makespan(first_runs, slots))
        if len(first_runs) == vms > 0 else None,
    }
