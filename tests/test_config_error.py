"""A pool whose clones fail permanently (actors/pool/config_error.py): real actors, a real
redis-server and the dummy provider on a fake clock.

The pool enters the configuration-error state at its first permanent clone failure: one
error line, the error in Redis and ``/status``, the ``pool.config_error`` gauge at 1, and
no clone of its own but trials at growing intervals, up to one every
``config_error_retry_interval`` seconds. A clone
that succeeds (the fix landed) or a template override ends it; transient failures never
enter it; on-demand requests for the pool fail at once.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.api_harness import api
from tests.harness import Harness, context_for, make_config, pool, started, wait_until
from vmpooler.actors.config import ConfigError as ConfigFileError
from vmpooler.actors.config import load_config
from vmpooler.actors.metrics.prometheus_families import resolve
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.config_error_store import ConfigErrorStore
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.errors import PermissionDeniedError, TransientProviderError

INTERVAL = 300.0
SIZE = 3
DENIED = ("permission denied: user 'svc' lacks privilege VirtualMachine.Provisioning.Clone "
          "on vim.Folder:group-v3")


class Refusing(DummyProvider):
    """The dummy provider, whose clones raise ``refuse`` while it is set; counts clones."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.refuse: Exception | None = None
        self.attempts = 0

    def create_vm(self, pool: str, vm: str, **kwargs: Any) -> Any:
        with self.lock:
            self.attempts += 1
            error = self.refuse
        if error is not None:
            raise error
        return super().create_vm(pool, vm, **kwargs)

    def count(self) -> int:
        with self.lock:
            return self.attempts


def _start(client: redis.Redis, *, template: str = "tpl-a", **knobs: Any,
           ) -> tuple[Any, Refusing]:
    config = make_config([pool("a", SIZE, template=template)],
                         config_error_retry_interval=INTERVAL)
    provider = Refusing(context_for(config, knobs), rng=random.Random(1), sleep=lambda _s: None)
    return started(client, config, provider=provider), provider


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR and r.name.startswith("vmpooler.actors.pool")]


def _published(client: redis.Redis) -> dict[str, str]:
    return dict(ConfigErrorStore(client).read("a") or {})


def _enter(h: Harness, provider: Refusing) -> None:
    """Wait until the first fill's clones all failed and the pool is in the state."""
    wait_until(lambda: _published(h.client), 10, "the configuration error published")
    h.quiesce()
    assert provider.count() == SIZE  # the first fill, sent before any answer came


def test_a_permanent_failure_stops_cloning_and_says_why_once(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="vmpooler.actors.pool")
    starter, provider = _start(redis_client)
    provider.refuse = PermissionDeniedError(DENIED)
    with starter as h:
        _enter(h, provider)
        published = _published(redis_client)
        assert published["error_class"] == "PermissionDeniedError"
        assert published["message"] == DENIED and published["template"] == "tpl-a"
        assert h.metrics.last_gauge("pool.config_error", pool="a") == 1
        (line,) = _errors(caplog)
        assert "[a] configuration error" in line
        assert "VirtualMachine.Provisioning.Clone" in line

        # Trials, each failing the same way: further and further apart, up to the interval.
        trials: list[int] = []
        seen = provider.count()
        for second in range(10, 2001, 10):
            h.advance(10)
            if provider.count() > seen:
                assert provider.count() == seen + 1, "one trial at a time"
                seen = provider.count()
                trials.append(second)
        gaps = [later - earlier for earlier, later in itertools.pairwise(trials)]
        # (Each trial also waits for the pool's clone back-off, up to check_loop_delay_max.)
        assert trials[0] <= 60, trials  # a template missing for a minute costs a minute
        assert sum(1 for t in trials if t <= INTERVAL) >= 3, trials  # early: often
        assert gaps[-3:] == [INTERVAL] * 3, trials  # then once per interval, no more
        assert max(gaps) <= INTERVAL + 10, trials
        assert len(trials) <= 14, trials
        assert len(_errors(caplog)) == 1, _errors(caplog)
        assert redis_client.scard(schema.pending("a")) == 0
        assert h.metrics.last_gauge("pool.config_error", pool="a") == 1

        body = api(redis_client, h.system.config).client.simulate_get("/api/v3/status").json
        entry = body["pools"]["a"]["config_error"]
        assert entry["error_class"] == "PermissionDeniedError" and entry["message"] == DENIED
        assert entry["since"] == published["since"]


def test_the_pool_recovers_once_the_fix_lands_without_a_restart(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vmpooler.actors.pool")
    starter, provider = _start(redis_client)
    provider.refuse = PermissionDeniedError(DENIED)
    with starter as h:
        _enter(h, provider)
        provider.refuse = None  # the operator grants the privilege
        h.advance(INTERVAL + 10)  # the trial succeeds, the others follow
        h.wait_full("a", SIZE)
        assert _published(redis_client) == {}
        assert h.metrics.last_gauge("pool.config_error", pool="a") == 0
        cleared = [r.getMessage() for r in caplog.records
                   if "configuration error cleared" in r.getMessage()]
        assert len(cleared) == 1 and all(
            r.levelno == logging.INFO for r in caplog.records
            if "configuration error cleared" in r.getMessage())
        body = api(redis_client, h.system.config).client.simulate_get("/api/v3/status").json
        assert "config_error" not in body["pools"]["a"]


def test_a_template_override_ends_the_state_at_once(redis_client: redis.Redis) -> None:
    # The dummy knows only tpl-good: the pool's own template is missing (permanent).
    starter, provider = _start(redis_client, template="tpl-missing", templates=["tpl-good"])
    with starter as h:
        _enter(h, provider)
        assert _published(redis_client)["error_class"] == "TemplateNotFoundError"
        redis_client.hset(schema.config_template(), "a", "tpl-good")
        h.system.notify("a", "template override")
        h.quiesce()
        h.advance(10)  # far less than the trial interval
        h.wait_full("a", SIZE)
        assert _published(redis_client) == {}


def test_transient_failures_are_retried_and_never_enter_the_state(
        redis_client: redis.Redis) -> None:
    starter, provider = _start(redis_client)
    provider.refuse = TransientProviderError("vCenter: InsufficientResourcesFault: no room")
    with starter as h:
        wait_until(lambda: provider.count() >= SIZE, 10, "the first fill")
        h.advance(120)
        assert provider.count() > 2 * SIZE, "retried with back-off, not stopped"
        assert _published(redis_client) == {}
        assert h.metrics.last_gauge("pool.config_error", pool="a") == 0
        provider.refuse = None
        h.advance(240)  # the breaker's cool-down and the clone back-off (60 s at most)
        h.wait_full("a", SIZE)


def test_an_ondemand_request_for_the_pool_fails_at_once(redis_client: redis.Redis) -> None:
    starter, provider = _start(redis_client)
    provider.refuse = PermissionDeniedError(DENIED)
    with starter as h:
        _enter(h, provider)
        rid = h.system.request_ondemand({"a": 1})
        assert rid
        wait_until(lambda: redis_client.hget(schema.odrequest(rid), "status") == "failed",
                   10, "the request failed")
        reason = redis_client.hget(schema.odrequest(rid), "failure_reason")
        assert reason.startswith("Configuration error") and "PermissionDeniedError" in reason
        h.quiesce()
        assert provider.count() == SIZE + 1  # its one clone, not retried


def test_an_error_left_by_an_earlier_actor_goes_at_the_first_clone(
        redis_client: redis.Redis) -> None:
    ConfigErrorStore(redis_client).publish("a", error_class="X", message="m", since="",
                                           template="tpl-a", clone_target="")
    starter, _provider = _start(redis_client)
    with starter as h:
        h.wait_full("a", SIZE)
        assert _published(redis_client) == {}


@pytest.mark.parametrize("value", ["0", "-5", "'soon'"])
def test_the_retry_interval_must_be_a_positive_number(tmp_path: Path, value: str) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(f":config:\n  config_error_retry_interval: {value}\n")
    with pytest.raises(ConfigFileError) as caught:
        load_config(path, environ={}, cwd=tmp_path)
    text = str(caught.value)
    assert "config_error_retry_interval" in text and str(path) in text


def test_the_retry_interval_defaults_to_five_minutes(tmp_path: Path) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(":config:\n  task_limit: 2\n")
    assert load_config(path, environ={}, cwd=tmp_path).settings.config_error_retry_interval \
        == 300.0


def test_the_gauge_is_in_the_prometheus_families() -> None:
    resolved = resolve("pool.config_error", {"pool": "a"})
    assert resolved is not None and resolved.family.kind == "gauge"
    assert (resolved.name, resolved.labels) == ("pool_config_error", ("a",))
