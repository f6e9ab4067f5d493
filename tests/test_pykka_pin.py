"""The pooled actors (``actors/runtime/pooled.py``) use three of pykka 4's private names:
the package pins ``pykka>=4.0,<5``, and this says at once when an installed pykka no longer
has what they use (rather than a hang at the first pooled message)."""

from __future__ import annotations

import importlib
from importlib.metadata import requires, version

import pytest


def test_the_installed_pykka_is_the_pinned_major() -> None:
    assert version("pykka").split(".")[0] == "4"
    pins = [set(r[len("pykka"):].replace(" ", "").split(","))
            for r in requires("vmpooler") or () if r.startswith("pykka")]
    assert pins == [{">=4.0", "<5"}]


@pytest.mark.parametrize("module, name", [
    ("pykka._threading", "ThreadingFuture"),
    ("pykka._actor", "ActorInbox"),
    ("pykka._envelope", "Envelope"),
])
def test_the_private_names_the_pooled_actors_use_exist(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name)
