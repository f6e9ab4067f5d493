"""The dashboard (reference §1.4): the page, its assets and the two JSON endpoints, in-process
over the session's real Redis. No browser: the page is checked as served text, the endpoints
for their exact bodies over seeded Redis, the assets for their headers, and the static route
for path traversal. One case through real gunicorn lives in test_api_http.py.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import pytest
import redis

from tests.api_harness import Api, api, api_config, api_pool
from tests.test_api_middleware import REQUESTS, with_limits
from tests.test_api_status import CountingRedis
from vmpooler.actors.config import GlobalSettings, PoolConfig
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.connection import connect
from vmpooler.web.resources.dashboard import ASSETS, major, site_title

POOL = "/dashboard/stats/vmpooler/pool"
RUNNING = "/dashboard/stats/vmpooler/running"


def seed(a: Api, pool: str, queue: str, count: int) -> None:
    for n in range(count):
        a.add_vm(pool, f"{pool}-{queue}-{n}", queue)


@pytest.fixture
def spec(redis_client: redis.Redis) -> Api:
    """vmpooler's dashboard_spec: pool1 (size 5, 3 ready), pool2 (size 1, 2 ready)."""
    a = api(redis_client, api_config([api_pool("pool1", 5), api_pool("pool2", 1)]))
    seed(a, "pool1", "ready", 3)
    seed(a, "pool2", "ready", 2)
    return a


@pytest.fixture
def majors(redis_client: redis.Redis) -> Api:
    """Pools sharing a major (``pool-1``, ``pool-2``), another (``diffpool-1``), one without a
    dash and one whose major would be empty."""
    pools = [api_pool(name, 2) for name in ("pool-1", "diffpool-1", "pool-2", "plain", "-odd")]
    a = api(redis_client, api_config(pools))
    seed(a, "pool-1", "running", 2)
    seed(a, "pool-2", "running", 3)
    seed(a, "diffpool-1", "running", 1)
    seed(a, "plain", "running", 4)
    seed(a, "pool-1", "ready", 1)  # not running: not counted
    return a


def page(a: Api, path: str = "/dashboard/", **kwargs: Any) -> Any:
    resp = a.client.simulate_get(path, **kwargs)
    assert resp.status_code == 200, resp.text
    return resp


# -- the page -------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/dashboard", "/dashboard/"])
def test_page_is_html_with_the_site_name(spec: Api, path: str) -> None:
    resp = page(spec, path)
    assert resp.headers["content-type"] == "text/html; charset=utf-8"
    assert resp.text.startswith("<!DOCTYPE html>")
    assert "<title>vmpooler</title>" in resp.text
    assert '<h1 id="site-name">vmpooler</h1>' in resp.text
    assert "{{" not in resp.text  # every placeholder filled
    assert "<b>" not in resp.text  # the default site name's markup is not inserted
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert resp.headers["x-frame-options"] == "DENY"
    csp = resp.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp


def test_root_redirects_to_a_page_that_answers(spec: Api) -> None:
    resp = spec.client.simulate_get("/")
    assert resp.status_code == 302
    assert resp.headers["location"].endswith("/dashboard/")
    page(spec, resp.headers["location"].removeprefix("http://falconframework.org"))


def test_page_carries_the_clone_slot_limits(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([api_pool("pool1")], task_limit=7, ondemand_clone_limit=3))
    text = page(a).text
    assert 'data-task-limit="7"' in text and 'data-ondemand-clone-limit="3"' in text


@pytest.mark.parametrize(("configured", "shown"), [
    ("<b>vmpooler</b>", "vmpooler"),
    ("Build farm", "Build farm"),
    ("<i>CI</i> &amp; QA", "CI &amp; QA"),
    ('<script>alert("x")</script> pooler', "alert(&quot;x&quot;) pooler"),
    ("<b></b>", "vmpooler"),
])
def test_site_name_is_shown_as_escaped_text(redis_client: redis.Redis, configured: str,
                                            shown: str) -> None:
    a = api(redis_client, api_config([api_pool("pool1")], site_name=configured))
    text = page(a).text
    assert f"<title>{shown}</title>" in text
    assert f'<h1 id="site-name">{shown}</h1>' in text
    assert "<script>alert" not in text and "<i>" not in text


def test_site_title() -> None:
    assert site_title("  <b>my</b>\n  pooler ") == "my pooler"
    assert site_title("a < b") == "a < b"  # a lone "<" is not a tag
    assert site_title("") == "vmpooler"


def test_site_name_is_not_read_again_per_request(spec: Api,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """vmpooler re-read the configuration (and SITE_NAME) on every page view; ours renders
    the page once, from the parsed configuration."""
    monkeypatch.setenv("SITE_NAME", "changed later")
    spec.ctx.config = dataclasses.replace(
        spec.ctx.config, settings=GlobalSettings(site_name="changed too"))
    text = page(spec).text
    assert "changed" not in text and "<title>vmpooler</title>" in text


def test_assets_linked_by_the_page_are_served(spec: Api) -> None:
    text = page(spec).text
    links = re.findall(r'(?:href|src)="(/dashboard/static/[^"]+)"', text)
    assert sorted(link.split("?")[0] for link in links) == sorted(
        f"/dashboard/static/{name}" for name in ASSETS)
    for link in links:
        path, _, query = link.partition("?")
        resp = spec.client.simulate_get(path, query_string=query)
        assert resp.status_code == 200
        assert resp.headers["content-type"] == ASSETS[path.rsplit("/", 1)[1]]
        assert resp.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert resp.headers["etag"] == f'"{query.removeprefix("v=")}"'


def test_page_follows_the_application_root(spec: Api) -> None:
    """Mounted under a WSGI SCRIPT_NAME, links and the polled API carry it."""
    text = page(spec, root_path="/pooler").text
    assert '<meta name="vmpooler-root" content="/pooler">' in text
    assert 'href="/pooler/dashboard/static/dashboard.css?v=' in text
    assert 'src="/pooler/dashboard/static/dashboard.js?v=' in text
    assert '<meta name="vmpooler-root" content="">' in page(spec).text


def test_head_answers_headers_only(spec: Api) -> None:
    for path in ("/dashboard/", "/dashboard/static/dashboard.js"):
        resp = spec.client.simulate_head(path)
        assert resp.status_code == 200 and resp.text == ""
        assert resp.headers["content-type"].endswith("charset=utf-8")


# -- the assets -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ASSETS))
def test_asset_headers_and_revalidation(spec: Api, name: str) -> None:
    path = f"/dashboard/static/{name}"
    resp = spec.client.simulate_get(path)
    assert resp.status_code == 200 and len(resp.content) > 500
    assert resp.headers["content-type"] == ASSETS[name]
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert resp.headers["cache-control"] == "no-cache"  # unversioned URL: revalidate
    etag = resp.headers["etag"]
    assert re.fullmatch(r'"[0-9a-f]{16}"', etag)
    stale = spec.client.simulate_get(path, query_string="v=0123456789abcdef")
    assert stale.headers["cache-control"] == "no-cache"
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = spec.client.simulate_get(path, headers={"If-None-Match": header})
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == etag
    changed = spec.client.simulate_get(path, headers={"If-None-Match": '"0123456789abcdef"'})
    assert changed.status_code == 200 and changed.content == resp.content


def test_script_never_writes_markup() -> None:
    """Data reaches the page through textContent only."""
    from importlib import resources

    js = resources.files("vmpooler.web").joinpath("static", "dashboard.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function"):
        assert sink not in js
    assert "textContent" in js
    assert "/api/v3/status" in js and "setTimeout(poll" in js


# -- path traversal -------------------------------------------------------------------------
TRAVERSALS = [
    "/dashboard/../../etc/passwd",
    "/dashboard/static/../../../etc/passwd",
    "/dashboard/static/..%2f..%2f..%2fetc%2fpasswd",
    "/dashboard/static/..%2F..%2Fopenapi.json",
    "/dashboard/static/%2e%2e%2f%2e%2e%2fpyproject.toml",
    "/dashboard/static/%2e%2e",
    "/dashboard/static/..",
    "/dashboard/static/.",
    "/dashboard/static/..%5c..%5cresources%5cdashboard.py",
    "/dashboard/static/%252e%252e%252fopenapi.json",
    "/dashboard/static/....//....//etc/passwd",
    "/dashboard/static/%2fetc%2fpasswd",
    "/dashboard/static/dashboard.css%00.js",
    "/dashboard/static/dashboard.html",  # the page template is not an asset
    "/dashboard/static/../resources/dashboard.py",
    "/dashboard/static/DASHBOARD.CSS",
    "/dashboard/static/",
    "/dashboard/static",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_static_route_serves_nothing_else(spec: Api, path: str) -> None:
    resp = spec.client.simulate_get(path)
    assert resp.status_code == 404, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert resp.json == {"ok": False}


# -- GET /dashboard/stats/vmpooler/pool ------------------------------------------------------
def test_pool_stats_match_vmpoolers_spec(spec: Api) -> None:
    resp = spec.client.simulate_get(POOL)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    assert resp.text == ('{\n  "pool1": {\n    "size": 5,\n    "ready": 3\n  },\n'
                         '  "pool2": {\n    "size": 1,\n    "ready": 2\n  }\n}')


@pytest.mark.parametrize("query", ["history", "history=", "history=1", "history=false",
                                   "x=1&history"])
def test_pool_stats_history_is_the_current_ready_count(spec: Api, query: str) -> None:
    body = spec.client.simulate_get(POOL + "/", query_string=query).json
    assert body == {"pool1": {"size": 5, "ready": 3, "history": [3]},
                    "pool2": {"size": 1, "ready": 2, "history": [2]}}
    assert list(body["pool1"]) == ["size", "ready", "history"]


def test_pool_stats_without_history(spec: Api) -> None:
    body = spec.client.simulate_get(POOL, query_string="histories=1").json
    assert body == {"pool1": {"size": 5, "ready": 3}, "pool2": {"size": 1, "ready": 2}}


def test_pool_stats_apply_the_size_override(spec: Api) -> None:
    spec.redis.hset(schema.config_poolsize(), mapping={"pool1": "9", "pool2": "junk"})
    assert spec.client.simulate_get(POOL).json == {
        "pool1": {"size": 9, "ready": 3}, "pool2": {"size": 1, "ready": 2}}


def test_no_pools_is_an_empty_object(redis_client: redis.Redis) -> None:
    a = api(redis_client, api_config([]))
    assert a.client.simulate_get(POOL).json == {}
    assert a.client.simulate_get(RUNNING, query_string="history=1").json == {}


# -- GET /dashboard/stats/vmpooler/running ---------------------------------------------------
def test_major() -> None:
    assert major("debian-12-x86_64") == "debian"
    assert major("win_2019-x86_64") == "win_2019"
    assert major("plain") == "plain"
    assert major("-odd") == ""


def test_running_is_summed_per_major(majors: Api) -> None:
    resp = majors.client.simulate_get(RUNNING)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    body = resp.json
    assert body == {"pool": {"running": 5}, "diffpool": {"running": 1},
                    "plain": {"running": 4}, "": {"running": 0}}
    assert list(body) == ["pool", "diffpool", "plain", ""]  # first appearance in the config


def test_running_history_is_the_current_count(majors: Api) -> None:
    body = majors.client.simulate_get(RUNNING + "/", query_string="history=1").json
    assert body == {"pool": {"running": 5, "history": [5]},
                    "diffpool": {"running": 1, "history": [1]},
                    "plain": {"running": 4, "history": [4]},
                    "": {"running": 0, "history": [0]}}


def test_running_does_not_write_major_into_the_configuration(majors: Api) -> None:
    before = [dict(pool.raw) for pool in majors.ctx.config.pools]
    majors.client.simulate_get(RUNNING)
    assert [dict(pool.raw) for pool in majors.ctx.config.pools] == before
    config = majors.client.simulate_get("/api/v3/config").json
    assert all("major" not in pool for pool in config["pool_configuration"])


# -- Redis ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [POOL, RUNNING])
def test_each_json_endpoint_is_one_evalsha(redis_client: redis.Redis, path: str) -> None:
    """One EVALSHA; with ``history`` one pipeline more (the history sets)."""
    pools: list[PoolConfig] = [api_pool(f"p{n}-x", 2) for n in range(50)]
    counting = CountingRedis(redis_client)
    a = api(counting, api_config(pools))
    a.client.simulate_get(path)  # loads the script if this server does not have it yet
    redis_client.config_resetstat()
    counting.direct = 0
    assert a.client.simulate_get(path).status_code == 200
    # the EVALSHA is written pre-encoded on a pooled connection (PreparedCall): redis-server
    # counts it, execute_command never sees it
    assert counting.direct == 0 and counting.pipelines == []
    assert redis_client.info("commandstats")["cmdstat_evalsha"]["calls"] == 1
    assert a.client.simulate_get(path, query_string="history").status_code == 200
    assert counting.direct == 0 and len(counting.pipelines) == 1
    assert redis_client.info("commandstats")["cmdstat_evalsha"]["calls"] == 2


def test_page_and_assets_do_not_touch_redis(redis_client: redis.Redis) -> None:
    counting = CountingRedis(redis_client)
    a = api(counting, api_config([api_pool("pool1")]))
    counting.direct = 0
    for path in ("/dashboard/", *(f"/dashboard/static/{name}" for name in ASSETS)):
        assert a.client.simulate_get(path).status_code == 200
    assert counting.direct == 0 and counting.pipelines == []


@pytest.mark.parametrize("path", [POOL, RUNNING])
def test_redis_down_is_a_json_503(path: str, caplog: pytest.LogCaptureFixture) -> None:
    dead = connect("127.0.0.1", 1, pool_size=2, pool_timeout=1)
    a = api(dead, api_config([api_pool("pool1")]))
    with caplog.at_level(logging.CRITICAL):
        resp = a.client.simulate_get(path)
    assert resp.status_code == 503
    assert resp.json == {"ok": False, "error": "redis unavailable", "retry_after": 5}
    assert resp.headers["retry-after"] == "5"
    assert page(a).text.startswith("<!DOCTYPE html>")  # the page itself still loads


# -- middleware: treated like vmpooler's dashboard ---------------------------------------------
def test_dashboard_routes_are_rate_limited_like_any_route(redis_client: redis.Redis) -> None:
    """vmpooler mounted its dashboard behind the rate limiter (reference §1.1)."""
    config = with_limits(api_config([api_pool("pool1")], rate_limiting_enabled=True),
                         global_per_ip=(3, 60))
    a = api(redis_client, config)
    codes = [a.client.simulate_get(path).status_code
             for path in ("/dashboard/", "/dashboard/static/dashboard.css", POOL, RUNNING)]
    assert codes == [200, 200, 200, 429]


def test_dashboard_routes_are_logged(redis_client: redis.Redis,
                                     caplog: pytest.LogCaptureFixture) -> None:
    a = api(redis_client, api_config([api_pool("pool1")], request_logger=True))
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        a.client.simulate_get("/dashboard/")
        a.client.simulate_get("/dashboard/static/nope.js")
    lines = [r.getMessage() for r in caplog.records if r.name == REQUESTS]
    assert lines[0].startswith("[ ] API: Method: GET, Status: 200, Path: /dashboard, Body: ")
    assert lines[1].startswith("[ ] API: Method: GET, Status: 404, Path: /dashboard/static/nope.js")
