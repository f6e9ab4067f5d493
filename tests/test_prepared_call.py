"""PreparedCall over the session's real redis-server: the reply of the registered script,
sent once pre-encoded; a flushed script cache and a killed connection fall back to the
script (loaded again, retried); error replies raise and leave the connection usable."""

from __future__ import annotations

import pytest
import redis

from vmpooler.actors.storage.prepared_call import PreparedCall

ECHO = "return {KEYS[1], ARGV[1], #KEYS}"


def test_the_reply_is_the_scripts(redis_client: redis.Redis) -> None:
    script = redis_client.register_script(ECHO)
    call = PreparedCall(redis_client, script, ["k1", "k2"], ["a1"])
    assert call() == script(keys=["k1", "k2"], args=["a1"]) == ["k1", "a1", 2]
    redis_client.config_resetstat()
    assert call() == ["k1", "a1", 2]
    stats = redis_client.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 1
    assert "cmdstat_script|load" not in stats


def test_a_flushed_script_cache_loads_the_script_again(redis_client: redis.Redis) -> None:
    call = PreparedCall(redis_client, redis_client.register_script(ECHO), ["k"], [1])
    redis_client.script_flush()
    assert call() == ["k", "1", 1]
    assert call() == ["k", "1", 1]


def test_a_killed_connection_is_replaced(redis_client: redis.Redis) -> None:
    kwargs = redis_client.connection_pool.connection_kwargs
    other = redis.Redis(host=kwargs.get("host", "127.0.0.1"), port=kwargs["port"],
                        password=kwargs.get("password"))
    call = PreparedCall(other, other.register_script(ECHO), ["k"], ["v"])
    assert call() == [b"k", b"v", 1]
    mine = str(redis_client.client_id())
    killed = [c["id"] for c in redis_client.client_list() if c["id"] != mine]
    assert killed
    for client_id in killed:
        redis_client.client_kill_filter(_id=client_id)
    assert call() == [b"k", b"v", 1]
    other.close()


def test_an_error_reply_raises_and_the_connection_stays_usable(
        redis_client: redis.Redis) -> None:
    failing = redis_client.register_script("return redis.error_reply('nope')")
    call = PreparedCall(redis_client, failing, ["k"], [])
    with pytest.raises(redis.ResponseError, match="nope"):
        call()
    assert redis_client.ping()
    assert PreparedCall(redis_client, redis_client.register_script(ECHO), ["k"], ["x"])() == \
        ["k", "x", 1]
