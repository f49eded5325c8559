"""Telling the live ``/sys`` servers of a node what a render changed, before the render returns.

A live ``/sys`` lets the kernel cache what it served (names, attributes, file contents, symlink targets), which is
what makes its reads fast; the price is that it must be told the moment the tree changes. Every change to a node
goes through the agent's render, so the renderer is where the news starts: after an incremental render it sends
the paths it wrote or removed to every server registered for the node (a unix socket in
``<node dir>/live-sys/``) and waits for each to acknowledge that the kernel dropped them. A reader that starts
after the agent answered therefore never sees a stale value.

Wire format (one request per connection): a decimal byte count and a newline, then that many bytes of
newline-separated root-relative paths (``sys/bus/cxl/devices/mem3/driver``); the server answers ``k`` once the
kernel has been told. A socket nobody listens on any more (its server died) is removed.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

LIVE_DIR = "live-sys"
"""Where a node's live servers register (``<node dir>/live-sys/<pid>.sock``)."""
NOTIFY_TIMEOUT_S = 5.0
MAX_REQUEST = 64 * 2**20
"""The most a server reads from one request (a whole fresh tree's paths fit well within it)."""


def sys_paths(changed: Iterable[str]) -> list[str]:
    return [p for p in changed if p == "sys" or p.startswith("sys/")]


def notify(node_dir: Path, changed: Iterable[str], timeout: float = NOTIFY_TIMEOUT_S) -> int:
    """Tell every live server of the node that ``changed`` paths changed; returns how many acknowledged."""
    live = node_dir / LIVE_DIR
    try:
        sockets = [p for p in live.iterdir() if p.name.endswith(".sock")]
    except OSError:
        return 0
    paths = sys_paths(changed)
    if not sockets or not paths:
        return 0
    data = "\n".join(paths).encode()
    request = f"{len(data)}\n".encode() + data
    told = 0
    for path in sockets:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(str(path))
                s.sendall(request)
                if s.recv(1) == b"k":
                    told += 1
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(OSError):
                path.unlink()  # its server is gone
        except OSError as exc:
            log.warning("live /sys server %s did not acknowledge a change: %s", path, exc)
    return told


def read_request(conn: socket.socket) -> list[str]:
    """The paths of one notification (raises ValueError on a malformed or oversized request)."""
    head = b""
    while not head.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte or len(head) > 20:
            raise ValueError("bad request header")
        head += byte
    size = int(head)
    if not 0 <= size <= MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = conn.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ValueError("short request")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace").split("\n") if size else []
