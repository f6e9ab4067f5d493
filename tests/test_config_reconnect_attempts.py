"""``:redis: reconnect_attempts`` / ``REDIS_RECONNECT_ATTEMPTS``: a count, or vmpooler 3.x's
list of delays (redis-rb's form, JSON in the variable), which counts as its length."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_config import MINIMAL, load, problems

THEIR_LIST = "[0,0.25,0.5,1,2,4,8,16,32,64,128,256,512]"  # vmpooler-deployment's chart value


@pytest.mark.parametrize(("variable", "attempts"), [
    ("5", 5), ("0", 0), (THEIR_LIST, 13), ("[]", 0), ("[1, 2.5]", 2)])
def test_the_variable_takes_a_count_or_a_json_list(tmp_path: Path, variable: str,
                                                   attempts: int) -> None:
    config = load(tmp_path, MINIMAL, {"REDIS_RECONNECT_ATTEMPTS": variable})
    assert config.redis.reconnect_attempts == attempts


def test_the_file_takes_a_yaml_list(tmp_path: Path) -> None:
    text = MINIMAL + ":redis:\n  reconnect_attempts: [0, 0.25, 0.5]\n"
    assert load(tmp_path, text).redis.reconnect_attempts == 3


@pytest.mark.parametrize("variable", ["[a]", "[-1]", "[true]", "-1", "many", "[1,"])
def test_anything_else_is_an_error_naming_the_variable(tmp_path: Path, variable: str) -> None:
    found = problems(tmp_path, MINIMAL, {"REDIS_RECONNECT_ATTEMPTS": variable})
    assert any("REDIS_RECONNECT_ATTEMPTS" in str(p) and "list of delays" in str(p)
               for p in found), found
