"""A TCP relay on a fixed loopback port, for process tests that stand a server's restart in
for another: the pooler is configured with the relay's port, the test points it at the
server behind. :meth:`Relay.down` closes the listener and every relayed connection (to a
client, as if the server died: connections reset, then refused); :meth:`Relay.up` listens
again on the same port and relays to a server, maybe another one (a restarted server whose
state the test prepared before its clients could see it)."""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["Relay"]


class Relay:
    """Relays ``127.0.0.1:port`` to ``127.0.0.1:<upstream>``; :attr:`port` is fixed for the
    relay's life. Started listening; :meth:`close` when done."""

    def __init__(self, upstream: int) -> None:
        self.port = 0
        self._lock = threading.Lock()
        self._open: set[_Pair] = set()
        self._listener: socket.socket | None = None
        self.up(upstream)

    def up(self, upstream: int) -> None:
        """Listen (again, on :attr:`port`) and relay new connections to ``upstream``."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener, upstream), daemon=True).start()

    def down(self) -> None:
        """Stop listening and end every relayed connection."""
        with self._lock:
            listener, self._listener = self._listener, None
            pairs, self._open = self._open, set()
        if listener is not None:
            _close(listener)
        for pair in pairs:
            for sock in pair.sockets:
                _close(sock)

    close = down

    def _accept(self, listener: socket.socket, upstream: int) -> None:
        while True:
            try:
                client, _address = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                server = socket.create_connection(("127.0.0.1", upstream), timeout=5)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            pair = _Pair((client, server))
            with self._lock:
                if self._listener is not listener:
                    pair.close()
                    return
                self._open.add(pair)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(pair, source, sink),
                                 daemon=True).start()

    def _pump(self, pair: _Pair, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            pair.ended += 1
            last = pair.ended == 2
            if last:
                self._open.discard(pair)
        if last:
            pair.close()


class _Pair:
    """A relayed connection: the client's socket and the server's."""

    def __init__(self, sockets: tuple[socket.socket, socket.socket]) -> None:
        self.sockets = sockets
        self.ended = 0  # directions whose source has ended

    def close(self) -> None:
        for sock in self.sockets:
            _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
