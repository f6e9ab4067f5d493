"""What a provider call runs on its worker thread: the provider method, or a composite of
several (clone = DNS check, create, IP, DNS record; checks; destroy with its DNS record).

Nothing here touches the actor's state: :meth:`ProviderWork.for_call` returns a function
that a worker thread runs, whose result or exception goes back to the provider actor.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from vmpooler.actors.messages import (
    CallProvider,
    CloneResult,
    ProviderOp,
    ReadyCheckResult,
    RunningCheckResult,
)
from vmpooler.providers.base import Provider
from vmpooler.providers.dns import DnsPlugin, DynamicDns
from vmpooler.providers.errors import ProviderError

__all__ = ["ProviderWork", "StaleDnsError", "resolves"]

log = logging.getLogger(__name__)


class StaleDnsError(ProviderError):
    """The generated name already resolves in DNS; pick another (not a provider fault)."""


def resolves(fqdn: str) -> bool:
    """True if ``fqdn`` resolves to an address."""
    try:
        socket.getaddrinfo(fqdn, None)
    except (OSError, UnicodeError):
        return False
    return True


class ProviderWork:
    """Builds the work of each call for one provider. Its functions run on worker threads;
    they only read what they were built with."""

    def __init__(self, provider: Provider, dns_plugins: Mapping[str, DnsPlugin],
                 resolver: Callable[[str], bool] = resolves,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.provider = provider
        self.dns_plugins = dict(dns_plugins)
        self.resolver = resolver
        self.monotonic = monotonic  # the clock durations (clone, destroy) are measured on

    def for_call(self, call: CallProvider) -> Callable[[], Any]:
        """What to run on a worker thread for ``call`` (not run here)."""
        p, pool, vm, args = self.provider, call.pool, call.vm or "", call.args
        op = call.op
        if op is ProviderOp.LIST_VMS:
            return lambda: tuple(p.vms_in_pool(pool))
        if op is ProviderOp.CLONE:
            template, target = (*args, None, None)[:2]
            return lambda: self._clone(pool, vm, template, target)
        if op is ProviderOp.CHECK_PENDING:
            return lambda: bool(p.vm_ready(pool, vm))
        if op is ProviderOp.CHECK_READY:
            return lambda: self._check_ready(pool, vm, bool(args[0]) if args else True)
        if op is ProviderOp.CHECK_RUNNING:
            return lambda: self._check_running(pool, vm, bool(args[0]), args[1])
        if op is ProviderOp.DESTROY:
            return lambda: self._destroy(pool, vm, args[0] if args else None)
        if op is ProviderOp.MIGRATE:
            may_move = bool(args[0]) if args else False
            return lambda: p.migrate_vm(pool, vm, may_move=may_move)
        if op is ProviderOp.CREATE_DISK:
            return lambda: bool(p.create_disk(pool, vm, int(args[0])))
        if op is ProviderOp.CREATE_SNAPSHOT:
            return lambda: bool(p.create_snapshot(pool, vm, str(args[0])))
        if op is ProviderOp.REVERT_SNAPSHOT:
            return lambda: bool(p.revert_snapshot(pool, vm, str(args[0])))
        if op is ProviderOp.PREPARE_TEMPLATE:  # vm is "template:<the template in effect>"
            template = vm.removeprefix("template:") or None
            return lambda: p.create_template_delta_disks(pool, template=template)
        if op is ProviderOp.LOG_FAILURE_EVENTS:
            return lambda: p.log_failure_events(pool, vm)
        if op is ProviderOp.PURGE_UNCONFIGURED:
            allowlist = tuple(args[0]) if args else ()
            return lambda: p.purge_unconfigured_resources(allowlist)
        raise ValueError(f"unknown provider op {op!r}")

    def _dns(self, pool: str) -> DnsPlugin | None:
        plugin = self.dns_plugins.get(pool)
        return None if plugin is None or isinstance(plugin, DynamicDns) else plugin

    def _clone(
        self, pool: str, vm: str, template: str | None, clone_target: str | None
    ) -> CloneResult:
        plugin = self.dns_plugins.get(pool)
        domain = plugin.domain if plugin is not None else None
        if domain and not self.provider.skip_dns_check_before_creating_vm:
            fqdn = f"{vm}.{domain}"
            if self.resolver(fqdn):
                raise StaleDnsError(f"{fqdn} already resolves in DNS")
        started = self.monotonic()
        self.provider.create_vm(pool, vm, template=template, clone_target=clone_target)
        ip = self.provider.get_vm_ip_address(pool, vm)
        if not ip:
            raise ProviderError(f"provider returned no IP address for {vm}")
        dns = self._dns(pool)
        if dns is not None:
            try:
                dns.create_or_replace_record(vm, ip)
            except Exception as exc:  # a DNS plugin failure must not lose a good VM
                log.warning("[!] [%s] DNS record for '%s' not created: %s", pool, vm, exc)
        return CloneResult(ip=ip, seconds=self.monotonic() - started)

    def _check_ready(self, pool: str, vm: str, check_hostname: bool) -> ReadyCheckResult:
        hostname = None
        if check_hostname:
            info = self.provider.get_vm(pool, vm)
            hostname = info.hostname if info is not None else None
        try:
            ready = bool(self.provider.vm_ready(pool, vm))
            reason = None
        except ProviderError as exc:
            ready, reason = False, str(exc)
        return ReadyCheckResult(hostname=hostname, ready=ready, reason=reason)

    def _check_running(
        self, pool: str, vm: str, tag_user: bool, user: str | None
    ) -> RunningCheckResult:
        tagged = False
        if tag_user:
            try:
                tagged = bool(self.provider.tag_vm_user(pool, vm, user))
            except ProviderError as exc:
                log.warning("[!] [%s] '%s' could not be tagged with its user: %s", pool, vm, exc)
        try:
            exists = bool(self.provider.vm_ready(pool, vm))
        except ProviderError:
            exists = False
        if not exists:
            exists = self.provider.get_vm(pool, vm) is not None
        return RunningCheckResult(exists=exists, tagged=tagged)

    def _destroy(self, pool: str, vm: str, fqdn: str | None) -> float:
        started = self.monotonic()
        self.provider.destroy_vm(pool, vm)
        dns = self._dns(pool)
        if dns is not None and fqdn:
            try:
                dns.delete_record(fqdn)
            except Exception as exc:  # the VM is gone; a stale record is only logged
                log.warning("[!] [%s] DNS record '%s' not deleted: %s", pool, fqdn, exc)
        return self.monotonic() - started
