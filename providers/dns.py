"""The DNS plugin contract, and ``dynamic-dns`` (records managed elsewhere).

The core calls a DNS plugin from a worker thread, like a provider: after a clone with the
VM's short name and IP, and on destroy with the FQDN. Calls for different VMs may run
concurrently, so plugins must be thread-safe. Errors: raise
:class:`~vmpooler.providers.errors.ProviderError` subclasses; the core logs DNS failures and
does not fail the VM for them. Pools whose ``dns_class`` is ``dynamic-dns`` never reach a
plugin in vmpooler; here they get :class:`DynamicDns`, whose methods do nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

__all__ = ["DnsPlugin", "DynamicDns"]


class DnsPlugin(ABC):
    """Base class of DNS plugins: one instance per ``:dns_configs:`` entry."""

    def __init__(self, name: str, settings: Mapping[str, Any]) -> None:
        """``name`` is the ``:dns_configs:`` key, ``settings`` that entry (with ``dns_class``)."""
        self.name = name
        self.settings = settings

    @property
    def domain(self) -> str | None:
        """The DNS domain this entry serves (its ``domain`` setting), or None."""
        value = self.settings.get("domain")
        return str(value) if value else None

    @abstractmethod
    def create_or_replace_record(self, hostname: str, ip: str | None) -> None:
        """Point ``<hostname>.<domain>`` at ``ip``; ``hostname`` is the SHORT VM name.

        Idempotent: replaces an existing record. Raise ProviderError on failure.
        """

    @abstractmethod
    def delete_record(self, fqdn: str) -> None:
        """Delete the record for ``fqdn`` (the FULL name). Idempotent: absent is fine."""

    def close(self) -> None:  # noqa: B027 (optional hook, no-op by default)
        """Release connections. Default: no-op."""


class DynamicDns(DnsPlugin):
    """Records are managed elsewhere (DHCP / dynamic DNS): both methods are no-ops."""

    def create_or_replace_record(self, hostname: str, ip: str | None) -> None:
        """Do nothing: the VM registers itself."""

    def delete_record(self, fqdn: str) -> None:
        """Do nothing: the record expires on its own."""
