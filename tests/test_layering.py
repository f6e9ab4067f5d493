"""The folders keep to the architecture of docs/architecture.md ("The house"): each folder of
``actors/`` imports only the folders below it, the API names no Redis key, and the core
never imports the API.

A folder is ``vmpooler.actors.<folder>`` (or the modules ``system``, ``lifecycle`` and
``factories``); a module named in :data:`ALLOWED` by its dotted path (``fairness.intake``)
is a layer of its own above the rest of its folder;
imports are walked as in tests/test_import_cycles.py (``TYPE_CHECKING`` and function-level
imports included).
"""

from __future__ import annotations

from tests.test_import_cycles import import_graph, package_dirs

ALLOWED: dict[str, set[str]] = {
    # the replay simulator runs the whole system on a fake clock: above the facade
    "replay": {"system", "pool", "placement", "runtime", "storage", "metrics", "config",
               "sizing", "messages"},
    # the composition root wires everything: the facade, and how each actor is built
    "system": {"lifecycle", "factories", "runtime", "pool", "ondemand", "provider", "service",
               "cluster", "storage", "metrics", "config", "messages", "facade",
               "fairness.intake", "tracing"},
    # the composition root's start and stop sequences, step by step, for the facade
    "lifecycle": {"factories", "runtime", "pool", "provider", "service", "cluster", "storage",
                  "metrics", "config", "messages", "tracing"},
    "factories": {"runtime", "pool", "ondemand", "provider", "service", "cluster", "storage",
                  "metrics", "config", "messages", "tracing"},
    # actors: each may use the runtime, the Redis layer, metrics, configuration, messages;
    # those whose entity has one owner among several managers also the cluster
    "pool": {"cluster", "runtime", "storage", "metrics", "config", "messages", "sizing",
             "placement", "tracing"},
    "ondemand": {"cluster", "runtime", "storage", "metrics", "config", "messages",
                 "fairness", "tracing"},
    "provider": {"runtime", "storage", "metrics", "config", "messages", "tracing"},
    "service": {"runtime", "storage", "metrics", "config", "messages"},
    # the managers sharing one Redis: membership, leases, relay, heartbeat (a periodic
    # manager-wide actor like service's, using its habits)
    "cluster": {"service", "runtime", "storage", "metrics", "config", "messages"},
    # the foundations
    "runtime": {"metrics", "messages"},
    # which pool serves a name: pure rules over the configuration and a health reader
    "placement": {"config", "storage", "runtime"},
    "storage": {"config", "fairness"},
    "config": {"sizing", "fairness"},
    # the one gate every on-demand create passes (the API's and the facade's): the rules
    # below it, the stores that write
    "fairness.intake": {"fairness", "storage", "config"},
    "fairness": set(),  # who is asking, quotas, shares and priorities: pure policy
    "sizing": set(),  # demand sizing: the forecast, schedules and policy, pure
    "metrics": set(),
    # the spans and their context across actors and processes (docs/tracing.md)
    "tracing": {"config"},
    "messages": set(),
    "facade": set(),  # actors/__init__.py: a lazy facade, imports nothing at load
}


def _folder(module: str) -> str | None:
    """``pool`` for ``vmpooler.actors.pool.cycle``, ``system`` for ``vmpooler.actors.system``,
    ``facade`` for ``vmpooler.actors``; None outside ``vmpooler.actors``."""
    if module == "vmpooler.actors":
        return "facade"
    if not module.startswith("vmpooler.actors."):
        return None
    parts = module.split(".")
    own = ".".join(parts[2:4])
    return own if own in ALLOWED else parts[2]


def test_every_actors_module_belongs_to_a_known_folder() -> None:
    graph = import_graph(package_dirs())
    unknown = sorted(m for m in graph if _folder(m) not in (None, *ALLOWED))
    assert not unknown, f"add these folders to ALLOWED (and docs/architecture.md): {unknown}"


def test_each_actors_folder_imports_only_the_folders_below_it() -> None:
    graph = import_graph(package_dirs())
    wrong = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items() if (folder := _folder(module)) is not None
        for dep in deps
        if (target := _folder(dep)) is not None and target != folder
        and target not in ALLOWED[folder]
    )
    assert not wrong, "imports across the architecture's layers:\n" + "\n".join(wrong)


def test_the_core_never_imports_the_api() -> None:
    graph = import_graph(package_dirs())
    wrong = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith("vmpooler.actors")
                   for d in deps if d.startswith("vmpooler.web"))
    assert not wrong, "\n".join(wrong)


def test_the_api_names_no_redis_key_and_runs_no_script() -> None:
    """Key names and Lua scripts stay in storage/schema: the API reaches Redis through the
    stores of storage/."""
    graph = import_graph(package_dirs())
    wrong = sorted(m for m, deps in graph.items() if m.startswith("vmpooler.web")
                   and any(d.startswith("vmpooler.actors.storage.schema") for d in deps))
    assert not wrong, wrong


def test_no_two_folders_may_import_each_other() -> None:
    """The layers are a ladder: the table itself allows no import both ways."""
    both = sorted(f"{a} <-> {b}" for a, deps in ALLOWED.items() for b in deps
                  if a < b and a in ALLOWED.get(b, set()))
    assert not both, both


def _in_cli(module: str) -> bool:
    return module == "vmpooler.web.cli" or module.startswith("vmpooler.web.cli.")


def test_the_api_never_imports_the_command_line() -> None:
    """``web/cli/`` starts managers and gunicorn and may use the whole API; the API (the rest
    of ``web/``) never reaches back into the command line."""
    graph = import_graph(package_dirs())
    wrong = sorted(f"{m} -> {d}" for m, deps in graph.items()
                   if m.startswith("vmpooler.web") and not _in_cli(m)
                   for d in deps if _in_cli(d))
    assert not wrong, "\n".join(wrong)
