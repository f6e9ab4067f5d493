"""Reading YAML within limits (``actors/config/_yaml_limits.py``), in process: what real
configurations hold loads as ``yaml.safe_load`` loads it; nesting, aliases expanded,
integer literals and sizes over the limits are refused at their line, as ``YAMLError``s,
and ``load_config`` refuses such a file wherever it comes from (``ConfigRefusedError``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vmpooler.actors.config import ConfigError, ConfigRefusedError, load_config
from vmpooler.actors.config._yaml import read_source
from vmpooler.actors.config._yaml_limits import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_INT_CHARS,
    LimitError,
    compose,
    load,
)

REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted([*REPO.glob("conf/*.yaml"), *REPO.glob("conf/*.example"),
                  *REPO.glob("tests/data/**/*.yaml")])


def laughs(levels: int) -> str:
    """A billion-laughs document: each level nine aliases of the one before."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def refusal(text: str) -> LimitError:
    with pytest.raises(LimitError) as caught:
        load(text)
    return caught.value


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_real_configurations_load_as_safe_load_loads_them(path: Path) -> None:
    text = path.read_text()
    assert load(text) == yaml.safe_load(text)


def test_anchors_aliases_and_merge_keys_load_as_safe_load_loads_them() -> None:
    text = ("defaults: &d {size: 2, template: t, tags: {a: 1}}\n"
            "pools:\n" + "".join(f"- {{<<: *d, name: p{i}}}\n" for i in range(2000)))
    assert load(text) == yaml.safe_load(text)
    assert compose(text) is not None and compose("") is None and load("") is None


def test_nesting_up_to_the_limit_loads_and_one_more_level_is_refused_at_its_line() -> None:
    assert load("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert "nested deeper than 100 levels" in refusal("[" * (MAX_DEPTH + 1)
                                                      + "]" * (MAX_DEPTH + 1)).problem
    block = "".join(" " * i + "- \n" for i in range(MAX_DEPTH + 1))
    error = refusal(block)
    assert error.problem_mark is not None and error.problem_mark.line + 1 == MAX_DEPTH + 1


def test_libyamls_own_nesting_limit_is_the_same_refusal() -> None:
    assert refusal("a: " + "[" * 5000 + "]" * 5000).problem == "nested deeper than 100 levels"


def test_nesting_through_aliases_counts() -> None:
    half = MAX_DEPTH // 2 + 1
    text = f"a: &a {'[' * half}{']' * half}\nb: {'[' * half}*a{']' * half}\n"
    assert "aliases expanded" in refusal(text).problem


def test_a_recursive_alias_is_refused() -> None:
    assert "aliases expanded" in refusal("a: &a [1, *a]\n").problem
    assert "aliases expanded" in refusal("a: &a {b: *a}\n").problem


def test_an_alias_bomb_is_refused_where_it_goes_over() -> None:
    error = refusal(laughs(9))
    assert error.problem == "more than 1,000,000 values, aliases expanded"
    assert error.problem_mark is not None and error.problem_mark.line + 1 == 7  # 9^6 > 10^6
    merges = "m0: &m0 {a: 1}\n" + "".join(f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}\n"
                                          for i in range(1, 40))
    assert "aliases expanded" in refusal(merges).problem
    assert load(laughs(5))["l5"][0][0][0][0][0] == ["lol"] * 9  # 9^5 values: read


def test_integer_literals_up_to_the_limit_are_read_longer_ones_refused() -> None:
    assert load("a: " + "9" * MAX_INT_CHARS) == {"a": int("9" * MAX_INT_CHARS)}
    error = refusal("a: 1\nb: " + "9" * 10_001 + "\n")
    assert error.problem == "an integer of 10,001 characters; at most 1000 are read"
    assert error.problem_mark is not None and error.problem_mark.line + 1 == 2
    assert "integer of 1,002" in refusal("a: 0x" + "f" * 1000).problem
    assert load("a: '" + "9" * 10_001 + "'")["a"] == "9" * 10_001  # a string is a string


@pytest.mark.parametrize("text", ["a: 2001-02-30", "a: !!int []", "a: !!int ''",
                                  "a: !!float x", "{[1]: 2}", "a: !!python/name:os.system"])
def test_a_value_that_cannot_be_built_is_a_yaml_error_at_its_line(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        load(text)
    assert not isinstance(caught.value, LimitError)
    assert getattr(caught.value, "problem_mark", None) is not None


def test_a_document_over_the_size_is_refused_and_a_file_is_not_read_past_it(
        tmp_path: Path) -> None:
    assert refusal("#" * (MAX_BYTES + 1)).problem == "larger than 4,194,304 characters"
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(ConfigRefusedError) as caught:
        read_source(big)
    assert str(caught.value) == f"{big}: <document>: larger than 4,194,304 bytes; refused unread"
    fits = tmp_path / "fits.yaml"
    fits.write_bytes(b"#" * MAX_BYTES)
    assert len(read_source(fits).text) == MAX_BYTES


def test_load_config_refuses_a_hostile_file_wherever_it_comes_from(tmp_path: Path) -> None:
    bomb = laughs(9)
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "a.yaml").write_text("- {name: a, size: 1}\n")
    (tmp_path / "pools" / "b.yaml").write_text(bomb)
    main = tmp_path / "vmpooler.yaml"
    main.write_text(":config:\n  pools_from_dir: pools\n:pools:\n- {name: m, size: 1}\n")
    with pytest.raises(ConfigRefusedError) as caught:
        load_config(main, environ={}, cwd=tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'pools' / 'b.yaml'}:7: <document>: ")
    (tmp_path / "extra.yaml").write_text(bomb)
    with pytest.raises(ConfigRefusedError) as caught:
        load_config(main, environ={"EXTRA_CONFIG": "extra.yaml"}, cwd=tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'extra.yaml'}:7: <document>: ")
    with pytest.raises(ConfigRefusedError) as caught:
        load_config(None, environ={"VMPOOLER_CONFIG": bomb}, cwd=tmp_path)
    assert str(caught.value).startswith("VMPOOLER_CONFIG:7: <document>: ")
    assert isinstance(caught.value, ConfigError) and len(caught.value.problems) == 1
