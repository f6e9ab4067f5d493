"""Reading YAML within limits: a file too large, nested too deep, whose aliases expand too
far, or with an integer too long to read is refused with the line where it went over, in
time and memory bounded by the limits, never with a traceback.

What callers may rely on: :func:`load` and :func:`compose` read YAML as ``yaml.safe_load``
and ``yaml.compose`` do (the YAML 1.1 safe schema, merge keys included) and raise only
``yaml.YAMLError``: :class:`LimitError` for a limit, another ``YAMLError`` for a syntax
error or a value that cannot be read (``2001-02-30``), each with ``problem_mark`` set where
the file tells where. A document that loads is a tree (aliases shared, never cyclic) at
most :data:`MAX_DEPTH` deep with at most :data:`MAX_NODES` values, aliases expanded, so a
recursive walk over it is safe. The limits are far above any real configuration.

How: libyaml parses (the pure-Python parser when libyaml is not installed); the composer
is PyYAML's, in Python, counting its depth; each composed document is measured with its
aliases expanded before any value is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_INT_CHARS", "MAX_NODES", "LimitError", "compose",
           "load"]

MAX_BYTES = 4 * 1024 * 1024
"""The largest file read (bytes; characters for a document given as text)."""
MAX_DEPTH = 100
"""The deepest nesting of collections, aliases expanded (a configuration uses about 6)."""
MAX_NODES = 1_000_000
"""The most values (scalars and collections) a document holds, aliases expanded."""
MAX_INT_CHARS = 1000
"""The longest integer literal read (characters; Python reads at most 4,300 digits);
longer ones are refused, not read."""


class LimitError(yaml.MarkedYAMLError):
    """A document over one of the limits; ``problem`` says which, ``problem_mark`` where."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _LimitedComposer(Composer):
    """PyYAML's composer, refusing nesting over :data:`MAX_DEPTH` before Python's recursion
    limit is near, and measuring each document before it is returned."""

    _depth = 0
    peek_event: Callable[[], Any]  # the parser's, mixed in

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise LimitError(f"nested deeper than {MAX_DEPTH} levels",
                                 self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Node | None:
        node = super().compose_document()
        if node is not None:
            _measure(node)
        return node


def _measure(root: Node) -> None:
    """Raise :class:`LimitError` when ``root``, aliases expanded, is deeper than
    :data:`MAX_DEPTH` (a recursive alias is infinitely deep) or holds more than
    :data:`MAX_NODES` values. Each node is measured once: time linear in the file."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth), aliases expanded

    def visit(node: Node, level: int) -> tuple[int, int]:
        known = sizes.get(id(node))
        if known is None:
            if level > MAX_DEPTH:
                raise LimitError(f"nested deeper than {MAX_DEPTH} levels, aliases expanded",
                                 node.start_mark)
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [item for pair in node.value for item in pair]
            count, depth = 1, 0
            for child in children:
                child_count, child_depth = visit(child, level + 1)
                count, depth = count + child_count, max(depth, child_depth)
                if count > MAX_NODES:
                    raise LimitError(f"more than {MAX_NODES:,} values, aliases expanded",
                                     node.start_mark)
            known = sizes[id(node)] = (count, depth + 1)
        if level + known[1] - 1 > MAX_DEPTH:
            raise LimitError(f"nested deeper than {MAX_DEPTH} levels, aliases expanded",
                             node.start_mark)
        return known

    visit(root, 1)


class _LimitedConstructor(SafeConstructor):
    """The safe constructor; a value it cannot build (``2001-02-30``, ``!!int x``) is a
    ``ConstructorError`` at the value's line, and a long integer literal is refused before
    ``int()`` reads it."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, IndexError, TypeError, KeyError) as exc:
            raise ConstructorError(None, None, f"cannot read the value {node.tag}: {exc}",
                                   node.start_mark) from None

    def construct_yaml_int(self, node: Node) -> int:
        if not isinstance(node, ScalarNode):
            kind = type(node).__name__
            raise ConstructorError(None, None, f"expected an integer, but found a {kind}",
                                   node.start_mark)
        if len(node.value) > MAX_INT_CHARS:
            raise LimitError(f"an integer of {len(node.value):,} characters; at most "
                             f"{MAX_INT_CHARS} are read", node.start_mark)
        value: int = super().construct_yaml_int(node)
        return value


_LimitedConstructor.yaml_constructors = {  # add_constructor, as its stub's types allow
    **SafeConstructor.yaml_constructors,
    "tag:yaml.org,2002:int": _LimitedConstructor.construct_yaml_int,
}

try:
    from yaml._yaml import CParser as _Parser  # libyaml: parsing in C

    class _Loader(_LimitedComposer, _Parser, _LimitedConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            _Parser.__init__(self, stream)
            _LimitedConstructor.__init__(self)
            Resolver.__init__(self)
            _LimitedComposer.__init__(self)
except ImportError:  # pragma: no cover - libyaml is not installed
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(Reader, Scanner, Parser, _LimitedComposer,  # type: ignore[no-redef]
                  _LimitedConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _LimitedComposer.__init__(self)
            _LimitedConstructor.__init__(self)
            Resolver.__init__(self)


def _check_length(text: str) -> None:
    if len(text) > MAX_BYTES:
        raise LimitError(f"larger than {MAX_BYTES:,} characters", None)


def _nesting_refused(exc: yaml.MarkedYAMLError) -> LimitError | None:
    """libyaml's own nesting limit (1,000 levels, met while it scans ahead, before the
    composer sees the depth) as the same refusal as ours."""
    if "maximum nesting depth" in str(exc.problem):
        return LimitError(f"nested deeper than {MAX_DEPTH} levels", exc.problem_mark)
    return None


def load(text: str) -> Any:
    """The single document of ``text``, as ``yaml.safe_load`` builds it (None when empty);
    see the module docstring for the limits and errors."""
    _check_length(text)
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        raise _nesting_refused(exc) or exc from None
    finally:
        loader.dispose()


def compose(text: str) -> Node | None:
    """The node tree of the single document of ``text`` (None when empty), as
    ``yaml.compose`` gives it, within the limits."""
    _check_length(text)
    loader = _Loader(text)
    try:
        node: Node | None = loader.get_single_node()
        return node
    except yaml.MarkedYAMLError as exc:
        raise _nesting_refused(exc) or exc from None
    finally:
        loader.dispose()
