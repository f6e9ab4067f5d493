"""Key names of on-demand requests (their queues, hashes, delivered VMs, clone tasks and
waits) and of the per-user quotas they and checkouts count against.

Part of :mod:`vmpooler.actors.storage.schema`: import the names from there."""

from __future__ import annotations

from vmpooler.actors.storage.schema.prefix import PREFIX as _P

__all__ = [
    "odcreate_task",
    "odinflight",
    "odrequest",
    "provisioning_processing",
    "provisioning_request",
    "quota_held",
    "quota_labels",
    "quota_usage_snapshot",
    "quota_users",
    "request_vms",
    "waits",
]



def provisioning_request() -> str:
    """Sorted set of on-demand request ids not yet expanded, score = creation epoch."""
    return f"{_P}provisioning__request"


def provisioning_processing() -> str:
    """Sorted set of on-demand request ids being provisioned, score = creation epoch."""
    return f"{_P}provisioning__processing"


def odrequest(request_id: str) -> str:
    """Hash of one on-demand request: ``requested``, ``token:token``, ``token:user``,
    ``status``, ``retry_count``, ``failure_reason`` (reference §2.4)."""
    return f"{_P}odrequest__{request_id}"


def request_vms(request_id: str, alias: str, pool: str) -> str:
    """Set of the VMs delivered to a request for one ``alias:pool`` entry. The request id is
    the key's first word: see :data:`~vmpooler.actors.storage.schema.NAMESPACES`."""
    return f"{_P}{request_id}__{alias}__{pool}"


def odinflight(user: str) -> str:
    """Set (ours) of the ids of ``user``'s on-demand requests counted against
    ``max_ondemand_requests_per_user``; members whose request is no longer in flight are
    dropped when the set is next checked (:mod:`vmpooler.actors.storage.request_quota`)."""
    return f"{_P}odinflight__{user}"


def odcreate_task() -> str:
    """Sorted set of clone tasks ``"<name>:<pool>:<count>:<id>"``.

    Score: queueing epoch; 1 for retries, 0 for a cancel marker.
    """
    return f"{_P}odcreate__task"


def waits() -> str:
    """Hash request id -> its wait (ours): JSON ``{"position": <VMs granted before its next
    one>, "ready_at": <epoch estimate>, "at": <epoch written>}``, written by the on-demand
    manager running the request (at most once a second, only the entries that changed) and
    its entry deleted when the request finishes; read by ``GET /ondemandvm/<id>``. Expires
    when no manager writes it for an hour."""
    return f"{_P}waits__requests"


def quota_held(user: str) -> str:
    """Set (ours) of what ``user`` holds under ``:quotas:``: ``vm:<pool>:<vm>`` for a VM it
    checked out, ``rq:<id>`` for an on-demand request; a member that holds nothing any more
    is dropped by the next script that counts the set (``user_quota_scripts``)."""
    return f"{_P}quota__held__{user}"


def quota_users() -> str:
    """Hash (ours) user -> ``<label>|<limits>`` of every user with a :func:`quota_held` set:
    the usage view's index (``user_quota_scripts``)."""
    return f"{_P}quota__users"


def quota_labels() -> str:
    """Counter (ours) of the opaque labels given to users in the usage view."""
    return f"{_P}quota__labels"


def quota_usage_snapshot() -> str:
    """Hash (ours) of the usage view's last count, shared by the API processes: ``at`` (when
    it was counted), the totals ``users``, ``vms_held``, ``ondemand_in_flight`` and ``top``,
    the users holding the most (JSON, ``user_quota_scripts.USAGE_SNAPSHOT``); it expires."""
    return f"{_P}quota__usage_snapshot"
