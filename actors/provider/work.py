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
from typing import cast

from vmpooler.actors.messages import (
    CallProvider,
    CheckPending,
    CheckReady,
    CheckRunning,
    CloneResult,
    CloneVm,
    CreateDisk,
    CreateSnapshot,
    DestroyVm,
    ListVms,
    LogFailureEvents,
    MigrateVm,
    PrepareTemplate,
    ProviderResult,
    PurgeUnconfigured,
    ReadyCheckResult,
    ResumeVm,
    RevertSnapshot,
    RunningCheckResult,
    SuspendVm,
)
from vmpooler.providers.base import Provider
from vmpooler.providers.dns import DnsPlugin, DynamicDns
from vmpooler.providers.errors import PermanentProviderError, ProviderError

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

    def for_call(self, call: CallProvider) -> Callable[[], ProviderResult]:
        """What to run on a worker thread for ``call`` (not run here). It returns a result of
        a type the call's request ``answers`` (None when that is empty), or raises
        :class:`~vmpooler.providers.errors.PermanentProviderError` naming the operation when
        the provider returned something else."""
        run = self._run(call)
        request = call.request

        def checked() -> ProviderResult:
            result = run()
            if not request.answers:
                return None
            if not isinstance(result, request.answers):
                raise PermanentProviderError(
                    f"the provider's {request.op.value} returned {type(result).__name__}, "
                    f"not {' or '.join(t.__name__ for t in request.answers)}")
            return cast(ProviderResult, result)  # one of the answers' types, checked above
        return checked

    def _run(self, call: CallProvider) -> Callable[[], object]:
        p, pool, vm = self.provider, call.pool, call.vm or ""
        match call.request:
            case ListVms():
                return lambda: tuple(p.vms_in_pool(pool))
            case CloneVm(template=template, target=target):
                return lambda: self._clone(pool, vm, template, target)
            case CheckPending():
                return lambda: bool(p.vm_ready(pool, vm))
            case CheckReady(check_hostname=check_hostname):
                return lambda: self._check_ready(pool, vm, check_hostname)
            case CheckRunning(tag_user=tag_user, user=user):
                return lambda: self._check_running(pool, vm, tag_user, user)
            case DestroyVm(fqdn=fqdn):
                return lambda: self._destroy(pool, vm, fqdn)
            case MigrateVm(may_move=may_move):
                return lambda: p.migrate_vm(pool, vm, may_move=may_move)
            case CreateDisk(size_gb=size_gb):
                return lambda: bool(p.create_disk(pool, vm, size_gb))
            case CreateSnapshot(name=name):
                return lambda: bool(p.create_snapshot(pool, vm, name))
            case RevertSnapshot(name=name):
                return lambda: bool(p.revert_snapshot(pool, vm, name))
            case PrepareTemplate(template=template):
                return lambda: p.create_template_delta_disks(pool, template=template)
            case LogFailureEvents():
                return lambda: p.log_failure_events(pool, vm)
            case PurgeUnconfigured(allowlist=allowlist):
                return lambda: p.purge_unconfigured_resources(allowlist)
            case SuspendVm(mode=mode):
                return lambda: bool(p.suspend_vm(pool, vm, mode=mode))
            case ResumeVm():
                return lambda: bool(p.resume_vm(pool, vm))
        raise ValueError(f"unknown provider request {call.request!r}")

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
