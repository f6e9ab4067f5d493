"""Pools from a directory: ``:config: pools_from_dir`` (``POOLS_FROM_DIR`` wins).

Every ``*.yaml`` and ``*.yml`` file directly in the directory is read, in file-name order;
each holds a ``:pools:`` (or ``pools:``) key with a list of pools, or a bare list of pools.
Their pools are appended, file after file, to the configuration's ``:pools:`` (after the
``extra_config`` files are merged), so a pool is validated, located (``file:line``) and
rendered like any other.

Made for Kubernetes: a ConfigMap mounted as a volume holds each key as a symbolic link
(``pools.yaml -> ..data/pools.yaml``) next to hidden entries (``..data`` and
``..2026_12_05_...``, directories). Names starting with ``.`` are skipped, links are followed,
and only regular files are read; a link to nothing is an error naming it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmpooler.actors.config._values import show
from vmpooler.actors.config._yaml import (
    Locator,
    SourceText,
    normalise_keys,
    parse_yaml,
    read_source,
)
from vmpooler.actors.config.problems import ConfigError, ConfigProblem, ConfigRefusedError

__all__ = ["ENV_VAR", "SETTING", "PoolFiles", "directory_problem", "pool_file_paths",
           "pools_dir_setting", "read_pool_files"]

ENV_VAR = "POOLS_FROM_DIR"
SETTING = ("config", "pools_from_dir")
SUFFIXES = (".yaml", ".yml")
_KEY = "config.pools_from_dir"


@dataclass(slots=True)
class PoolFiles:
    """What :func:`read_pool_files` found.

    ``sources`` are the files whose pools were taken, in order (a bare list has ``root``
    ``("pools",)``); ``pools`` their entries (keys normalised), file after file; ``problems``
    every file that could not be used, each naming the file and, when known, the line.
    """

    sources: list[SourceText] = field(default_factory=list)
    pools: list[Any] = field(default_factory=list)
    problems: list[ConfigProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def pools_dir_setting(document: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[
    str | None, str
]:
    """The directory to read and the variable it came from: ``POOLS_FROM_DIR`` when set
    (not empty), else ``:config: pools_from_dir`` with ``""``. ``(None, "")`` when neither is
    set or the key is not a string (validation reports that)."""
    if environ.get(ENV_VAR):
        return environ[ENV_VAR], ENV_VAR
    section = document.get("config")
    value = section.get("pools_from_dir") if isinstance(section, Mapping) else None
    return (value, "") if isinstance(value, str) and value else (None, "")


def pool_file_paths(directory: Path) -> list[Path]:
    """The files of ``directory`` to read, in file-name order: names ending in ``.yaml`` or
    ``.yml`` that do not start with ``.``, excluding directories and other non-regular files
    (links are followed; a link to nothing is kept, so that reading it names it). Raises
    ``OSError`` when the directory cannot be listed."""
    paths = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(".") or not name.endswith(SUFFIXES):
            continue
        path = directory / name
        try:
            mode = path.stat().st_mode
        except OSError:
            paths.append(path)  # a dangling link: reading it says so
            continue
        if stat.S_ISREG(mode):
            paths.append(path)
    return paths


def read_pool_files(paths: list[Path]) -> PoolFiles:
    """Read and check each file of ``paths`` in order. Raises only :class:`ConfigRefusedError`,
    for a file over a limit of reading (the others' problems are collected)."""
    found = PoolFiles()
    for path in paths:
        try:
            source = read_source(path)
        except ConfigRefusedError:
            raise
        except ConfigError as exc:
            found.problems.extend(exc.problems)
            continue
        _read_one(source, found)
    return found


def _read_one(source: SourceText, found: PoolFiles) -> None:
    data, problem = parse_yaml(source)
    if problem is not None:
        found.problems.append(problem)
        return
    data, clashes = normalise_keys(data)
    found.notes.extend(f"{source.name}: {clash}" for clash in clashes)
    if data is None:
        found.notes.append(f"{source.name}: empty, no pools in it")
        return
    if isinstance(data, list):
        found.sources.append(SourceText(source.name, source.text, root=("pools",)))
        found.pools.extend(data)
        return
    locator = Locator([source], {})

    def fail(key: tuple[str, ...], message: str) -> None:
        name, line = locator.locate(key)
        found.problems.append(ConfigProblem(name, line, ".".join(key) or "<document>", message))

    if not isinstance(data, Mapping):
        fail((), f"expected a :pools: key with a list of pools, or a list of pools; got "
                 f"{show(data)}")
        return
    others = [str(key) for key in data if key != "pools"]
    for key in others:
        fail((key,), "only :pools: is read from a pools_from_dir file; put other sections "
                     "in the main configuration")
    if "pools" not in data:
        if not others:
            fail((), "expected a :pools: key with a list of pools, or a list of pools")
        return
    pools = data["pools"]
    if pools is not None and not isinstance(pools, list):
        fail(("pools",), f"expected a list of pools, got {show(pools)}")
        return
    if others:
        return
    found.sources.append(source)
    found.pools.extend(pools or [])


def directory_problem(directory: Path, error: OSError, where: tuple[str, int | None]) -> \
        ConfigProblem:
    """The problem of a directory that cannot be listed, at ``where`` (the variable, or the
    file and line of ``pools_from_dir``)."""
    reason = error.strerror or str(error)
    return ConfigProblem(where[0], where[1], _KEY,
                         f"{directory}: cannot read the directory: {reason}")
