"""vmpooler's Prometheus metric families and how a ``Metrics`` call maps onto one (§6).

A call ``(name, tags)`` is first looked up by its whole name in :data:`KEYED` (families of
ours whose labels come from the tags by key). Otherwise vmpooler's rule applies to the
*segments*: the dotted name split on ``.`` followed by the tag values (mapping order, ``pool``
last, exactly as the statsd backend renders them):

* the first segment selects a family of :data:`FAMILIES`;
* a family with ``suffixes`` takes the second segment as a name suffix (one not listed is
  unknown);
* the remaining segments fill the family's labels: a single label takes them all joined
  with ``.`` (hostnames, ``metric_path``), several labels are filled from the end (a missing
  one is ``""``), a family without labels ignores them.

The exposed name is ``<prometheus_prefix>_<family>[_<suffix>]``; ``prometheus_client``
appends ``_total`` to every counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "FAMILIES",
    "HTTP_BUCKETS",
    "IGNORED",
    "KEYED",
    "Family",
    "Resolved",
    "resolve",
]

Kind = Literal["counter", "gauge", "histogram"]

CLONE_BUCKETS = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 180.0, 240.0, 300.0, 600.0)
"""vmpooler's ``POOLER_CLONE_TIME_BUCKETS`` (seconds)."""
READY_BUCKETS = (30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 500.0, 800.0, 1200.0, 1600.0)
"""vmpooler's ``POOLER_READY_TIME_BUCKETS`` (seconds)."""
CONNECT_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.008, 0.013, 0.018, 0.023)
"""vmpooler's ``REDIS_CONNECT_BUCKETS`` (1…23 ms), in seconds: our timings are seconds."""
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""client_ruby's default buckets, which vmpooler's HTTP and our checkout histograms use."""
ONDEMAND_BUCKETS = (10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1200.0, 1800.0)
QUEUE_WAIT_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
RESUME_BUCKETS = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0)
"""Seconds from a standby VM's resume to ready: seconds to a minute or two, where
:data:`READY_BUCKETS` (a clone's boot) would put them all in the first bucket."""

GaugeMode = Literal["livemostrecent", "livesum"]
"""The multiprocess modes a family's gauge uses (see :class:`Family`)."""


@dataclass(frozen=True, slots=True)
class Family:
    """One registered family (vmpooler's ``vmpooler_metrics_table`` entry).

    ``mode`` is the gauge's multiprocess mode: ``livemostrecent`` (the newest value any
    live process set) unless the family also takes increments, which that mode refuses;
    those use ``livesum`` (only the manager writes them, so the sum is its value).
    ``also`` names a histogram family that observes every value of this gauge too.
    ``keys`` (:data:`KEYED` only) maps a tag key to the label it fills.
    """

    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    mode: GaugeMode = "livemostrecent"
    also: str | None = None
    keys: Mapping[str, str] = field(default_factory=dict)


_METRIC_PATH = ("metric_path",)
_POOL = ("poolname",)
_USAGE = ("operation", "poolname")

FAMILIES: Mapping[str, Family] = {
    "user": Family("counter", "Pool instances and the operation performed by a user",
                   ("user", *_USAGE)),
    "usage_litmus": Family("counter", "Pool instances and the operation by Litmus jobs",
                           ("user", *_USAGE)),
    "usage_jenkins_instance": Family(
        "counter", "Pool instances and the operation by Jenkins instances",
        ("jenkins_instance", "value_stream", *_USAGE)),
    "usage_branch_project": Family(
        "counter", "Pool instances and the operation by Jenkins branch/project",
        ("branch", "project", *_USAGE)),
    "usage_job_component": Family(
        "counter", "Pool instances and the operation by Jenkins job/component",
        ("job_name", "component_to_test", *_USAGE)),
    "checkout": Family("counter", "Pool checkout counts", _POOL,
                       ("nonresponsive", "empty", "success", "invalid", "miss")),
    "delete": Family("counter", "Delete machine", (), ("success", "failed")),
    "ondemandrequest_generate": Family("counter", "Ondemand request", (),
                                       ("duplicaterequests", "success")),
    "ondemandrequest_fail": Family("counter", "Ondemand request failure", _POOL,
                                   ("toomanyrequests", "invalid")),
    "config": Family("counter", "vmpooler pool configuration request", _POOL, ("invalid",)),
    "poolreset": Family("counter", "Pool reset counter", _POOL, ("invalid",)),
    "connect": Family("counter", "vmpooler connect (to vSphere)", (), ("open", "fail")),
    "migrate_from": Family("counter", "vmpooler machine migrated from", ("host_name",)),
    "migrate_to": Family("counter", "vmpooler machine migrated to", ("host_name",)),
    "http_requests_vm_total": Family(
        "counter", "HTTP requests and sub-operations under /vm and /ondemandvm",
        ("method", "subpath", "operation")),
    "ready": Family("gauge", "vmpooler number of machines in ready State", _POOL),
    "running": Family("gauge", "vmpooler number of machines running", _POOL),
    "connection_available": Family("gauge", "vmpooler connections available",
                                   ("type", "provider")),
    "time_to_ready_state": Family("histogram", "Time taken for machine to reach ready state",
                                  _POOL, buckets=READY_BUCKETS),
    "migrate": Family("histogram", "vmpooler time taken to migrate machine for pool", _POOL,
                      buckets=CLONE_BUCKETS),
    "clone": Family("histogram", "vmpooler time taken to clone machine", _POOL,
                    buckets=CLONE_BUCKETS),
    "destroy": Family("histogram", "vmpooler time taken to destroy machine", _POOL,
                      buckets=CLONE_BUCKETS),
    "connection_waited": Family("histogram", "vmpooler connection wait time (seconds)",
                                ("type", "provider"), buckets=CONNECT_BUCKETS),
    "vmpooler_health": Family("gauge", "vmpooler health check metrics", _METRIC_PATH),
    "vmpooler_purge": Family("gauge", "vmpooler purge metrics", _METRIC_PATH, mode="livesum"),
    "vmpooler_destroy": Family("gauge", "vmpooler destroy metrics", _POOL),
    "vmpooler_clone": Family("gauge", "vmpooler clone metrics", _POOL, also="clone"),
    "circuit_breaker": Family("gauge", "Circuit breaker state and failure tracking",
                              _METRIC_PATH, mode="livesum"),
    "connection_pool": Family("gauge", "Connection pool health metrics", _METRIC_PATH,
                              mode="livesum"),
    "adaptive_timeout": Family("gauge", "Adaptive timeout statistics", _METRIC_PATH),
    "vmpooler_performance": Family("gauge", "vmpooler performance metrics for pool operations",
                                   _METRIC_PATH),
    "vmpooler_dlq": Family("counter", "vmpooler dead letter queue metrics", _METRIC_PATH),
    "vmpooler_errors": Family("counter", "vmpooler error counters", _METRIC_PATH),
    # ours, not vmpooler's
    "vmpooler_ondemand": Family("counter", "On-demand requests ready or failed", _METRIC_PATH),
    "vmpooler_actor": Family("counter", "Actor crashes, restarts and give-ups", _METRIC_PATH),
    "pending": Family("gauge", "vmpooler number of machines being cloned (pending)", _POOL),
    "size": Family("gauge", "vmpooler pool target size", _POOL),
}
"""vmpooler 3.9.1's table (the legacy, unused ``errors_*`` family left out) plus ours."""

_POOL_KEY = {"pool": "poolname"}

KEYED: Mapping[str, Family] = {
    "checkout.duration": Family(
        "histogram", "Time taken by a successful checkout (seconds)", _POOL,
        buckets=HTTP_BUCKETS, keys=_POOL_KEY),
    "ondemand.time_to_ready": Family(
        "histogram", "Time from an on-demand request to all its VMs ready (seconds)",
        buckets=ONDEMAND_BUCKETS),
    "ondemand.outcome": Family("counter", "On-demand requests finished, by result",
                               ("result",), keys={"result": "result"}),
    "clone.queue_wait": Family(
        "histogram", "Time a clone waited for a clone slot (seconds), by kind pool|ondemand",
        ("poolname", "kind"), buckets=QUEUE_WAIT_BUCKETS, keys={**_POOL_KEY, "kind": "kind"}),
    "task.queue_wait": Family(
        "histogram", "Time a provider task waited in the provider's own queue (seconds)",
        ("provider", "op"), buckets=QUEUE_WAIT_BUCKETS,
        keys={"provider": "provider", "op": "op"}),
    "clone.outcome": Family(
        "counter", "Clone outcomes by pool, provider and result",
        ("poolname", "provider", "result"),
        keys={**_POOL_KEY, "provider": "provider", "result": "result"}),
    "api.redis_unavailable": Family(
        "counter", "API requests answered 503 because Redis could not be reached"),
    "api.connections.refused": Family(
        "counter", "Connections refused or closed early by the API workers, by reason",
        ("reason",), keys={"reason": "reason"}),
    "api.connections.open": Family("gauge", "Connections the API workers hold",
                                   mode="livesum"),
    "api.login_refused": Family(
        "counter", "Logins refused (429) after too many failures, by scope user|address",
        ("scope",), keys={"scope": "scope"}),
    "quota.refused": Family(
        "counter", "Requests refused by a :quotas: limit, by limit and requester "
        "token|anonymous|address", ("quota", "requester"),
        keys={"quota": "quota", "requester": "requester"}),
    "vm.lost": Family("counter", "VMs destroyed without ever being used, by reason",
                      ("poolname", "reason"), keys={**_POOL_KEY, "reason": "reason"}),
    "brake.engaged": Family("gauge", "1 while the pool's mass-failure brake is engaged",
                            ("poolname",), keys=_POOL_KEY),
    "brake.engagements": Family("counter", "Times the pool's mass-failure brake engaged",
                                ("poolname",), keys=_POOL_KEY),
    "brake.held": Family("counter", "Ready VMs held instead of destroyed by the brake",
                         ("poolname",), keys=_POOL_KEY),
    "pool.config_error": Family(
        "gauge", "1 while the pool is in the configuration-error state (a permanent clone "
        "failure)", ("poolname",), keys=_POOL_KEY),
    "failover.size": Family("gauge", "The size a failover pool keeps, its siblings' share "
                            "included", ("poolname",), keys=_POOL_KEY),
    "sizing.target": Family("gauge", "The ready VMs a demand-sized pool keeps now",
                            ("poolname",), keys=_POOL_KEY),
    "sizing.warm_hit": Family("gauge", "Share of a demand-sized pool's checkouts of the last "
                              "day served from a ready VM", ("poolname",), keys=_POOL_KEY),
    "sizing.idle": Family("gauge", "Ready VMs of a demand-sized pool waiting for a checkout",
                          ("poolname",), keys=_POOL_KEY),
    "sizing.standby_target": Family("gauge", "The standby VMs a demand-sized pool with "
                                    "standby: auto keeps now", ("poolname",), keys=_POOL_KEY),
    "failover.takeover": Family(
        "counter", "Times the pool started covering an alias sibling's share",
        ("poolname", "sibling"), keys={**_POOL_KEY, "sibling": "sibling"}),
    "failover.giveback": Family(
        "counter", "Times the pool gave an alias sibling's share back",
        ("poolname", "sibling"), keys={**_POOL_KEY, "sibling": "sibling"}),
    "standby": Family("gauge", "VMs in the pool's standby tier (suspended or powered off)",
                      ("poolname",), keys=_POOL_KEY),
    "standby.suspend": Family("counter", "VMs put on standby, by result success|failure",
                              ("poolname", "result"), keys={**_POOL_KEY, "result": "result"}),
    "standby.resume": Family("counter", "Standby VMs woken, by result success|failure",
                             ("poolname", "result"), keys={**_POOL_KEY, "result": "result"}),
    "standby.resume_duration": Family(
        "histogram", "Time from a standby VM's resume to ready (seconds)", ("poolname",),
        buckets=RESUME_BUCKETS, keys=_POOL_KEY),
}
"""Service-level families of ours, named by the whole call name, labelled by tag key."""

IGNORED: frozenset[str] = frozenset({"http_request"})
"""Names dropped without a log line: ``http_request`` is covered by the HTTP families."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where one call lands: the family key, its exposed name suffix and label values."""

    key: str
    family: Family
    name: str
    labels: tuple[str, ...]


def _segments(name: str, tags: Mapping[str, str] | None) -> list[str]:
    parts = name.split(".")
    if tags:
        parts.extend(str(v) for k, v in tags.items() if k != "pool")
        if "pool" in tags:
            parts.append(str(tags["pool"]))
    return parts


def resolve(name: str, tags: Mapping[str, str] | None) -> Resolved | None:
    """The family, exposed name (without the prefix) and label values for a call, or None
    when the name is unknown (or its suffix is not one of the family's)."""
    keyed = KEYED.get(name)
    if keyed is not None:
        given = tags or {}
        by_label = {label: str(given[key]) for key, label in keyed.keys.items() if key in given}
        return Resolved(name, keyed, name.replace(".", "_"),
                        tuple(by_label.get(label, "") for label in keyed.labels))
    segments = _segments(name, tags)
    key = segments.pop(0)
    family = FAMILIES.get(key)
    if family is None:
        return None
    exposed = key
    if family.suffixes:
        if not segments or segments[0] not in family.suffixes:
            return None
        exposed = f"{key}_{segments.pop(0)}"
    if len(family.labels) == 1:
        values: tuple[str, ...] = (".".join(segments),)
    else:
        filled = [segments.pop() if segments else "" for _ in family.labels]
        values = tuple(reversed(filled))
    return Resolved(key, family, exposed, values)
