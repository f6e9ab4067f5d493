"""Finding, reading and merging the configuration: :func:`load_config`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from vmpooler.actors.config import pools_dir
from vmpooler.actors.config._yaml import (
    Locator,
    SourceText,
    deep_merge,
    normalise_keys,
    parse_yaml,
    read_source,
)
from vmpooler.actors.config.env import apply_environment
from vmpooler.actors.config.model import Config
from vmpooler.actors.config.problems import (
    ConfigError,
    ConfigProblem,
    ConfigRefusedError,
    Issue,
    format_key,
)
from vmpooler.actors.config.redis_pools import PoolReader, PoolsFromRedis, RedisPoolsError
from vmpooler.actors.config.validate import NO_POOLS_NOTE, validate_document

__all__ = ["bundled_config_path", "load_config"]

ENV_DOCUMENT = "VMPOOLER_CONFIG"
ENV_FILE = "VMPOOLER_CONFIG_FILE"


def bundled_config_path() -> str:
    """Where the bundled default configuration (``conf/vmpooler.yaml``) lives."""
    return str(resources.files("vmpooler.conf") / "vmpooler.yaml")


def _entry_point_names(group: str) -> frozenset[str]:
    return frozenset(metadata.entry_points(group=group).names)


def _provider_checks() -> dict[str, Any]:
    """Each installed provider class's settings check, by lower-cased class name. A check
    that cannot be loaded is skipped: the provider itself reports its settings at start."""
    checks: dict[str, Any] = {}
    for ep in metadata.entry_points(group="vmpooler.provider_settings"):
        try:
            checks.setdefault(ep.name.lower(), ep.load())
        except Exception:  # a broken plugin must not make every configuration unloadable
            continue
    return checks


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    known_provider_classes: Collection[str] | None = None,
    known_dns_classes: Collection[str] | None = None,
    pool_reader: PoolReader | None = None,
) -> Config:
    """Read, merge, override and validate the configuration; return it frozen.

    Source, first match wins: ``path`` (the CLI's ``--config``); the YAML document in
    ``VMPOOLER_CONFIG``; the file named by ``VMPOOLER_CONFIG_FILE``; ``vmpooler.yaml`` in
    ``cwd``; the bundled ``conf/vmpooler.yaml``. Relative paths (including ``extra_config``
    files and ``pools_from_dir``) are resolved against ``cwd``, which defaults to the
    process's working directory. The pools of the ``pools_from_dir`` files (see
    :mod:`.pools_dir`) are appended after the ``extra_config`` files are merged.
    ``environ`` defaults to ``os.environ``; pass ``{}`` to ignore the environment.

    ``known_provider_classes`` / ``known_dns_classes`` are the class names a provider's
    ``provider_class`` / a dns config's ``dns_class`` may name (case-insensitively); None
    means the installed entry points of groups ``vmpooler.providers`` / ``vmpooler.dns``.

    When the document has no ``:pools:`` (or a null one) and ``pool_reader`` is given, the
    pools come from Redis as vmpooler reads them (the command line passes
    :func:`vmpooler.actors.storage.published_pools.redis_pool_reader`); their problems name
    the Redis key they came from.

    Raises :class:`ConfigError` listing every problem found, or :class:`ConfigRefusedError` (one
    problem) at the first file over a limit of reading (``_yaml_limits``: size, nesting,
    aliases, integer length), whichever file it is. Has no side effects besides
    reading files (and Redis, through ``pool_reader``); safe to call from any thread.
    """
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else Path(cwd)
    main, description = _main_source(path, environ, cwd)
    notes: list[str] = []
    document = _read_document(main, notes)
    sources = [main]
    problems: list[ConfigProblem] = []
    document = _merge_extra_configs(document, environ, cwd, sources, problems, notes)
    document = _append_pools_from_dir(document, environ, cwd, sources, problems, notes)
    document = _copy_legacy_vsphere(document, notes)
    overrides = apply_environment(document, environ)
    if known_provider_classes is None:
        known_provider_classes = _entry_point_names("vmpooler.providers")
    if known_dns_classes is None:
        known_dns_classes = _entry_point_names("vmpooler.dns")
    def validate(document: Mapping[str, Any]) -> tuple[Config | None, list[Issue], list[str]]:
        return validate_document(
            document,
            source=description,
            known_provider_classes=known_provider_classes,
            known_dns_classes=known_dns_classes,
            provider_checks=_provider_checks(),
            debug=overrides.debug,
            api_port=overrides.api_port,
            app_env=overrides.app_env,
        )

    config, issues, more_notes = validate(overrides.document)
    locator = Locator(sources, overrides.origins)
    problems.extend(_locate(locator, [*overrides.issues, *issues]))
    if problems or config is None:
        raise ConfigError(problems)
    if pool_reader is not None and overrides.document.get("pools") is None:
        config, more_notes = _with_redis_pools(config, overrides.document, pool_reader,
                                               validate, more_notes)
    all_notes = (*notes, *overrides.notes, *more_notes)
    return dataclasses.replace(config, notes=tuple(dict.fromkeys(all_notes)))


def _with_redis_pools(
    config: Config,
    document: Mapping[str, Any],
    reader: PoolReader,
    validate: Callable[[Mapping[str, Any]], tuple[Config | None, list[Issue], list[str]]],
    notes: list[str],
) -> tuple[Config, list[str]]:
    """``config`` validated again with the pools ``reader`` finds (unchanged when none)."""
    try:
        read = reader(config.redis)
    except RedisPoolsError as exc:
        raise ConfigError([ConfigProblem(config.source, None, "pools",
                                         f"no :pools: section, and {exc}")]) from None
    where, entries = read.where, read.entries
    if not entries:
        return config, notes
    with_pools, issues, more_notes = validate({**document, "pools": entries})
    if issues or with_pools is None:
        raise ConfigError([_redis_problem(read, issue) for issue in issues])
    names = ", ".join(entry["name"] for entry in entries)
    kept = [note for note in more_notes if note != NO_POOLS_NOTE]
    return with_pools, [*kept, f"no :pools: section: pools read from {where}: {names}"]


def _redis_problem(read: PoolsFromRedis, issue: Issue) -> ConfigProblem:
    """A problem of a pool read from Redis names its hash; others keep their YAML key."""
    path, where = issue.path, read.where
    if len(path) >= 2 and path[0] == "pools" and isinstance(path[1], int):
        name = read.entries[path[1]]["name"]
        key = read.keys.get(name, name)
        field = ".".join(str(p) for p in path[2:]) or "<hash>"
        return ConfigProblem(f"{where} {key}", None, field, issue.message)
    return ConfigProblem(issue.source or where, None, format_key(path), issue.message)


def _main_source(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str], cwd: Path
) -> tuple[SourceText, str]:
    """The main document and the human description of where it came from."""
    if path is not None:
        return read_source(cwd / path), str(cwd / path)
    if environ.get(ENV_DOCUMENT):
        description = f"environment variable {ENV_DOCUMENT}"
        return SourceText(ENV_DOCUMENT, environ[ENV_DOCUMENT]), description
    if environ.get(ENV_FILE):
        file = cwd / environ[ENV_FILE]
        return read_source(file), str(file)
    local = cwd / "vmpooler.yaml"
    if local.is_file():
        return read_source(local), str(local)
    bundled = resources.files("vmpooler.conf") / "vmpooler.yaml"
    return SourceText(bundled_config_path(), bundled.read_text(encoding="utf-8")), str(bundled)


def _read_document(source: SourceText, notes: list[str]) -> dict[str, Any]:
    """Parse and normalise one document; it must be a mapping. Raises ConfigError."""
    data, problem = parse_yaml(source)
    if problem is not None:
        raise ConfigError([problem])
    document, clashes = normalise_keys(data)
    notes.extend(f"{source.name}: {clash}" for clash in clashes)
    if not isinstance(document, dict):
        kind = "empty" if document is None else f"a {type(document).__name__}"
        raise ConfigError(
            [ConfigProblem(source.name, 1, "<document>",
                           f"the configuration must be a mapping of sections, but it is {kind}")]
        )
    return document


def _extra_config_paths(document: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[
    list[str], str
]:
    """The ``extra_config`` file list (``EXTRA_CONFIG`` wins) and where it was set."""
    if environ.get("EXTRA_CONFIG"):
        return environ["EXTRA_CONFIG"].split(","), "EXTRA_CONFIG"
    section = document.get("config")
    value = section.get("extra_config") if isinstance(section, Mapping) else None
    if isinstance(value, str):
        return value.split(","), ""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value), ""
    return [], ""


def _merge_extra_configs(
    document: dict[str, Any],
    environ: Mapping[str, str],
    cwd: Path,
    sources: list[SourceText],
    problems: list[ConfigProblem],
    notes: list[str],
) -> dict[str, Any]:
    """Deep-merge each ``extra_config`` file into ``document`` (see ``_yaml.deep_merge``)."""
    paths, env_source = _extra_config_paths(document, environ)
    for name in (item.strip() for item in paths):
        if not name:
            continue
        try:
            source = read_source(cwd / name)
        except ConfigRefusedError:
            raise
        except ConfigError as exc:
            reason = exc.problems[0].message
            where = (env_source, None) if env_source else _extra_config_location(sources[0])
            problems.append(ConfigProblem(
                where[0], where[1], "config.extra_config", f"{cwd / name}: {reason}"
            ))
            continue
        try:
            extra = _read_document(source, notes)
        except ConfigRefusedError:
            raise
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        sources.append(source)
        notes.append(f"merged extra_config file {source.name}")
        document = deep_merge(document, extra)
    return document


def _append_pools_from_dir(
    document: dict[str, Any],
    environ: Mapping[str, str],
    cwd: Path,
    sources: list[SourceText],
    problems: list[ConfigProblem],
    notes: list[str],
) -> dict[str, Any]:
    """Append the pools of the ``pools_from_dir`` files to ``document``'s ``pools`` (left
    alone when that is neither a list nor null: validation reports it)."""
    value, env_source = pools_dir.pools_dir_setting(document, environ)
    if value is None:
        return document
    directory = cwd / value
    try:
        paths = pools_dir.pool_file_paths(directory)
    except OSError as exc:
        where = (env_source, None) if env_source else Locator(sources, {}).locate(
            pools_dir.SETTING)
        problems.append(pools_dir.directory_problem(directory, exc, where))
        return document
    found = pools_dir.read_pool_files(paths)
    problems.extend(found.problems)
    notes.extend(found.notes)
    sources.extend(found.sources)
    names = ", ".join(Path(source.name).name for source in found.sources)
    notes.append(f"pools_from_dir {directory}: {len(found.pools)} pool(s) from {names}" if names
                 else f"pools_from_dir {directory}: no pools (no *.yaml or *.yml file with any)")
    existing = document.get("pools")
    if not found.pools or not (existing is None or isinstance(existing, list)):
        return document
    return {**document, "pools": [*(existing or []), *found.pools]}


def _extra_config_location(main: SourceText) -> tuple[str, int | None]:
    """Where ``config.extra_config`` is written in the main document."""
    return Locator([main], {}).locate(("config", "extra_config"))


def _copy_legacy_vsphere(document: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """vmpooler copies a legacy top-level ``:vsphere:`` section to ``:providers: :vsphere:``."""
    if document.get("vsphere") is None:
        return document
    providers = document.get("providers")
    if providers is None:
        providers = {}
    if not isinstance(providers, Mapping) or "vsphere" in providers:
        return document
    notes.append("top-level :vsphere: is deprecated; it is used as :providers: :vsphere:")
    return {**document, "providers": {**providers, "vsphere": document["vsphere"]}}


def _locate(locator: Locator, issues: Iterable[Issue]) -> list[ConfigProblem]:
    problems = []
    for issue in issues:
        if issue.source is not None:
            source, line = issue.source, None
        else:
            source, line = locator.locate(issue.path)
        message = issue.message
        if issue.related is not None:
            other, other_line = locator.locate(issue.related)
            message += f"; first at {other}" + ("" if other_line is None else f":{other_line}")
        problems.append(ConfigProblem(source, line, format_key(issue.path), message))
    return problems
