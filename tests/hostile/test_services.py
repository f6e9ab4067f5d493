"""The shared hostile-client services answer as a well-behaved client expects."""

from __future__ import annotations

import pytest

from tests.harness import wait_until
from tests.hostile.service import Service

pytestmark = pytest.mark.integration


def test_service_checks_out_and_returns_a_vm(service: Service) -> None:
    wait_until(lambda: service.request("GET", "/api/v3/status").json["pools"]["alpha"]["ready"]
               > 0, 30, "alpha to hold a ready VM")
    answer = service.request("POST", "/api/v3/vm/alpha")
    assert answer.status == 200, answer.body
    vm = answer.json["alpha"]["hostname"].split(".")[0]
    assert service.request("DELETE", f"/api/v3/vm/{vm}").status == 200
    assert service.request("GET", "/prometheus").status == 200
