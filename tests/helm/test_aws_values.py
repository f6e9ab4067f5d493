"""The Helm values example of docs/aws.md renders with the chart: the aws provider's section
reaches vmpooler.yaml (and loads), its credentials reach the pods from a Secret and never a
ConfigMap."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python
import yaml

from tests.helm.chart import ROOT, container, env_of, loaded_config, render


def docs_values() -> dict[str, Any]:
    text = (ROOT / "docs" / "aws.md").read_text()
    (block,) = re.findall(r"```yaml\n# values.yaml\n(.*?)```", text, re.S)
    values: dict[str, Any] = yaml.safe_load(block)
    return values


def test_the_docs_helm_example_renders_and_loads(chart: helm_python.Chart,
                                                 tmp_path: Path) -> None:
    docs = render(chart, docs_values())
    for deployment in ("vmpooler-api", "vmpooler-manager"):
        env = env_of(container(docs, deployment))
        assert env["ABS_AWS_ACCESS_KEY"] == {
            "secretKeyRef": {"name": "vmpooler-aws", "key": "access_key"}}
        assert env["ABS_AWS_SECRET_KEY"] == {
            "secretKeyRef": {"name": "vmpooler-aws", "key": "secret_key"}}
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            assert "ABS_AWS" not in yaml.safe_dump(doc)
    config = loaded_config(docs, "vmpooler-manager", tmp_path)
    aws = config.providers["aws"]
    assert aws.provider_class == "aws"
    assert aws.settings["subnet_id"] == "subnet-0fe90a688844f6f26"
