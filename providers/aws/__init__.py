"""The ``aws`` provider (alias ``ec2``): vmpooler's pools on Amazon EC2, through boto3.

Modules: :mod:`.settings` (keys, defaults, checks; no boto3), :mod:`.client` (the boto3
clients and the launch that is never sent twice), :mod:`.faults` (EC2's errors as the core's),
:mod:`.watch` (waits for instance states, one poll for all), :mod:`.readiness` (probes),
:mod:`.volumes` (disks and snapshots), :mod:`.purge` and :mod:`.provider` (the contract).
Importing this package imports neither boto3 nor botocore; ``AwsProvider`` needs them only
when built (without them it raises a PermanentProviderError saying
``pip install 'vmpooler[aws]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vmpooler.providers.aws.provider import AwsProvider

__all__ = ["AwsProvider"]


def __getattr__(name: str) -> Any:
    if name == "AwsProvider":
        from vmpooler.providers.aws.provider import AwsProvider

        return AwsProvider
    raise AttributeError(name)
