"""The scripted sequence: every v3 endpoint, with good and bad input, with and without
authentication, in an order where each step's answer is determined by the seeded Redis and
the earlier steps (a checkout finds exactly one possible VM; a random on-demand draw lists its
possible answers in ``either``).

Step ids are stable names: ``known_differences.py`` refers to them.
"""

from __future__ import annotations

import datetime

from tests.differential.seed import PASSWORD, T0, TOKEN, USER, ondemand_request, vm, vms
from tests.differential.step import Step, delete, get, post, put

__all__ = ["sequence"]

V3 = "/api/v3"
TODAY = datetime.date.today().isoformat()
CREDS = (USER, PASSWORD)
SAME_CREDS = (USER, USER)  # the dummy provider refuses a password equal to the name


def _status(id: str, view: str) -> Step:
    """``/status`` with a view no earlier step asked for (vmpooler caches each for 30 s)."""
    return get(id, f"{V3}/status?view={view},{id}")


def misc() -> list[Step]:
    return [
        get("root", "/"),
        get("vm-list", f"{V3}/vm"),
        get("unknown-route", f"{V3}/nope"),
        get("healthcheck", "/healthcheck"),
        get("readiness", f"{V3}/readiness"),
        Step("method-not-allowed", "PATCH", f"{V3}/vm"),
        get("status-all", f"{V3}/status"),
        _status("status-pools", "pools"),
        _status("status-capacity", "capacity"),
        get("status-bare-view", f"{V3}/status/?view"),
        get("status-view-empty", f"{V3}/status?view="),
        get("poolstat-none", f"{V3}/poolstat"),
        get("poolstat-slash", f"{V3}/poolstat/?pool=pool1"),
        get("poolstat-pool1", f"{V3}/poolstat?pool=pool1"),
        get("poolstat-alias", f"{V3}/poolstat?pool=poolone"),
        get("poolstat-generic", f"{V3}/poolstat?pool=genericpool"),
        get("poolstat-many", f"{V3}/poolstat?pool=pool2,pool3,nope"),
        get("totalrunning", f"{V3}/totalrunning"),
        get("summary", f"{V3}/summary"),
        get("summary-today", f"{V3}/summary?from={TODAY}&to={TODAY}"),
        get("summary-bad-format", f"{V3}/summary?from=yesterday"),
        get("summary-impossible-date", f"{V3}/summary?from=2024-13-45"),
        get("summary-reversed", f"{V3}/summary?from=2024-05-02&to=2024-05-01"),
        get("summary-future", f"{V3}/summary?from=2999-01-01&to=2999-01-02"),
        get("summary-boot", f"{V3}/summary/boot"),
        get("summary-clone-duration", f"{V3}/summary/clone/duration"),
        get("summary-tag", f"{V3}/summary/tag"),
        get("summary-tag-project", f"{V3}/summary/tag/project"),
        get("summary-unknown", f"{V3}/summary/nope"),
    ]


def tokens() -> list[Step]:
    return [
        get("token-list-noauth", f"{V3}/token"),
        get("token-list-badcreds", f"{V3}/token", basic=SAME_CREDS),
        post("token-create-noauth", f"{V3}/token"),
        post("token-create", f"{V3}/token", basic=CREDS, capture={"token": "token"}),
        get("token-list", f"{V3}/token", basic=CREDS),
        get("token-list-other-user", f"{V3}/token", basic=("alice", "pw")),
        get("token-show", f"{V3}/token/{{token}}"),
        get("token-show-missing", f"{V3}/token/zyxwvutsrqponmlkjihgfedcba543210"),
        get("token-show-with-vm", f"{V3}/token/{TOKEN}",
            seed=vm("pool1", "vm-owned0", "running", **{"token:token": TOKEN,
                                                       "token:user": USER})),
        delete("token-delete-noauth", f"{V3}/token/{{token}}"),
        delete("token-delete", f"{V3}/token/{{token}}", basic=CREDS),
        delete("token-delete-again", f"{V3}/token/{{token}}", basic=CREDS),
    ]


def checkouts() -> list[Step]:
    return [
        post("checkout-empty-object", f"{V3}/vm", {}),
        post("checkout-no-body", f"{V3}/vm"),
        post("checkout-unknown", f"{V3}/vm", {"pool9": 1}),
        post("checkout-dotted-name", f"{V3}/vm", {"pool.1": 1}),
        post("checkout-bad-name", f"{V3}/vm", {"pool 1": 1}),
        post("checkout-count-0", f"{V3}/vm", {"pool1": 0}),
        post("checkout-count-101", f"{V3}/vm", {"pool1": 101}),
        post("checkout-count-abc", f"{V3}/vm", {"pool1": "abc"}),
        post("checkout-invalid-json", f"{V3}/vm", raw=b"{nope"),
        post("checkout-array", f"{V3}/vm", raw=b"[1]"),
        post("checkout-empty-pools", f"{V3}/vm", {"pool1": "1"}),
        post("checkout-pool1", f"{V3}/vm", {"pool1": 1}, seed=vm("pool1", "vm-p1a")),
        post("checkout-alias", f"{V3}/vm/poolone", seed=vm("pool1", "vm-p1b")),
        post("checkout-generic", f"{V3}/vm", {"genericpool": 1}, seed=vm("pool3", "vm-p3a")),
        post("checkout-generic-pool1", f"{V3}/vm/genericpool", seed=vm("pool1", "vm-p1i")),
        post("checkout-pool2-own", f"{V3}/vm/pool2", seed=vm("pool2", "vm-p2a")),
        post("checkout-pool2-alias", f"{V3}/vm", {"pool2": 1}, seed=vm("pool1", "vm-p1c")),
        post("checkout-multi", f"{V3}/vm", {"pool1": 2, "pool3": 1},
             seed=vms(vm("pool1", "vm-p1d"), vm("pool1", "vm-p1e"), vm("pool3", "vm-p3b"))),
        post("checkout-partial", f"{V3}/vm", {"pool1": 1, "pool3": 1},
             seed=vm("pool1", "vm-p1f")),
        post("checkout-partial-token", f"{V3}/vm", {"pool1": 1, "pool3": 1}, token=TOKEN),
        post("checkout-bad-token", f"{V3}/vm", {"pool1": 1}, token="bogus"),
        post("checkout-token", f"{V3}/vm", {"pool1": 1}, token=TOKEN),
        post("checkout-template-repeat", f"{V3}/vm/pool1+pool1",
             seed=vms(vm("pool1", "vm-p1g"), vm("pool1", "vm-p1h"))),
        post("checkout-template-unknown", f"{V3}/vm/pool9"),
        post("checkout-template-plus", f"{V3}/vm/+"),
        post("checkout-running-only", f"{V3}/vm", {"pool3": 1}),
    ]


def vm_reads() -> list[Step]:
    return [
        get("vm-get-running", f"{V3}/vm/vm-p1a"),
        get("vm-get-fqdn", f"{V3}/vm/vm-p1a.one.example.com"),
        get("vm-get-ready", f"{V3}/vm/vm-r1", seed=vm("pool2", "vm-r1", check=T0)),
        get("vm-get-pending", f"{V3}/vm/vm-pe1", seed=vm("pool2", "vm-pe1", "pending")),
        get("vm-get-missing", f"{V3}/vm/vm-nope"),
        get("vm-get-invalid", f"{V3}/vm/bad_name"),
        get("vm-get-destroyed", f"{V3}/vm/vm-gone",
            seed=vm("pool2", "vm-gone", "completed", checkout=T0, destroy=T0)),
        get("vm-get-full", f"{V3}/vm/vm-full", seed=vm(
            "pool1", "vm-full", "running", lifetime="3", ip="192.0.2.10", host="host1",
            migrated="true", disk="+8gb:+10gb", **{"tag:project": "alpha",
                                                   "snapshot:snap0": T0})),
    ]


def vm_changes() -> list[Step]:
    p1a = f"{V3}/vm/vm-p1a"
    return [
        put("vm-put-lifetime-notoken", p1a, {"lifetime": 4}),
        put("vm-put-lifetime", p1a, {"lifetime": 4}, token=TOKEN),
        put("vm-put-lifetime-0", p1a, {"lifetime": 0}, token=TOKEN),
        put("vm-put-lifetime-abc", p1a, {"lifetime": "abc"}, token=TOKEN),
        put("vm-put-lifetime-prefix", p1a, {"lifetime": "5abc"}, token=TOKEN),
        put("vm-put-lifetime-limit", p1a, {"lifetime": 168}, token=TOKEN),
        put("vm-put-lifetime-over", p1a, {"lifetime": 200}, token=TOKEN),
        put("vm-put-tags", p1a, {"tags": {"project": "x", "url": "foo.com/something.html"}}),
        put("vm-put-tag-empty-value", p1a, {"tags": {"created_by": ""}}),
        put("vm-put-tag-unlisted", p1a, {"tags": {"owner": "me"}}),
        put("vm-put-tag-bad-key", p1a, {"tags": {"bad key!": "x"}}),
        put("vm-put-tag-bad-value", p1a, {"tags": {"project": "a;b"}}),
        put("vm-put-tag-equals", p1a, {"tags": {"project": "a=b"}}),
        put("vm-put-tags-not-object", p1a, {"tags": "x"}),
        put("vm-put-unknown-key", p1a, {"colour": "blue"}),
        put("vm-put-invalid-json", p1a, raw=b"{"),
        put("vm-put-no-body", p1a),
        put("vm-put-missing", f"{V3}/vm/vm-nope", {"lifetime": 4}, token=TOKEN),
        delete("vm-delete-owned-notoken", f"{V3}/vm/vm-p1f"),
        delete("vm-delete-owned", f"{V3}/vm/vm-p1f", token=TOKEN),
        delete("vm-delete-running", f"{V3}/vm/vm-p1a"),
        delete("vm-delete-missing", f"{V3}/vm/vm-nope"),
        delete("vm-delete-invalid", f"{V3}/vm/bad_name"),
        delete("vm-delete-ready", f"{V3}/vm/vm-r1"),
        delete("vm-delete-pending", f"{V3}/vm/vm-pe1"),
        post("vm-disk-notoken", f"{V3}/vm/vm-p1b/disk/8"),
        post("vm-disk", f"{V3}/vm/vm-p1b/disk/8", token=TOKEN),
        post("vm-disk-zero", f"{V3}/vm/vm-p1b/disk/0", token=TOKEN),
        post("vm-disk-too-big", f"{V3}/vm/vm-p1b/disk/3000", token=TOKEN),
        post("vm-disk-abc", f"{V3}/vm/vm-p1b/disk/abc", token=TOKEN),
        post("vm-disk-missing", f"{V3}/vm/vm-nope/disk/8", token=TOKEN),
        post("vm-snapshot-notoken", f"{V3}/vm/vm-p1b/snapshot"),
        post("vm-snapshot", f"{V3}/vm/vm-p1b/snapshot", token=TOKEN,
             capture={"snapshot": "vm-p1b.snapshot"}),
        post("vm-snapshot-missing", f"{V3}/vm/vm-nope/snapshot", token=TOKEN),
        post("vm-revert", f"{V3}/vm/vm-full/snapshot/snap0", token=TOKEN),
        post("vm-revert-unknown", f"{V3}/vm/vm-full/snapshot/nosuch", token=TOKEN),
        post("vm-revert-notoken", f"{V3}/vm/vm-full/snapshot/snap0"),
    ]


def ondemand() -> list[Step]:
    od = f"{V3}/ondemandvm"
    return [
        post("od-notoken", od, {"pool1": 1}),
        post("od-create", od, {"pool1": 1}, token=TOKEN, capture={"request": "request_id"}),
        post("od-alias", od, {"poolone": 2}, token=TOKEN, capture={"request2": "request_id"}),
        post("od-pool2", od, {"pool2": 1}, token=TOKEN, capture={"request3": "request_id"}),
        post("od-generic", od, {"genericpool": 1}, token=TOKEN,
             capture={"request4": "request_id"},
             either=("genericpool:pool1:1", "genericpool:pool3:1")),
        post("od-with-id", od, {"pool3": 1, "request_id": "my-request-1"}, token=TOKEN),
        post("od-null-id", od, {"pool3": "2", "request_id": None}, token=TOKEN,
             capture={"request7": "request_id"}),
        post("od-reused-id", od, {"pool3": 1, "request_id": "my-request-1"}, token=TOKEN),
        post("od-too-many", od, {"pool1": 6}, token=TOKEN),
        post("od-unknown", od, {"pool9": 1, "pool1": 1}, token=TOKEN),
        post("od-invalid-json", od, raw=b"{", token=TOKEN),
        post("od-no-body", od, token=TOKEN),
        post("od-null", od, raw=b"null", token=TOKEN),
        post("od-array", od, raw=b"[1]", token=TOKEN),
        post("od-negative-count", od, {"pool1": -1}, token=TOKEN,
             capture={"request5": "request_id"}),
        post("od-id-with-colon", od, {"pool1": 1, "request_id": "a:b"}, token=TOKEN),
        post("od-template", f"{od}/pool1+pool3+pool3", token=TOKEN,
             capture={"request6": "request_id"}),
        post("od-template-unknown", f"{od}/pool9", token=TOKEN),
        get("od-get-waiting", f"{od}/{{request}}"),
        get("od-get-missing", f"{od}/nosuchrequest"),
        get("od-get-ready", f"{od}/od-ready", seed=ondemand_request(
            "od-ready", "pool1:pool1:1,poolone:pool1:1", status="ready",
            delivered={"pool1:pool1": ["vm-od1"], "poolone:pool1": ["vm-od2"]})),
        get("od-get-partly", f"{od}/od-partly", seed=ondemand_request(
            "od-partly", "pool3:pool3:2", delivered={"pool3:pool3": ["vm-od3"]})),
        get("od-get-failed", f"{od}/od-failed",
            seed=ondemand_request("od-failed", "pool1:pool1:1", status="failed")),
        get("od-get-deleted", f"{od}/od-deleted",
            seed=ondemand_request("od-deleted", "pool1:pool1:1", status="deleted")),
        delete("od-delete-notoken", f"{od}/{{request}}"),
        delete("od-delete", f"{od}/{{request}}", token=TOKEN),
        delete("od-delete-again", f"{od}/{{request}}", token=TOKEN),
        delete("od-delete-missing", f"{od}/nosuchrequest", token=TOKEN),
        delete("od-delete-ready", f"{od}/od-ready", token=TOKEN),
        delete("od-delete-failed", f"{od}/od-failed", token=TOKEN),
        get("od-get-after-delete", f"{od}/{{request}}"),
    ]


def configuration() -> list[Step]:
    cfg = f"{V3}/config"
    return [
        get("config", cfg),
        get("full-config", f"{V3}/full_config"),
        post("poolsize-notoken", f"{cfg}/poolsize", {"pool1": 3}),
        post("poolsize", f"{cfg}/poolsize", {"pool1": 3}, token=TOKEN),
        post("poolsize-same", f"{cfg}/poolsize", {"pool1": 3}, token=TOKEN),
        post("poolsize-unknown", f"{cfg}/poolsize", {"pool9": 1}, token=TOKEN),
        post("poolsize-not-a-number", f"{cfg}/poolsize", {"pool2": "four"}, token=TOKEN),
        post("poolsize-negative", f"{cfg}/poolsize", {"pool2": -1}, token=TOKEN),
        post("poolsize-alias", f"{cfg}/poolsize", {"poolone": 1}, token=TOKEN),
        post("poolsize-invalid-json", f"{cfg}/poolsize", raw=b"{", token=TOKEN),
        delete("poolsize-reset", f"{cfg}/poolsize/pool1", token=TOKEN),
        delete("poolsize-reset-again", f"{cfg}/poolsize/pool1", token=TOKEN),
        delete("poolsize-reset-unknown", f"{cfg}/poolsize/pool9", token=TOKEN),
        post("pooltemplate", f"{cfg}/pooltemplate", {"pool1": "templates/new1"}, token=TOKEN),
        post("pooltemplate-same", f"{cfg}/pooltemplate", {"pool1": "templates/new1"},
             token=TOKEN),
        post("pooltemplate-no-slash", f"{cfg}/pooltemplate", {"pool1": "new1"}, token=TOKEN),
        post("pooltemplate-leading-slash", f"{cfg}/pooltemplate", {"pool1": "/t/new1"},
             token=TOKEN),
        post("pooltemplate-unknown", f"{cfg}/pooltemplate", {"pool9": "t/x"}, token=TOKEN),
        delete("pooltemplate-reset", f"{cfg}/pooltemplate/pool1", token=TOKEN),
        delete("pooltemplate-reset-again", f"{cfg}/pooltemplate/pool1", token=TOKEN),
        post("clonetarget", f"{cfg}/clonetarget", {"pool3": "compute9"}, token=TOKEN),
        post("clonetarget-same", f"{cfg}/clonetarget", {"pool3": "compute9"}, token=TOKEN),
        post("clonetarget-unknown", f"{cfg}/clonetarget", {"pool9": "c"}, token=TOKEN),
        post("poolreset-notoken", f"{V3}/poolreset", {"pool2": True}),
        post("poolreset", f"{V3}/poolreset", {"pool2": True}, token=TOKEN),
        post("poolreset-unknown", f"{V3}/poolreset", {"pool9": True}, token=TOKEN),
        post("poolreset-invalid-json", f"{V3}/poolreset", raw=b"{", token=TOKEN),
        get("config-after-overrides", cfg),
    ]


def afterwards() -> list[Step]:
    return [
        _status("status-after", "pools,capacity,clone,boot,status"),
        _status("status-queue-after", "queue"),
        get("poolstat-after", f"{V3}/poolstat?pool=pool1,pool2"),
        get("totalrunning-after", f"{V3}/totalrunning"),
        get("dashboard", "/dashboard/", compare_body=False),
        get("dashboard-pool", "/dashboard/stats/vmpooler/pool"),
        get("dashboard-pool-history", "/dashboard/stats/vmpooler/pool?history=true"),
        get("dashboard-running", "/dashboard/stats/vmpooler/running"),
        get("dashboard-running-history", "/dashboard/stats/vmpooler/running?history=true"),
    ]


def sequence() -> list[Step]:
    """The whole sequence, in order."""
    steps = [*misc(), *tokens(), *checkouts(), *vm_reads(), *vm_changes(),
             *ondemand(), *configuration(), *afterwards()]
    ids = [s.id for s in steps]
    assert len(ids) == len(set(ids)), "step ids must be unique"
    return steps

