"""The Datadog dashboard and monitors that ship in ``conf/datadog/``: valid against the
dashboard and monitor models of Datadog's own API client (``datadog-api-client``), strictly
(no key a model does not know, no value it could not parse), and querying only metrics the
service emits."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from datadog_api_client import Configuration
from datadog_api_client import model_utils as mu
from datadog_api_client.v1.model.dashboard import Dashboard
from datadog_api_client.v1.model.monitor import Monitor

ROOT = Path(__file__).resolve().parent.parent
ASSETS = resources.files("vmpooler.conf") / "datadog"
NAMESPACE = "vmpooler"
# what DogStatsD timings (|ms) become in Datadog
TIMING_SUFFIXES = ("avg", "count", "median", "max", "95percentile")


def load(name: str) -> Any:
    return json.loads((ASSETS / name).read_text(encoding="utf-8"))


def parse(value: Any, model: type) -> Any:
    return mu.validate_and_convert_types(value, (model,), [model.__name__], True, True,
                                         Configuration())


def problems(model: Any, raw: Any, path: str = "$") -> Iterator[str]:
    """What in ``raw`` the parsed ``model`` did not take: unparsable values, unknown keys."""
    if isinstance(model, list):
        for index, (item, raw_item) in enumerate(zip(model, raw, strict=True)):
            yield from problems(item, raw_item, f"{path}[{index}]")
        return
    if not isinstance(model, mu.OpenApiModel):
        return
    if getattr(model, "_unparsed", False):  # set up the tree from where the fault is
        yield f"{path}: not a valid {type(model).__name__}"
    if isinstance(model, mu.ModelComposed):
        instance = model.get_oneof_instance() if model._composed_instances else None
        if instance is not None:
            yield from problems(instance, raw, path)
        return
    if isinstance(model, mu.ModelSimple) or not isinstance(raw, dict):
        return
    known = set(type(model).attribute_map.values())
    for key in raw:
        if key not in known:
            yield f"{path}.{key}: unknown to {type(model).__name__}"
    by_json = {json_key: name for name, json_key in type(model).attribute_map.items()}
    for key, value in raw.items():
        if key in by_json:
            yield from problems(getattr(model, by_json[key]), value, f"{path}.{key}")


def test_the_dashboard_is_a_valid_datadog_dashboard() -> None:
    raw = load("dashboard.json")
    assert list(problems(parse(raw, Dashboard), raw)) == []


@pytest.mark.parametrize("index", range(len(load("monitors.json"))))
def test_each_monitor_is_a_valid_datadog_monitor(index: int) -> None:
    raw = load("monitors.json")[index]
    assert list(problems(parse(raw, Monitor), raw)) == []


def test_the_validation_refuses_what_datadog_would() -> None:
    """The checks above can fail: a bad enum, an unknown key, a widget of no known type."""
    bad = {"title": "t", "layout_type": "sideways", "widgets": [
        {"definition": {"type": "nosuch"}},
        {"definition": {"type": "timeseries", "requests": [{"q": "avg:x{*}", "colour": 1}]}}]}
    found = list(problems(parse(bad, Dashboard), bad))
    assert any("layout_type" in p for p in found)
    assert any("widgets[0].definition" in p for p in found)
    assert any("colour" in p for p in found)


def emitted() -> set[str]:
    """Every metric name the service's code sends (``metrics.increment/gauge/timing`` with a
    literal name, or a literal prefix of an f-string), as Datadog receives it."""
    names: set[str] = set()
    for folder in ("actors", "web", "providers"):
        for file in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("increment", "gauge", "timing") and node.args):
                    continue
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    base = [first.value]
                else:
                    continue
                for name in base:
                    names.add(f"{NAMESPACE}.{name}")
                    if node.func.attr == "timing":
                        names |= {f"{NAMESPACE}.{name}.{s}" for s in TIMING_SUFFIXES}
    return names


_METRIC = re.compile(r"\b(?:avg|sum|min|max|count):([\w.]+)\{")


def queried() -> set[str]:
    """Every metric a widget or monitor of the shipped JSON queries."""
    text = json.dumps([load("dashboard.json"), load("monitors.json")])
    return set(_METRIC.findall(text))


def test_every_queried_metric_is_one_the_service_emits() -> None:
    used = queried()
    assert len(used) > 15
    assert used - emitted() == set()
