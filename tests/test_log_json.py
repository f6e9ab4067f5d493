"""``--log-format json``: the formatter (one line per record, masked like the text format),
how the command line picks the format, and ``vmpooler run`` writing nothing but JSON lines."""

from __future__ import annotations

import argparse
import calendar
import io
import json
import logging
import os
import re
import signal
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gunicorn.config
import pytest
import redis
import yaml

from tests import http_client
from tests.harness import wait_until
from tests.log_capture import captured_logger, root_logging_restored
from tests.test_manager_process import VMPOOLER, full
from vmpooler.actors.storage.embedded_redis import free_port
from vmpooler.web.cli import command as cli_command
from vmpooler.web.cli.log_json import JsonFormatter, JsonGunicornLogger
from vmpooler.web.cli.log_setup import configure_logging
from vmpooler.web.logsafe import MASK, redact_text

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FORGED = "[2026-01-01 00:00:00] forged"
CONTROLS = "\n" + FORGED + "\r\n\t\x1b[2J\x00\x0b\x0c\x1c\x7f\x85\x9b\u2028\u2029 end"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing through :class:`JsonFormatter` to a buffer."""
    with captured_logger("tests.log_json", JsonFormatter()) as found:
        yield found


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger (and warnings capture) back after ``configure_logging``."""
    with root_logging_restored():
        yield


def only_record(buffer: io.StringIO) -> dict[str, Any]:
    """The one record in ``buffer``: exactly one line, ASCII, no control character."""
    text = buffer.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1, text
    line = text[:-1]
    assert len(line.splitlines()) == 1  # no Unicode line boundary either (U+2028, NEL...)
    assert line.isascii() and not re.search("[\x00-\x1f\x7f]", line), line
    record: dict[str, Any] = json.loads(line)
    return record


# -- the formatter -----------------------------------------------------------------------------
def test_a_record_is_one_json_object_with_the_promised_fields(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    logger.warning("[!] [%s] is empty", "pool1")
    record = only_record(buffer)
    assert list(record) == ["time", "level", "logger", "message", "pid", "thread"]
    assert TIME.match(record["time"]), record["time"]
    assert record["level"] == "warning" and record["logger"] == "tests.log_json"
    assert record["message"] == "[!] [pool1] is empty"
    assert record["pid"] == os.getpid() and record["thread"] == "MainThread"


def test_time_is_utc_with_milliseconds() -> None:
    created = calendar.timegm((2026, 12, 5, 19, 7, 51)) + 0.1239
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.created, record.msecs = created, 123.9
    assert json.loads(JsonFormatter().format(record))["time"] == "2026-12-05T19:07:51.123Z"


def test_newlines_and_control_characters_stay_inside_the_string(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    logger.info("first line\nsecond line: %s", CONTROLS)
    record = only_record(buffer)
    assert record["message"] == "first line\nsecond line: " + CONTROLS  # exactly, decoded


def test_secrets_are_masked_as_the_text_format_masks_them(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    text = ("GET /api/v3/token/s3cr3t-token?password=hunter2&pool=p "
            "headers {'Authorization': 'Bearer abc.def'}")
    logger.info("[ ] API: %s", text)
    record = only_record(buffer)
    assert record["message"] == redact_text(f"[ ] API: {text}")
    for secret in ("s3cr3t-token", "hunter2", "abc.def"):
        assert secret not in buffer.getvalue()
    assert f"/api/v3/token/{MASK}?password={MASK}&pool=p" in record["message"]


def test_an_exception_is_its_own_field_one_line_masked(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    try:
        raise ValueError("while serving /api/v3/token/s3cr3t-token\nsecond line")
    except ValueError:
        logger.exception("[!] [api] failed")
    record = only_record(buffer)
    assert record["message"] == "[!] [api] failed"
    assert record["level"] == "error"
    assert record["exception"].startswith("Traceback (most recent call last):\n")
    assert "ValueError: while serving /api/v3/token/" + MASK in record["exception"]
    assert "s3cr3t-token" not in buffer.getvalue()


def test_stack_info_is_a_field(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, buffer = captured
    logger.info("where am I", stack_info=True)
    record = only_record(buffer)
    assert "exception" not in record
    assert record["stack"].startswith("Stack (most recent call last):")


def test_arguments_that_do_not_fit_the_template_are_kept() -> None:
    # formatted directly: pytest's own capture handlers would raise on this record first
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%d VMs", ("many",), None)
    line = JsonFormatter().format(record)
    assert json.loads(line)["message"] == "%d VMs (arguments that do not fit: ('many',))"


def test_gunicorns_handlers_write_json() -> None:
    error_log = logging.getLogger("gunicorn.error")
    before = list(error_log.handlers), error_log.propagate
    cfg = gunicorn.config.Config()
    cfg.set("errorlog", "-")
    logger = JsonGunicornLogger(cfg)
    buffer = io.StringIO()
    # the handler gunicorn installed (it marks its own); pytest may have added others
    handler = next(h for h in error_log.handlers if getattr(h, "_gunicorn", False))
    handler.setStream(buffer)
    try:
        logger.error("Invalid request from ip=%s: %s", "10.0.0.1",
                     f"/api/v3/token/abc?password=pw\n{FORGED}")
    finally:
        error_log.handlers[:], error_log.propagate = before  # as the other tests expect
    record = only_record(buffer)
    assert (record["level"], record["logger"]) == ("error", "gunicorn.error")
    assert record["message"] == (f"Invalid request from ip=10.0.0.1: /api/v3/token/{MASK}"
                                 f"?password={MASK}\n{FORGED}")


# -- the command line --------------------------------------------------------------------------
def test_configure_logging_json_writes_stdout_and_the_log_file(
    tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str],
) -> None:
    logfile = tmp_path / "vmpooler.log"
    configure_logging("info", str(logfile), "json")
    logging.getLogger("vmpooler.web.requests").info("[ ] API: Path: %s", "/a\nb")
    warnings.warn("a warning becomes a record", UserWarning, stacklevel=1)
    for handler in logging.getLogger().handlers:
        handler.flush()
    for text in (logfile.read_text(), capsys.readouterr().out):
        records = [json.loads(line) for line in text.splitlines()]
        assert [r["logger"] for r in records] == ["vmpooler.web.requests", "py.warnings"]
        assert records[0]["message"] == "[ ] API: Path: /a\nb"


def test_configure_logging_refuses_an_unknown_format(restore_logging: None) -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        configure_logging("info", None, "xml")


@pytest.mark.parametrize(("flag", "env", "expected"), [
    (None, None, "text"), (None, "", "text"), (None, "json", "json"), ("text", "json", "text"),
    ("json", None, "json"), (None, "xml", None),
])
def test_the_format_is_the_flag_else_log_format_else_text(
    flag: str | None, env: str | None, expected: str | None,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    if env is None:
        monkeypatch.delenv("LOG_FORMAT", raising=False)
    else:
        monkeypatch.setenv("LOG_FORMAT", env)
    assert cli_command._log_format(argparse.Namespace(log_format=flag)) == expected
    if expected is None:
        assert "LOG_FORMAT: expected one of text, json, got 'xml'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "api", "manager", "check-config"])
def test_every_command_takes_the_option(command: str) -> None:
    args = cli_command._parser().parse_args([command, "--log-format", "json"])
    assert args.log_format == "json"
    with pytest.raises(SystemExit):
        cli_command._parser().parse_args([command, "--log-format", "xml"])


# -- a real `vmpooler run` ---------------------------------------------------------------------
def get(url: str) -> int:
    """The status of ``GET url`` (0 when nothing answers)."""
    return int(http_client.get(url, timeout=10)[0])


@pytest.mark.integration
def test_run_writes_only_json_lines(tmp_path: Path) -> None:
    data_dir = tmp_path / "redis"
    config = tmp_path / "vmpooler.yaml"
    config.write_text(yaml.safe_dump({
        ":config": {"check_loop_delay_min": 1, "check_loop_delay_max": 2,
                    "request_logger": True},
        ":redis": {"data_dir": str(data_dir)},
        ":pools": [{"name": "alpha", "size": 1}],
    }))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VMPOOLER", "REDIS", "LOG_FORMAT"))}
    port = free_port()
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(
            [*VMPOOLER, "run", "--log-format", "json", "--config", str(config),
             "--bind", f"127.0.0.1:{port}"],
            cwd=tmp_path, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=err)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: get(f"{base}/api/v3/vm") == 200, 30, "the API to answer")
        port_file = data_dir / "redis.port"
        client = redis.Redis(port=int(port_file.read_text()),
                             password=(data_dir / "redis.password").read_text(),
                             decode_responses=True)
        wait_until(lambda: full(client, {"alpha": 1}), 30, "alpha to fill")
        client.close()
        get(f"{base}/api/v3/vm/no-such-vm%0A{FORGED.replace(' ', '%20')}?token=hunter2")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    stdout = (tmp_path / "out").read_text()
    stderr = (tmp_path / "err").read_text()
    records = [json.loads(line) for line in stdout.splitlines()]  # each line, or it fails
    assert any("serving on" in r["message"] for r in records), stdout[:2000]
    assert any("moved from 'pending' to 'ready'" in r["message"] for r in records)
    assert any("no-such-vm\n" + FORGED in r["message"] for r in records), "request logged"
    assert "hunter2" not in stdout + stderr
    gunicorn = [json.loads(line) for line in stderr.splitlines()]  # gunicorn's, as JSON
    assert any(r["logger"] == "gunicorn.error" and "Booting worker" in r["message"]
               for r in gunicorn), stderr[:2000]
    for record in records + gunicorn:
        assert TIME.match(record["time"]) and record["level"] in ("debug", "info", "warning",
                                                                  "error", "critical")
