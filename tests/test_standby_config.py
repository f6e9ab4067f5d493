"""The standby tier's configuration: ``standby``, ``standby_state``, ``standby_ttl``,
``standby_resume_limit``, ``standby_cost`` per pool with ``:config:`` defaults; errors name
the file, line and key; ``auto`` needs demand sizing."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmpooler.actors.config import ConfigError, load_config
from vmpooler.actors.config.model import Config


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(str(path), environ={})


def _problems(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    return str(caught.value)


def test_no_standby_by_default(tmp_path: Path) -> None:
    config = _load(tmp_path, ":pools:\n  - name: a\n    size: 2\n")
    assert config.pools[0].standby is None


def test_a_pool_number_and_the_global_defaults(tmp_path: Path) -> None:
    config = _load(tmp_path, """\
:config:
  standby_state: powered_off
  standby_ttl: 120
  standby_resume_limit: 4
:pools:
  - name: a
    size: 2
    standby: 3
  - name: b
    size: 2
""")
    tier = config.pools[0].standby
    assert tier is not None and tier.count == 3 and not tier.auto
    assert (tier.state, tier.ttl, tier.resume_limit, tier.cost) == ("powered_off", 7200.0, 4, 0.1)
    assert config.pools[1].standby is None


def test_a_global_standby_applies_to_every_pool_and_a_pool_may_say_zero(
        tmp_path: Path) -> None:
    config = _load(tmp_path, """\
:config:
  standby: 2
:pools:
  - name: a
    size: 2
  - name: b
    size: 2
    standby: 0
""")
    assert config.pools[0].standby is not None and config.pools[0].standby.count == 2
    assert config.pools[1].standby is None


def test_auto_with_demand_sizing(tmp_path: Path) -> None:
    config = _load(tmp_path, """\
:pools:
  - name: a
    size: 2
    sizing: demand
    size_max: 10
    standby: auto
    standby_cost: 0.2
""")
    tier = config.pools[0].standby
    assert tier is not None and tier.auto and tier.cost == 0.2


def test_auto_without_demand_sizing_keeps_none_and_says_so(tmp_path: Path) -> None:
    config = _load(tmp_path, ":pools:\n  - name: a\n    size: 2\n    standby: auto\n")
    assert config.pools[0].standby is None
    assert any("standby: auto needs sizing: demand" in note for note in config.notes)


@pytest.mark.parametrize(("line", "expected"), [
    ("standby: -1", "standby"),
    ("standby: lots", "expected a number of VMs (0 or more) or auto"),
    ("standby_state: hibernated", "unknown standby_state 'hibernated'"),
    ("standby_ttl: 0", "standby_ttl"),
    ("standby_resume_limit: 0", "standby_resume_limit"),
    ("standby_cost: 0", "standby_cost"),
    ("standby_cost: 2", "standby_cost: expected a number > 0 and <= 1, got 2"),
])
def test_bad_values_name_the_key_and_line(tmp_path: Path, line: str, expected: str) -> None:
    text = f":pools:\n  - name: a\n    size: 2\n    standby: 1\n    {line}\n"
    if line.startswith("standby:"):
        text = f":pools:\n  - name: a\n    size: 2\n    {line}\n"
    problems = _problems(tmp_path, text)
    assert expected in problems
    line_number = 4 if line.startswith("standby:") else 5
    assert f"vmpooler.yaml:{line_number}: pools[0]." in problems
