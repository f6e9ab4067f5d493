"""Checking API answers against ``web/openapi.json``, and a seeded API to check them on.

The OpenAPI 3.0 schemas are turned into JSON Schema (``nullable``, ``$ref`` to components)
and validated with ``jsonschema_rs``. :func:`seeded_api` builds the app over real Redis with
pools, aliases, ready/running/pending/destroyed VMs, a token, overrides and daily statistics,
and makes sure ``/api/v3/openapi.json`` is served.
"""

from __future__ import annotations

import json
from typing import Any

import falcon
import jsonschema_rs
import redis

from tests.api_harness import TOKEN, USER, Api, api, api_config, api_pool
from vmpooler.actors.storage import schema, timefmt
from vmpooler.web.app import API_PREFIX
from vmpooler.web.resources import openapi

__all__ = ["DOC", "OTHER_TOKEN", "Api", "body_errors", "response_schema", "routed", "seed",
           "seeded_api"]

DOC: dict[str, Any] = openapi.document()
OTHER_TOKEN = "zyxwvutsrqponmlkjihgfedcba543210"
_OPENAPI_ONLY = {"nullable", "example", "discriminator", "readOnly", "writeOnly", "xml",
                 "externalDocs", "deprecated"}


def to_json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema draft 7 (components become ``definitions``)."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items() if k not in _OPENAPI_ONLY}
    if "$ref" in out:
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/definitions/")
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if "type" not in out and "enum" not in out:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


_DEFINITIONS = {name: to_json_schema(s) for name, s in DOC["components"]["schemas"].items()}


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        section, name = node["$ref"].split("/")[-2:]
        node = DOC["components"][section][name]
    return node


def response_schema(method: str, template: str, status: int) -> dict[str, Any] | None:
    """JSON Schema of the body of ``status`` for the operation; None if it has no body.

    Raises KeyError naming what is missing when the operation or status is undocumented.
    """
    operation = DOC["paths"][template][method.lower()]
    responses = operation["responses"]
    if str(status) not in responses:
        raise KeyError(f"{method} {template}: status {status} is not documented "
                       f"(documented: {sorted(responses)})")
    content = _resolve(responses[str(status)]).get("content")
    if not content:
        return None
    return {**to_json_schema(content["application/json"]["schema"]),
            "definitions": _DEFINITIONS}


def body_errors(method: str, template: str, status: int, text: str) -> list[str]:
    """What is wrong with a response body: empty when it matches the document."""
    schema_ = response_schema(method, template, status)
    if schema_ is None:
        return [] if not text.strip() else [f"undocumented body {text[:200]!r}"]
    try:
        body = json.loads(text)
    except ValueError:
        return [f"body is not JSON: {text[:200]!r}"]
    validator = jsonschema_rs.Draft7Validator(schema_)
    return [f"{'/'.join(map(str, e.instance_path)) or '<root>'}: {e.message}"
            for e in validator.iter_errors(body)]


def routed(app: falcon.App, path: str) -> bool:
    """Whether a route (not the 404 sink) serves ``path``."""
    return app._router.find(path.split("?")[0].rstrip("/") or "/") is not None


def _ensure_openapi(a: Api) -> None:
    if not routed(a.client.app, f"{API_PREFIX}/openapi.json"):
        openapi.register(a.client.app, a.ctx, API_PREFIX)


def _vm(client: redis.Redis, pool: str, vm: str, queue: str, **fields: str) -> None:
    client.sadd(getattr(schema, queue)(pool), vm)
    client.hset(schema.vm(vm), mapping={"template": pool, "pool": pool, **fields})


def seeded_api(client: redis.Redis, *, auth: bool = True, experimental: bool = True,
               ownership: bool = False) -> Api:
    """The app over ``client`` seeded with every state the endpoints report on.

    ``ownership`` turns on ``enforce_vm_ownership`` (VMs checked out with a token are only
    changed with that token).
    """
    pools = [api_pool("pool1", 2, domain="example.com", alias=("alias1",)),
             api_pool("pool2", 1, alias=("alias1", "alias2")),
             api_pool("empty", 1)]
    a = api(client, api_config(pools, auth=auth, experimental_features=experimental,
                               vm_lifetime=12, max_lifetime_upper_limit=100,
                               enforce_vm_ownership=ownership))
    _ensure_openapi(a)
    seed(a)
    return a


def seed(a: Api) -> None:
    """Empty the database and write the seeded state again."""
    client = a.redis
    client.flushdb()
    now = a.clock.now()
    stamp = timefmt.format_epoch(now - 3600)
    day = timefmt.date_bucket(now)
    a.add_token(TOKEN, USER)
    a.add_token(OTHER_TOKEN, "someone")
    client.hset(schema.token(OTHER_TOKEN), "last", stamp)
    for vm in ("vm1a", "vm1b", "vm1c"):
        _vm(client, "pool1", vm, "ready", ready=stamp, check=stamp)
    _vm(client, "pool2", "vm2a", "ready", ready=stamp)
    _vm(client, "pool2", "vm2pending", "pending", clone=stamp)
    _vm(client, "pool1", "vmrun", "running", checkout=stamp, lifetime="2",
             **{"token:token": TOKEN, "token:user": USER, "tag:jenkins": "job-1",
                "snapshot:snap1": stamp, "disk": "+8gb:+10gb", "host": "esx1",
                "migrated": "true"})
    _vm(client, "pool2", "vmfree", "running", checkout=stamp)
    _vm(client, "pool1", "vmgone", "completed", checkout=stamp, destroy=stamp)
    client.hset(schema.lastboot(), "pool1", stamp)
    client.zadd(schema.manager_heartbeat(), {"manager:1:0": now - 2})  # a live manager
    client.hset(schema.config_poolsize(), "pool1", "3")
    client.hset(schema.config_template(), "pool2", "templates/other")
    client.hset(schema.config_clone_target(), "pool2", "cluster2")
    client.hset(schema.template_prepared(), "pool1", "templates/pool1")
    client.set(schema.tasks_clone(), "1")
    client.hset(schema.clone_stats(day), mapping={"pool1:vm1a": "12.5", "pool1:vm1b": "20",
                                                   "vmx": "3"})
    client.hset(schema.boot_stats(day), mapping={"pool1:vm1a": "30.25", "pool2:vm2a": "41"})
    client.hset(f"vmpooler__tag__{day}", mapping={"vmrun:jenkins": "job-1",
                                                  "vm1a:jenkins": "job-2"})
