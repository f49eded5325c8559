"""Finding 5: what an unauthenticated TCP peer can make the agent hold is bounded; a burst of clients is served.

Before: headers were read in full before the token was checked and the 30 s timeout was per ``recv``, so 150
connections with 99 x 64 KB headers took the agent from 46 MB to 288-996 MB and a peer sending one byte every few
seconds kept its connection forever; the unix socket's listen backlog was 5 and the client never retried, so 32
threads of the project's own AgentClient saw 17-69 % "Resource temporarily unavailable" against one agent serving
the 18 trays of gb200-nvl72.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.agent.server import HEADER_DEADLINE_S, MAX_HEADER_BYTES, MAX_UNAUTHENTICATED
from tests.hostile.conftest import AgentProcess, error_of, http_request, raw_http

FLOOD_CONNECTIONS = 150
FLOOD_HEADERS = 99


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tcp_agent(agents: Callable[..., AgentProcess], tmp_path: Path) -> Iterator[AgentProcess]:
    """A gh200 agent on loopback TCP with a token. It renders no node files (``--files on-demand``): the tests that
    use it are about what the HTTP layer accepts and holds, which reads no file (rendering the node wrote ~14,500
    entries per test to the disk, whose inode allocation slows after deletes: docs/testbed.md)."""
    token = secrets.token_hex(16)
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    port = _free_port()
    agent = agents("gh200", tmp_path / "state", tmp_path / "agent.sock", "--listen", f"127.0.0.1:{port}",
                   "--token-file", str(token_file), "--files", "on-demand")
    agent.port, agent.token = port, token
    yield agent


def test_oversized_headers_are_refused_before_authentication(tcp_agent: AgentProcess) -> None:
    assert tcp_agent.port is not None
    padding = "".join(f"X-Pad-{i}: {'a' * 1000}\r\n" for i in range(MAX_HEADER_BYTES // 1000 + 2))
    request = f"GET /v1/health HTTP/1.1\r\nHost: a\r\n{padding}\r\n".encode()
    status, headers, body = raw_http(("127.0.0.1", tcp_agent.port), request)
    assert status == 431 and f"larger than {MAX_HEADER_BYTES} bytes" in error_of(body)
    assert headers.get("connection") == "close"
    status, _, body = raw_http(("127.0.0.1", tcp_agent.port), http_request("GET", "/v1/health"))
    assert status == 401 and "bearer token" in error_of(body)


def _flood(port: int, sent: Counter[str]) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /v1/health HTTP/1.1\r\n")
            for i in range(FLOOD_HEADERS):
                s.sendall(b"X-A%d: %s\r\n" % (i, b"a" * 65000))
                sent["headers"] += 1
    except OSError:
        sent["cut off"] += 1


def test_a_header_flood_of_150_connections_leaves_memory_bounded(tcp_agent: AgentProcess) -> None:
    assert tcp_agent.port is not None
    before = tcp_agent.rss_mb()
    sent: Counter[str] = Counter()
    threads = [threading.Thread(target=_flood, args=(tcp_agent.port, sent)) for _ in range(FLOOD_CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    after = tcp_agent.rss_mb()
    print(f"agent RSS {before:.0f} MB before, {after:.0f} MB after {FLOOD_CONNECTIONS} connections sending up to "
          f"{FLOOD_HEADERS} x 64 KB headers ({sent['headers']} header lines accepted, {sent['cut off']} cut off)")
    assert sent["cut off"] == FLOOD_CONNECTIONS, "every flooding connection is cut off"
    assert after - before < 64, f"RSS grew by {after - before:.0f} MB"
    assert tcp_agent.client().health()["status"] == "ok"


def test_a_peer_dripping_one_byte_at_a_time_is_cut_off(tcp_agent: AgentProcess) -> None:
    assert tcp_agent.port is not None
    start = time.monotonic()
    closed = False
    with socket.create_connection(("127.0.0.1", tcp_agent.port), timeout=1) as s:
        s.sendall(b"GET /v1/health HTTP/1.1\r\nX-Slow: ")
        while time.monotonic() - start < 4 * HEADER_DEADLINE_S:
            try:
                s.sendall(b"a")
                if s.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue  # nothing to read yet: keep dripping
            except OSError:
                closed = True
                break
    assert closed, f"a peer dripping a byte a second was still connected after {4 * HEADER_DEADLINE_S:.0f} s"


def test_unauthenticated_connections_are_capped_and_the_unix_socket_still_serves(tcp_agent: AgentProcess) -> None:
    assert tcp_agent.port is not None
    idle = [socket.create_connection(("127.0.0.1", tcp_agent.port), timeout=5) for _ in range(MAX_UNAUTHENTICATED)]
    try:
        time.sleep(0.2)  # let the agent accept them all
        for _ in range(4):
            status, headers, body = raw_http(("127.0.0.1", tcp_agent.port), http_request("GET", "/v1/health"))
            assert status == 503 and "too many connections" in error_of(body) and headers.get("retry-after")
        assert tcp_agent.client().health()["status"] == "ok"
    finally:
        for s in idle:
            s.close()
    client = AgentClient(url=f"http://127.0.0.1:{tcp_agent.port}", token=tcp_agent.token)
    assert client.health()["status"] == "ok", "slots come back when the idle peers go"


def test_32_threads_against_one_agent_serving_18_trays_see_no_errors(fast_tmp: Path,
                                                                     agents: Callable[..., AgentProcess]) -> None:
    """The agent renders every tray's files (the default) and an injection re-renders its node, so the threads
    race the rendering too; its state dir (157,000 entries, 575 MB) is on ``fast_tmp``: the agent is a process on
    the host that no node view reads, and on the disk the test took 37.7 s in CI (2026-11-28). ``fast_tmp`` comes
    first so that it is removed after ``agents`` has stopped the agent (which writes its journal's meta file as it
    stops)."""
    agent = agents("gb200-nvl72", fast_tmp, fast_tmp / "agent.sock")
    nodes = [n["name"] for n in agent.client().nodes()]
    assert len(nodes) == 18
    errors: Counter[str] = Counter()
    done: Counter[str] = Counter()

    def work(k: int) -> None:
        client = AgentClient(agent.socket)
        for i in range(40):
            node = nodes[(k + i) % len(nodes)]
            try:
                if i % 4 == 0:
                    client.inject(node, "thermal", "gpu0", temperature_c=85)
                else:
                    client.state(node)
                done["ok"] += 1
            except AgentRequestError as exc:
                errors[exc.message[:80]] += 1

    threads = [threading.Thread(target=work, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, dict(errors)
    assert done["ok"] == 32 * 40
