"""The weekly plan of the demand forecast: ready VMs per time-of-week slot, from the history.

Input: the kept checkout instants, each with its *rank* (how many checkouts arrived within one
clone window up to and including it: the ready VMs it needed to be served warm), the instant
learning began, ``now``, and the target warm-hit ratio.

1. Exposure: how many times each time-of-week slot elapsed in ``[begin, now)`` (fractions at
   the edges), so rates are per visit of a slot.
2. Day-of-week factor ``f_w``: checkouts per elapsed weekday ``w`` over checkouts per elapsed
   day. A weekday seen for less than ``PRIOR_DAYS`` (one day) is drawn toward 1 (an average
   day) by the part not yet seen; after that the data alone decide. No pseudo-demand is kept
   beyond that: at a 99 % target any invented demand above 1 % of the total would have to be
   covered, which would keep VMs through every silent night and weekend.
3. Daily profile ``c_h``: per time-of-day slot ``h``, checkouts per visit, with each checkout
   weighted by ``1/f_w`` of its weekday (taking the weekly cycle out), smoothed over
   neighbouring slots with the kernel ``(1, 2, 1)/4`` (demand at 10:00 says something about
   10:30; a single slot's count is too sparse to stand alone).
4. Ranks: ``p(r)``, the share of all kept checkouts (weekday-weighted) that have rank ``r``.
   How big a pool's bursts are is its workflows' doing; the time of day and week sets how
   often they come. Expected checkouts of rank ``r`` in a visit of slot ``(w, h)``:
   ``n = f_w · c_h · p(r)``.
5. Allocation: holding ``S`` ready VMs in a slot serves its checkouts of rank ``≤ S``. The r-th
   VM in slot ``s`` serves ``n_s(r)`` checkouts per visit for one slot of idle time, so the
   fewest VM-slots reaching the target ratio take the (slot, rank) pairs of largest ``n`` first
   until ``target_hit`` of all expected checkouts are covered (a Lagrangian threshold λ);
   slot ``s`` then holds the largest rank ``r`` with ``n_s(r) ≥ λ``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DAY", "MONDAY_EPOCH", "PRIOR_DAYS", "WEEK", "Seasons", "build_plan", "seasons",
           "week_slot"]

DAY = 86400.0
WEEK = 7 * DAY
MONDAY_EPOCH = 4 * DAY  # 1970-01-05T00:00Z, a Monday: time-of-week slots count from there.
# A weekday seen for less than this many days is drawn toward an average day (see step 2).
PRIOR_DAYS = 1.0


def week_slot(epoch: float, slot_seconds: float) -> int:
    """The time-of-week slot (UTC, Monday 00:00 first) of ``epoch``."""
    return int((epoch - MONDAY_EPOCH) // slot_seconds) % int(WEEK // slot_seconds)


def _exposure(begin: float, now: float, slot_seconds: float) -> list[float]:
    slots = int(WEEK // slot_seconds)
    seen = [0.0] * slots
    if now <= begin:
        return seen
    first = int((begin - MONDAY_EPOCH) // slot_seconds)
    last = int((now - MONDAY_EPOCH) // slot_seconds)
    weeks, _rest = divmod(last - first + 1, slots)
    if weeks:
        seen = [float(weeks)] * slots
    for index in range(first + weeks * slots, last + 1):
        seen[index % slots] += 1.0
    # The edge slots only partly elapsed.
    head = (begin - MONDAY_EPOCH) / slot_seconds - first
    tail = last + 1 - (now - MONDAY_EPOCH) / slot_seconds
    seen[first % slots] -= head
    seen[last % slots] -= tail
    return seen


@dataclass(frozen=True, slots=True)
class Seasons:
    """Steps 1-3 of the plan for a history: the day-of-week factors ``factor[w]``, the
    smoothed checkouts per visit of each time-of-day slot ``rate[h]`` (weekday-normalised),
    each kept checkout's time-of-week slot and its weight ``1 / factor[w]``. Expected
    checkouts in a visit of slot ``(w, h)``: ``factor[w] * rate[h]``."""

    factor: list[float]
    rate: list[float]
    slot_of: list[int]
    weight: list[float]
    visits: list[float]


def seasons(times: Sequence[float], begin: float, now: float,
            slot_seconds: float) -> Seasons | None:
    """The seasonal part of the plan (steps 1-3); None without history or exposure."""
    if not times:
        return None
    per_day = int(DAY // slot_seconds)
    seen = _exposure(begin, now, slot_seconds)
    day_seen = [sum(seen[w * per_day:(w + 1) * per_day]) / per_day for w in range(7)]
    day_count = [0] * 7
    slot_of = [week_slot(t, slot_seconds) for t in times]
    for s in slot_of:
        day_count[s // per_day] += 1
    total_days = sum(day_seen)
    if total_days <= 0:
        return None
    mean = len(times) / total_days
    factor = []
    for w in range(7):
        prior = max(0.0, PRIOR_DAYS - day_seen[w])
        factor.append((day_count[w] + prior * mean) / ((day_seen[w] + prior) * mean))
    raw = [0.0] * per_day  # weekday-normalised checkouts per time-of-day slot
    for s in slot_of:
        w, h = divmod(s, per_day)
        raw[h] += 1.0 / factor[w]
    visits = [sum(seen[w * per_day + h] for w in range(7)) for h in range(per_day)]
    rate = [0.0] * per_day
    for h in range(per_day):
        count = seen_h = 0.0
        for offset, kernel in ((-1, 0.25), (0, 0.5), (1, 0.25)):
            src = (h + offset) % per_day
            seen_h += kernel * visits[src]
            count += kernel * raw[src]
        if seen_h > 0:
            rate[h] = count / seen_h
    weight = [1.0 / factor[s // per_day] for s in slot_of]
    return Seasons(factor, rate, slot_of, weight, visits)


def build_plan(times: Sequence[float], ranks: Sequence[int], begin: float, now: float,
               target_hit: float, slot_seconds: float) -> list[int]:
    """Ready VMs per time-of-week slot (index as ``week_slot``) reaching ``target_hit`` of the
    expected checkouts with the fewest VM-slots. All zeros without history."""
    slots = int(WEEK // slot_seconds)
    per_day = int(DAY // slot_seconds)
    plan = [0] * slots
    found = seasons(times, begin, now, slot_seconds)
    if found is None:
        return plan
    factor, visits = found.factor, found.visits
    # Daily profile: weekday-normalised counts per (time-of-day slot, rank).
    raw: list[dict[int, float]] = [{} for _ in range(per_day)]
    for s, rank in zip(found.slot_of, ranks, strict=True):
        w, h = divmod(s, per_day)
        cell = raw[h]
        cell[rank] = cell.get(rank, 0.0) + 1.0 / factor[w]
    profile: list[dict[int, float]] = [{} for _ in range(per_day)]
    for h in range(per_day):
        counts: dict[int, float] = {}
        seen_h = 0.0
        for offset, weight in ((-1, 0.25), (0, 0.5), (1, 0.25)):
            src = (h + offset) % per_day
            seen_h += weight * visits[src]
            for rank, count in raw[src].items():
                counts[rank] = counts.get(rank, 0.0) + weight * count
        if seen_h > 0:
            profile[h] = {rank: count / seen_h for rank, count in counts.items()}
    # Separable: a slot's rate of checkouts times the pool's distribution of ranks. How big a
    # pool's bursts are is its workflows' doing; the time of day and week only sets how often
    # they come. A slot's own ranks are too few to say how big the next burst there will be
    # (a plan fitted to them served 97.4 % on the week after for a 99 % target).
    overall: dict[int, float] = {}
    for cell in raw:
        for rank, count in cell.items():
            overall[rank] = overall.get(rank, 0.0) + count
    whole = sum(overall.values())
    share = {rank: count / whole for rank, count in overall.items()}
    for h in range(per_day):
        rate = sum(profile[h].values())
        profile[h] = {rank: rate * part for rank, part in share.items()}
    # Allocation by a threshold on checkouts served per VM-slot.
    items: list[float] = []
    total = 0.0
    for w in range(7):
        for h in range(per_day):
            for count in profile[h].values():
                value = factor[w] * count
                items.append(value)
                total += value
    items.sort(reverse=True)
    needed = target_hit * total
    covered = 0.0
    threshold = items[-1] if items else 0.0
    for value in items:
        covered += value
        if covered >= needed:
            threshold = value
            break
    for w in range(7):
        for h in range(per_day):
            fw = factor[w]
            best = 0
            for rank, count in profile[h].items():
                if rank > best and fw * count >= threshold:
                    best = rank
            plan[w * per_day + h] = best
    return plan
