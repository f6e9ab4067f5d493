"""Every metric the service emits: name, kind, tags and unit.

A name is what a caller passes to :class:`vmpooler.actors.metrics.backends.Metrics` (without the
variable suffix); ``<word>`` in a name stands for one variable dotted segment that is part
of the name on every backend (``vmpooler_dlq.<queue>.count``). ``tags`` are the tag keys in
the order the statsd/graphite form appends their values (``pool`` last), so
``user`` with tags ``(user, operation, pool)`` is vmpooler's ``user.<user>.<op>.<pool>``.

Every tag value of request origin is bounded by
:class:`vmpooler.actors.metrics.bounded.LabelRule` (unknown pools are ``unknown``).

Units: ``unit`` is what the value means as the caller passes it: timings are always
seconds (statsd and DogStatsD send them as ``|ms`` in milliseconds); ``plain_unit`` is what
graphite receives for a timing, which is what vmpooler sent there (seconds, except
``connection_waited`` in whole milliseconds).

What callers may rely on: :data:`CATALOG` is complete for the emission sites of this
package (a process test keeps it in step with the wire); :func:`find` matches a name as a
sink sees it, without the prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Literal

__all__ = ["CATALOG", "MetricSpec", "find", "plain_unit"]

Kind = Literal["increment", "gauge", "timing"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric family.

    ``reference`` is True for vmpooler 3.9.1's own metrics (reference §6), False for the
    ones only this service adds; ``emitter`` is ``api``, ``manager`` or ``provider``.
    """

    name: str
    kind: Kind
    tags: tuple[str, ...] = ()
    unit: str = "count"
    emitter: str = "manager"
    reference: bool = True
    plain_unit: str = ""
    doc: str = ""


def _specs() -> list[MetricSpec]:
    p, api, prov = ("pool",), "api", "provider"
    specs = [
        MetricSpec("checkout.success", "increment", p, emitter=api),
        MetricSpec("checkout.empty", "increment", p, emitter=api,
                   doc="pool is the requested name (a pool or an alias), as vmpooler"),
        MetricSpec("checkout.miss", "increment", p, emitter=api, reference=False,
                   doc="one per pool the refused name could be served from: warm-hit ratio"),
        MetricSpec("checkout.invalid", "increment", p, emitter=api,
                   doc="pool is 'unknown': the name is not configured, or the body empty"),
        MetricSpec("delete.success", "increment", emitter=api),
        MetricSpec("delete.failed", "increment", emitter=api),
        MetricSpec("ondemandrequest_generate.success", "increment", emitter=api),
        MetricSpec("ondemandrequest_generate.duplicaterequests", "increment", emitter=api),
        MetricSpec("ondemandrequest_fail.toomanyrequests", "increment", p, emitter=api),
        MetricSpec("ondemandrequest_fail.invalid", "increment", p, emitter=api,
                   doc="pool is 'unknown' (a name no configuration knows)"),
        MetricSpec("config.invalid", "increment", p, emitter=api,
                   doc="pool: a configured pool given a bad value, else 'unknown'"),
        MetricSpec("poolreset.invalid", "increment", p, emitter=api,
                   doc="pool: an alias, else 'unknown'"),
        MetricSpec("http_requests_vm_total", "increment", ("method", "subpath", "operation"),
                   emitter=api),
        MetricSpec("user", "increment", ("user", "operation", "pool"), emitter=api,
                   doc="usage_stats only"),
        MetricSpec("usage_litmus", "increment", ("user", "operation", "pool"), emitter=api),
        MetricSpec("usage_jenkins_instance", "increment",
                   ("instance", "value_stream", "operation", "pool"), emitter=api),
        MetricSpec("usage_branch_project", "increment",
                   ("branch", "project", "operation", "pool"), emitter=api),
        MetricSpec("usage_job_component", "increment",
                   ("job", "component", "operation", "pool"), emitter=api),
        MetricSpec("ready", "gauge", p, "vms"),
        MetricSpec("running", "gauge", p, "vms"),
        MetricSpec("vmpooler_clone", "gauge", p, "s", doc="seconds the clone took"),
        MetricSpec("vmpooler_destroy", "gauge", p, "s", doc="seconds the destroy took"),
        MetricSpec("time_to_ready_state", "timing", p, "s", plain_unit="s"),
        *[MetricSpec(f"vmpooler_errors.{e}", "increment", p)
          for e in ("markedasfailed", "permanently_failed", "duplicatehostname", "staledns")],
        MetricSpec("vmpooler_dlq.<queue>.count", "increment", p),
        MetricSpec("vmpooler_purge.<queue>.count", "increment", p),
        MetricSpec("vmpooler_purge.orphaned.count", "increment"),
        MetricSpec("vmpooler_purge.cycle.duration", "gauge", (), "s"),
        MetricSpec("vmpooler_purge.total.count", "gauge"),
        MetricSpec("vmpooler_health.status", "gauge", (), "state",
                   doc="0 healthy, 1 degraded, 2 unhealthy"),
        MetricSpec("vmpooler_health.check.duration", "gauge", (), "s"),
        MetricSpec("vmpooler_health.dlq.total_size", "gauge"),
        MetricSpec("vmpooler_health.stuck_vms.count", "gauge"),
        MetricSpec("vmpooler_health.orphaned_metadata.count", "gauge"),
        *[MetricSpec(f"vmpooler_health.queue.{q}", "gauge", p,
                     "s" if q.endswith("oldest_age") else "count")
          for q in ("pending.size", "pending.oldest_age", "pending.stuck_count",
                    "ready.size", "ready.oldest_age", "completed.size")],
        MetricSpec("vmpooler_health.dlq.size", "gauge", ("queue",)),
        *[MetricSpec(f"vmpooler_health.tasks.{t}", "gauge")
          for t in ("clone.active", "ondemand.active", "ondemand.pending")],
        MetricSpec("vmpooler_performance.check_pool", "gauge", p, "s"),
        MetricSpec("connection_available", "gauge", ("type", "provider"), emitter=prov),
        MetricSpec("connection_waited", "timing", ("type", "provider"), "s", emitter=prov,
                   plain_unit="ms"),
        *[MetricSpec(f"connection_pool.{g}", "gauge", ("provider",),
                     "percent" if g == "utilization" else "count")
          for g in ("available", "in_use", "utilization", "waiting")],
        MetricSpec("connection_pool.critical", "increment", ("provider",)),
        MetricSpec("connection_pool.warning", "increment", ("provider",)),
        MetricSpec("circuit_breaker.state", "gauge", ("provider",), "state",
                   doc="0 closed, 0.5 half open, 1 open"),
        MetricSpec("circuit_breaker.failures", "gauge", ("provider",)),
        *[MetricSpec(f"circuit_breaker.{e}", "increment", ("provider",))
          for e in ("opened", "half_open", "closed")],
        MetricSpec("adaptive_timeout.current", "gauge", ("provider", "op"), "s"),
        MetricSpec("adaptive_timeout.p95", "gauge", ("provider", "op"), "s"),
        MetricSpec("connect.open", "increment", ("provider",), emitter=prov),
        MetricSpec("connect.fail", "increment", ("provider",), emitter=prov),
        MetricSpec("migrate", "timing", p, "s", plain_unit="s"),
        MetricSpec("destroy", "timing", p, "s", emitter=prov, plain_unit="s",
                   doc="a VM of an unconfigured folder destroyed at start-up; pool is the "
                       "folder's name"),
        MetricSpec("migrate_from", "increment", ("host",)),
        MetricSpec("migrate_to", "increment", ("host",)),
        # Only this service:
        MetricSpec("http_request", "timing", ("method", "status"), "s", emitter=api,
                   reference=False, plain_unit="s",
                   doc="every API response; method OTHER for one outside RFC 9110 and PATCH"),
        MetricSpec("api.redis_unavailable", "increment", emitter=api, reference=False,
                   doc="API requests answered 503 because Redis could not be reached"),
        MetricSpec("api.connections.refused", "increment", ("reason",), emitter=api,
                   reference=False,
                   doc="connections refused or closed early by an API worker, by reason "
                       "(web/worker.py REASONS)"),
        MetricSpec("api.connections.open", "gauge", (), "connections", emitter=api,
                   reference=False, doc="connections an API worker holds"),
        MetricSpec("api.login_refused", "increment", ("scope",), emitter=api,
                   reference=False, doc="HTTP Basic logins answered 429 without asking the "
                   "auth provider: too many failures for the user name or the address (scope "
                   "user|address)"),
        MetricSpec("quota.refused", "increment", ("quota", "requester"), emitter=api,
                   reference=False,
                   doc="requests refused (429) by a :quotas: limit, by limit name and kind of "
                       "requester (token|anonymous|address; never a user name)"),
        MetricSpec("vmpooler_ondemand.ready", "increment", reference=False),
        MetricSpec("vmpooler_ondemand.failed", "increment", reference=False),
        *[MetricSpec(f"vmpooler_actor.{e}", "increment", ("actor",), reference=False)
          for e in ("crashed", "given_up", "restarted")],
        MetricSpec("pending", "gauge", p, "vms", reference=False),
        MetricSpec("size", "gauge", p, "vms", reference=False, doc="the pool's target size"),
        MetricSpec("clone.outcome", "increment", ("provider", "result", "pool"),
                   reference=False),
        MetricSpec("clone.queue_wait", "timing", ("kind", "pool"), "s", reference=False,
                   plain_unit="s", doc="seconds waited for a clone slot"),
        MetricSpec("task.queue_wait", "timing", ("provider", "op"), "s", reference=False,
                   plain_unit="s",
                   doc="seconds the provider (vCenter) queued a call's task before running it"),
        MetricSpec("ondemand.time_to_ready", "timing", (), "s", reference=False,
                   plain_unit="s", doc="seconds from an on-demand request to ready"),
        MetricSpec("ondemand.outcome", "increment", ("result",), reference=False),
        MetricSpec("checkout.duration", "timing", p, "s", emitter=api, reference=False,
                   plain_unit="s", doc="seconds a successful checkout took"),
        MetricSpec("vm.lost", "increment", ("reason", "pool"), reference=False,
                   doc="VMs destroyed without ever being used"),
        MetricSpec("brake.engaged", "gauge", p, "state", reference=False,
                   doc="1 while the pool's mass-failure brake is engaged, else 0 (pools "
                       "with max_unhealthy only)"),
        MetricSpec("brake.engagements", "increment", p, reference=False,
                   doc="times the pool's mass-failure brake engaged"),
        MetricSpec("brake.held", "increment", p, reference=False,
                   doc="ready VMs held instead of destroyed by the mass-failure brake"),
        MetricSpec("pool.config_error", "gauge", p, "state", reference=False,
                   doc="1 while the pool is in the configuration-error state (a clone "
                       "failed permanently: it clones nothing but a trial now and then), "
                       "else 0"),
        MetricSpec("failover.size", "gauge", p, "vms", reference=False,
                   doc="the size a failover pool keeps: its own plus what it takes over of "
                       "alias siblings that cannot deliver (pools with failover only)"),
        MetricSpec("sizing.target", "gauge", p, "vms", reference=False,
                   doc="the ready VMs a demand-sized pool keeps now (sizing: demand only)"),
        MetricSpec("sizing.warm_hit", "gauge", p, "ratio", reference=False,
                   doc="the share of a demand-sized pool's checkouts of the last day served "
                       "from a ready VM"),
        MetricSpec("sizing.idle", "gauge", p, "vms", reference=False,
                   doc="ready VMs of a demand-sized pool waiting for a checkout"),
        MetricSpec("sizing.standby_target", "gauge", p, "vms", reference=False,
                   doc="the standby VMs a demand-sized pool keeps now (standby: auto only)"),
        MetricSpec("failover.takeover", "increment", ("sibling", "pool"), reference=False,
                   doc="times the pool started covering the share of a sibling"),
        MetricSpec("failover.giveback", "increment", ("sibling", "pool"), reference=False,
                   doc="times the pool gave a sibling's share back"),
        MetricSpec("standby", "gauge", p, "vms", reference=False,
                   doc="VMs in the pool's standby tier (suspended or powered off, or on "
                       "their way in or out), every cycle (pools with a standby tier only)"),
        MetricSpec("standby.suspend", "increment", ("result", "pool"), reference=False,
                   doc="VMs put on standby: result success (suspended or powered off) or "
                       "failure (the VM is destroyed)"),
        MetricSpec("standby.resume", "increment", ("result", "pool"), reference=False,
                   doc="standby VMs woken: result success (ready again) or failure (the VM "
                       "is destroyed)"),
        MetricSpec("standby.resume_duration", "timing", p, "s", reference=False,
                   plain_unit="s",
                   doc="seconds from a standby VM's resume sent to it being ready"),
    ]
    return specs


CATALOG: tuple[MetricSpec, ...] = tuple(_specs())
"""Every metric family, §6 ones first."""


def _name_pattern(name: str) -> str:
    return ".".join(r"[^.]+" if re.fullmatch(r"<\w+>", part) else re.escape(part)
                    for part in name.split("."))


@cache
def _dotted(spec: MetricSpec) -> re.Pattern[str]:
    return re.compile(_name_pattern(spec.name) + r"(\.[^.]*)" * len(spec.tags) + "$")


@cache
def _bare(spec: MetricSpec) -> re.Pattern[str]:
    return re.compile(_name_pattern(spec.name) + "$")


def find(name: str, tags: Mapping[str, str] | None) -> MetricSpec | None:
    """The family of ``name`` as a sink sees it, prefix removed.

    With ``tags`` (a tagged backend; constant tags removed) the name is matched bare and
    the tag keys must be the family's; with None the name is the dotted statsd/graphite
    form with the tag values appended. None when nothing matches.
    """
    for spec in CATALOG:
        if tags is None:
            if _dotted(spec).match(name):
                return spec
        elif _bare(spec).match(name) and set(tags) == set(spec.tags):
            return spec
    return None


@cache
def plain_unit(name: str) -> str:
    """What graphite receives for the timing ``name`` (a caller's name): ``s`` or ``ms``;
    ``s`` for a name the catalogue does not know."""
    for spec in CATALOG:
        if spec.kind == "timing" and _bare(spec).match(name):
            return spec.plain_unit or "s"
    return "s"
