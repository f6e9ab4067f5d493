"""Find provider and DNS plugin classes by their configured names.

Plugins register through entry points: group ``vmpooler.providers`` (a configured
``provider_class``, e.g. ``dummy``, ``vsphere``) and group ``vmpooler.dns`` (a
``dns_class``, e.g. ``dynamic-dns``). Names match case-insensitively. The built-ins
``dummy`` and ``dynamic-dns`` resolve even when the package's entry points are not
installed (running from a source tree); an installed entry point of the same name wins.
Loading imports the plugin's module; nothing is cached here (importlib caches modules).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable

from vmpooler.providers.base import Provider
from vmpooler.providers.dns import DnsPlugin

__all__ = [
    "DNS_GROUP",
    "PROVIDER_GROUP",
    "UnknownPluginError",
    "known_dns_classes",
    "known_provider_classes",
    "load_dns_class",
    "load_provider_class",
]

PROVIDER_GROUP = "vmpooler.providers"
DNS_GROUP = "vmpooler.dns"

_BUILTINS: tuple[tuple[str, str, str], ...] = (
    (PROVIDER_GROUP, "dummy", "vmpooler.providers.dummy:DummyProvider"),
    (PROVIDER_GROUP, "vsphere", "vmpooler.providers.vsphere.provider:VsphereProvider"),
    (PROVIDER_GROUP, "aws", "vmpooler.providers.aws.provider:AwsProvider"),
    (PROVIDER_GROUP, "ec2", "vmpooler.providers.aws.provider:AwsProvider"),
    (DNS_GROUP, "dynamic-dns", "vmpooler.providers.dns:DynamicDns"),
)


class UnknownPluginError(ValueError):
    """No plugin of that name is registered; the message lists the known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(self.known) or '(none)'}")


def _entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """Lower-cased name -> entry point: installed ones first, then built-in fallbacks."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=group):
        found.setdefault(ep.name.lower(), ep)
    for ep_group, name, value in _BUILTINS:
        if ep_group == group:
            found.setdefault(name, importlib.metadata.EntryPoint(name, value, group))
    return found


def _load(group: str, kind: str, name: str, base: type) -> type:
    entry_points = _entry_points(group)
    ep = entry_points.get(name.strip().lower())
    if ep is None:
        raise UnknownPluginError(kind, name, entry_points)
    loaded = ep.load()  # ImportError/AttributeError propagate: a broken plugin is a bug
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise TypeError(f"{kind} {name!r} ({ep.value}) is not a subclass of {base.__name__}")
    return loaded


def load_provider_class(provider_class: str) -> type[Provider]:
    """The :class:`Provider` subclass registered as ``provider_class`` (case-insensitive).

    Raises :class:`UnknownPluginError` when no such name is registered, TypeError when the
    entry point is not a Provider subclass; import errors of the plugin propagate.
    """
    return _load(PROVIDER_GROUP, "provider class", provider_class, Provider)


def load_dns_class(dns_class: str) -> type[DnsPlugin]:
    """The :class:`DnsPlugin` subclass registered as ``dns_class`` (case-insensitive).

    Raises as :func:`load_provider_class` does.
    """
    return _load(DNS_GROUP, "dns class", dns_class, DnsPlugin)


def known_provider_classes() -> frozenset[str]:
    """Lower-cased names of every provider class that :func:`load_provider_class` accepts."""
    return frozenset(_entry_points(PROVIDER_GROUP))


def known_dns_classes() -> frozenset[str]:
    """Lower-cased names of every DNS class that :func:`load_dns_class` accepts."""
    return frozenset(_entry_points(DNS_GROUP))
