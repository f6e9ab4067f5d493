"""The wheel ships every package of the source tree: pyproject.toml lists its packages one
by one (the top-level folders are mapped to ``vmpooler.*``), so a new sub-folder that is not
listed would be missing from a plain ``pip install``. ``.ci/wheel-smoke`` then installs
the wheel and starts the service from it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def source_packages() -> set[str]:
    """Every folder with an ``__init__.py`` under a mapped top-level folder, as its
    ``vmpooler.*`` name."""
    found = set()
    for package, folder in _setuptools()["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(base).parts
            found.add(".".join((package, *relative)))
    return found


def test_every_source_package_is_listed_for_the_wheel() -> None:
    listed = set(_setuptools()["packages"])
    assert source_packages() - listed == set(), "add these to pyproject.toml's packages"
    data_only = {name for name in listed - source_packages() if any(_folder(name).iterdir())}
    assert listed - source_packages() - data_only == set(), "these listed packages have no folder"


def _folder(package: str) -> Path:
    """The source folder of a ``vmpooler.*`` package name."""
    mapping = _setuptools()["package-dir"]
    top = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
    rest = package[len(top):].lstrip(".")
    return ROOT / mapping[top] / Path(*rest.split(".")) if rest else ROOT / mapping[top]


def test_package_data_patterns_match_files() -> None:
    """Every package-data pattern names files that exist (a moved data file would otherwise
    drop out of the wheel silently)."""
    for package, patterns in _setuptools()["package-data"].items():
        folder = _folder(package)
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches nothing"
