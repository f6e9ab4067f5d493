"""The aws provider against a faulty EC2: the session's moto server behind the seeded
fault proxy of ``tests/ec2_faults.py`` (which also honours ``ClientToken`` as EC2 does).
Throttling at 30 %, capacity errors and connections dropped mid-create all end with every
VM made exactly once and nothing leaked; EC2's error codes are classified as the core
needs; an instance EC2 does not show yet is not lost.

A launch whose answer is lost is protected twice: the provider looks for the instance by
its tag before launching again, and launches again with the same ``ClientToken``. Moto shows
an instance only once its (sometimes slow, the first in a process takes seconds)
``RunInstances`` is done, so a look may miss it, as on EC2; the token then prevents the
second instance.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError

from tests import moto_ec2
from tests.ec2_faults import FaultProxy, Faults
from tests.moto_ec2 import moto  # noqa: F401 (a fixture)
from vmpooler.providers.aws import AwsProvider
from vmpooler.providers.aws.faults import translate
from vmpooler.providers.aws.watch import InstanceWatch
from vmpooler.providers.errors import (
    ConnectionLostError,
    NetworkNotFoundError,
    PermissionDeniedError,
    TemplateNotFoundError,
    TransientProviderError,
    VmNotFoundError,
    is_permanent,
)

POOL = "faulty"


@pytest.fixture
def proxy(moto: moto_ec2.MotoServer) -> Iterator[FaultProxy]:
    running = FaultProxy(moto.port, Faults()).start()
    yield running
    running.stop()


def provider(proxy: FaultProxy, **settings: Any) -> AwsProvider:
    return AwsProvider(moto_ec2.context(proxy.url, {POOL: {"template": moto_ec2.AMI}},
                                        settings=settings), sleep=lambda _s: None)


def create_all(aws: AwsProvider, names: list[str]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=len(names)) as workers:
        return list(workers.map(lambda n: aws.create_vm(POOL, n), names))


def test_throttling_at_30_percent_is_ridden_out(moto: moto_ec2.MotoServer,
                                                proxy: FaultProxy) -> None:
    proxy.set_faults(Faults(throttle=0.3, seed=7))
    # botocore's own back-off sleeps for real (0-1 s, then 0-2 s …): few VMs, few polls;
    # "standard" is "adaptive" (the default) without its client-side rate limiter, which
    # doubles this test's time (16 s against 8 s here) for no other difference in behaviour
    aws = provider(proxy, retry_mode="standard", state_poll_interval=0.5)
    names = [f"thr-{i}" for i in range(2)]
    try:
        created = create_all(aws, names)  # all at once: their back-offs overlap
        assert [c.name for c in created] == names
        with ThreadPoolExecutor(max_workers=len(names)) as workers:
            assert all(workers.map(lambda n: aws.vm_ready(POOL, n), names))
            assert moto_ec2.vm_names(moto.client(), POOL) == names  # each made once
            assert all(workers.map(lambda n: aws.destroy_vm(POOL, n), names))
    finally:
        aws.close()
    assert proxy.injected["throttle"] >= 2
    assert moto_ec2.live_instances(moto.client()) == []


def test_capacity_errors_are_transient_and_leave_nothing(moto: moto_ec2.MotoServer,
                                                         proxy: FaultProxy) -> None:
    proxy.set_faults(Faults(capacity=1.0))
    aws = provider(proxy)
    try:
        with pytest.raises(TransientProviderError, match="no capacity") as caught:
            aws.create_vm(POOL, "cap-1")
        assert not is_permanent(caught.value)
        assert proxy.calls["RunInstances"] == 1  # the pool backs off, not the provider
        assert moto_ec2.live_instances(moto.client()) == []
        proxy.set_faults(Faults())
        assert aws.create_vm(POOL, "cap-1").name == "cap-1"
        assert moto_ec2.vm_names(moto.client(), POOL) == ["cap-1"]
    finally:
        aws.close()


def test_dropped_and_timed_out_launches_make_each_vm_once(
        moto: moto_ec2.MotoServer, proxy: FaultProxy) -> None:
    # a held answer outlasts the client's read timeout; the timeout leaves room for a
    # loaded machine (six launches and the proxy share this process)
    proxy.set_faults(Faults(drop=0.3, timeout=0.4, delay=2.5, seed=4))
    aws = provider(proxy, api_timeout=1.5)
    names = [f"drop-{i}" for i in range(6)]
    try:
        created = create_all(aws, names)
        assert [c.name for c in created] == names
        assert proxy.injected["drop"] >= 1 and proxy.injected["timeout"] >= 1
        assert moto_ec2.vm_names(moto.client(), POOL) == names  # none launched twice
        # the watch's polls and the terminations lose connections too (botocore retries)
        proxy.set_faults(Faults(drop=0.2, seed=2, drop_actions=frozenset(
            {"DescribeInstances", "TerminateInstances"})))
        with ThreadPoolExecutor(max_workers=len(names)) as workers:
            assert all(workers.map(lambda n: aws.destroy_vm(POOL, n), names))
        assert proxy.injected["drop"] >= 2
    finally:
        aws.close()
    assert moto_ec2.live_instances(moto.client()) == []


def _client_error(code: str, operation: str = "RunInstances") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} says EC2"}}, operation)


@pytest.mark.parametrize(("code", "kind", "permanent"), [
    ("RequestLimitExceeded", TransientProviderError, False),
    ("InsufficientInstanceCapacity", TransientProviderError, False),
    ("InternalError", TransientProviderError, False),
    ("UnauthorizedOperation", PermissionDeniedError, True),
    ("InvalidAMIID.NotFound", TemplateNotFoundError, True),
    ("InvalidSubnetID.NotFound", NetworkNotFoundError, True),
    ("InvalidParameterValue", Exception, True),
    ("InvalidInstanceID.NotFound", VmNotFoundError, False),
])
def test_ec2_error_codes_are_classified(code: str, kind: type[Exception],
                                        permanent: bool) -> None:
    error = translate(_client_error(code), "RunInstances of vm1")
    assert isinstance(error, kind)
    assert is_permanent(error) is permanent


def test_a_dropped_connection_is_transient() -> None:
    error = translate(ConnectionClosedError(endpoint_url="http://ec2"), "DescribeInstances")
    assert isinstance(error, ConnectionLostError) and not is_permanent(error)


def test_an_instance_not_shown_yet_is_not_lost() -> None:
    """EC2 shows a new instance only after a while: the launch's wait goes on through
    the grace; an instance missing beyond it is gone."""
    now = [0.0]
    shown = threading.Event()
    polls: list[int] = []

    def describe(ids: list[str]) -> list[dict[str, Any]]:
        polls.append(1)
        now[0] += 1.0  # each poll is a second later
        if len(polls) < 4:
            return []  # InvalidInstanceID.NotFound territory: not visible yet
        shown.set()
        return [{"InstanceId": i, "State": {"Name": "running"},
                 "PrivateIpAddress": "10.0.0.9"} for i in ids if i == "i-new"]

    watch = InstanceWatch("t", describe, poll_interval=0.0, grace=10.0, clock=lambda: now[0])
    try:
        seen = watch.wait("i-new", lambda s: s is not None and s.state == "running", 5,
                          "launch")
        assert seen is not None and seen.private_ip == "10.0.0.9" and len(polls) >= 4
        assert watch.wait("i-gone", lambda s: s is None, 5, "termination") is None
        assert now[0] >= 10.0  # declared gone only after the grace
    finally:
        watch.close()
