"""The first words of vmpooler's key names (part of :mod:`vmpooler.actors.storage.schema`:
import ``NAMESPACES`` from there)."""

from __future__ import annotations

__all__ = ["NAMESPACES"]

NAMESPACES: frozenset[str] = frozenset({
    "active", "boot", "brake", "clone", "commands", "completed", "config", "configerror", "demand",
    "demand_guard", "demand_misses", "discovered", "dlq", "empty", "failover", "health", "held",
    "history", "lastboot", "lease", "login_failures", "manager", "migrating", "migration",
    "odcreate", "odinflight", "odrequest", "pending", "pool", "poolreset", "pools", "provider",
    "provisioning", "quota", "ratelimit", "ready", "running", "sizing", "standby", "tag",
    "tasks", "template", "token", "vm", "waits",
})
"""The first word after ``vmpooler__`` of every key name of the schema but
:func:`~vmpooler.actors.storage.schema.request_vms` (``vmpooler__<word>`` or
``vmpooler__<word>__...``; tests/test_wrong_type_keys.py checks that none is missing). A
request id becomes the first word of the keys of its delivered VMs, so a request id must be
none of these words (nor contain ``__``): ``vm`` would make
``vmpooler__vm__<alias>__<pool>`` a set among the VM hashes."""
