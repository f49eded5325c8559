"""The small HTTP/JSON services the testbed runs in-process: the fake API server, the extender delay proxy and
the reference extender all answer keep-alive JSON over loopback, and all need the same two fixes to the standard
library's server."""

from __future__ import annotations

import socket
import sys
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
