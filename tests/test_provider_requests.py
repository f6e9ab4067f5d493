"""One request type per provider operation: the work a request builds runs the provider
method it names, with its arguments by name, and answers only the result types it names."""

from __future__ import annotations

import random

import pytest

from tests.harness import context_for, make_config, pool
from vmpooler.actors.messages import (
    CallProvider,
    CheckReady,
    CreateSnapshot,
    MigrateVm,
    ProviderCallFinished,
    ProviderOp,
    PurgeUnconfigured,
    ReadyCheckResult,
)
from vmpooler.actors.provider.work import ProviderWork
from vmpooler.providers.base import MigrationResult
from vmpooler.providers.dummy import DummyProvider
from vmpooler.providers.errors import PermanentProviderError


class Answers(DummyProvider):
    """A dummy whose migrate and purge answers the test chooses."""

    migrated: object = MigrationResult(host="host-1")
    purged: object = None

    def migrate_vm(self, pool: str, vm: str, *, may_move: bool = False) -> MigrationResult | None:
        self.may_move = may_move
        return self.migrated  # type: ignore[return-value]

    def purge_unconfigured_resources(self, allowlist: object) -> None:
        self.allowlist = allowlist
        return self.purged  # type: ignore[return-value]


@pytest.fixture
def provider() -> Answers:
    config = make_config([pool("a", 1)])
    dummy = Answers(context_for(config), rng=random.Random(1), sleep=lambda _s: None)
    dummy.create_vm("a", "vm1")
    return dummy


def run(provider: Answers, request: object, vm: str = "vm1") -> object:
    call = CallProvider(request=request, pool="a", vm=vm, reply_to=None)  # type: ignore[arg-type]
    return ProviderWork(provider, {}, resolver=lambda _f: True).for_call(call)()


def test_arguments_travel_by_name(provider: Answers) -> None:
    assert run(provider, MigrateVm(may_move=True)) == MigrationResult(host="host-1")
    assert provider.may_move is True
    run(provider, PurgeUnconfigured(allowlist=("keep",)))
    assert provider.allowlist == ("keep",)
    assert isinstance(run(provider, CheckReady(check_hostname=False)), ReadyCheckResult)
    assert run(provider, CreateSnapshot(name="s1")) is True


def test_a_result_of_another_type_is_a_permanent_failure_naming_the_operation(
    provider: Answers,
) -> None:
    provider.migrated = {"host": "host-1"}
    with pytest.raises(PermanentProviderError, match="migrate returned dict, not "
                                                      "MigrationResult or NoneType"):
        run(provider, MigrateVm())


def test_an_operation_without_a_result_answers_none(provider: Answers) -> None:
    provider.purged = "done"
    assert run(provider, PurgeUnconfigured()) is None


def test_a_consumer_reads_the_result_as_the_type_it_expects() -> None:
    answer = ProviderCallFinished(op=ProviderOp.MIGRATE, pool="a", vm="vm1", call_id=1,
                                  seconds=0.1, result=MigrationResult(host="h"))
    assert answer.result_of(MigrationResult).host == "h"
    with pytest.raises(TypeError, match="migrate answered MigrationResult, not bool"):
        answer.result_of(bool)
