"""The pool store's single-command reads and writes outside a pool's transitions: override
acknowledgements, template records, the task queues (disk, snapshot, snapshot revert), a VM's
``disk`` field and dead letters (part of :class:`~vmpooler.actors.storage.store.Store`, which
inherits them: call them on a ``Store``).

None runs behind a lease's fence (the task actor and the manager's upkeep write them whoever
owns the pool), none races a pool transition; each may raise ``redis.RedisError``.
Thread-safe (the client's connection pool is).
"""

from __future__ import annotations

import redis

from vmpooler.actors.storage import schema
from vmpooler.actors.storage.replies import maybe_text

__all__ = ["SideWrites"]


class SideWrites:
    """The single-command methods of :class:`~vmpooler.actors.storage.store.Store` on
    ``client`` (a store's Redis client, set by the store)."""

    client: redis.Redis

    def ack_reset(self, pool: str) -> bool:
        """Take the pool out of the reset set; True if it was there (the reset is ours)."""
        return bool(self.client.srem(schema.poolreset(), pool))

    def ack_undo(self, pool: str, *, size: bool = False, template: bool = False) -> None:
        """Acknowledge undo-override markers."""
        if size:
            self.client.srem(schema.undo_size_override(), pool)
        if template:
            self.client.srem(schema.undo_template_override(), pool)

    def set_prepared_template(self, pool: str, template: str) -> None:
        """Record the template last prepared for the pool."""
        self.client.hset(schema.template_prepared(), pool, template)

    def has_delta_disks(self, template: str) -> bool:
        """Whether delta disks were created for ``template``."""
        return bool(self.client.sismember(schema.template_deltas(), template))

    def add_delta_disks(self, template: str) -> None:
        """Record that ``template`` has delta disks."""
        self.client.sadd(schema.template_deltas(), template)

    def pop_task(self, kind: str) -> str | None:
        """SPOP one ``disk``, ``snapshot`` or ``snapshot-revert`` task."""
        return maybe_text(self.client.spop(_task_key(kind)))

    def push_task(self, kind: str, task: str) -> None:
        """Queue a task again (SADD), e.g. one that met another call on its VM."""
        self.client.sadd(_task_key(kind), task)

    def vm_field(self, vm: str, field: str) -> str | None:
        """HGET one field of a VM hash."""
        return maybe_text(self.client.hget(schema.vm(vm), field))

    def append_disk(self, vm: str, size_gb: int) -> None:
        """Append ``+<n>gb`` to the VM's ``disk`` field."""
        current = maybe_text(self.client.hget(schema.vm(vm), "disk"))
        entry = f"+{size_gb}gb"
        self.client.hset(schema.vm(vm), "disk", f"{current}:{entry}" if current else entry)

    def dlq_add(self, queue: str, member: str, score: float, *, ttl: int, max_entries: int) -> None:
        """Add a dead-letter entry, trim to ``max_entries`` oldest-first, refresh the TTL."""
        key = schema.dlq(queue)
        pipe = self.client.pipeline(transaction=True)
        pipe.zadd(key, {member: score})
        pipe.zremrangebyrank(key, 0, -(max_entries + 1))
        pipe.expire(key, ttl)
        pipe.execute()


def _task_key(kind: str) -> str:
    return {
        "disk": schema.tasks_disk(), "snapshot": schema.tasks_snapshot(),
        "snapshot-revert": schema.tasks_snapshot_revert(),
    }[kind]
