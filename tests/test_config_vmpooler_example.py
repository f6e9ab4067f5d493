"""vmpooler 3.9.1's own ``vmpooler.yaml.example`` is a valid configuration for us.

The file (vendored unchanged in ``tests/data/``) leaves out ``clone_target`` and
``datacenter``; vmpooler's vsphere provider needs a clone target to clone anything, so each
pool gets one here, by text, keeping the file's comments, quoting and layout. Its pools name
no datacenter: vmpooler then uses vCenter's first, and so do we (with a note).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from vmpooler.actors.config import load_config

EXAMPLE = Path(__file__).parent / "data" / "vmpooler-3.9.1.yaml.example"
VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]


def with_clone_targets(text: str, target: str = "cluster1") -> str:
    """``text`` with ``clone_target: <target>`` added to each pool that has none (right
    after its ``- name:`` line)."""
    lacking = {pool["name"] for pool in yaml.safe_load(text)[":pools"]
               if "clone_target" not in pool}
    lines = []
    for line in text.splitlines(keepends=True):
        lines.append(line)
        stripped = line.strip()
        if stripped.startswith("- name:"):
            name = yaml.safe_load(stripped[2:])["name"]
            if name in lacking:
                indent = " " * (len(line) - len(line.lstrip()) + 2)
                lines.append(f"{indent}clone_target: '{target}'\n")
    return "".join(lines)


def example(tmp_path: Path) -> Path:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(with_clone_targets(EXAMPLE.read_text()))
    return path


def test_the_vendored_example_is_vmpooler_391s() -> None:
    text = EXAMPLE.read_text()
    assert "vmpooler 3.9.1" in text.splitlines()[0]
    pools = yaml.safe_load(text)[":pools"]
    assert [p["name"] for p in pools] == ["debian-7-i386", "debian-7-x86_64"]
    assert all("clone_target" not in p and "datacenter" not in p for p in pools)


def test_the_example_with_clone_targets_loads(tmp_path: Path) -> None:
    config = load_config(example(tmp_path), environ={}, cwd=tmp_path)
    assert [p.name for p in config.pools] == ["debian-7-i386", "debian-7-x86_64"]
    assert {p.raw["clone_target"] for p in config.pools} == {"cluster1"}
    assert set(config.providers) == {"vsphere-pdx", "vsphere-bfs", "vsphere", "dummy"}
    assert sum("first datacenter" in note for note in config.notes) == 2


def test_check_config_accepts_the_example(tmp_path: Path) -> None:
    path = example(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMPOOLER_")}
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(path)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the first datacenter vCenter lists will be used" in result.stdout + result.stderr
