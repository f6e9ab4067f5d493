"""The two upgrade traps, fenced: ``web/worker.py`` builds on gunicorn's ``gthread`` internals
and ``actors/runtime/pooled.py`` on pykka's private modules, both pinned in pyproject.toml.

Each test checks exactly the internals that module uses (private modules and names, method
signatures, attributes, and the calls of the library's own code that reach our overrides).
When a pin is raised and one of them changed, the failure names the internal, what changed,
and the function of ours to re-check; once that function is adapted (or found still right),
update the expectation here and the pin together.
"""

from __future__ import annotations

import importlib
import inspect
import os
import socket
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
WORKER = "web/worker.py"
POOLED = "actors/runtime/pooled.py"

PINS = {"gunicorn": ">=27.0,<28", "pykka": ">=4.0,<5"}
"""The series whose internals the checks below describe (pyproject.toml must pin these)."""


class Trap:
    """The differences found between a library's internals and what one of our modules
    relies on, each naming what to re-check there."""

    def __init__(self, library: str, module: str) -> None:
        self.library = library
        self.module = module
        self.problems: list[str] = []

    def problem(self, internal: str, change: str, user: str) -> None:
        self.problems.append(f"{self.library} {internal}: {change}; re-check {self.module} "
                             f"{user}")

    def lookup(self, owner: Any, dotted: str, user: str) -> Any:
        """``owner.<dotted>`` (a module name when ``owner`` is None), or None (recorded)."""
        if owner is None:
            module, _, name = dotted.rpartition(".")
            try:
                owner = importlib.import_module(module)
            except ImportError:
                self.problem(module, "the module is gone", user)
                return None
            dotted = name
        found = owner
        for name in dotted.split("."):
            found = getattr(found, name, None)
            if found is None:
                self.problem(f"{getattr(owner, '__name__', owner)}.{dotted}", "is gone", user)
                return None
        return found

    def signature(self, owner: Any, name: str, params: str, user: str) -> None:
        """``owner.name`` takes exactly ``params`` (``"self, conn"``, as ``inspect`` shows
        them without annotations)."""
        function = self.lookup(owner, name, user)
        if function is None:
            return
        found = ", ".join(_bare(p) for p in inspect.signature(function).parameters.values())
        if found != params:
            self.problem(f"{owner.__name__}.{name}", f"takes ({found}), not ({params})", user)

    def calls(self, owner: Any, name: str, fragments: tuple[str, ...], user: str) -> None:
        """The source of ``owner.name`` (the library's own code) still says each of
        ``fragments``: how it reaches or what it does that our code mirrors."""
        function = self.lookup(owner, name, user)
        if function is None:
            return
        source = inspect.getsource(function)
        for fragment in fragments:
            if fragment not in source:
                self.problem(f"{owner.__name__}.{name}", f"no longer says {fragment!r}", user)

    def attributes(self, obj: Any, names: tuple[str, ...], user: str) -> None:
        for name in names:
            if not hasattr(obj, name):
                self.problem(f"{type(obj).__name__}().{name}", "is not set any more", user)

    def report(self) -> str:
        return "\n".join(self.problems)


def _bare(parameter: inspect.Parameter) -> str:
    text = parameter.name
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        text = "*" + text
    elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
        text = "**" + text
    elif parameter.kind is inspect.Parameter.KEYWORD_ONLY:
        text = "*, " + text  # only one keyword-only parameter is ever expected here
    if parameter.default is not inspect.Parameter.empty:
        text += f"={parameter.default!r}"
    return text


# -- gunicorn: web/worker.py -----------------------------------------------------------------
def gunicorn_trap() -> Trap:
    """What web/worker.py's ``GuardedThreadWorker`` and ``_Conn`` take from gunicorn 27."""
    trap = Trap("gunicorn", WORKER)
    user = "(GuardedThreadWorker, _Conn)"
    worker = trap.lookup(None, "gunicorn.workers.gthread.ThreadWorker", user)
    conn = trap.lookup(None, "gunicorn.workers.gthread.TConn", user)
    trap.lookup(None, "gunicorn.http.errors.NoMoreData", "GuardedThreadWorker.handle and "
                "._read_at_once (raise and catch it)")
    if worker is None or conn is None:
        return trap
    # Methods of ours that gunicorn's code calls: the callers must still call them so.
    trap.signature(worker, "__init__", "self, *args, **kwargs", "GuardedThreadWorker.__init__")
    trap.signature(worker, "run", "self", "GuardedThreadWorker.run (replaces it whole)")
    trap.signature(worker, "accept", "self, listener", "GuardedThreadWorker.accept")
    trap.signature(worker, "handle", "self, conn", "GuardedThreadWorker.handle")
    trap.signature(worker, "finish_request", "self, conn, fs",
                   "GuardedThreadWorker.finish_request")
    trap.calls(worker, "set_accept_enabled", ("self.poller.register(listener",
                                              "self.accept"),
               "GuardedThreadWorker.accept (a listener's readable event must call it)")
    trap.calls(worker, "enqueue_req", ("self.tpool.submit(self.handle, conn)",
                                       "self.method_queue.defer(self.finish_request, conn"),
               "GuardedThreadWorker.handle and .finish_request (a thread runs the first, "
               "the loop the second)")
    trap.calls(worker, "wait_for_and_dispatch_events", ("callback(key.fileobj)",),
               "GuardedThreadWorker._readable and ._drain (called with the socket)")
    trap.calls(worker, "init_process", ("self.get_thread_pool()", "selectors.DefaultSelector()",
                                        "self.method_queue.init()"),
               "GuardedThreadWorker.run (uses tpool, poller and method_queue)")
    # gunicorn's methods that ours call.
    for name, params, used in (
        ("set_accept_enabled", "self, enabled", "run and _stop"),
        ("wait_for_and_dispatch_events", "self, timeout", "run and _stop"),
        ("is_parent_alive", "self", "run"),
        ("notify", "self", "run and _stop"),
        ("enqueue_req", "self, conn", "_dispatch"),
        ("handle_request", "self, req, conn", "handle"),
        ("_keepalive_after", "self, conn, keepalive", "handle"),
        ("handle_error", "self, req, client, addr, exc", "handle"),
    ):
        trap.signature(worker, name, params, f"GuardedThreadWorker.{used}")
    trap.signature(conn, "__init__", "self, cfg, sock, client, server",
                   "_Conn.__init__ and GuardedThreadWorker.accept")
    trap.signature(conn, "init", "self", "GuardedThreadWorker.handle")
    _gunicorn_instances(trap, worker, conn)
    return trap


def _gunicorn_instances(trap: Trap, worker: Any, conn: Any) -> None:
    """The attributes web/worker.py reads of a ThreadWorker (made, not run) and of a TConn
    initialised on a socket pair."""
    from gunicorn.config import Config

    cfg = Config()
    left, right = socket.socketpair()
    made = None
    try:
        made = worker(1, os.getpid(), [], None, 30, cfg, None)
        trap.attributes(made, ("worker_connections", "tpool", "poller", "method_queue",
                               "nr_conns", "alive", "cfg", "app", "sockets", "log"),
                        "GuardedThreadWorker (its loop and accounting)")
        trap.attributes(made.method_queue, ("init", "fileno", "run_callbacks", "defer", "close"),
                        "GuardedThreadWorker.run, .handle and ._stop")
        connection = conn(cfg, left, ("127.0.0.1", 1), ("127.0.0.1", 2))
        connection.init()
        trap.attributes(connection, ("sock", "client", "server", "parser"),
                        "GuardedThreadWorker.handle")
        trap.attributes(connection.parser.unreader, ("unread", "take_buffered", "buf"),
                        "GuardedThreadWorker.handle (puts the read request back) and "
                        ".finish_request (takes a pipelined request's bytes)")
    except Exception as exc:  # what changed is named; the signatures above say more
        trap.problem("ThreadWorker(...) and TConn(...).init()", f"raised {exc!r}",
                     "GuardedThreadWorker and _Conn")
    finally:
        if made is not None:
            made.tmp.close()
        left.close()
        right.close()


# -- pykka: actors/runtime/pooled.py ---------------------------------------------------------
def pykka_trap() -> Trap:
    """What actors/runtime/pooled.py's ``PooledActor``, ``PooledInbox`` and ``PooledFuture``
    take from pykka 4, private modules included."""
    trap = Trap("pykka", POOLED)
    future = trap.lookup(None, "pykka._threading.ThreadingFuture", "PooledFuture")
    trap.lookup(None, "pykka.messages._ActorStop", "_reply_dead (answers a stop as pykka does)")
    inbox = trap.lookup(None, "pykka._actor.ActorInbox", "PooledInbox (implements it)")
    envelope = trap.lookup(None, "pykka._envelope.Envelope", "PooledInbox and "
                           "PooledActor._actor_handle")
    actor = trap.lookup(None, "pykka.Actor", "PooledActor")
    ref = trap.lookup(None, "pykka.ActorRef", "notify_when_stopped")
    if None in (future, inbox, envelope, actor, ref):
        return trap
    for name, params in (("get", "self, *, timeout=None"), ("set", "self, value=None"),
                         ("set_exception", "self, exc_info=None"),
                         ("set_get_hook", "self, func")):
        trap.signature(future, name, params, f"PooledFuture.{name} (overrides it)")
    for name, params in (("put", "self, envelope"), ("get", "self"), ("empty", "self")):
        trap.signature(inbox, name, params, f"PooledInbox.{name} (pykka calls it)")
    trap.signature(envelope, "__init__", "self, message, reply_to=None",
                   "PooledActor._actor_handle and _reply_dead (read message and reply_to)")
    for name, params, used in (
        ("_create_actor_inbox", "", "PooledActor._create_actor_inbox (overrides it)"),
        ("_create_future", "", "PooledActor._create_future (overrides it)"),
        ("_start_actor_loop", "self", "PooledActor._start_actor_loop (overrides it)"),
        ("_actor_loop_setup", "self", "PooledActor._actor_run_slice (calls it)"),
        ("_handle_receive", "self, message", "PooledActor._actor_handle (calls it)"),
        ("_handle_failure", "self, exception_type, exception_value, traceback",
         "PooledActor._actor_run_slice and ._actor_handle (call it)"),
        ("_stop", "self", "PooledActor._actor_handle (calls it)"),
        ("on_failure", "self, exception_type, exception_value, traceback",
         "PooledActor._actor_handle (calls it)"),
    ):
        trap.signature(actor, name, params, used)
    trap.calls(actor, "__init__", ("self.actor_inbox = self._create_actor_inbox()",),
               "PooledActor.__init__ (its mailbox is the inbox pykka creates)")
    trap.calls(actor, "start", ("obj._start_actor_loop()",), "PooledActor._start_actor_loop")
    trap.calls(ref, "ask", ("self.actor_class._create_future()",), "PooledActor._create_future")
    trap.calls(ref, "__init__", ("self.actor_inbox = actor.actor_inbox",),
               "notify_when_stopped (reads ref.actor_inbox)")
    trap.calls(actor, "_actor_loop_running", (
        "self._handle_receive(envelope.message)", "envelope.reply_to.set(response)",
        "envelope.reply_to.set_exception()", "self._handle_failure(*sys.exc_info())",
        "self.on_failure(*sys.exc_info())", "self._stop()", "ActorRegistry.stop_all(",
    ), "PooledActor._actor_handle (keeps these rules for one message)")
    trap.calls(actor, "_actor_loop_teardown", ("isinstance(envelope.message, messages."
                                               "_ActorStop)", "ActorDeadError"),
               "_reply_dead (answers what is left in a stopped mailbox so)")
    trap.calls(actor, "_handle_receive", ("messages._ActorStop", "self._stop()"),
               "PooledActor._actor_run_slice (a stop message ends the actor)")
    import pykka

    trap.attributes(pykka.ThreadingActor(), ("actor_stopped", "actor_ref", "actor_inbox"),
                    "PooledActor (reads them of itself)")
    return trap


# -- the pins --------------------------------------------------------------------------------
def pin_problems(pyproject: str) -> list[str]:
    """Where pyproject.toml's pins, or the installed versions, differ from :data:`PINS`."""
    declared = {}
    for line in tomllib.loads(pyproject)["project"]["dependencies"]:
        requirement = Requirement(line)
        declared[requirement.name] = requirement.specifier
    problems = []
    for library, pin in PINS.items():
        module = WORKER if library == "gunicorn" else POOLED
        found = declared.get(library)
        if found is None or {str(s) for s in found} != set(pin.split(",")):
            problems.append(f"pyproject.toml pins {library}{found or ' (nothing)'}, but "
                            f"tests/test_upgrade_traps.py checks the internals of {library}"
                            f"{pin}: re-check {module} against the new series and update PINS")
        elif not found.contains(version(library)):
            problems.append(f"{library} {version(library)} is installed, outside the pin "
                            f"{pin}: reinstall (pip install -e .)")
    return problems


def test_the_gunicorn_internals_web_worker_builds_on_are_there() -> None:
    trap = gunicorn_trap()
    assert not trap.problems, trap.report()


def test_the_pykka_internals_pooled_actors_build_on_are_there() -> None:
    trap = pykka_trap()
    assert not trap.problems, trap.report()


def test_pyproject_pins_the_series_these_checks_describe() -> None:
    problems = pin_problems((ROOT / "pyproject.toml").read_text())
    assert not problems, "\n".join(problems)


# -- the checks fail on a changed internal ----------------------------------------------------
def test_a_changed_gunicorn_signature_names_what_to_recheck(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gunicorn.workers.gthread import ThreadWorker

    def enqueue_req(self: Any, conn: Any, priority: int) -> None:
        """A gunicorn that queues connections by priority."""

    monkeypatch.setattr(ThreadWorker, "enqueue_req", enqueue_req)
    problems = gunicorn_trap().problems
    assert any("ThreadWorker.enqueue_req: takes (self, conn, priority), not (self, conn); "
               "re-check web/worker.py GuardedThreadWorker._dispatch" in p for p in problems)
    assert any("enqueue_req: no longer says 'self.tpool.submit(self.handle, conn)'" in p
               for p in problems), problems


def test_a_gone_pykka_private_name_names_what_to_recheck(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pykka.messages

    monkeypatch.delattr(pykka.messages, "_ActorStop")
    problems = pykka_trap().problems
    assert problems == ["pykka pykka.messages._ActorStop: is gone; re-check "
                        "actors/runtime/pooled.py _reply_dead (answers a stop as pykka does)"]


def test_a_changed_pykka_loop_names_what_to_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    import pykka

    def _actor_loop_running(self: Any) -> None:
        """A pykka whose loop no longer stops every actor on a BaseException."""

    monkeypatch.setattr(pykka.Actor, "_actor_loop_running", _actor_loop_running)
    problems = pykka_trap().problems
    assert len(problems) == 7
    assert all("PooledActor._actor_handle" in p for p in problems)


def test_a_different_pin_or_installed_version_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert "gunicorn>=27.0,<28" in text
    problems = pin_problems(text.replace("gunicorn>=27.0,<28", "gunicorn>=28.0,<29"))
    assert problems == ["pyproject.toml pins gunicorn<29,>=28.0, but tests/test_upgrade_traps.py "
                        "checks the internals of gunicorn>=27.0,<28: re-check web/worker.py "
                        "against the new series and update PINS"]
    installed = version
    monkeypatch.setattr(sys.modules[__name__], "version",
                        lambda library: "5.0.0" if library == "pykka" else installed(library))
    assert pin_problems(text) == ["pykka 5.0.0 is installed, outside the pin >=4.0,<5: "
                                  "reinstall (pip install -e .)"]
