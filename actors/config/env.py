"""Environment variable overrides (vmpooler reference §3.2), applied over the YAML document.

Every variable vmpooler 3.9.1 reads is honoured with the same meaning, plus our own
``DATADOG_HOST``/``DATADOG_PORT`` (or Datadog's standard ``DD_AGENT_HOST``/
``DD_DOGSTATSD_PORT``; the ``DATADOG_*`` spelling wins), ``VMPOOLER_REDIS_DATA_DIR``,
``PROMETHEUS_MULTIPROC_DIR`` (over ``:prometheus:`` ``multiprocess_dir``) and
``VMPOOLER_PROVIDER_<NAME>_SERVER`` / ``_USERNAME`` / ``_PASSWORD`` (a provider's
credentials, see :func:`provider_env_name`).

Deliberate divergences from vmpooler, all in the direction of "say what you mean":

* An empty variable counts as unset.
* Integers parse strictly; a value such as ``5a`` is an error naming the variable (vmpooler
  aborts too, but silently ignores values without any digit).
* Booleans parse as ``true/yes/1/on`` or ``false/no/0/off``; anything else is an error.
  vmpooler stores most of them as raw strings, so ``EXPERIMENTAL_FEATURES=false`` enabled
  the feature there; here it disables it. ``VMPOOLER_DEBUG`` is parsed the same way.
* ``CREATE_LINKED_CLONES`` only overrides the file when set; a YAML ``false`` is honoured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from vmpooler.actors.config._data import thaw
from vmpooler.actors.config._values import coerce, parse_bool, parse_int
from vmpooler.actors.config.model import GlobalSettings, RedisSettings
from vmpooler.actors.config.problems import DOMAIN_REMOVED, Issue

__all__ = ["PROVIDER_ENV_KEYS", "EnvOverrides", "apply_environment", "provider_env_name"]


@dataclass(frozen=True, slots=True)
class _Var:
    """One variable: where it writes, its kind, and whether it creates a missing section."""

    name: str
    path: tuple[str, ...]
    kind: str
    creates: bool = True


def _declared() -> tuple[_Var, ...]:
    """Variables declared on the settings dataclasses, then the section-specific ones."""
    out: list[_Var] = []
    for section, cls in (("config", GlobalSettings), ("redis", RedisSettings)):
        for item in fields(cls):
            env = item.metadata.get("env")
            if env:
                out.append(_Var(env, (section, item.name), item.metadata["kind"].rstrip("?")))
    return (
        *out,
        _Var("CREATE_FOLDERS", ("config", "create_folders"), "bool"),
        _Var("EXTRA_CONFIG", ("config", "extra_config"), "str"),
        _Var("STATSD_SERVER", ("statsd", "server"), "str"),
        _Var("STATSD_PREFIX", ("statsd", "prefix"), "str", creates=False),
        _Var("STATSD_PORT", ("statsd", "port"), "int", creates=False),
        _Var("GRAPHITE_SERVER", ("graphite", "server"), "str"),
        _Var("GRAPHITE_PREFIX", ("graphite", "prefix"), "str", creates=False),
        _Var("GRAPHITE_PORT", ("graphite", "port"), "int", creates=False),
        _Var("DD_AGENT_HOST", ("datadog", "host"), "str"),
        _Var("DATADOG_HOST", ("datadog", "host"), "str"),
        _Var("DD_DOGSTATSD_PORT", ("datadog", "port"), "int", creates=False),
        _Var("DATADOG_PORT", ("datadog", "port"), "int", creates=False),
        _Var("PROMETHEUS_MULTIPROC_DIR", ("prometheus", "multiprocess_dir"), "str",
             creates=False),
        _Var("VMPOOLER_TRACING_ENABLED", ("tracing", "enabled"), "bool"),
        _Var("VMPOOLER_TRACING_JAEGER_HOST", ("tracing", "jaeger_host"), "str"),
        _Var("VMPOOLER_TRACING_OTLP_ENDPOINT", ("tracing", "otlp_endpoint"), "str"),
        _Var("VMPOOLER_TRACING_SAMPLE_RATIO", ("tracing", "sample_ratio"), "number"),
        _Var("AUTH_PROVIDER", ("auth", "provider"), "str"),
        _Var("LDAP_HOST", ("auth", "ldap", "host"), "str", creates=False),
        _Var("LDAP_PORT", ("auth", "ldap", "port"), "int", creates=False),
        _Var("LDAP_BASE", ("auth", "ldap", "base"), "str", creates=False),
        _Var("LDAP_USER_OBJECT", ("auth", "ldap", "user_object"), "str", creates=False),
    )


@dataclass(slots=True)
class EnvOverrides:
    """The result of :func:`apply_environment`.

    ``document`` is a new plain copy of the input with overrides applied; ``origins`` maps
    each overridden key path to its variable; ``debug``, ``api_port`` and ``app_env`` are the
    process-level settings that have no YAML key.
    """

    document: dict[str, Any]
    origins: dict[tuple[str | int, ...], str] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    debug: bool = False
    api_port: int = 4567
    app_env: str = "development"


def _get(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return value if value else None


def apply_environment(document: Mapping[str, Any], environ: Mapping[str, str]) -> EnvOverrides:
    """Apply every override found in ``environ`` to a copy of ``document`` (plain keys).

    Never raises for bad values: each one becomes an ``Issue`` whose source is the variable.
    A section that exists but is not a mapping is left alone (validation reports it).
    """
    result = EnvOverrides(document=thaw(document))
    doc = result.document
    if _get(environ, "DOMAIN"):
        result.issues.append(Issue(("config", "domain"), DOMAIN_REMOVED, source="DOMAIN"))
    legacy_purge = _get(environ, "PURGE_UNCONFIGURED_FOLDERS")
    if legacy_purge:
        result.notes.append(
            "environment variable PURGE_UNCONFIGURED_FOLDERS is deprecated; "
            "use PURGE_UNCONFIGURED_RESOURCES"
        )
    overrides = dict(environ)
    spelled: dict[str, str] = {}  # variable actually set, when a legacy name stands in
    if legacy_purge and not _get(environ, "PURGE_UNCONFIGURED_RESOURCES"):
        overrides["PURGE_UNCONFIGURED_RESOURCES"] = legacy_purge
        spelled["PURGE_UNCONFIGURED_RESOURCES"] = "PURGE_UNCONFIGURED_FOLDERS"

    for var in _declared():
        text = _get(overrides, var.name)
        if text is None:
            continue
        name = spelled.get(var.name, var.name)
        try:
            value = _parse(text, var.kind)
        except ValueError as exc:
            result.issues.append(Issue(var.path, str(exc), source=name))
            continue
        if _assign(doc, var, value):
            result.origins[var.path] = name
        else:
            result.notes.append(
                f"environment variable {var.name} ignored: "
                f"no :{var.path[0]}: section to apply it to"
            )
    _provider_credentials(doc, environ, result)
    _runtime(environ, result)
    return result


PROVIDER_ENV_KEYS = ("server", "username", "password")
"""Provider keys that ``VMPOOLER_PROVIDER_<NAME>_<KEY>`` variables may set (ours)."""


def provider_env_name(provider: str, key: str) -> str:
    """``VMPOOLER_PROVIDER_<NAME>_<KEY>``: the provider's name upper-cased, every character
    other than a letter or digit replaced by ``_`` (``vsphere-east`` → ``VSPHERE_EAST``)."""
    name = "".join(c if c.isalnum() else "_" for c in provider.upper())
    return f"VMPOOLER_PROVIDER_{name}_{key.upper()}"


def _provider_credentials(
    doc: dict[str, Any], environ: Mapping[str, str], result: EnvOverrides
) -> None:
    """Credentials from the environment, so they need not sit in the file: each variable
    overrides its key in an existing ``:providers: :<name>:`` section."""
    providers = doc.get("providers")
    if not isinstance(providers, dict):
        return
    for name, section in providers.items():
        if not isinstance(section, dict):
            continue
        for key in PROVIDER_ENV_KEYS:
            variable = provider_env_name(str(name), key)
            text = _get(environ, variable)
            if text is not None:
                section[key] = text
                result.origins[("providers", str(name), key)] = variable




def _parse(text: str, kind: str) -> Any:
    """Booleans and integers parse strictly; other kinds go through ``coerce``."""
    if kind == "bool":
        return parse_bool(text)
    if kind == "int":
        return parse_int(text)
    return coerce(text, kind)


def _assign(doc: dict[str, Any], var: _Var, value: Any) -> bool:
    """Set ``value`` at ``var.path``; False when the section is absent and not creatable."""
    section = doc.get(var.path[0])
    if section is None:
        if not var.creates:
            return False
        section = doc[var.path[0]] = {}
    if not isinstance(section, dict):
        return True
    target = section
    for part in var.path[1:-1]:
        child = target.get(part)
        if child is None:
            child = target[part] = {}
        if not isinstance(child, dict):
            return True
        target = child
    target[var.path[-1]] = value
    return True


def _runtime(environ: Mapping[str, str], result: EnvOverrides) -> None:
    """Process-level settings: VMPOOLER_DEBUG, PORT, APP_ENV / RACK_ENV."""
    debug = _get(environ, "VMPOOLER_DEBUG")
    if debug is not None:
        try:
            result.debug = parse_bool(debug)
        except ValueError as exc:
            result.issues.append(Issue(("VMPOOLER_DEBUG",), str(exc), source="VMPOOLER_DEBUG"))
    port = _get(environ, "PORT")
    if port is not None:
        try:
            result.api_port = coerce(port, "int", minimum=1, maximum=65535)
        except ValueError as exc:
            result.issues.append(Issue(("PORT",), str(exc), source="PORT"))
    result.app_env = _get(environ, "APP_ENV") or _get(environ, "RACK_ENV") or "development"
