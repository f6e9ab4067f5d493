"""The wheelhouse of an offline image build (README "Image") serves every patch release of
the Python that made it: the distributions that ``'.[image]'`` resolves to here hold every
distribution the image's install (``vmpooler[image]``, Dockerfile) needs on any 3.X.Y.

Wheels are made on one machine and installed in the base image, whose Python may be another
patch release: a dependency that a marker asks for on some releases only (redis's
``async-timeout; python_full_version < "3.11.3"``) is then missing from the wheels unless
``[image]`` names it. The dependency graph is read from the installed distributions'
metadata, as pip would resolve it; a distribution not installed here is one the wheels
would lack."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.podman import readme_wheel_command

PATCHES = range(0, 21)
"""Patch releases of this Python's minor version checked (3.11.0 to 3.11.20)."""


def closure(root: str, extras: set[str], environment: dict[str, str]) -> set[str]:
    """Canonical names of the distributions ``root[extras]`` needs under ``environment``
    (marker variables), ``root`` included; a needed distribution not installed here is
    named but not followed."""
    needed: set[str] = set()
    queue: list[tuple[str, frozenset[str]]] = [(root, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        name, wanted = queue.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        needed.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(
                    marker.evaluate({**environment, "extra": extra})
                    for extra in (wanted or {""})):
                continue
            queue.append((canonicalize_name(requirement.name),
                          frozenset(requirement.extras)))
    return needed


def environment_of(version: str) -> dict[str, str]:
    """Marker variables of this machine with Python ``version``."""
    return {**default_environment(), "python_full_version": version,
            "python_version": ".".join(version.split(".")[:2])}


def readme_extras() -> set[str]:
    """The extras of the README's wheel command (``'.[image]'`` → ``{"image"}``)."""
    target = next(word for word in readme_wheel_command() if word.startswith("."))
    inside = target.partition("[")[2].rstrip("]")
    return {extra.strip() for extra in inside.split(",") if extra.strip()}


def test_the_readmes_wheels_hold_what_every_patch_release_installs() -> None:
    made_here = closure("vmpooler", readme_extras(), environment_of(platform.python_version()))
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    missing = {}
    for patch in PATCHES:
        version = f"{minor}.{patch}"
        lacking = closure("vmpooler", {"image"}, environment_of(version)) - made_here
        if lacking:
            missing[version] = sorted(lacking)
    assert not missing, (
        f"wheels made with Python {platform.python_version()} by the README's command lack, "
        f"for the image's install on: {missing} — name them in pyproject.toml's [image] extra")


def test_without_the_image_extra_an_older_patch_release_would_lack_a_wheel() -> None:
    """The check above can fail: the wheels of plain ``.`` miss what 3.X.0 needs (when this
    Python is a later release than the dependencies' markers name)."""
    if sys.version_info[:3] < (3, 11, 3):
        return  # here, the markers already ask for everything
    plain = closure("vmpooler", set(), environment_of(platform.python_version()))
    oldest = closure("vmpooler", {"image"}, environment_of(f"{sys.version_info.major}."
                                                           f"{sys.version_info.minor}.0"))
    assert "async-timeout" in oldest - plain
