"""Resolving provider and DNS plugin classes by name, through entry points."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

import pytest

from vmpooler.providers.base import Provider, ProviderContext, VmInfo
from vmpooler.providers.dns import DnsPlugin, DynamicDns
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.registry import (
    DNS_GROUP,
    PROVIDER_GROUP,
    UnknownPluginError,
    known_dns_classes,
    known_provider_classes,
    load_dns_class,
    load_provider_class,
)


class AcmeCloudProvider(Provider):
    """Stands in for a provider shipped by a third-party distribution."""

    def vms_in_pool(self, pool: str) -> list[str]:
        return []

    def get_vm(self, pool: str, vm: str) -> VmInfo | None:
        return None

    def create_vm(self, pool: str, vm: str) -> VmInfo:
        return VmInfo(name=vm)

    def get_vm_ip_address(self, pool: str, vm: str) -> str | None:
        return None

    def vm_ready(self, pool: str, vm: str) -> bool:
        return False

    def destroy_vm(self, pool: str, vm: str) -> bool:
        return True


class AcmeDns(DynamicDns):
    """Stands in for a third-party DNS plugin."""


class NotAPlugin:
    """Registered by mistake: not a Provider subclass."""


def install_entry_points(
    monkeypatch: pytest.MonkeyPatch, extra: Mapping[str, list[tuple[str, str]]]
) -> None:
    """Make ``importlib.metadata.entry_points`` report ``extra`` (group -> (name, value)).

    This is the only mock in these tests: registering a real third-party plugin would mean
    installing another distribution into the shared venv, a side effect outside the test.
    """

    def entry_points(*, group: str, **_kwargs: Any) -> list[importlib.metadata.EntryPoint]:
        return [
            importlib.metadata.EntryPoint(name, value, group)
            for name, value in extra.get(group, [])
        ]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_builtins_resolve() -> None:
    assert load_provider_class("dummy") is DummyProvider
    assert load_dns_class("dynamic-dns") is DynamicDns
    assert "dummy" in known_provider_classes()
    assert "dynamic-dns" in known_dns_classes()


@pytest.mark.parametrize("name", ["DUMMY", "Dummy", " dummy "])
def test_provider_names_are_case_insensitive(name: str) -> None:
    assert load_provider_class(name) is DummyProvider


def test_dns_names_are_case_insensitive() -> None:
    assert load_dns_class("Dynamic-DNS") is DynamicDns


def test_unknown_names_raise_listing_known_ones() -> None:
    with pytest.raises(UnknownPluginError, match="dummy") as caught:
        load_provider_class("vsphere-nope")
    assert isinstance(caught.value, ValueError)
    assert "vsphere-nope" in str(caught.value)
    assert "dummy" in caught.value.known
    with pytest.raises(UnknownPluginError, match="dynamic-dns"):
        load_dns_class("gcp-nope")


def test_builtins_resolve_without_installed_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    install_entry_points(monkeypatch, {})
    assert load_provider_class("dummy") is DummyProvider
    assert load_dns_class("dynamic-dns") is DynamicDns
    assert load_provider_class("ec2") is load_provider_class("aws")
    assert known_provider_classes() == frozenset({"aws", "dummy", "ec2", "vsphere"})
    assert known_dns_classes() == frozenset({"dynamic-dns"})


def test_third_party_plugins_resolve_through_entry_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_entry_points(
        monkeypatch,
        {
            PROVIDER_GROUP: [("AcmeCloud", f"{__name__}:AcmeCloudProvider")],
            DNS_GROUP: [("acme-dns", f"{__name__}:AcmeDns")],
        },
    )
    assert load_provider_class("acmecloud") is AcmeCloudProvider
    assert load_dns_class("ACME-DNS") is AcmeDns
    assert known_provider_classes() == frozenset({"acmecloud", "aws", "dummy", "ec2", "vsphere"})
    assert known_dns_classes() == frozenset({"acme-dns", "dynamic-dns"})
    provider = load_provider_class("AcmeCloud")(ProviderContext("acme", {}, {}, {}, {}))
    assert provider.name == "acme"


def test_installed_entry_point_wins_over_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    install_entry_points(
        monkeypatch, {PROVIDER_GROUP: [("dummy", f"{__name__}:AcmeCloudProvider")]}
    )
    assert load_provider_class("dummy") is AcmeCloudProvider


def test_entry_point_of_wrong_type_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    install_entry_points(monkeypatch, {PROVIDER_GROUP: [("bogus", f"{__name__}:NotAPlugin")]})
    with pytest.raises(TypeError, match="not a subclass of Provider"):
        load_provider_class("bogus")


def test_dynamic_dns_is_a_no_op_plugin() -> None:
    plugin = DynamicDns("ddns", {"dns_class": "dynamic-dns", "domain": "example.com"})
    assert isinstance(plugin, DnsPlugin)
    assert plugin.name == "ddns"
    assert plugin.domain == "example.com"
    assert plugin.create_or_replace_record("vm1", "10.0.0.1") is None
    assert plugin.delete_record("vm1.example.com") is None
    assert plugin.close() is None
    assert DynamicDns("bare", {}).domain is None
