"""YAML reading for the loader: reading files and parsing with located errors, Ruby-symbol
key normalisation, vmpooler's ``extra_config`` deep merge, and mapping key paths back to
source lines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vmpooler.actors.config import _yaml_limits
from vmpooler.actors.config.problems import (
    ConfigError,
    ConfigProblem,
    ConfigRefusedError,
    KeyPath,
    format_key,
)

__all__ = ["Locator", "SourceText", "deep_merge", "normalise_keys", "parse_yaml", "read_source"]


@dataclass(frozen=True, slots=True)
class SourceText:
    """One YAML document and where it came from (a file path or a variable name).

    ``root`` is the key path of the merged configuration at which this document's top node
    sits: ``()`` for a whole configuration document, ``("pools",)`` for a ``pools_from_dir``
    file that holds a bare list of pools.
    """

    name: str
    text: str
    root: tuple[str, ...] = ()


def read_source(file: Path) -> SourceText:
    """The text of ``file`` (UTF-8). Raises :class:`ConfigError` naming the file and the
    reason (no traceback) when it cannot be read, :class:`ConfigRefusedError` when it is larger
    than ``_yaml_limits.MAX_BYTES`` (no more than that is read)."""
    limit = _yaml_limits.MAX_BYTES
    try:
        with file.open("rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise ConfigRefusedError([ConfigProblem(
                str(file), None, "<document>",
                f"larger than {limit:,} bytes; refused unread")])
        return SourceText(str(file), data.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            [ConfigProblem(str(file), None, "<document>", f"cannot read the file: {reason}")]
        ) from None


def parse_yaml(source: SourceText) -> tuple[Any, ConfigProblem | None]:
    """Load the text as ``yaml.safe_load`` does, within ``_yaml_limits``' limits; on a
    syntax error (or a value that cannot be read) return a problem with its line. Raises
    :class:`ConfigRefusedError` (one problem: source, line, what) for a document over a limit."""
    try:
        return _yaml_limits.load(source.text), None
    except _yaml_limits.LimitError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigRefusedError([ConfigProblem(source.name, line, "<document>",
                                           f"{exc.problem}; refused")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        detail = f"{context}: {problem}" if context else problem
        return None, ConfigProblem(source.name, line, "<document>", f"invalid YAML: {detail}")


def _plain(key: Any) -> Any:
    return key[1:] if isinstance(key, str) and key.startswith(":") else key


def normalise_keys(value: Any, path: tuple[str | int, ...] = ()) -> tuple[Any, list[str]]:
    """Strip one leading ``:`` from every mapping key at every level (``:config`` → ``config``).

    Returns the new data and messages for keys written both ways in one mapping (the
    symbol form wins, as it is the one vmpooler reads).
    """
    clashes: list[str] = []
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        symbolic: set[Any] = set()
        for key, item in value.items():
            plain = _plain(key)
            child, more = normalise_keys(item, (*path, str(plain)))
            clashes.extend(more)
            if plain in out:
                clashes.append(f"{format_key((*path, str(plain)))}: written both as symbol and "
                               "plain key; the symbol form is used")
                if plain in symbolic:
                    continue
            out[plain] = child
            if plain != key:
                symbolic.add(plain)
        return out, clashes
    if isinstance(value, list):
        items = []
        for index, item in enumerate(value):
            child, more = normalise_keys(item, (*path, index))
            clashes.extend(more)
            items.append(child)
        return items, clashes
    return value, clashes


def deep_merge(base: Any, extra: Any) -> Any:
    """vmpooler's ``extra_config`` merge: mappings merge key by key, lists concatenate,
    and a value already present in ``base`` is kept (extra files only add). Pure."""
    if isinstance(base, Mapping) and isinstance(extra, Mapping):
        merged = dict(base)
        for key, item in extra.items():
            merged[key] = deep_merge(merged[key], item) if key in merged else item
        return merged
    if isinstance(base, list) and isinstance(extra, list):
        return [*base, *extra]
    return extra if base is None else base


_Candidate = tuple[int, str, yaml.Node, yaml.Node]


class Locator:
    """Maps a key path of the merged document to ``(source, line)``.

    Sources are searched in merge order, so a key's location is that of the value that won
    the merge, and list indexes continue across concatenated lists. A source whose ``root``
    is not empty joins the search below that key path (a bare list of pools continues
    ``pools``). Values set from the environment map to ``(variable, None)``. When the full
    path cannot be found (a missing key), the deepest existing ancestor is reported.
    """

    def __init__(self, sources: Sequence[SourceText],
                 origins: Mapping[tuple[str | int, ...], str]) -> None:
        # (merge order, name, top node, root key path) of each source that parses
        self._roots: list[tuple[int, str, yaml.Node, tuple[str, ...]]] = []
        for order, source in enumerate(sources):
            try:
                node = _yaml_limits.compose(source.text)
            except yaml.YAMLError:
                node = None
            if node is not None:
                self._roots.append((order, source.name, node, source.root))
        self._default = sources[0].name if sources else "<unknown>"
        self._origins = {tuple(path): name for path, name in origins.items()}

    def locate(self, path: KeyPath) -> tuple[str, int | None]:
        """Return the source and 1-based line for ``path`` (see the class docstring)."""
        path = tuple(path)
        for length in range(len(path), 0, -1):
            if path[:length] in self._origins:
                return self._origins[path[:length]], None
        # Each candidate: (merge order, source, node holding the value, node whose line to
        # report), kept in merge order.
        current = self._joining(())
        if not current:
            return self._default, None
        for depth, part in enumerate(path, start=1):
            found = sorted([*self._step(current, part), *self._joining(path[:depth])],
                           key=lambda candidate: candidate[0])
            if not found:
                break
            current = found
        _, name, _, marker = current[0]
        return name, marker.start_mark.line + 1

    def _joining(self, at: tuple[str | int, ...]) -> list[_Candidate]:
        """The sources whose top node sits at key path ``at``."""
        return [(order, name, node, node) for order, name, node, root in self._roots
                if root == at]

    @staticmethod
    def _step(current: list[_Candidate], part: str | int) -> list[_Candidate]:
        found: list[_Candidate] = []
        if isinstance(part, int):
            offset = part
            for order, name, node, _ in current:
                if isinstance(node, yaml.SequenceNode):
                    if offset < len(node.value):
                        item = node.value[offset]
                        return [(order, name, item, item)]
                    offset -= len(node.value)
            return found
        for order, name, node, _ in current:
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if isinstance(key_node, yaml.ScalarNode) and _plain(key_node.value) == part:
                        found.append((order, name, value_node, key_node))
                        break
        return found

