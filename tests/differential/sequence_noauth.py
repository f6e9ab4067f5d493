"""The sequence for a configuration without ``:auth:`` and with experimental features off:
token routes absent, tokens neither needed nor recorded (but a VM that carries a token still
needs one to be returned), and the configuration endpoints refused.

Step ids start with ``noauth-``.
"""

from __future__ import annotations

from tests.differential.seed import PASSWORD, TOKEN, USER, vm
from tests.differential.step import Step, delete, get, post, put

__all__ = ["sequence_without_auth"]

V3 = "/api/v3"
CREDS = (USER, PASSWORD)


def sequence_without_auth() -> list[Step]:
    """The whole sequence, in order."""
    cfg = f"{V3}/config"
    od = f"{V3}/ondemandvm"
    return [
        get("noauth-token-list", f"{V3}/token", basic=CREDS),
        post("noauth-token-create", f"{V3}/token", basic=CREDS),
        get("noauth-token-show", f"{V3}/token/{TOKEN}"),
        delete("noauth-token-delete", f"{V3}/token/{TOKEN}", basic=CREDS),
        post("noauth-checkout-token", f"{V3}/vm", {"pool1": 1}, token=TOKEN,
             seed=vm("pool1", "vm-n1")),
        post("noauth-checkout-bad-token", f"{V3}/vm/pool3", token="bogus",
             seed=vm("pool3", "vm-n2")),
        put("noauth-put-lifetime", f"{V3}/vm/vm-n1", {"lifetime": 3}),
        delete("noauth-delete-owned-notoken", f"{V3}/vm/vm-n3", seed=vm(
            "pool1", "vm-n3", "running", **{"token:token": TOKEN, "token:user": USER})),
        delete("noauth-delete-owned-bad-token", f"{V3}/vm/vm-n3", token="bogus"),
        delete("noauth-delete-owned", f"{V3}/vm/vm-n3", token=TOKEN),
        post("noauth-disk", f"{V3}/vm/vm-n1/disk/4"),
        post("noauth-snapshot", f"{V3}/vm/vm-n1/snapshot",
             capture={"snapshot": "vm-n1.snapshot"}),
        post("noauth-od-create", od, {"pool3": 1}, capture={"request": "request_id"}),
        post("noauth-od-create-token", od, {"pool3": 1}, token=TOKEN,
             capture={"request2": "request_id"}),
        get("noauth-od-get", f"{od}/{{request2}}"),
        delete("noauth-od-delete", f"{od}/{{request}}"),
        post("noauth-poolsize", f"{cfg}/poolsize", {"pool1": 1}),
        delete("noauth-poolsize-reset", f"{cfg}/poolsize/pool1"),
        post("noauth-pooltemplate", f"{cfg}/pooltemplate", {"pool1": "t/x"}),
        delete("noauth-pooltemplate-reset", f"{cfg}/pooltemplate/pool1"),
        post("noauth-clonetarget", f"{cfg}/clonetarget", {"pool1": "c"}),
        post("noauth-poolreset", f"{V3}/poolreset", {"pool1": True}),
        get("noauth-config", cfg),
        get("noauth-status", f"{V3}/status?view=pools,status,noauth"),
    ]
