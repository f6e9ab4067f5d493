"""What the tests of the Helm chart in conf/helm/vmpooler share: the chart rendered by the real
Helm engine (helm-python-sdk), offline: no cluster, so `lookup` finds nothing; the manifests
read as parsed YAML; and the vmpooler.yaml and pools.yaml they render loaded by vmpooler's own
config loader with the environment the Deployments set.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import helm_python
import yaml

from vmpooler.actors.config import load_config

ROOT = Path(__file__).resolve().parent.parent.parent
CHART = ROOT / "conf" / "helm" / "vmpooler"
THEIR_VALUES = ROOT / "tests" / "data" / "vmpooler-deployment-values-3.10.3.yaml"

Manifest = dict[str, Any]

DUMMY_POOLS = [
    {"name": "debian-12-x86_64", "alias": ["debian-12"], "template": "templates/debian-12",
     "size": 2, "provider": "dummy"},
    {"name": "centos-9-x86_64", "template": "templates/centos-9", "size": 1,
     "provider": "dummy"},
]


def their_values() -> dict[str, Any]:
    return yaml.safe_load(THEIR_VALUES.read_text())


def render(chart: helm_python.Chart, values: Mapping[str, Any] | None = None,
           release: str = "vmpooler") -> list[Manifest]:
    """Every object the chart renders for ``release`` (default "vmpooler") in namespace
    "pooling"."""
    out = chart.render(dict(values or {}), name=release, namespace="pooling")
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def one(docs: list[Manifest], kind: str, name: str) -> Manifest:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {[(d['kind'], d['metadata']['name']) for d in docs]}"
    return found[0]


def names(docs: list[Manifest], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == kind}


def container(docs: list[Manifest], deployment: str) -> dict[str, Any]:
    return one(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]


def env_of(c: Mapping[str, Any]) -> dict[str, Any]:
    """name → value, or the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def checksum(docs: list[Manifest], deployment: str) -> str:
    return one(docs, "Deployment", deployment)["spec"]["template"]["metadata"]["annotations"][
        "checksum/config"]


def write_configmaps(docs: list[Manifest], etc: Path) -> None:
    """The ConfigMaps' files where the pods mount them, under ``etc`` for /etc/vmpooler."""
    for folder in ("base", "config"):
        (etc / folder).mkdir(parents=True, exist_ok=True)
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            for name, text in doc["data"].items():
                (etc / ("config" if name == "pools.yaml" else "base") / name).write_text(text)


def environ_of(docs: list[Manifest], c: Mapping[str, Any], etc: Path,
               tmp: Path) -> dict[str, str]:
    """A container's environment, /etc/vmpooler read as ``etc`` and /tmp as ``tmp``; values
    from Secrets decoded when the chart renders the Secret, else made up."""
    secrets = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "Secret"}
    environ = {}
    for entry in c["env"]:
        if "value" in entry:
            value = entry["value"]
            if value.startswith("/tmp/"):
                value = f"{tmp}/{value.removeprefix('/tmp/')}"
            environ[entry["name"]] = value.replace("/etc/vmpooler", str(etc))
            continue
        ref = entry["valueFrom"]["secretKeyRef"]
        data = secrets.get(ref["name"], {})
        environ[entry["name"]] = (base64.b64decode(data[ref["key"]]).decode()
                                  if ref["key"] in data else f"from-{ref['name']}")
    return environ


def loaded_config(docs: list[Manifest], deployment: str, tmp_path: Path) -> Any:
    """vmpooler's config as the Deployment's container would load it."""
    etc = tmp_path / "etc" / "vmpooler"
    write_configmaps(docs, etc)
    environ = environ_of(docs, container(docs, deployment), etc, tmp_path)
    return load_config(environ=environ, cwd=tmp_path)
