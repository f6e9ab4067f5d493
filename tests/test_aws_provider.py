"""What the aws provider does beyond the shared contract, on the session's moto server:
standby stop/start (and hibernation), the ``ssh`` readiness probe, the clean-up of a VM's
own disks and snapshots, the purge's allowlist as the gem documents it, and EC2's eventual
consistency (an instance just launched that EC2 does not show yet is not a lost VM)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests import moto_ec2
from tests.ec2_faults import FaultProxy, Faults
from tests.moto_ec2 import moto  # noqa: F401 (a fixture)
from vmpooler.providers.aws import AwsProvider
from vmpooler.providers.aws.purge import doomed_instances
from vmpooler.providers.aws.readiness import NotReadyError
from vmpooler.providers.base import Capability
from vmpooler.providers.errors import PermanentProviderError, TransientProviderError

POOLS = {"p1": {"template": moto_ec2.AMI},
         "hib": {"template": moto_ec2.AMI, "hibernate": True},
         "sshp": {"template": moto_ec2.AMI, "vm_ready_check": "ssh"}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def aws(moto: moto_ec2.MotoServer) -> Iterator[AwsProvider]:
    provider = AwsProvider(moto_ec2.context(moto.url, POOLS), sleep=lambda _s: None)
    yield provider
    provider.close()


@pytest.mark.parametrize(("pool", "mode"), [("p1", Capability.POWER_OFF),
                                          ("hib", Capability.SUSPEND)])
def test_standby_stops_or_hibernates_and_starts_the_instance(
        moto: moto_ec2.MotoServer, pool: str, mode: Capability) -> None:
    aws = AwsProvider(moto_ec2.context(moto.url, {pool: POOLS[pool]}), sleep=lambda _s: None)
    try:
        assert mode in aws.capabilities
        aws.create_vm(pool, "sb1")
        assert aws.suspend_vm(pool, "sb1", mode=mode) is True
        info = aws.get_vm(pool, "sb1")
        assert info is not None and info.powerstate == "stopped"
        assert aws.vm_ready(pool, "sb1") is False
        assert aws.suspend_vm(pool, "sb1", mode=mode) is True  # idempotent
        assert aws.resume_vm(pool, "sb1") is True
        assert aws.get_vm(pool, "sb1").powerstate == "running"  # type: ignore[union-attr]
        assert aws.vm_ready(pool, "sb1") is True
        assert aws.resume_vm(pool, "sb1") is True
        assert aws.suspend_vm(pool, "nope", mode=mode) is False
        assert aws.resume_vm(pool, "nope") is False
        instance = moto_ec2.live_instances(moto.client(), vm_name="sb1")[0]
        assert instance.get("HibernationOptions", {}).get("Configured", False) is (
            pool == "hib")
    finally:
        aws.close()


def test_only_hibernating_pools_suspend(aws: AwsProvider) -> None:
    assert aws.capabilities == frozenset({Capability.POWER_OFF})  # p1 does not hibernate
    with pytest.raises(PermanentProviderError, match="hibernate"):
        aws.suspend_vm("p1", "any", mode=Capability.SUSPEND)


def test_ssh_readiness_connects_to_the_vms_name(moto: moto_ec2.MotoServer) -> None:
    """``<vm>.<domain>`` is what the probe connects to: here a name the test resolves to a
    listening loopback socket; nothing connects to moto's 10.x addresses."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    asked: list[str] = []

    def connect(address: tuple[str, int], timeout: float) -> Any:
        asked.append(address[0])
        if address[0] != "sshvm.example.test":
            raise OSError("Name or service not known")
        return socket.create_connection(("127.0.0.1", address[1]), timeout)

    provider = AwsProvider(moto_ec2.context(moto.url, POOLS, settings={"vm_ready_port": port},
                                            dns_domains={"sshp": "example.test"}),
                           tcp_connect=connect)
    try:
        provider.create_vm("sshp", "sshvm")
        assert provider.vm_ready("sshp", "sshvm") is True
        listener.close()
        with pytest.raises(NotReadyError, match=r"sshvm\.example\.test"):
            provider.vm_ready("sshp", "sshvm")
        assert set(asked) == {"sshvm.example.test"}
    finally:
        listener.close()
        provider.close()


def test_destroy_removes_the_vms_disks_and_snapshots(aws: AwsProvider,
                                                     moto: moto_ec2.MotoServer) -> None:
    aws.create_vm("p1", "ex1")
    assert aws.create_disk("p1", "ex1", 3) is True
    assert aws.create_snapshot("p1", "ex1", "s1") is True
    ec2 = moto.client()
    tagged = [{"Name": "tag:vm_name", "Values": ["ex1"]}]
    sizes = sorted(v["Size"] for v in ec2.describe_volumes(Filters=tagged)["Volumes"])
    assert 3 in sizes
    assert ec2.describe_snapshots(OwnerIds=["self"], Filters=tagged)["Snapshots"]
    assert aws.destroy_vm("p1", "ex1") is True
    left = [v for v in ec2.describe_volumes(Filters=tagged)["Volumes"]
            if v["State"] != "deleting"]
    assert [v["Size"] for v in left if v["State"] == "available"] == []
    assert ec2.describe_snapshots(OwnerIds=["self"], Filters=tagged)["Snapshots"] == []


def _instance(iid: str, state: str = "running", **tags: str) -> dict[str, Any]:
    return {"InstanceId": iid, "State": {"Name": state},
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def test_the_purge_follows_the_gems_allowlist_rules() -> None:
    instances = [
        _instance("i-configured", pool="p1"),
        _instance("i-retired", pool="old"),
        _instance("i-untagged"),
        _instance("i-allowed-pool", pool="custom-pool"),
        _instance("i-bob", pool="old", user="bob"),
        _instance("i-dying", "shutting-down", pool="old"),
    ]
    doomed = doomed_instances(instances, {"p1"}, ["user=bob", "custom-pool"])
    assert doomed == [("i-retired", "old"), ("i-untagged", None)]
    spared = doomed_instances(instances, {"p1"}, ["user=bob", "custom-pool", ""])
    assert spared == [("i-retired", "old")]


def test_the_purge_terminates_only_what_the_rules_doom(aws: AwsProvider,
                                                       moto: moto_ec2.MotoServer) -> None:
    ec2 = moto.client()
    for tags in ({"pool": "old"}, {"pool": "old", "user": "bob"}, {"owner": "someone"}):
        ec2.run_instances(ImageId=moto_ec2.AMI, MinCount=1, MaxCount=1,
                          InstanceType="t3.micro",
                          Placement={"AvailabilityZone": moto_ec2.ZONE},
                          TagSpecifications=[{"ResourceType": "instance", "Tags": [
                              {"Key": k, "Value": v} for k, v in tags.items()]}])
    aws.create_vm("p1", "keep1")
    aws.purge_unconfigured_resources(["user=bob", ""])
    left = moto_ec2.live_instances(ec2)
    kept = sorted(str({t["Key"]: t["Value"] for t in i["Tags"]}.get("pool")) for i in left)
    assert kept == ["None", "old", "p1"]  # the untagged one, bob's, ours


def test_an_instance_ec2_does_not_show_yet_is_not_lost(moto: moto_ec2.MotoServer) -> None:
    proxy = FaultProxy(moto.port, Faults()).start()
    clock = Clock()
    provider = AwsProvider(moto_ec2.context(proxy.url, POOLS, settings={
        "visibility_grace": 30}), sleep=lambda _s: None, clock=clock)
    try:
        provider.create_vm("p1", "ev1")
        proxy.set_faults(Faults(not_found=1.0, not_found_actions=frozenset(
            {"DescribeInstanceStatus", "CreateTags"})))
        with pytest.raises(NotReadyError, match="does not show"):
            provider.vm_ready("p1", "ev1")
        with pytest.raises(TransientProviderError):
            provider.tag_vm_user("p1", "ev1", "alice")
        clock.now += 31  # past the grace: EC2 really has no such instance
        assert provider.vm_ready("p1", "ev1") is False
        proxy.set_faults(Faults())
        assert provider.vm_ready("p1", "ev1") is True  # found again by its tags
    finally:
        provider.close()
        proxy.stop()
