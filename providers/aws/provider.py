"""``AwsProvider``: vmpooler's provider contract on Amazon EC2, through boto3 (class ``aws``,
alias ``ec2``, as vmpooler-provider-ec2).

Each VM is one instance tagged ``vm_name`` (the VM's name), ``pool``, ``Name`` (the name,
with ``.<domain>`` when one is set) and ``lifetime``, plus the configured ``instance_tags``;
its volumes are tagged ``vm_name`` and ``pool`` too. Every method runs on one of the core's
worker threads; waits for a state (running, stopped, terminated) go through the shared
:class:`~vmpooler.providers.aws.watch.InstanceWatch`, never a poll per instance.

EC2 calls per operation: ``vms_in_pool`` 1 (per page); ``get_vm`` 1; ``create_vm`` 1
(``RunInstances``; +1 ``DescribeImages`` the first time an AMI is used with
``volume_size``) plus the watch's shared polls; ``get_vm_ip_address`` 0 right after the
create, else 1; ``vm_ready`` 0 (``ssh`` with a domain), 1 (``ssh``/``ssh_ip``) or 1
(``instance_status``, instance known) to 2; ``destroy_vm`` 2 plus the watch's polls (+2 to
4 when the VM had disks or snapshots); ``tag_vm_user`` 1 (2 when the instance is not known).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from vmpooler.providers.aws.launch import Images, launch_params, running_with_ip
from vmpooler.providers.aws.purge import doomed_instances, tags_of
from vmpooler.providers.aws.readiness import NotReadyError, probe_status, probe_tcp
from vmpooler.providers.aws.settings import INSTALL_HINT, AwsSettings, PoolSpec
from vmpooler.providers.aws.standby import Power
from vmpooler.providers.aws.volumes import EXTRAS_TAG, Volumes, snapshot_names
from vmpooler.providers.aws.watch import InstanceWatch
from vmpooler.providers.base import (
    Capability,
    ConnectionPoolHealth,
    Provider,
    ProviderContext,
    VmInfo,
)
from vmpooler.providers.errors import (
    PermanentProviderError,
    ProviderError,
    TransientProviderError,
    VmNotFoundError,
)

if TYPE_CHECKING:
    from vmpooler.providers.aws.client import Ec2

__all__ = ["AwsProvider"]

log = logging.getLogger(__name__)

_LIVE = ["pending", "running", "stopping", "stopped"]
_GONE = frozenset({"shutting-down", "terminated"})


class AwsProvider(Provider):
    """The ``aws`` provider. Thread-safe; see the module docstring for its behaviour."""

    def __init__(
        self,
        context: ProviderContext,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        tcp_connect: Callable[[tuple[str, int], float], Any] = socket.create_connection,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Builds the clients; sends no request. ``sleep``, ``clock``, ``tcp_connect`` and
        ``environ`` are injectable for tests. Raises PermanentProviderError for an unusable
        configuration, naming each key."""
        super().__init__(context)
        try:
            self.config = AwsSettings.from_context(
                context.name, context.settings, context.pools, context.global_settings,
                context.dns_domains, environ)
        except ValueError as exc:
            raise PermanentProviderError(str(exc)) from exc
        try:
            from vmpooler.providers.aws.client import Ec2
        except ImportError as exc:  # the extra is not installed
            raise PermanentProviderError(INSTALL_HINT) from exc
        self.ec2: Ec2 = Ec2(self.config, sleep=sleep)
        self.watch = InstanceWatch(context.name, self._describe_ids,
                                   poll_interval=self.config.poll_interval,
                                   grace=self.config.visibility_grace, clock=clock)
        self.power = Power(self.ec2, self.watch, self.config.wait_timeout)
        self.volumes = Volumes(self.ec2, self.power.set, poll_interval=self.config.poll_interval,
                               timeout=self.config.wait_timeout, sleep=sleep, clock=clock)
        self._clock = clock
        self._tcp_connect = tcp_connect
        self._lock = threading.Lock()
        self._ids: dict[tuple[str, str], tuple[str, float]] = {}  # -> (instance, launched)
        self._fresh_ip: dict[tuple[str, str], str] = {}
        self.images = Images(self.ec2)

    @property
    def probe_timeout(self) -> float:
        """``vm_ready_timeout`` plus one EC2 call."""
        return self.config.ready_timeout + 1.0

    @property
    def max_concurrent_calls(self) -> int:
        """``connection_pool_size`` (default: the largest of pools served, task_limit, 2)."""
        return self.config.pool_size

    @property
    def capabilities(self) -> frozenset[Capability]:
        """``POWER_OFF``: a stopped instance. ``SUSPEND`` too when every pool of the provider
        has ``hibernate`` (its instances launch with hibernation configured): a hibernated
        instance, its memory kept on its root volume."""
        modes = {Capability.POWER_OFF}
        if self.config.pools and all(s.hibernate for s in self.config.pools.values()):
            modes.add(Capability.SUSPEND)
        return frozenset(modes)

    # -- lookups --------------------------------------------------------------------------
    def _spec(self, pool: str) -> PoolSpec:
        spec = self.config.pools.get(pool)
        if spec is None:
            raise PermanentProviderError(f"Pool {pool} does not exist for the provider {self.name}")
        return spec

    def _describe_ids(self, ids: list[str]) -> list[dict[str, Any]]:
        return self.ec2.instances([{"Name": "instance-id", "Values": ids}],
                                  "the instances in flight")

    def _find(self, pool: str, vm: str) -> list[dict[str, Any]]:
        """The live instances named ``vm`` in ``pool``, oldest first (one call)."""
        self._spec(pool)
        found = self.ec2.instances(
            [{"Name": "tag:vm_name", "Values": [vm]}, {"Name": "tag:pool", "Values": [pool]},
             {"Name": "instance-state-name", "Values": _LIVE}], vm)
        found.sort(key=lambda i: (str(i.get("LaunchTime", "")), i["InstanceId"]))
        with self._lock:
            if found:
                known = self._ids.get((pool, vm))
                launched = known[1] if known and known[0] == found[0]["InstanceId"] else 0.0
                self._ids[(pool, vm)] = (str(found[0]["InstanceId"]), launched)
            else:
                self._ids.pop((pool, vm), None)
        return found

    def _require(self, pool: str, vm: str) -> dict[str, Any]:
        found = self._find(pool, vm)
        if not found:
            raise VmNotFoundError(f"VM {vm} in pool {pool} does not exist for the provider "
                                  f"{self.name}")
        return found[0]

    def _known(self, pool: str, vm: str) -> tuple[str, float] | None:
        with self._lock:
            known = self._ids.get((pool, vm))
        if known is None:
            found = self._find(pool, vm)
            return (str(found[0]["InstanceId"]), 0.0) if found else None
        return known

    def _forget(self, pool: str, vm: str) -> None:
        with self._lock:
            self._ids.pop((pool, vm), None)
            self._fresh_ip.pop((pool, vm), None)

    def _just_launched(self, launched: float) -> bool:
        return launched > 0 and self._clock() - launched < self.config.visibility_grace

    # -- inventory and state ----------------------------------------------------------------
    def vms_in_pool(self, pool: str) -> list[str]:
        """Names (tag ``vm_name``) of the pool's pending, running, stopping and stopped
        instances."""
        self._spec(pool)
        found = self.ec2.instances([{"Name": "tag:pool", "Values": [pool]},
                                    {"Name": "instance-state-name", "Values": _LIVE}], pool)
        names: dict[str, str] = {}
        for instance in found:
            name = tags_of(instance).get("vm_name")
            if name is not None:
                names.setdefault(name, str(instance["InstanceId"]))
        with self._lock:  # what a later probe or tag needs, without looking again
            for name, instance_id in names.items():
                self._ids.setdefault((pool, name), (instance_id, 0.0))
        return sorted(names)

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        """The instance's AMI, launch time, state (EC2's word: ``running``, ``stopped`` …),
        private address, zone (as ``host``) and snapshots; None when it has no live
        instance in the pool."""
        found = self._find(pool, vm)
        if not found:
            return None
        instance = found[0]
        tags = tags_of(instance)
        launched = instance.get("LaunchTime")
        return VmInfo(
            name=vm, template=instance.get("ImageId"), poolname=tags.get("pool", pool),
            boottime=None if launched is None else str(launched),
            powerstate=(instance.get("State") or {}).get("Name"),
            ip=instance.get("PrivateIpAddress"),
            host=(instance.get("Placement") or {}).get("AvailabilityZone"),
            snapshots=snapshot_names(tags))

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        """The private IPv4 address; the one seen by the create costs no call."""
        with self._lock:
            fresh = self._fresh_ip.pop((pool, vm), None)
        if fresh is not None:
            return fresh
        found = self._find(pool, vm)
        return found[0].get("PrivateIpAddress") if found else None

    def vm_ready(self, pool: str, vm: str) -> bool:
        """The pool's ``vm_ready_check`` (:mod:`~vmpooler.providers.aws.readiness`);
        NotReadyError says why an instance is not ready."""
        spec = self._spec(pool)
        port, timeout = self.config.ready_port, self.config.ready_timeout
        if spec.ready_check == "ssh" and spec.domain:
            return probe_tcp(f"{vm}.{spec.domain}", port, timeout, self._tcp_connect)
        if spec.ready_check in ("ssh", "ssh_ip"):
            found = self._find(pool, vm)
            if not found:
                return False
            key = "PrivateIpAddress" if spec.ready_check == "ssh_ip" else "PrivateDnsName"
            host = found[0].get(key)
            if not host:
                raise NotReadyError(f"EC2 reports no {key} for the instance yet")
            return probe_tcp(str(host), port, timeout, self._tcp_connect)
        known = self._known(pool, vm)
        if known is None:
            return False
        instance_id, launched = known
        try:
            statuses = self.ec2.call("describe_instance_status", vm, InstanceIds=[instance_id],
                                     IncludeAllInstances=True)["InstanceStatuses"]
        except VmNotFoundError as exc:
            if self._just_launched(launched):
                raise NotReadyError("EC2 does not show the new instance yet") from exc
            self._forget(pool, vm)
            return False
        status = statuses[0] if statuses else None
        state = None if status is None else (status.get("InstanceState") or {}).get("Name")
        if state in _GONE:
            self._forget(pool, vm)
            return False
        if state in ("stopping", "stopped"):
            return False  # a standby VM: not ready until resumed
        return probe_status(status)

    # -- create and destroy -------------------------------------------------------------------
    def create_vm(self, pool: str, vm: str, *, template: str | None = None,
                  clone_target: str | None = None) -> VmInfo:
        """``RunInstances`` (see :meth:`Ec2.launch`: a launch is sent again only when the
        last one made nothing), then wait for ``running`` and a private address. A failed
        launch leaves no instance of ours. ``clone_target`` is ignored (EC2 places)."""
        spec = self._spec(pool)
        params = launch_params(spec, vm, template or spec.template,
                               self.config.max_lifetime_hours, self.config.key_name,
                               self.images.devices)

        def lookup() -> str | None:
            found = self._find(pool, vm)
            return str(found[0]["InstanceId"]) if found else None

        instance_id = self.ec2.launch(params, vm, lookup)
        with self._lock:
            self._ids[(pool, vm)] = (instance_id, self._clock())
        try:
            seen = self.watch.wait(instance_id, running_with_ip,
                                   self.config.wait_timeout, f"launch of {vm}")
        except ProviderError as exc:
            log.warning("[!] [%s] '%s' (%s) did not start: %s", pool, vm, instance_id, exc)
            self._terminate([instance_id], vm, wait=False)
            self._forget(pool, vm)
            raise
        ip = seen.private_ip if seen is not None else None
        if ip is not None:
            with self._lock:
                self._fresh_ip[(pool, vm)] = ip
        return VmInfo(name=vm, template=template or spec.template, poolname=pool,
                      powerstate="running", ip=ip)

    def _terminate(self, ids: list[str], what: str, *, wait: bool = True) -> None:
        try:
            self.ec2.call("terminate_instances", what, InstanceIds=ids)
        except VmNotFoundError:
            return
        except ProviderError as exc:
            if wait:
                raise
            log.warning("[!] '%s' may be left behind: %s", what, exc)
            return
        if wait:
            for instance_id in ids:
                self.watch.wait(instance_id, lambda s: s is None or s.state == "terminated",
                                self.config.wait_timeout, f"termination of {what}")

    def destroy_vm(self, pool: str, vm: str) -> bool:
        """Terminate every live instance named ``vm`` in the pool and wait until EC2 says
        ``terminated``; then delete the VM's own disks and snapshots, if it had any. True
        also when there was nothing to terminate."""
        found = self._find(pool, vm)
        if found:
            self._terminate([str(i["InstanceId"]) for i in found], vm)
            if any(EXTRAS_TAG in tags_of(i) for i in found):
                self.volumes.delete_extras(vm)
        self._forget(pool, vm)
        return True

    def tag_vm_user(self, pool: str, vm: str, user: str | None) -> bool:
        """Tag the instance ``token-user`` (as the gem does); False when it does not exist."""
        known = self._known(pool, vm)
        if known is None:
            return False
        try:
            self.ec2.call("create_tags", vm, Resources=[known[0]],
                          Tags=[{"Key": "token-user", "Value": user or ""}])
        except VmNotFoundError as exc:
            if self._just_launched(known[1]):
                raise TransientProviderError(f"{vm}: EC2 does not show it yet") from exc
            self._forget(pool, vm)
            return False
        return True

    # -- standby --------------------------------------------------------------------------------
    def suspend_vm(self, pool: str, vm: str, *, mode: Capability = Capability.POWER_OFF) -> bool:
        """Stop the instance (``POWER_OFF``) or hibernate it (``SUSPEND``, a pool with
        ``hibernate`` only) unless it is stopped already; False when the VM does not
        exist. Both read ``stopped`` in :meth:`get_vm`'s ``powerstate``."""
        hibernate = mode is Capability.SUSPEND
        if hibernate and not self._spec(pool).hibernate:
            raise PermanentProviderError(f"configuration error: pool {pool} does not set "
                                         f"hibernate, so its VMs cannot be suspended")
        found = self._find(pool, vm)
        if not found:
            return False
        if (found[0].get("State") or {}).get("Name") == "stopped":
            return True
        self.power.set(str(found[0]["InstanceId"]), on=False, hibernate=hibernate)
        return True

    def resume_vm(self, pool: str, vm: str) -> bool:
        """Start the instance unless it runs; False when the VM does not exist."""
        found = self._find(pool, vm)
        if not found:
            return False
        if (found[0].get("State") or {}).get("Name") != "running":
            self.power.set(str(found[0]["InstanceId"]), on=True)
        return True

    # -- disks and snapshots ----------------------------------------------------------------------
    def create_disk(self, pool: str, vm: str, size_gb: int) -> bool:
        """A new ``size_gb`` GB EBS volume, attached; False for a size <= 0."""
        if size_gb <= 0:
            return False
        return self.volumes.create_disk(self._require(pool, vm), pool, vm, size_gb)

    def create_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """EBS snapshots of every volume, tagged ``snapshot_name``."""
        return self.volumes.create_snapshot(self._require(pool, vm), pool, vm, snapshot_name)

    def revert_snapshot(self, pool: str, vm: str, snapshot_name: str) -> bool:
        """Replace the volumes (root included) by ones made from the snapshot; False when
        there is no such snapshot."""
        return self.volumes.revert_snapshot(self._require(pool, vm), pool, vm, snapshot_name)

    # -- purge ------------------------------------------------------------------------------------
    def purge_unconfigured_resources(self, allowlist: Collection[str]) -> None:
        """Terminate the instances of the pools' zones that no pool of this provider
        claims, spared by ``allowlist`` and ``resources_allowlist`` as the gem documents
        (:mod:`~vmpooler.providers.aws.purge`). Every zone of the region when a pool names
        no zone."""
        allowed = set(allowlist) | set(self.config.allowlist)
        zones = {spec.zone for spec in self.config.pools.values()} | {self.config.zone}
        filters: list[dict[str, Any]] = [{"Name": "instance-state-name", "Values": _LIVE}]
        if None not in zones:
            filters.append({"Name": "availability-zone", "Values": sorted(
                z for z in zones if z is not None)})
        doomed = doomed_instances(self.ec2.instances(filters, "unconfigured instances"),
                                  self.config.pools, allowed)
        for instance_id, pool in doomed:
            log.info("[-] [%s] terminating unconfigured instance %s (pool tag: %s)", self.name,
                     instance_id, pool if pool is not None else "none")
        if doomed:
            self._terminate([i for i, _ in doomed], "unconfigured instances", wait=False)

    def connection_pool_health(self) -> ConnectionPoolHealth:
        """EC2 calls in flight against the clients' connection pools (``/status``,
        ``view=providers``)."""
        return self.ec2.health()

    def close(self) -> None:
        """Stop the instance watch and close the clients' connections."""
        self.watch.close()
        self.ec2.close()

