"""Real ``vmpooler run`` / ``vmpooler api`` + ``manager`` processes for attacking over TCP.

:func:`start_service` writes a configuration (the dummy provider, two small pools, dummy
auth, Prometheus, the request logger, experimental features, rate limiting with limits too
high to matter, unless ``overrides`` say otherwise), starts the processes on a free loopback
port and waits until the API answers. :class:`Service` then gives the URLs, raw HTTP calls,
a Redis client of the service's Redis and the log text.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import yaml

from tests.harness import wait_until
from vmpooler.actors.storage.embedded_redis import free_port

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]

GENEROUS_LIMITS = {name: {"limit": 1_000_000, "period": 60}
                   for name in ("global_per_ip", "authenticated", "vm_creation", "vm_deletion")}
"""Rate limits no test of the shared services reaches (the limiter itself stays on)."""


def base_document(directory: Path) -> dict[str, Any]:
    """The configuration every hostile-client service starts from."""
    return {
        ":config": {
            "check_loop_delay_min": 1, "check_loop_delay_max": 2, "task_limit": 20,
            "timeout": 10, "request_logger": True, "experimental_features": True,
            "rate_limiting_enabled": True, "manager_heartbeat_interval": 1,
        },
        ":rate_limits": copy.deepcopy(GENEROUS_LIMITS),
        ":auth": {"provider": "dummy"},
        ":redis": {"data_dir": str(directory / "redis")},
        ":prometheus": {"prefix": "hostile", "multiprocess_dir": str(directory / "prometheus")},
        ":providers": {":dummy": {"provider_class": "dummy", "createvm_max_time": 0.2,
                                    "destroyvm_max_time": 0.2,
                                    "skip_dns_check_before_creating_vm": True}},
        ":dns_configs": {":local": {"dns_class": "dynamic-dns", "domain": "example.test"}},
        ":pools": [
            {"name": "alpha", "alias": ["alpha-alias"], "size": 2, "provider": "dummy",
             "dns_plugin": "local"},
            {"name": "beta", "size": 2, "provider": "dummy", "dns_plugin": "local"},
        ],
    }


def merge(document: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with ``overrides`` merged in, mapping by mapping (a None value deletes)."""
    for key, value in overrides.items():
        if value is None:
            document.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(document.get(key), dict):
            merge(document[key], value)
        else:
            document[key] = copy.deepcopy(value)
    return document


@dataclass
class Answer:
    """One HTTP answer: status, headers (lower-case names), raw body and its JSON if any."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Service:
    """A running vmpooler under test: ``kind`` is ``run`` or ``api`` (with a manager)."""

    kind: str
    directory: Path
    config_path: Path
    port: int
    redis_port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base(self) -> str:
        return f"{self.root}/api/v3"

    @property
    def data_dir(self) -> Path:
        return self.directory / "redis"

    @property
    def prometheus_dir(self) -> Path:
        return self.directory / "prometheus"

    def request(self, method: str, path: str, body: Any = None, *,
                headers: Mapping[str, str] | None = None, timeout: float = 10) -> Answer:
        """One request on a fresh connection; ``body`` is sent as JSON unless bytes/str."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            raw = body is None or isinstance(body, bytes | str)
            payload = body if raw else json.dumps(body)
            connection.request(method, path, body=payload, headers=dict(headers or {}))
            response = connection.getresponse()
            return Answer(response.status,
                          {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            connection.close()

    def redis_client(self) -> redis.Redis:
        """A client of the service's Redis (the embedded one: its port and password files; a
        configured one: with the password, user and TLS files of the configuration)."""
        if self.redis_port is not None:
            section = (yaml.safe_load(self.config_path.read_text()) or {}).get(":redis") or {}
            return redis.Redis(port=self.redis_port, decode_responses=True,
                               **_client_options(section))
        port = int((self.data_dir / "redis.port").read_text().strip())
        password_file = self.data_dir / "redis.password"
        password = password_file.read_text().strip() if password_file.exists() else None
        return redis.Redis(port=port, password=password, decode_responses=True)

    def log_text(self) -> str:
        return "".join(path.read_text(errors="replace")
                       for path in sorted(self.directory.glob("*.log")))

    def answering(self) -> bool:
        try:
            return self.request("GET", "/api/v3/vm", timeout=2).status == 200
        except OSError:
            return False

    def alive(self) -> bool:
        return all(process.poll() is None for process in self.processes)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _client_options(section: Mapping[str, Any]) -> dict[str, Any]:
    """redis-py options for a ``:redis:`` section's password, username and TLS keys."""
    options: dict[str, Any] = {"password": section.get("password"),
                               "username": section.get("username")}
    if section.get("ssl"):
        verify = section.get("ssl_verify", True)
        options.update(ssl=True, ssl_ca_certs=section.get("ssl_ca_file"),
                       ssl_certfile=section.get("ssl_cert_file"),
                       ssl_keyfile=section.get("ssl_key_file"),
                       ssl_cert_reqs="required" if verify else "none",
                       ssl_check_hostname=bool(verify))
    return options


def _spawn(service: Service, name: str, *args: str) -> None:
    log = open(service.directory / f"{name}.log", "a")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen([*VMPOOLER, *args], cwd=service.directory, stdout=log,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", **service.env})
    log.close()
    service.processes.append(process)


def start_service(directory: Path, kind: str = "run", overrides: Mapping[str, Any] = (),
                  *, redis_port: int | None = None, workers: int = 2, threads: int = 8,
                  extra_args: tuple[str, ...] = (),
                  env: Mapping[str, str] | None = None, manager: bool = True) -> Service:
    """Start ``vmpooler run`` (embedded Redis unless ``redis_port``) or ``vmpooler api``
    (``workers`` workers) with a ``vmpooler manager`` (on ``redis_port``; without one, the
    manager starts the embedded Redis and the API is started once its port file is there)
    and wait until the API answers (40 s at most); with ``manager=False`` (and a
    ``redis_port``) the API alone, so that the Redis work seen is the API's. ``VMPOOLER_DEBUG``
    is set (dummy auth needs it) unless ``env`` says otherwise."""
    directory.mkdir(parents=True, exist_ok=True)
    document = base_document(directory)
    if redis_port is not None:
        document[":redis"] = {"server": "127.0.0.1", "port": redis_port}
    merge(document, dict(overrides))
    config_path = directory / "vmpooler.yaml"
    config_path.write_text(yaml.safe_dump(document))
    service = Service(kind=kind, directory=directory, config_path=config_path,
                      port=free_port(), redis_port=redis_port,
                      env={"VMPOOLER_DEBUG": "1", **(env or {})})
    bind = ("--bind", f"127.0.0.1:{service.port}", "--threads", str(threads))
    if kind == "run":
        _spawn(service, "run", "run", "--config", str(config_path), *bind, *extra_args)
    elif kind == "api":
        if manager or redis_port is None:
            _spawn(service, "manager", "manager", "--config", str(config_path))
        if redis_port is None:  # the manager's embedded Redis, found by the API as by tools
            try:
                wait_until(lambda: (service.data_dir / "redis.port").exists()
                           or not service.alive(), 20, "the manager's embedded Redis")
            except BaseException:
                service.stop()
                raise
        _spawn(service, "api", "api", "--config", str(config_path), "--workers", str(workers),
               *bind, *extra_args)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    try:
        wait_until(lambda: service.answering() or not service.alive(), 40,
                   f"vmpooler {kind} to answer")
        if not service.alive():
            raise AssertionError(f"vmpooler {kind} exited:\n{service.log_text()[-4000:]}")
    except BaseException:
        service.stop()
        raise
    return service
