"""Alias failover's configuration: ``failover``, ``size_max`` and ``failover_failures``, their
errors (file, line and key) and warnings, and ``vmpooler check-config`` saying them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vmpooler.actors.config import ConfigError, load_config
from vmpooler.actors.config.unacted import unacted_warnings
from vmpooler.actors.pool.failover_watch import failover_group

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]

GOOD = """\
:config:
  failover_failures: 2
  backend_weight:
    dc1-cluster: 3
    dc2-cluster: 1
:pools:
  - name: a
    size: 5
    alias: [x]
    failover: true
    clone_target: dc1-cluster
  - name: b
    size: 4
    alias: x
    failover: yes
    size_max: 9
    clone_target: dc2-cluster
  - name: c
    size: 2
    alias: [x]
"""


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "vmpooler.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(str(path), environ={})


def _problems(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    return str(caught.value)


def test_the_keys_are_read_and_default_to_off(tmp_path: Path) -> None:
    config = _load(tmp_path, GOOD)
    a, b, c = config.pools
    assert (a.failover, a.size_max) == (True, None)
    assert (b.failover, b.size_max) == (True, 9)
    assert (c.failover, c.size_max) == (False, None)
    assert config.settings.failover_failures == 2
    assert not unacted_warnings(config, environ={})
    group = failover_group(config, "a")
    assert group is not None and group.threshold == 2
    assert [s.name for s in group.siblings] == ["b"], "c has no failover: not a sibling"
    assert (group.me.weight, group.siblings[0].weight, group.siblings[0].ceiling) == (3, 1, 9)
    assert failover_group(config, "c") is None


def test_without_the_keys_nothing_changes(tmp_path: Path) -> None:
    config = _load(tmp_path, ":pools:\n  - name: a\n    size: 1\n    alias: [x]\n")
    assert config.settings.failover_failures == 3
    assert failover_group(config, "a") is None


@pytest.mark.parametrize(("pool", "key", "message"), [
    ("    alias: [x]\n    failover: sometimes\n", "pools[0].failover",
     "expected true or false"),
    ("    alias: [x]\n    failover: true\n    size_max: many\n", "pools[0].size_max",
     "expected an integer"),
    ("    alias: [x]\n    failover: true\n    size_max: 3\n", "pools[0].size_max",
     "size_max 3 is below the pool's size 5"),
    ("    alias: [x]\n    failover: true\n    size_max: 20000\n", "pools[0].size_max",
     "size_max 20000 is above the largest allowed, 10000 (max_pool_size)"),
    ("    failover: true\n", "pools[0].failover",
     "pool 'a' has failover: true but no alias"),
])
def test_bad_values_name_file_line_and_key(tmp_path: Path, pool: str, key: str,
                                           message: str) -> None:
    text = _problems(tmp_path, f":pools:\n  - name: a\n    size: 5\n{pool}")
    assert f": {key}: " in text and message in text, text
    assert "vmpooler.yaml:" in text


def test_a_bad_threshold_names_its_key(tmp_path: Path) -> None:
    text = _problems(tmp_path, ":config:\n  failover_failures: 0\n:pools: []\n")
    assert "vmpooler.yaml:2: config.failover_failures:" in text, text


def test_keys_that_do_nothing_are_warned_about(tmp_path: Path) -> None:
    config = _load(tmp_path, """\
:config:
  failover_failures: 4
:pools:
  - name: a
    size: 5
    alias: [x]
    size_max: 8
  - name: b
    size: 5
    alias: [y]
    failover: true
""")
    warnings = [str(w) for w in unacted_warnings(config, environ={})]
    assert any(":2: config.failover_failures: no two pools of one alias" in w
               for w in warnings), warnings
    assert any(":7: pools[0].size_max: pool 'a' has no failover: true" in w
               for w in warnings), warnings
    assert any(":11: pools[1].failover: no other pool of alias 'y'" in w
               for w in warnings), warnings


def test_check_config_says_it(tmp_path: Path) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(":pools:\n  - name: a\n    size: 5\n    failover: true\n"
                    "    size_max: 2\n", encoding="utf-8")
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(path)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 1
    assert (f"{path}:4: pools[0].failover: pool 'a' has failover: true but no alias"
            in result.stderr), result.stderr
    assert f"{path}:5: pools[0].size_max: size_max 2 is below the pool's size 5" in result.stderr
    path.write_text(GOOD.replace("    failover: yes\n", ""), encoding="utf-8")
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(path)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "failover: true" in result.stdout
    assert "pools[1].size_max: pool 'b' has no failover: true (not acted on)" in result.stderr
