"""One HTTP/1.1 message off a socket, for tests that play one side of the agent's API themselves (a proxy that
drops answers, a stand-in agent): its head and its ``Content-Length`` body, nothing more."""

from __future__ import annotations

import socket


def read_message(s: socket.socket) -> bytes:
    """One HTTP message (headers and a Content-Length body) from ``s``; what came before the peer closed, if it
    closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body
