"""The readiness probe every provider shares: a TCP connection that opens.

A provider's ``vm_ready_check`` of ``ssh`` or ``ssh_ip`` is this probe, to a name or an
address the provider knows. A probe that fails raises :class:`NotReadyError` saying why;
the core stores that text as the VM's ``open_socket_error``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from vmpooler.providers.errors import TransientProviderError

__all__ = ["Connector", "NotReadyError", "probe_tcp"]

Connector = Callable[[tuple[str, int], float], Any]
"""Opens a connection to ``(host, port)`` within a timeout (``socket.create_connection``)."""


class NotReadyError(TransientProviderError):
    """The VM is not ready for its user yet; the message says why."""


def probe_tcp(host: str, port: int, timeout: float,
              connect: Connector = socket.create_connection) -> bool:
    """True when a TCP connection to ``host:port`` opens within ``timeout`` seconds (it is
    closed at once); raises NotReadyError with the reason otherwise."""
    try:
        connection = connect((host, port), timeout)
    except (OSError, UnicodeError) as exc:
        raise NotReadyError(f"{host}:{port}: {exc}") from exc
    connection.close()
    return True
