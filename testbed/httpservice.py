"""The small HTTP/JSON services the testbed runs in-process: the fake API server, the extender delay proxy and
the reference extender all answer keep-alive JSON over loopback, and all need the same two fixes to the standard
library's server (:class:`LoopbackJsonServer`) and the same handler plumbing (:class:`JsonHandler`)."""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackJsonServer(ThreadingHTTPServer):
    """A threading HTTP server tuned for request/answer JSON over keep-alive connections.

    Answers go out in two writes (headers, body): without TCP_NODELAY, Nagle's algorithm and the client's delayed
    ACK stall every keep-alive answer by ~40 ms. A client that hangs up mid-request is normal (timeouts, restarts),
    so that is not printed as a traceback.
    """

    daemon_threads = True
    allow_reuse_address = True
    _serve_thread: threading.Thread | None = None

    def start_background(self, name: str | None = None, poll_interval: float = 0.05) -> threading.Thread:
        """Serve from a daemon thread until :meth:`close`."""
        thread = threading.Thread(target=self.serve_forever, args=(poll_interval,), name=name, daemon=True)
        self._serve_thread = thread
        thread.start()
        return thread

    def close(self, join_timeout: float = 5.0) -> None:
        """Stop serving (when :meth:`start_background` started it) and release the socket."""
        thread, self._serve_thread = self._serve_thread, None
        if thread is not None:
            self.shutdown()
        self.server_close()
        if thread is not None:
            thread.join(timeout=join_timeout)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


def send_json_bytes(handler: BaseHTTPRequestHandler, status: int, data: bytes) -> bool:
    """Write one complete JSON answer; False when the client is already gone (nothing more to do for it)."""
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    except OSError:
        return False
    return True


class JsonHandler(BaseHTTPRequestHandler):
    """A keep-alive JSON request handler: no access log on stderr, the body read by Content-Length, JSON answers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def read_body(self, limit: int | None = None) -> bytes:
        """The request body (empty without a Content-Length); ValueError when Content-Length is not a non-negative
        integer or is over ``limit``."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or (limit is not None and length > limit):
            raise ValueError("missing or oversized Content-Length")
        return self.rfile.read(length) if length else b""

    def send_json(self, code: int, obj: Any) -> bool:
        """Answer ``obj`` as compact JSON; False when the client is already gone."""
        return send_json_bytes(self, code, json.dumps(obj, separators=(",", ":")).encode())
