"""No import cycle among the modules of the ``vmpooler`` package (actors, web, providers).

Every module is parsed with :mod:`ast`; every ``import`` and ``from … import`` counts,
wherever it stands: at module level, under ``if TYPE_CHECKING:``, inside a function. A
relative import is resolved against the importing module's package. ``from a.b import c``
depends on ``a.b``, and on ``a.b.c`` too when that is a module; it does not depend on the
``__init__`` modules of ``a`` (importing them runs them, but a package ``__init__`` that
only re-exports lazily, like ``actors/__init__.py``, is no part of a cycle through its
submodules). One cycle path is reported for each strongly connected component.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vmpooler.actors", "vmpooler.web", "vmpooler.providers")


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """The folders of :data:`PACKAGES`, as ``pyproject.toml``'s ``package-dir`` maps them."""
    with open(root / "pyproject.toml", "rb") as handle:
        mapping = tomllib.load(handle)["tool"]["setuptools"]["package-dir"]
    return {name: root / mapping[name] for name in PACKAGES}


def modules(roots: Mapping[str, Path]) -> dict[str, Path]:
    """Every module under ``roots`` (package name → folder), by dotted name."""
    found: dict[str, Path] = {}
    for package, folder in roots.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The project modules that module ``name`` (at ``path``) imports."""
    known = set(known)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name, path).split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            # ``from a.b import c`` needs the module a.b.c when there is one, else the
            # name c that a.b defines (a re-export of an ``__init__`` counts as a.b).
            targets.update(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known
                           else source for alias in node.names)
    deps = set()
    for target in targets:
        # ``import a.b.c`` needs a.b.c; a name outside the project resolves to nothing.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            deps.add(target)
    return deps


def import_graph(roots: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module → the project modules it imports."""
    found = modules(roots)
    return {name: imports(name, path, found) for name, path in found.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, …, a]``) for each strongly connected component of more than one
    module (Tarjan's algorithm, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(_cycle_in(component, graph) for component in components)


def _cycle_in(component: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first search)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(package_dirs())
    assert len(graph) > 100, "the walk found too few modules"
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_only_the_composition_root_imports_the_pool_actor() -> None:
    graph = import_graph(package_dirs())
    importers = sorted(name for name, deps in graph.items()
                       if "vmpooler.actors.pool.pool_actor" in deps
                       and name.startswith("vmpooler.actors."))
    assert importers == ["vmpooler.actors.factories"]


def test_cycles_are_found_through_type_checking_functions_and_relative_imports(
    tmp_path: Path,
) -> None:
    """The checker itself: a cycle hidden under ``TYPE_CHECKING``, one through an import
    inside a function and a relative import, and a package ``__init__`` that re-exports
    without being part of any cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
                "class A: ...\n",
        "b.py": "from pkg import a\nclass B: ...\n",
        "sub/__init__.py": "",
        "sub/c.py": "def f():\n    from .d import g\n    return g\n",
        "sub/d.py": "from pkg.sub import c\ndef g(): ...\n",
        "e.py": "import pkg.sub.d\nfrom pkg import A\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    graph = import_graph({"pkg": pkg})
    assert graph["pkg.e"] == {"pkg.sub.d", "pkg"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.sub.c", "pkg.sub.d", "pkg.sub.c"]]
