"""Every difference between vmpooler 3.9.1's API and ours that the differential sequence
shows, each explained in docs/compatibility.md (``doc`` is a phrase of that page).

A difference found that is not listed here fails ``tests/test_differential.py``, and so does an
entry here that no longer occurs. ``step`` and ``where`` are globs; keep them narrow.
"""

from __future__ import annotations

from tests.differential.known import Known

__all__ = ["KNOWN_DIFFERENCES"]

_STREAM = "through the Redis stream `vmpooler__commands`"
_DELETE_READY = "`DELETE /vm/<host>` moves a VM only out of running or ready"
_ROLLBACK = "A rollback leaves no field behind (vmpooler left `lifetime` on VMs it put back)."
_PARSER = "For a body that is not valid JSON, the parser's own words follow `Invalid JSON: `"
_DROP_ACTIVE = "also dropping its `active` and `migrating` entries"
_OD_QUEUES = "A deleted request also leaves the provisioning queues at once"
_WINDOW = "a counter's expiry is set when it is created and not renewed by later requests"
_NO_EXPIRY = "A counter found without an expiry gets one of `period` seconds"
_MISREAD = "vmpooler silently stopped limiting that class"
_VALID_TOKEN = "Only a valid token is a client of its own."
_WHO_ASKED = "An on-demand request's hash also records who asked"
_LOGINS = "failed HTTP Basic logins (`GET`/`POST /token`, `DELETE /token/<t>`) are limited"

KNOWN_DIFFERENCES: tuple[Known, ...] = (
    # Processes and Redis: every change is also a command to the manager.
    Known("*", "redis", "vmpooler__commands *", _STREAM),
    # The dashboard's history: checkouts are counted per pool.
    Known("*", "redis", "vmpooler__history__checkouts *",
          "The checkout and clone-succeeded scripts each run one `HINCRBY` more"),
    # Demand sizing learns from every checkout, served or not (docs/sizing.md).
    Known("*", "redis", "vmpooler__demand__* *",
          "The checkout script logs each checkout it served in the pool's"),
    Known("*", "redis", "vmpooler__demand_misses__* *",
          "and a refused one in `vmpooler__demand_misses__<pool>`"),
    Known("*", "redis", "vmpooler__demand_guard__* *",
          "at most two per requester and pool a minute, counted in"),
    Known("*", "redis", "vmpooler__history__misses *",
          "The checkout script counts the checkouts that found no VM per pool"),
    # Who asked for an on-demand request (docs/fairness.md).
    *(Known("*", "redis", f"vmpooler__odrequest__* {field}", _WHO_ASKED)
      for field in ("user", "priority", "share")),
    # Routes of ours, and 405 for a method a route lacks.
    Known("root", "content-type", "", "redirects to the dashboard with an empty body typed "
          "`application/json` like every answer"),
    Known("healthcheck", "status", "", "`/healthcheck` always exists instead of only with "
          "Prometheus"),
    # ours: 503 here (no manager runs beside the differential APIs); vmpooler has no such route
    Known("readiness", "status", "", "Ours: `GET /api/v3/readiness` answers 200 when Redis"),
    Known("method-not-allowed", "status", "",
          'A method a route does not have answers 405 `{"ok": false}` (Sinatra: 404).'),
    # /status and /summary.
    *(Known(step, "body", "$.status.*", "Empty pools are reported whatever `view` asks for.")
      for step in ("status-view-empty", "status-capacity", "status-queue-after")),
    Known("status-queue-after", "body", "$.queue.*",
          "the queue numbers are read in the right order (vmpooler mixed them up with several "
          "pools)"),
    Known("summary*", "body", "$.*.*.[am][vai][enx]*",
          "the range-level `average`/`min`/`max` that vmpooler documented but never produced "
          "are produced"),
    *(Known(step, "body", "$*", "`/summary` errors are JSON 400 (vmpooler: plain text under "
            "a JSON content type)")
      for step in ("summary-bad-format", "summary-reversed", "summary-future")),
    Known("summary-impossible-date", "status", "", "an impossible date is a 400 (vmpooler: 500)"),
    # Tokens.
    Known("token-delete-again", "status", "",
          "`DELETE /token/<t>` of a missing token is 404 (vmpooler: 401)"),
    # ... and a failed login is counted (a success forgets the user's failures).
    Known("token-list-badcreds", "redis", "vmpooler__login_failures__*", _LOGINS),
    Known("token-create", "redis", "vmpooler__login_failures__user__*", _LOGINS),
    Known("final", "redis", "vmpooler__login_failures__address__127.0.0.1 *", _LOGINS),
    # Checkout.
    Known("checkout-dotted-name", "status", "",
          "Pool names may contain dots in the JSON body of `POST /vm`"),
    Known("*-invalid-json", "body", "$.error", _PARSER),
    Known("checkout-partial-token", "redis", "vmpooler__vm__vm-p1f lifetime", _ROLLBACK),
    Known("checkout-token", "redis", "vmpooler__vm__vm-p1f lifetime", _ROLLBACK),
    Known("checkout-template-plus", "status", "",
          "`POST /vm/+` (no names) is 404 like an empty body (vmpooler: 200)."),
    # A VM: reading, changing, returning.
    Known("vm-get-full", "body", "$.vm-full.ip", "`GET /vm/<host>` reports the `ip` the manager "
          "stored"),
    Known("vm-put-lifetime-limit", "status", "",
          "A lifetime equal to `max_lifetime_upper_limit` is accepted (vmpooler refused it)"),
    Known("vm-put-tag-equals", "status", "", "Tag values may contain `=` and `,` (Jenkins URLs)"),
    Known("vm-put-tags-not-object", "status", "",
          "`tags` that is not an object is a 400 failure too (vmpooler: 500)"),
    *(Known(step, "redis", "vmpooler__tag__<today> <expires>",
            "The day's tag statistics `vmpooler__tag__<date>` expire `:redis: data_ttl` hours")
      for step in ("vm-put-tags", "final")),
    Known("vm-delete-owned", "redis", "vmpooler__*__pool1 *vm-p1f",
          "also dropping its `active` and `migrating` entries"),
    Known("vm-delete-running", "redis", "vmpooler__*__pool1 *vm-p1a",
          "also dropping its `active` and `migrating` entries"),
    Known("vm-delete-ready", "redis", "vmpooler__ready__pool2 <type>", _DELETE_READY),
    Known("vm-delete-pending", "status", "",
          "a VM in pending or in no queue is a 404 (vmpooler answered 200 and added it to "
          "completed, leaving it in two queues)"),
    # ... and what the ready VM vmpooler left in ready shows later.
    Known("status-after", "body", "$.[cps][ato]*", _DELETE_READY),
    Known("poolstat-after", "body", "$.pools.pool2.ready", _DELETE_READY),
    Known("dashboard-pool*", "body", "$.pool2.*", _DELETE_READY),
    # On-demand requests.
    Known("od-null", "status", "", "A body that is not a JSON object (`null`, an array, a "
          "number) is a 400"),
    Known("od-array", "status", "", "A body that is not a JSON object (`null`, an array, a "
          "number) is a 400"),
    Known("od-negative-count", "status", "", "A negative or non-numeric count is a 400 naming "
          "the key"),
    Known("od-id-with-colon", "status", "", "A supplied `request_id` must be 1 to 64 "
          "characters of `A-Z a-z 0-9 . _ -`"),
    Known("od-delete", "redis", "vmpooler__provisioning__request zset:<request>",
          "A deleted request also leaves the provisioning queues at once"),
    Known("od-delete-failed", "body", "$.message", "`DELETE` never changes a final status"),
    Known("od-delete-failed", "redis", "vmpooler__odrequest__od-failed *",
          "`DELETE` never changes a final status"),
    # Configuration endpoints.
    Known("full-config", "body", "$.full_config.*",
          "`/full_config` shows the configuration as the file gives it"),
    Known("poolsize-alias", "status", "",
          "an alias is not accepted where a pool is required (vmpooler: 500, or a reset nobody "
          "consumed)"),
    Known("pool*-invalid-json", "status", "",
          "An empty, invalid or non-object JSON body is a 400 (vmpooler: 500)"),
    # The key space afterwards: what the differences above left behind.
    Known("final", "redis", "vmpooler__[am]*__pool1 *vm-p1[af]",
          "also dropping its `active` and `migrating` entries"),
    Known("final", "redis", "vmpooler__ready__pool2 *", _DELETE_READY),
    Known("final", "redis", "vmpooler__completed__pool2 +vm-pe1",
          "a VM in pending or in no queue is a 404 (vmpooler answered 200 and added it to "
          "completed, leaving it in two queues)"),
    Known("final", "redis", "vmpooler__*<request5>*", "A negative or non-numeric count is a "
          "400 naming the key"),
    Known("final", "redis", "vmpooler__*a:b*", "A supplied `request_id` must be 1 to 64 "
          "characters of `A-Z a-z 0-9 . _ -`"),
    Known("final", "redis", "vmpooler__provisioning__request zset:<request>",
          "A deleted request also leaves the provisioning queues at once"),
    Known("final", "redis", "vmpooler__odrequest__od-failed *",
          "`DELETE` never changes a final status"),
    Known("final", "redis", "vmpooler__vm__vm-p1a lifetime",
          "A lifetime equal to `max_lifetime_upper_limit` is accepted (vmpooler refused it)"),
    Known("final", "redis", "vmpooler__*vm-p1a*project", "Tag values may contain `=` and `,` "
          "(Jenkins URLs)"),
    # Without auth.
    Known("noauth-delete-owned", "redis", "vmpooler__active__pool1 vm-n3",
          "also dropping its `active` and `migrating` entries"),
    Known("noauth-final", "redis", "vmpooler__active__pool1 vm-n3",
          "also dropping its `active` and `migrating` entries"),
    Known("noauth-od-delete", "redis", "vmpooler__provisioning__request zset:<request>",
          "A deleted request also leaves the provisioning queues at once"),
    Known("noauth-final", "redis", "vmpooler__provisioning__request zset:<request>",
          "A deleted request also leaves the provisioning queues at once"),
    # Dashboard.
    Known("dashboard-running*", "body", "$.*.running",
          'a pool name without `-` is its own major (vmpooler grouped those under `""`)'),
    Known("dashboard-running-history", "body", "$.pool*.history*",
          "the running endpoint gave no `history` at all without one"),
    # The rate limiter: what returning VMs and deleting requests do, as above ...
    Known("ratelimit-delete-[12i]*", "redis", "vmpooler__[am]*__pool1 *", _DROP_ACTIVE),
    Known("ratelimit-window-accepted", "redis", "vmpooler__[am]*__pool1 *", _DROP_ACTIVE),
    Known("ratelimit-final", "redis", "vmpooler__[am]*__pool1 *vm-rl[1-5]", _DROP_ACTIVE),
    Known("ratelimit-final", "redis", "vmpooler__migrating__pool1 <type>", _DROP_ACTIVE),
    Known("ratelimit-ondemand-delete-token", "redis", "vmpooler__provisioning__request *",
          _OD_QUEUES),
    Known("ratelimit-final", "redis", "vmpooler__provisioning__request *", _OD_QUEUES),
    # ... its fixed window ...
    *(Known("ratelimit-window-over", aspect, where, _WINDOW)
      for aspect, where in (("body", "$.retry_after"), ("header", "retry-after"),
                            ("header", "x-ratelimit-reset"))),
    # ... a counter without expiry ...
    *(Known("ratelimit-window-no-expiry", aspect, where, _NO_EXPIRY)
      for aspect, where in (("body", "$.retry_after"), ("header", "retry-after"),
                            ("header", "x-ratelimit-reset"),
                            ("redis", "vmpooler__ratelimit__global_per_ip__ip:127.0.0.1 *"))),
    Known("ratelimit-final", "redis",
          "vmpooler__ratelimit__global_per_ip__ip:127.0.0.1 <expires>", _NO_EXPIRY),
    # ... only a valid token counts apart: an empty or unknown one counts by address ...
    Known("ratelimit-empty-token", "status", "", _VALID_TOKEN),
    Known("ratelimit-auth-other-token", "status", "", _VALID_TOKEN),
    Known("ratelimit-final", "redis", "vmpooler__ratelimit__authenticated__ip:127.0.0.1 *",
          _VALID_TOKEN),
    Known("ratelimit-final", "redis", "vmpooler__ratelimit__authenticated__token:bogus *",
          _VALID_TOKEN),
    # ... and classes vmpooler misread (plain keys, no period), which it does not limit.
    Known("ratelimit-keys-*", "redis", "vmpooler__ratelimit__*", _MISREAD),
    Known("ratelimit-keys-global-2", "status", "", _MISREAD),
    Known("ratelimit-keys-create-over", "status", "", _MISREAD),
    Known("ratelimit-keys-final", "redis", "vmpooler__*vm-rk2*", _MISREAD),
    Known("ratelimit-keys-final", "redis", "vmpooler__ready__pool1 <type>", _MISREAD),
)
