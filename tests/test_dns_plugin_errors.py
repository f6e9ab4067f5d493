"""A failing DNS plugin is logged, never fatal: the VM it was for is still good."""

from __future__ import annotations

import queue
import random
from typing import Any

import pykka

from tests.harness import context_for, make_config, pool
from vmpooler.actors.messages import (
    CallProvider,
    CloneResult,
    CloneVm,
    DestroyVm,
    ProviderCallFinished,
)
from vmpooler.actors.metrics.backends import RecordingMetrics
from vmpooler.actors.provider.provider_actor import ProviderActor
from vmpooler.actors.runtime.breaker import CircuitBreaker
from vmpooler.actors.runtime.clock import FakeClock
from vmpooler.providers.dns import DnsPlugin
from vmpooler.providers.dummy import DummyProvider


class BrokenDns(DnsPlugin):
    def create_or_replace_record(self, hostname: str, ip: str | None) -> None:
        raise ConnectionError("DNS server unreachable")

    def delete_record(self, fqdn: str) -> None:
        raise ConnectionError("DNS server unreachable")


class Collector(pykka.ThreadingActor):
    def __init__(self, inbox: queue.Queue[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.put(message)


def test_clone_and_destroy_succeed_when_the_dns_plugin_fails() -> None:
    config = make_config([pool("a", 1)])
    clock = FakeClock()
    inbox: queue.Queue[Any] = queue.Queue()
    collector = Collector.start(inbox)
    provider = DummyProvider(context_for(config), rng=random.Random(1), sleep=lambda _s: None)
    actor = ProviderActor.start(
        name="dummy", provider=provider,
        dns_plugins={"a": BrokenDns("dyn", {"domain": "example.test"})},
        clock=clock, scheduler=clock, metrics=RecordingMetrics(),
        breaker=CircuitBreaker("dummy", clock=clock.monotonic), clone_workers=1,
        call_timeout=60, resolve_reply_to=lambda _pool: None, resolver=lambda _fqdn: False,
    )
    try:
        actor.tell(CallProvider(CloneVm("tpl", None), "a", "vm1", collector, 1))
        cloned: ProviderCallFinished = inbox.get(timeout=10)
        assert cloned.failure is None and isinstance(cloned.result, CloneResult)
        actor.tell(CallProvider(DestroyVm("vm1.example.test"), "a", "vm1", collector, 2))
        destroyed: ProviderCallFinished = inbox.get(timeout=10)
        assert destroyed.failure is None
        assert "vm1" not in provider.inventory_snapshot().get("a", [])
    finally:
        actor.stop()
        collector.stop()
