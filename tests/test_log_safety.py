"""Log injection: request text cannot forge a log line, and secrets in it are masked.

The formatter is exercised as ``configure_logging`` installs it (a real log file), and the
request logger and the 500 handler through Falcon's TestClient over the session's Redis.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import falcon
import gunicorn.config
import pytest
import redis

from tests.api_harness import TOKEN, api, api_config, api_pool
from tests.log_capture import captured_logger, root_logging_restored
from vmpooler.web.cli.log_setup import DATE_FORMAT, FORMAT, configure_logging
from vmpooler.web.logsafe import (
    MASK,
    SafeFormatter,
    SafeGunicornLogger,
    escape_controls,
    redact_path,
    redact_text,
)

FORGED = "[2026-01-01 00:00:00] forged"
EVIL = ("\n" + FORGED, "\r" + FORGED, "\r\n" + FORGED, "\u2028" + FORGED, "\u2029" + FORGED,
        "\x85" + FORGED, "\x0b" + FORGED, "\x0c" + FORGED, "\x1c" + FORGED, "\x1b[2J")


def forged_lines(text: str) -> list[str]:
    """Lines of ``text`` (split at every Unicode line boundary) that start with the forgery
    or hold a raw control character."""
    return [line for line in text.splitlines()
            if line.startswith(FORGED) or escape_controls(line) != line.replace("\t", "\\t")]


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing through :class:`SafeFormatter` in vmpooler's format to a buffer."""
    with captured_logger("tests.log_safety", SafeFormatter(FORMAT, DATE_FORMAT)) as found:
        yield found


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger back as it was after a test that calls ``configure_logging``."""
    with root_logging_restored():
        yield


# -- the formatter -----------------------------------------------------------------------------
@pytest.mark.parametrize("evil", EVIL)
def test_arguments_cannot_start_a_line_or_carry_a_control_character(
        captured: tuple[logging.Logger, io.StringIO], evil: str) -> None:
    logger, buffer = captured
    logger.info("[ ] API: Method: %s, Path: %s", "GET", f"/api/v3/vm/x{evil}")
    logger.info("%(pool)s and %(vm)r", {"pool": f"p{evil}", "vm": f"v{evil}"})
    text = buffer.getvalue()
    assert len(text.splitlines()) == 2, text
    assert forged_lines(text) == []


def test_escapes_are_readable(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, buffer = captured
    logger.warning("%s|%r|%d|%.1f", "a\nb\rc\td\x1be\u2028f", "x\ny", 7, 2.25)
    line = buffer.getvalue().rstrip("\n").split("] ", 1)[1]
    assert line == r"a\nb\rc\td\x1be\u2028f|'x\ny'|7|2.2"


def test_a_traceback_stays_multi_line_but_indented(
        captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, buffer = captured
    try:
        raise ValueError(f"bad input\n{FORGED}\x1b[2J")
    except ValueError:
        logger.exception("[!] [api] %s %s failed", "GET", "/api/v3/x")
    lines = buffer.getvalue().splitlines()
    assert lines[0].endswith("[!] [api] GET /api/v3/x failed")
    assert lines[1] == "  Traceback (most recent call last):"
    assert any(line.startswith("    File ") for line in lines)
    assert f"  {FORGED}\\x1b[2J" in lines
    assert all(line.startswith("  ") for line in lines[1:])
    assert forged_lines(buffer.getvalue()) == []


def test_a_multi_line_template_is_indented_not_flattened(
        captured: tuple[logging.Logger, io.StringIO]) -> None:
    """pykka's thread dump (SIGUSR1) and gunicorn's pre-formatted lines put the newlines in
    the message itself."""
    logger, buffer = captured
    logger.critical(f"Current state of MainThread:\n  File 'x.py', line 1\n{FORGED}")
    assert buffer.getvalue().splitlines()[1:] == ["    File 'x.py', line 1", f"  {FORGED}"]


def test_the_record_is_left_as_logged(captured: tuple[logging.Logger, io.StringIO],
                                      caplog: pytest.LogCaptureFixture) -> None:
    logger, _ = captured
    logger.propagate = True
    with caplog.at_level(logging.INFO, logger="tests.log_safety"):
        logger.info("path %s", "/a\nb")
    assert {r.getMessage() for r in caplog.records} == {"path /a\nb"}


def test_a_template_the_escaped_arguments_do_not_fit_is_escaped_whole(
        captured: tuple[logging.Logger, io.StringIO]) -> None:
    from decimal import Decimal

    class Weird:
        def __index__(self) -> int:
            return 3

        def __str__(self) -> str:
            return f"w\n{FORGED}"

    logger, buffer = captured
    logger.info("%x %s %s", Weird(), Weird(), Decimal("1.5"))
    assert buffer.getvalue().count("\n") == 1
    assert buffer.getvalue().rstrip().endswith(f"3 w\\n{FORGED} 1.5")


# -- redaction ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("/api/v3/token/abcdefghijklmnopqrstuvwxyz012345", f"/api/v3/token/{MASK}"),
    ("/api/v3/token/abc/extra", f"/api/v3/token/{MASK}/extra"),
    ("/API/V3/TOKEN/abc", f"/API/V3/TOKEN/{MASK}"),
    ("/api/v3/token", "/api/v3/token"),
    ("/api/v3/vm/token-host", "/api/v3/vm/token-host"),
])
def test_redact_path(text: str, expected: str) -> None:
    assert redact_path(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("GET /api/v3/token/abc?x=1 HTTP/1.1", f"GET /api/v3/token/{MASK}?x=1 HTTP/1.1"),
    (f"Path: /api/v3/token/{MASK}, Body: 1", f"Path: /api/v3/token/{MASK}, Body: 1"),
    ("/x?token=abc&pool=p1&password=pw", f"/x?token={MASK}&pool=p1&password={MASK}"),
    ("/x?a=1&api_key=k&client_secret=s;passphrase=q",
     f"/x?a=1&api_key={MASK}&client_secret={MASK};passphrase={MASK}"),
    ("Invalid HTTP Header: 'X-AUTH-TOKEN: abcdef'", f"Invalid HTTP Header: 'X-AUTH-TOKEN: {MASK}'"),
    ("authorization=Basic amRvZTpzM2NyZXQ=", f"authorization={MASK}"),
    ("no secret here: pool token-pool", "no secret here: pool token-pool"),
])
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_gunicorns_handlers_format_safely() -> None:
    cfg = gunicorn.config.Config()
    cfg.set("errorlog", "-")
    logger = SafeGunicornLogger(cfg)
    buffer = io.StringIO()
    handler = logger.error_log.handlers[0]
    handler.setStream(buffer)
    try:
        logger.error("Error handling request %s %s", "GET",
                     f"/api/v3/token/abc?password=pw\n{FORGED}")
    finally:
        logger.error_log.removeHandler(handler)
    line = buffer.getvalue()
    assert line.count("\n") == 1 and "[ERROR] Error handling request GET" in line
    # the escaped line feed is part of the masked value, which runs to the next blank
    assert line.rstrip().endswith(f"/api/v3/token/{MASK}?password={MASK} 00:00:00] forged")


# -- as the command line configures it ---------------------------------------------------------
def test_configure_logging_writes_safe_lines_to_the_log_file(
        tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    logfile = tmp_path / "vmpooler.log"
    configure_logging("info", str(logfile))
    logging.getLogger("vmpooler.web.requests").info(
        "[ ] API: Path: %s", f"/api/v3/vm/x\n{FORGED}")
    logging.getLogger("gunicorn.error").propagate = True
    for handler in logging.getLogger().handlers:
        handler.flush()
    for text in (logfile.read_text(), capsys.readouterr().out):
        assert text.count("\n") == 1
        assert f"Path: /api/v3/vm/x\\n{FORGED}" in text
        assert forged_lines(text) == []


# -- the API's loggers -------------------------------------------------------------------------
def test_the_request_logger_masks_the_token_of_a_token_path(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    a = api(redis_client, api_config([api_pool("pool1")], auth=True, request_logger=True))
    a.add_token()
    with caplog.at_level(logging.INFO, logger="vmpooler.web.requests"):
        a.client.simulate_get(f"/api/v3/token/{TOKEN}")
        a.client.simulate_delete(f"/api/v3/token/{TOKEN}")
    lines = [r.getMessage() for r in caplog.records if r.name == "vmpooler.web.requests"]
    assert lines == [f"[ ] API: Method: GET, Status: 200, Path: /api/v3/token/{MASK}, Body: "
                     f"{lines[0].rsplit(' ', 2)[1]} bytes",
                     f"[ ] API: Method: DELETE, Status: 401, Path: /api/v3/token/{MASK}, "
                     "Body: 17 bytes"]
    assert TOKEN not in caplog.text


def test_the_500_handler_logs_an_escaped_masked_path(
        redis_client: redis.Redis, captured: tuple[logging.Logger, io.StringIO]) -> None:
    class Broken:
        def on_get(self, req: falcon.Request, resp: falcon.Response, token: str,
                   rest: str) -> None:
            raise RuntimeError(f"broken\n{FORGED}")

    _, buffer = captured
    handler = logging.getLogger("tests.log_safety").handlers[0]
    errors = logging.getLogger("vmpooler.web.api_errors")
    errors.addHandler(handler)
    try:
        a = api(redis_client, api_config([api_pool("pool1")]))
        a.client.app.add_route("/api/v3/token/{token}/broken/{rest}", Broken())
        answer = a.client.simulate_get(
            f"/api/v3/token/{TOKEN}/broken/x%0A[2026-01-01 00:00:00] forged")
    finally:
        errors.removeHandler(handler)
    assert answer.status_code == 500
    assert answer.json == {"ok": False, "error": "internal error"}
    text = buffer.getvalue()
    assert text.splitlines()[0].endswith(
        f"[!] [api] GET /api/v3/token/{MASK}/broken/x\\n{FORGED} failed")
    assert "Traceback" in text and TOKEN not in text
    assert forged_lines(text) == []
