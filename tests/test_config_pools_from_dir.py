"""``:config: pools_from_dir`` / ``POOLS_FROM_DIR``: pools appended from a directory of files,
each problem naming its file and line (real files in ``tmp_path``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from vmpooler.actors.config import Config, ConfigError, ConfigProblem, load_config, render_config
from vmpooler.actors.config.unacted import unacted_warnings

MAIN = """\
:config:
  task_limit: 3
:pools:
  - name: 'main1'
    size: 1
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, main: str = MAIN, environ: Mapping[str, str] | None = None) -> Config:
    return load_config(write(tmp_path / "vmpooler.yaml", main), environ=environ or {},
                       cwd=tmp_path)


def problems(tmp_path: Path, main: str = MAIN,
             environ: Mapping[str, str] | None = None) -> tuple[ConfigProblem, ...]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, main, environ)
    return info.value.problems


def with_dir(directory: str) -> str:
    return MAIN.replace("  task_limit: 3\n", f"  task_limit: 3\n  pools_from_dir: '{directory}'\n")


def test_files_are_read_in_name_order_and_appended_after_the_other_pools(tmp_path: Path) -> None:
    pools = tmp_path / "pools.d"
    write(pools / "20-bare.yml", "- name: 'b1'\n  size: 2\n- {name: 'b2', size: 0}\n")
    write(pools / "10-keyed.yaml", ":pools:\n  - name: 'a1'\n    size: 1\n")
    write(pools / "30-plain-key.yaml", "pools:\n  - {name: 'c1', size: 1, alias: 'c'}\n")
    write(pools / ".hidden.yaml", "- {name: 'hidden', size: 1}\n")
    write(pools / "notes.txt", "- {name: 'text', size: 1}\n")
    write(pools / "sub.yaml" / "inner.yaml", "- {name: 'nested', size: 1}\n")
    write(pools / "sub" / "deeper.yaml", "- {name: 'deeper', size: 1}\n")
    write(tmp_path / "extra.yaml", ":pools:\n  - {name: 'extra1', size: 1}\n")
    main = with_dir("pools.d").replace("  task_limit: 3\n",
                                       "  task_limit: 3\n  extra_config: 'extra.yaml'\n")
    config = load(tmp_path, main)
    assert config.pool_names == ("main1", "extra1", "a1", "b1", "b2", "c1")
    assert config.pool("b1").size == 2 and config.pool("c1").alias == ("c",)
    assert any("pools_from_dir" in note and "4 pool(s)" in note for note in config.notes)


def test_a_configmap_volume_layout_reads_each_key_once(tmp_path: Path) -> None:
    """kubelet's layout: the keys are links into ``..data``, itself a link to a hidden
    timestamped directory that is swapped atomically on update."""
    volume = tmp_path / "configmap"
    stamped = volume / "..2026_12_05_19_07_51.123456789"
    write(stamped / "pools.yaml", ":pools:\n  - {name: 'cm1', size: 1}\n")
    write(stamped / "more.yml", "- {name: 'cm2', size: 2}\n")
    (volume / "..data").symlink_to(stamped.name)
    (volume / "pools.yaml").symlink_to("..data/pools.yaml")
    (volume / "more.yml").symlink_to("..data/more.yml")
    config = load(tmp_path, with_dir(str(volume)))
    assert config.pool_names == ("main1", "cm2", "cm1")  # more.yml < pools.yaml


def test_the_environment_variable_wins_over_the_setting(tmp_path: Path) -> None:
    write(tmp_path / "from-env" / "p.yaml", "- {name: 'env1', size: 1}\n")
    config = load(tmp_path, with_dir("missing"), {"POOLS_FROM_DIR": str(tmp_path / "from-env")})
    assert config.pool_names == ("main1", "env1")
    assert config.settings.pools_from_dir == str(tmp_path / "from-env")


def test_pools_from_dir_alone_when_the_main_file_has_no_pools(tmp_path: Path) -> None:
    write(tmp_path / "d" / "p.yaml", "- {name: 'only', size: 1}\n")
    config = load(tmp_path, ":config:\n  pools_from_dir: 'd'\n")
    assert config.pool_names == ("only",)


def test_an_empty_directory_gives_no_pools(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    write(tmp_path / "empty" / "blank.yaml", "")
    config = load(tmp_path, with_dir("empty"))
    assert config.pool_names == ("main1",)
    assert any("no pools" in note for note in config.notes)


def test_a_pool_defined_twice_names_both_files_and_lines(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.yaml", ":pools:\n  - name: 'twice'\n    size: 1\n")
    write(tmp_path / "d" / "b.yaml", "# second\n- name: 'other'\n  size: 1\n- name: 'twice'\n"
                                     "  size: 2\n")
    (problem,) = problems(tmp_path, with_dir("d"))
    assert (problem.source, problem.line) == (str(tmp_path / "d" / "b.yaml"), 4)
    assert problem.key == "pools[3].name"
    assert "duplicate pool name 'twice'" in problem.message
    assert f"first at {tmp_path / 'd' / 'a.yaml'}:2" in problem.message


def test_a_pool_of_the_main_file_defined_again_in_the_directory(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.yaml", "- {name: 'main1', size: 1}\n")
    (problem,) = problems(tmp_path, with_dir("d"))
    assert (problem.source, problem.line) == (str(tmp_path / "d" / "a.yaml"), 1)
    assert f"first at {tmp_path / 'vmpooler.yaml'}:5" in problem.message


def test_validation_problems_name_the_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.yaml", ":pools:\n  - name: 'fine'\n    size: 1\n")
    write(tmp_path / "d" / "b.yaml", "- name: 'bad'\n  size: -3\n- name: 'worse'\n"
                                     "  size: 1\n  provider: 'nowhere'\n")
    found = {p.key: p for p in problems(tmp_path, with_dir("d"))}
    assert set(found) == {"pools[2].size", "pools[3].provider"}
    b = str(tmp_path / "d" / "b.yaml")
    assert (found["pools[2].size"].source, found["pools[2].size"].line) == (b, 2)
    assert (found["pools[3].provider"].source, found["pools[3].provider"].line) == (b, 5)


def test_every_broken_file_is_reported_at_once(tmp_path: Path) -> None:
    pools = tmp_path / "d"
    write(pools / "a-syntax.yaml", "- name: 'a'\n  size: [1\n")
    write(pools / "b-sections.yaml", ":pools: []\n:config:\n  task_limit: 1\n")
    write(pools / "c-scalar.yaml", "just text\n")
    write(pools / "d-not-a-list.yaml", "# pools\npools:\n  name: 'x'\n")
    write(pools / "e-no-pools.yaml", "{}\n")
    (pools / "f-binary.yaml").write_bytes(b"- name: '\xff'\n")
    (pools / "g-dangling.yaml").symlink_to("nowhere.yaml")
    write(pools / "h-fine.yaml", "- {name: 'fine', size: 1}\n")
    found = {Path(p.source).name: p for p in problems(tmp_path, with_dir("d"))}
    assert set(found) == {"a-syntax.yaml", "b-sections.yaml", "c-scalar.yaml",
                          "d-not-a-list.yaml", "e-no-pools.yaml", "f-binary.yaml",
                          "g-dangling.yaml"}
    assert "invalid YAML" in found["a-syntax.yaml"].message
    assert found["a-syntax.yaml"].line is not None and found["a-syntax.yaml"].line >= 2
    assert (found["b-sections.yaml"].line, found["b-sections.yaml"].key) == (2, "config")
    assert "only :pools:" in found["b-sections.yaml"].message
    assert "list of pools" in found["c-scalar.yaml"].message
    assert (found["d-not-a-list.yaml"].line, found["d-not-a-list.yaml"].key) == (2, "pools")
    assert "list of pools" in found["e-no-pools.yaml"].message
    assert "cannot read the file" in found["f-binary.yaml"].message
    assert "No such file" in found["g-dangling.yaml"].message
    assert found["g-dangling.yaml"].source == str(pools / "g-dangling.yaml")


def test_a_missing_directory_names_the_path_and_the_setting(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path, with_dir("nowhere"))
    assert (problem.source, problem.line) == (str(tmp_path / "vmpooler.yaml"), 3)
    assert problem.key == "config.pools_from_dir"
    assert str(tmp_path / "nowhere") in problem.message
    assert "No such file or directory" in problem.message


def test_a_missing_directory_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    write(tmp_path / "a-file", "")
    (problem,) = problems(tmp_path, environ={"POOLS_FROM_DIR": "a-file"})
    assert (problem.source, problem.line) == ("POOLS_FROM_DIR", None)
    assert str(tmp_path / "a-file") in problem.message and "Not a directory" in problem.message


def test_the_setting_must_be_a_string(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path, MAIN.replace("  task_limit: 3\n",
                                                 "  task_limit: 3\n  pools_from_dir: ['a']\n"))
    assert (problem.key, problem.line) == ("config.pools_from_dir", 3)


def test_check_config_shows_the_merged_pools_and_loads_back(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.yaml", "- {name: 'dir1', size: 1, template: 't/dir1'}\n")
    rendered = render_config(load(tmp_path, with_dir("d")))
    document = yaml.safe_load(rendered)
    assert [pool["name"] for pool in document[":pools"]] == ["main1", "dir1"]
    assert "pools_from_dir" not in document[":config"]  # its pools are in :pools: already
    again = load_config(write(tmp_path / "rendered.yaml", rendered), environ={}, cwd=tmp_path)
    assert again.pool_names == ("main1", "dir1")


def test_the_check_config_command_with_the_environment_variable(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.yaml", "- {name: 'dir1', size: 1}\n")
    write(tmp_path / "vmpooler.yaml", MAIN)
    result = subprocess.run(
        [sys.executable, "-m", "vmpooler.web.cli", "check-config"], cwd=tmp_path,
        env={**os.environ, "POOLS_FROM_DIR": "d"}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    pools = yaml.safe_load(result.stdout)[":pools"]
    assert [pool["name"] for pool in pools] == ["main1", "dir1"]


def test_unacted_warnings_locate_keys_of_a_pool_from_the_directory(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.yaml", "- name: 'dir1'\n  size: 1\n  max_unhealthy_window: 60\n")
    config = load(tmp_path, with_dir("d"))
    (warning,) = unacted_warnings(config, cwd=tmp_path, environ={})
    assert (warning.source, warning.line) == (str(tmp_path / "d" / "a.yaml"), 3)
    assert warning.key == "pools[1].max_unhealthy_window"
