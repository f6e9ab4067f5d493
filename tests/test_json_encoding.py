"""The API's JSON encoder: vmpooler's pretty-printing, whatever the body holds."""

from __future__ import annotations

import json

from vmpooler.web.api_errors import encode_json


def test_same_bytes_as_the_standard_library_for_ascii_bodies() -> None:
    body = {"ok": True, "pools": {"a-1": {"ready": 3, "empty": False, "lastBoot": None,
                                          "alias": ["x", "y"], "percent": 12.5, "z": {}}},
            "list": [], "nested": [[1, 2], {"k": -0.25}]}
    assert encode_json(body) == json.dumps(body, indent=2).encode()


def test_non_ascii_text_is_utf8_as_ruby_writes_it() -> None:
    out = encode_json({"tag": "café ☃"})
    assert "café ☃".encode() in out
    assert json.loads(out) == {"tag": "café ☃"}


def test_what_orjson_refuses_falls_back() -> None:
    big = 2**70
    assert json.loads(encode_json({"n": big})) == {"n": big}
    assert json.loads(encode_json({1: "a"})) == {"1": "a"}
    assert encode_json({"n": big}).startswith(b"{\n  ")
