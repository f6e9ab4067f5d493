"""Token endpoints (reference §1.3) over real Redis with the dummy auth provider."""

from __future__ import annotations

import base64
import re

import pytest
import redis

from tests.api_harness import TOKEN, USER, Api, api, api_config, api_pool
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.token_store import BATCH
from vmpooler.web.resources.token import new_token

PREFIX = "/api/v3"
REALM = 'Basic realm="Authentication required"'
TOKEN_RE = re.compile(r"[a-y][a-z0-9]{31}")


def basic(user: str = USER, password: str = "s3cret") -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


@pytest.fixture
def on(redis_client: redis.Redis) -> Api:
    """Auth configured (dummy provider), two pools."""
    return api(redis_client, api_config([api_pool("pool1"), api_pool("pool2")], auth=True))


@pytest.fixture
def off(redis_client: redis.Redis) -> Api:
    """Auth not configured."""
    return api(redis_client, api_config([api_pool("pool1")]))


def assert_401(result: object) -> None:
    assert result.status_code == 401
    assert result.json == {"ok": False}
    assert result.headers["WWW-Authenticate"] == REALM


class TestAuthNotConfigured:
    @pytest.mark.parametrize(("method", "path"), [
        ("GET", "/token"), ("POST", "/token"), ("GET", f"/token/{TOKEN}"),
        ("DELETE", f"/token/{TOKEN}"), ("GET", "/token/"), ("GET", f"/token/{TOKEN}/"),
    ])
    def test_every_endpoint_is_404(self, off: Api, method: str, path: str) -> None:
        off.add_token()
        result = off.client.simulate_request(method, PREFIX + path, headers=basic())
        assert result.status_code == 404
        assert result.json == {"ok": False}
        assert off.redis.exists(schema.token(TOKEN))


class TestListTokens:
    def test_without_credentials_is_401(self, on: Api) -> None:
        on.add_token()
        assert_401(on.client.simulate_get(f"{PREFIX}/token"))

    @pytest.mark.parametrize("header", [
        "Basic " + base64.b64encode(b"jdoe:jdoe").decode(),  # dummy: user == password
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic !!!not-base64!!!",
        "Bearer " + TOKEN,
        "Basic",
    ])
    def test_bad_credentials_are_401(self, on: Api, header: str) -> None:
        on.add_token()
        assert_401(on.client.simulate_get(f"{PREFIX}/token",
                                          headers={"Authorization": header}))

    def test_lists_only_my_tokens(self, on: Api) -> None:
        on.add_token(TOKEN, USER)
        mine2, other = new_token(), new_token()
        on.add_token(mine2, USER)
        on.redis.hset(schema.token(mine2), "last", "2024-05-01 13:02:11 +0000")
        on.add_token(other, "someone-else")
        result = on.client.simulate_get(f"{PREFIX}/token/", headers=basic())
        assert result.status_code == 200
        body = result.json
        assert next(iter(body)) == "ok" and body["ok"] is True
        assert set(body) == {"ok", TOKEN, mine2}
        assert body[TOKEN] == {"created": on.redis.hget(schema.token(TOKEN), "created"),
                               "last": "never"}
        assert body[mine2]["last"] == "2024-05-01 13:02:11 +0000"

    def test_no_tokens_is_404(self, on: Api) -> None:
        on.add_token(TOKEN, "someone-else")
        result = on.client.simulate_get(f"{PREFIX}/token", headers=basic())
        assert result.status_code == 404
        assert result.json == {"ok": False}

    def test_listing_spans_many_scan_pages(self, on: Api) -> None:
        pipe = on.redis.pipeline()
        for i in range(3 * BATCH):
            pipe.hset(schema.token(f"other{i:05d}"), mapping={"user": "x", "created": "c"})
        pipe.execute()
        mine = sorted(new_token() for _ in range(3))
        for token in mine:
            on.add_token(token, USER)
        on.redis.set("unrelated", "1")
        result = on.client.simulate_get(f"{PREFIX}/token", headers=basic())
        assert result.status_code == 200
        assert list(result.json) == ["ok", *mine]


class TestCreateToken:
    def test_without_credentials_is_401(self, on: Api) -> None:
        assert_401(on.client.simulate_post(f"{PREFIX}/token"))
        assert not on.redis.keys(schema.token("*"))

    def test_bad_credentials_are_401(self, on: Api) -> None:
        assert_401(on.client.simulate_post(f"{PREFIX}/token", headers=basic("a", "a")))
        assert not on.redis.keys(schema.token("*"))

    def test_creates_a_token_owned_by_the_caller(self, on: Api) -> None:
        rng_state = on.ctx.rng.getstate()
        result = on.client.simulate_post(f"{PREFIX}/token", headers=basic())
        assert result.status_code == 200
        assert list(result.json) == ["ok", "token"] and result.json["ok"] is True
        token = result.json["token"]
        assert TOKEN_RE.fullmatch(token)
        stored = on.redis.hgetall(schema.token(token))
        assert stored["user"] == USER and stored["created"]
        assert on.redis.ttl(schema.token(token)) == -1
        assert on.ctx.rng.getstate() == rng_state  # tokens do not come from ctx.rng
        second = on.client.simulate_post(f"{PREFIX}/token", headers=basic()).json["token"]
        assert second != token
        listed = on.client.simulate_get(f"{PREFIX}/token", headers=basic()).json
        assert set(listed) == {"ok", token, second}

    def test_new_tokens_have_vmpoolers_shape(self) -> None:
        tokens = {new_token() for _ in range(200)}
        assert len(tokens) == 200
        assert all(TOKEN_RE.fullmatch(t) for t in tokens)


class TestTokenDetails:
    def test_needs_no_credentials(self, on: Api) -> None:
        on.add_token()
        result = on.client.simulate_get(f"{PREFIX}/token/{TOKEN}")
        assert result.status_code == 200
        assert result.json == {"ok": True, TOKEN: on.redis.hgetall(schema.token(TOKEN))}
        assert result.json[TOKEN]["user"] == USER
        assert "vms" not in result.json[TOKEN]

    def test_lists_running_vms_checked_out_with_this_token(self, on: Api) -> None:
        on.add_token()
        other = new_token()
        on.add_token(other, "bob")
        on.add_vm("pool1", "vm1", "running", **{"token:token": TOKEN})
        on.add_vm("pool2", "vm2", "running", **{"token:token": TOKEN})
        on.add_vm("pool1", "vm3", "running", **{"token:token": other})
        on.add_vm("pool1", "vm4", "running")
        on.add_vm("pool1", "vm5", "ready", **{"token:token": TOKEN})
        result = on.client.simulate_get(f"{PREFIX}/token/{TOKEN}/")
        assert result.status_code == 200
        details = result.json[TOKEN]
        assert details["user"] == USER
        assert sorted(details["vms"]["running"]) == ["vm1", "vm2"]
        assert set(result.json) == {"ok", TOKEN}
        assert other not in result.text

    def test_many_running_vms(self, on: Api) -> None:
        on.add_token()
        pipe = on.redis.pipeline()
        for i in range(2 * BATCH + 7):
            vm = f"vm{i:04d}"
            pipe.sadd(schema.running("pool1"), vm)
            pipe.hset(schema.vm(vm), "token:token", TOKEN if i % 3 == 0 else "other")
        pipe.execute()
        running = on.client.simulate_get(f"{PREFIX}/token/{TOKEN}").json[TOKEN]["vms"]["running"]
        assert sorted(running) == [f"vm{i:04d}" for i in range(2 * BATCH + 7) if i % 3 == 0]

    def test_missing_token_is_404(self, on: Api) -> None:
        result = on.client.simulate_get(f"{PREFIX}/token/{TOKEN}")
        assert result.status_code == 404
        assert result.json == {"ok": False}

    @pytest.mark.parametrize("path", ["a*", "a?c", "[ab]", "x" * 65])
    def test_malformed_token_is_404_even_if_such_a_key_exists(self, on: Api, path: str) -> None:
        on.add_token(path, USER)
        on.add_token()
        result = on.client.simulate_get(f"{PREFIX}/token/{path}")
        assert result.status_code == 404
        assert TOKEN not in result.text


class TestDeleteToken:
    def test_without_credentials_is_401(self, on: Api) -> None:
        on.add_token()
        assert_401(on.client.simulate_delete(f"{PREFIX}/token/{TOKEN}"))
        assert on.redis.exists(schema.token(TOKEN))

    def test_bad_credentials_are_401(self, on: Api) -> None:
        on.add_token()
        assert_401(on.client.simulate_delete(f"{PREFIX}/token/{TOKEN}",
                                             headers=basic("same", "same")))
        assert on.redis.exists(schema.token(TOKEN))

    def test_deletes_any_token(self, on: Api) -> None:
        on.add_token(TOKEN, "someone-else")
        result = on.client.simulate_delete(f"{PREFIX}/token/{TOKEN}/", headers=basic())
        assert result.status_code == 200
        assert result.json == {"ok": True}
        assert not on.redis.exists(schema.token(TOKEN))

    def test_missing_token_is_404(self, on: Api) -> None:
        result = on.client.simulate_delete(f"{PREFIX}/token/{TOKEN}", headers=basic())
        assert result.status_code == 404
        assert result.json == {"ok": False}

    def test_malformed_token_is_404(self, on: Api) -> None:
        on.add_token("a*", USER)
        result = on.client.simulate_delete(f"{PREFIX}/token/a*", headers=basic())
        assert result.status_code == 404
        assert on.redis.exists(schema.token("a*"))

    def test_second_delete_is_404(self, on: Api) -> None:
        on.add_token()
        assert on.client.simulate_delete(f"{PREFIX}/token/{TOKEN}",
                                         headers=basic()).status_code == 200
        assert on.client.simulate_delete(f"{PREFIX}/token/{TOKEN}",
                                         headers=basic()).status_code == 404
