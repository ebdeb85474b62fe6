"""A loopback TCP proxy that a test can cut: DynamoDB "unreachable" without mocking anything."""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["CuttableProxy"]


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``cut()`` drops every connection and blackholes.

    After ``cut`` new connections are accepted but never answered, like a network partition
    (botocore sees read timeouts, not refusals).
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.cut_event = threading.Event()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self.cut_event.set()
        with self._lock:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
            self._socks.clear()

    def heal(self) -> None:
        self.cut_event.clear()

    def close(self) -> None:
        self.cut()
        with contextlib.suppress(OSError):
            self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self._socks.append(client)
            if self.cut_event.is_set():
                continue  # blackhole: keep it open, never answer
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.cut_event.is_set():
                data = src.recv(65536)
                if not data or self.cut_event.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
