"""The site's Redis, for the commands that read or repair it (``dlq``, ``history``)."""

from __future__ import annotations

import sys
from pathlib import Path

import redis

from vmpooler.actors.config import Config
from vmpooler.actors.storage.connection import connect_configured
from vmpooler.actors.storage.embedded_files import DataDirError, read_port

__all__ = ["site_client"]


def site_client(config: Config) -> redis.Redis | None:
    """A client of the configured Redis (a running vmpooler's embedded server when none is
    configured), or None after saying on stderr why there is none."""
    address = None
    if config.redis.embedded:  # where a running vmpooler's embedded server listens
        port = read_port(Path(config.redis.data_dir))
        if port is None:
            print(f"vmpooler: no embedded redis-server is running for {config.redis.data_dir} "
                  "(start vmpooler run or vmpooler manager, or set :redis: server)",
                  file=sys.stderr)
            return None
        address = ("127.0.0.1", port)
    try:  # the embedded server's password is read from its data directory
        return connect_configured(config.redis, address=address, pool_size=2,
                                  reconnect_attempts=1)
    except DataDirError as exc:
        print(f"vmpooler: the embedded redis-server's password: {exc}", file=sys.stderr)
        return None
