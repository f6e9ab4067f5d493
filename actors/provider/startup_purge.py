"""``purge_unconfigured_resources`` at manager start-up (reference §3.4, §4.1).

Which providers purge, with which allowlist, read as vmpooler reads them: the provider's own
``purge_unconfigured_resources``, else the global ``:config:`` one (legacy
``purge_unconfigured_folders`` is mapped by the loader); the allowlist is the provider's
``resources_allowlist``, or the deprecated ``folder_whitelist`` when that is set. Unlike
vmpooler, a provider's explicit ``false`` wins over a global ``true`` (Ruby's ``||`` made
it impossible to turn one provider off).

The purge runs through the provider's actor like any other call (on a worker thread, under
``provider_call_timeout``); the housekeeper receives and logs the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pykka

from vmpooler.actors.config import Config
from vmpooler.actors.messages import CallProvider, PurgeUnconfigured
from vmpooler.actors.messages.address import Address
from vmpooler.actors.runtime.supervisor import ActorDirectory

__all__ = ["request_startup_purges", "startup_purges"]

log = logging.getLogger(__name__)

_TRUE = frozenset({"true", "yes", "on", "1"})


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return value is True


def _names(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(item) for item in value)


def startup_purges(config: Config) -> dict[str, tuple[str, ...]]:
    """Provider name → allowlist, for every configured provider that purges."""
    wanted: dict[str, tuple[str, ...]] = {}
    for name, provider in config.providers.items():
        settings: Mapping[str, Any] = provider.settings
        own = settings.get("purge_unconfigured_resources")
        if not (config.settings.purge_unconfigured_resources if own is None else _flag(own)):
            continue
        if settings.get("folder_whitelist") is not None:
            log.warning("[!] [deprecation] rename configuration 'folder_whitelist' to "
                        "'resources_allowlist' for provider %s", name)
            wanted[name] = _names(settings.get("folder_whitelist"))
        else:
            wanted[name] = _names(settings.get("resources_allowlist"))
    return wanted


def request_startup_purges(config: Config, directory: ActorDirectory) -> list[str]:
    """Send each purging provider's actor its ``PURGE_UNCONFIGURED`` call, answered to the
    ``housekeeping`` actor. Returns the providers asked. A provider no pool uses has no
    actor and is not purged (logged): with no pool, everything would look unconfigured."""
    asked = []
    housekeeper = directory.get("housekeeping")
    for name, allowlist in startup_purges(config).items():
        ref = directory.get(Address.provider(name).name)
        if ref is None or housekeeper is None:
            log.warning("[!] [%s] serves no configured pool; its unconfigured resources are "
                        "not purged", name)
            continue
        log.info("[*] [%s] purging unconfigured resources (allowlist: %s)", name,
                 ", ".join(allowlist) or "none")
        try:
            ref.tell(CallProvider(request=PurgeUnconfigured(tuple(allowlist)), pool="", vm=name,
                                  reply_to=housekeeper))
        except pykka.ActorDeadError:
            continue
        asked.append(name)
    return asked
