"""The configuration both APIs of the differential suite run with, written as vmpooler writes
its YAML (``:section:`` symbol keys, unquoted, which Ruby reads as symbols).

The pools are vmpooler's integration-spec pools: ``pool1`` (aliases ``poolone``, ``pool2``
and ``genericpool``; clone target ``compute1``), ``pool2`` (clone target ``compute2``) and
``pool3`` (alias ``genericpool``), with ``backend_weight`` ``compute1: 5, compute2: 0`` from
its on-demand spec, so that a name served by ``pool1`` and ``pool2`` always draws ``pool1``.
Each pool has its own domain (``one``/``two``/``three.example.com``), so a hostname tells
which pool served it. Auth is the dummy provider (any user whose password differs from the
name), experimental features are on; either can be turned off.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["POOL1_ALIASES", "POOLS", "write_config"]

POOLS = ("pool1", "pool2", "pool3")
POOL1_ALIASES = ("poolone", "pool2", "genericpool")

_TEMPLATE = """\
---
:providers:
  :dummy:
    provider_class: 'dummy'
:dns_configs:
  :one:
    dns_class: 'dynamic-dns'
    domain: 'one.example.com'
  :two:
    dns_class: 'dynamic-dns'
    domain: 'two.example.com'
  :three:
    dns_class: 'dynamic-dns'
    domain: 'three.example.com'
:redis:
  server: '127.0.0.1'
  port: {redis_port}
{auth}:tagfilter:
  url: '(.*)\\/'
:config:
  site_name: 'vmpooler'
  logfile: 'vmpooler.log'
  experimental_features: {experimental}
  vm_lifetime: 12
  vm_lifetime_auth: 2
  max_lifetime_upper_limit: 168
  max_ondemand_instances_per_request: 5
  allowed_tags:
    - 'created_by'
    - 'project'
    - 'url'
  backend_weight:
    'compute1': 5
    'compute2': 0
{extra}:pools:
  - name: 'pool1'
    alias: [{pool1_aliases}]
    template: 'templates/pool1'
    size: 5
    clone_target: 'compute1'
    provider: 'dummy'
    dns_plugin: 'one'
  - name: 'pool2'
    template: 'templates/pool2'
    size: 2
    clone_target: 'compute2'
    provider: 'dummy'
    dns_plugin: 'two'
  - name: 'pool3'
    alias: ['genericpool']
    template: 'templates/pool3'
    size: 1
    provider: 'dummy'
    dns_plugin: 'three'
"""


def write_config(directory: Path, *, redis_port: int,
                 pool1_aliases: tuple[str, ...] = POOL1_ALIASES, auth: bool = True,
                 experimental: bool = True, extra: str = "", top_level: str = "") -> Path:
    """Write ``vmpooler.yaml`` into ``directory`` (created) and return its path. The log file
    is ``vmpooler.log``, relative: run each process in ``directory``. ``extra`` is more YAML,
    indented like the ``:config:`` keys (two spaces), appended to ``:config:``; ``top_level`` is
    more top-level YAML (sections such as ``:rate_limits:``, unindented), appended to the
    file. ``auth=False`` leaves out ``:auth:``; ``experimental=False`` turns the
    configuration endpoints off."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vmpooler.yaml"
    path.write_text(_TEMPLATE.format(
        redis_port=redis_port, auth=":auth:\n  provider: 'dummy'\n" if auth else "",
        experimental="true" if experimental else "false",
        pool1_aliases=", ".join(f"'{name}'" for name in pool1_aliases), extra=extra) + top_level)
    return path
