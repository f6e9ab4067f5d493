"""Configuration problems and the error that carries them.

A :class:`ConfigError` is raised once, after every problem in the configuration has been
collected, so an operator sees the whole list at once instead of fixing one line per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["ConfigError", "ConfigProblem", "ConfigRefusedError", "format_key"]

KeyPath = Sequence[str | int]

DOMAIN_REMOVED = (
    "the domain setting was removed in vmpooler 3; give each pool a dns_plugin "
    "naming a :dns_configs: entry with a domain"
)


def format_key(path: KeyPath) -> str:
    """Render a key path readably: ``("pools", 2, "size")`` → ``pools[2].size``.

    Indexes are 0-based, as in Python. The empty path (the document itself) is ``<document>``.
    """
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "<document>"


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with the configuration.

    ``source`` is the file path (or the environment variable) the offending value came from,
    ``line`` the 1-based line in that source when known (never for environment variables),
    ``key`` the readable key path (see :func:`format_key`), ``message`` what is wrong.
    """

    source: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.key}: {self.message}"


class ConfigError(ValueError):
    """The configuration cannot be used; ``problems`` lists every reason found (never empty).

    ``str(error)`` is one line per problem, ``<source>:<line>: <key>: <message>`` (the
    ``:<line>`` part is left out when the line is unknown).
    """

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        if not self.problems:
            raise ValueError("ConfigError needs at least one problem")
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(problem) for problem in self.problems)

    def __reduce__(self) -> tuple[type[ConfigError], tuple[tuple[ConfigProblem, ...]]]:
        return type(self), (self.problems,)


@dataclass(frozen=True, slots=True)
class Issue:
    """Internal: a problem found before its location is known.

    ``source`` is set when the location is not a YAML file (an environment variable);
    otherwise the loader looks ``path`` up in the YAML sources to find file and line.
    ``related`` is the key path of another value the problem involves (the first of two
    pools of one name); the loader adds where that one is written to the message.
    """

    path: tuple[str | int, ...]
    message: str
    source: str | None = None
    related: tuple[str | int, ...] | None = None


class ConfigRefusedError(ConfigError):
    """A file (or document) refused before it is read as configuration: over a limit of
    :mod:`._yaml_limits` (size, nesting, aliases, integer length). It carries exactly one
    problem, so ``str(error)`` is one line; the command line says it and exits 2."""
