"""Fuzzing every documented operation: no answer is a 5xx, every body is JSON.

Schemathesis generates conforming and non-conforming requests from ``web/openapi.json``
(positive and negative modes: odd path segments, wrong types, missing or extra fields) and
sends them to the Falcon WSGI app over a seeded real Redis, with or without credentials.
A second test sends raw garbage the schema cannot express: random bytes, unicode, huge
numbers, deep nesting and wrong content types, to every body-taking route and to the VM
routes under odd hostnames. Redis is seeded afresh before every example, so examples do not
depend on one another (and shrink reliably).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from tests.api_harness import TOKEN
from tests.openapi_check import DOC, OTHER_TOKEN, Api, seed, seeded_api

SCHEMA = schemathesis.openapi.from_dict(DOC)
OPERATIONS = {r.ok().label: r.ok() for r in SCHEMA.get_all_operations()}
SETTINGS = settings(max_examples=30, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), print_blob=True)
VALID = st.sampled_from([{"X-AUTH-TOKEN": TOKEN}, {"Authorization": "Basic amRvZTpzZWNyZXQ="}])
CREDENTIALS = VALID | st.sampled_from([
    {}, {"X-AUTH-TOKEN": TOKEN}, {"X-AUTH-TOKEN": OTHER_TOKEN}, {"X-AUTH-TOKEN": "bogus"},
    {"Authorization": "Basic amRvZTpzZWNyZXQ="},  # jdoe:secret
    {"Authorization": "Basic amRvZTpzZWNyZXQ=", "X-AUTH-TOKEN": TOKEN},
    {"Authorization": "Basic amRvZTpqZG9l"},  # jdoe:jdoe (refused)
    {"Authorization": "Basic !!notbase64"}, {"Authorization": "Bearer x"},
])

# Values that exist in the seeded Redis, so that generated requests also reach the paths
# behind the lookups (a random hostname is almost always 404).
KNOWN = {
    "hostname": ["vmrun", "vm1a", "vm1b.example.com", "vmfree", "vm2pending", "vmgone",
                 "pool1", "alias1", "pool1+alias2", "empty", "pool2+pool2"],
    "token": [TOKEN, OTHER_TOKEN], "pool": ["pool1", "pool2", "alias1", "empty"],
    "size": ["8", "0", "2048", "2049"], "snapshot": ["snap1", "nope"],
    "route": ["boot", "clone", "tag"], "key": ["duration", "count", "jenkins", "pool"],
    "from": ["2023-11-14", "2023-11-10", "2023-02-30", "2024-01-01"],
    "to": ["2023-11-14", "2023-11-12"], "view": ["", "pools,queue", "status"],
    "pool_query": ["pool1,alias2", "alias1", ""],
}
BODY_KEYS = ["pool1", "pool2", "alias1", "alias2", "empty", "lifetime", "tags"]


def steer(case: Any, data: st.DataObject) -> None:
    """Sometimes swap generated names for seeded ones (half the examples stay as generated)."""
    if not data.draw(st.booleans()):
        return
    for where in (case.path_parameters, case.query):
        for name in where or {}:
            known = KNOWN.get("pool_query" if where is case.query and name == "pool" else name)
            if known:
                where[name] = data.draw(st.sampled_from(known))
    if isinstance(case.body, dict) and case.body:
        keys = data.draw(st.lists(st.sampled_from(BODY_KEYS), min_size=1,
                                  max_size=len(case.body), unique=True))
        case.body = dict(zip(keys, case.body.values(), strict=False))


def assert_json_answer(status: int, content: bytes, what: str, checkout: bool = False) -> None:
    """Not a server error; a body, if any, is JSON (a 302 may have none).

    A checkout may answer 503 ``{"ok": false}``: that is vmpooler's "not enough ready VMs".
    """
    if checkout and status == 503:
        assert json.loads(content) == {"ok": False}, f"{what}: {content[:300]!r}"
        return
    assert status < 500, f"{what}: {status} {content[:300]!r}"
    if status == 302 and not content.strip():
        return
    try:
        json.loads(content)
    except ValueError:
        pytest.fail(f"{what}: {status} body is not JSON: {content[:300]!r}")


@pytest.mark.parametrize("label", list(OPERATIONS))
def test_operation_never_fails_on_generated_input(label: str, redis_client: redis.Redis) -> None:
    a = seeded_api(redis_client)
    operation = OPERATIONS[label]
    checkout = "503" in operation.definition.raw["responses"]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                      operation.as_strategy(GenerationMode.NEGATIVE))

    @SETTINGS
    @given(case=cases, credentials=CREDENTIALS, data=st.data())
    def run(case: Any, credentials: dict[str, str], data: st.DataObject) -> None:
        seed(a)
        steer(case, data)
        response = case.call(app=a.client.app, headers=credentials)
        assert_json_answer(response.status_code, response.content,
                           f"{case.method} {case.formatted_path} {case.body!r}"[:500],
                           checkout=checkout)

    run()


# -- raw garbage -----------------------------------------------------------------------------
P = "/api/v3"
BODY_ROUTES = [("POST", f"{P}/vm"), ("PUT", f"{P}/vm/vmrun"), ("POST", f"{P}/config/poolsize"),
               ("POST", f"{P}/config/pooltemplate"), ("POST", f"{P}/config/clonetarget"),
               ("POST", f"{P}/poolreset"), ("POST", f"{P}/token"), ("POST", f"{P}/vm/pool1"),
               ("POST", f"{P}/ondemandvm"), ("POST", f"{P}/vm/pool1+alias1"),
               ("POST", f"{P}/vm/vmrun/snapshot"), ("POST", f"{P}/vm/vmrun/disk/8")]
HOST_ROUTES = [("GET", "{}"), ("PUT", "{}"), ("DELETE", "{}"), ("POST", "{}"),
               ("POST", "{}/disk/8"), ("POST", "{}/snapshot"), ("POST", "{}/snapshot/snap1")]
# Strings no UTF-8 text can carry: lone UTF-16 surrogates, alone or inside other text (JSON
# writes them as "\\ud800" escapes, which a JSON parser accepts).
_surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1,
                      max_size=3)
_invalid_text = st.one_of(_surrogates, st.tuples(st.text(max_size=8), _surrogates,
                                                 st.text(max_size=8)).map("".join))
_scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=40), _invalid_text,
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False), st.sampled_from(["1e400", "-0", "0x10", " 7 ", "٣", "2abc"]))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["pool1", "alias1", "empty", "lifetime", "tags", "ok",
                                     "pool.1", "", "x" * 120, "ü"]) | st.text(max_size=12)
                    | _invalid_text,
                    inner, max_size=4)), max_leaves=12)
_bodies = st.one_of(
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.text(max_size=80).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.integers(1, 8).map(lambda n: ("[" * 10 * n + "]" * 10 * n).encode()),
    st.just(b'{"pool1": ' + b"9" * 5000 + b"}"),
    st.just(b'{"a": "' + b"x" * 11000 + b'"}'),
    st.just(b'{"ok": false, "error": "echo"}'),
    # invalid Unicode written every way a client can: escaped surrogates in keys and values,
    # surrogates encoded as UTF-8 bytes (CESU-8), bytes that are no UTF-8 at all
    st.sampled_from([b'{"\\ud800": 1}', b'{"pool1": "\\udfff"}',
                     b'{"pool1": 1, "\\udbff\\udbff": 1}', b'{"lifetime": "\\ud800"}',
                     b'{"tags": {"\\ud800": "x"}}', b'["\\ud800"]',
                     b'{"pool1": "\xed\xa0\x80"}', b'{"\xff\xfe": 1}', b'"\\ud800"']),
    # oversized: just over the limit, far over it, and a huge number
    st.sampled_from([b" " * 10240 + b"{}", b'{"pool1": 1}' + b" " * 10231,
                     b'{"pool1": "' + b"y" * (1 << 20) + b'"}', b"1" * 20000]),
    # deeply nested: deeper than the JSON parser's recursion limit, within the size limit
    st.sampled_from([b"[" * 5000 + b"]" * 5000, b'{"a":' * 2000 + b"1" + b"}" * 2000,
                     b'{"pool1": ' + b"[" * 3000 + b"]" * 3000 + b"}"]),
)
_content_types = st.sampled_from([
    None, "application/json", "application/x-www-form-urlencoded", "text/plain",
    "multipart/form-data; boundary=x", "application/json; charset=latin-1", "*/*"])
_hostnames = st.one_of(
    st.text(min_size=1, max_size=70).filter(lambda s: "/" not in s and "?" not in s
                                            and "#" not in s),
    st.sampled_from(["vmrun", "VMRUN", "vm1a", "pool1", "pool1+alias2", "vmrun.example.com",
                     "vmrun.", ".vmrun", "-vm", "vm_run", "a" * 64, ("a" * 63 + ".") * 5,
                     "vm%2Frun", "pool1+pool1",
                     "%00", "..", "vm1a+empty", "ünïcode", "1" * 300,
                     "%ED%A0%80", "%FF", "%C0%AF", "vm%ED%B0%80run", "%F4%90%80%80"]),
)


def _send(a: Api, method: str, path: str, body: bytes, content_type: str | None,
          credentials: dict[str, str]) -> None:
    seed(a)
    headers = dict(credentials)
    if content_type:
        headers["Content-Type"] = content_type
    result = a.client.simulate_request(method, path, body=body, headers=headers)
    checkout = method == "POST" and path.count("/") == 4 and path.startswith(f"{P}/vm/")
    assert_json_answer(result.status_code, result.content, f"{method} {path} {body[:200]!r}",
                       checkout=checkout or (method, path) == ("POST", f"{P}/vm"))


def test_raw_bodies_and_hostnames(redis_client: redis.Redis) -> None:
    a = seeded_api(redis_client)

    @settings(SETTINGS, max_examples=150)
    @given(route=st.sampled_from(BODY_ROUTES), body=_bodies, content_type=_content_types,
           credentials=CREDENTIALS)
    def bodies(route: tuple[str, str], body: bytes, content_type: str | None,
               credentials: dict[str, str]) -> None:
        _send(a, *route, body, content_type, credentials)

    @settings(SETTINGS, max_examples=150)
    @given(route=st.sampled_from(HOST_ROUTES), host=_hostnames, body=_bodies,
           credentials=CREDENTIALS)
    def hostnames(route: tuple[str, str], host: str, body: bytes,
                  credentials: dict[str, str]) -> None:
        _send(a, route[0], f"{P}/vm/" + route[1].format(host), body, "application/json",
              credentials)

    @settings(SETTINGS, max_examples=60)
    @given(path=st.sampled_from(sorted(DOC["paths"])), method=st.sampled_from(
        ["GET", "POST", "PUT", "DELETE", "PATCH"]), segment=_hostnames, body=_bodies)
    def methods(path: str, method: str, segment: str, body: bytes) -> None:
        """Any method on any documented path (undocumented ones are 404/405 JSON)."""
        concrete = "/".join(segment if part.startswith("{") else part
                            for part in path.split("/"))
        _send(a, method, concrete, body, "application/json", {"X-AUTH-TOKEN": TOKEN})

    bodies()
    hostnames()
    methods()


JSON_ROUTES = [("POST", f"{P}/vm"), ("PUT", f"{P}/vm/vmrun"), ("POST", f"{P}/ondemandvm"),
               ("POST", f"{P}/config/poolsize"), ("POST", f"{P}/config/pooltemplate"),
               ("POST", f"{P}/config/clonetarget"), ("POST", f"{P}/poolreset")]


@pytest.mark.parametrize("route", JSON_ROUTES, ids=[f"{m} {p}" for m, p in JSON_ROUTES])
@pytest.mark.parametrize("body", [b'{"\\ud800": 1}', b'{"pool1": "\\ud800"}'],
                         ids=["key", "value"])
def test_a_lone_surrogate_is_a_400_with_a_json_reason(route: tuple[str, str], body: bytes,
                                                      redis_client: redis.Redis) -> None:
    a = seeded_api(redis_client)
    seed(a)
    result = a.client.simulate_request(route[0], route[1], body=body,
                                       headers={"X-AUTH-TOKEN": TOKEN})
    assert 400 <= result.status_code < 500, (result.status_code, result.content[:300])
    assert json.loads(result.content)["ok"] is False
