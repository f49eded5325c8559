"""The client keeps its connection between requests and replaces one the agent closed, without a retry budget.

A plain socket server stands in for the agent, so the test sees exactly how many connections the client opened."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.client import AgentClient


class _Server:
    """Answers ``{"n": <request number>}`` to every request, a thread per connection (as the agent);
    ``keep``: answers per connection before closing it."""

    def __init__(self, path: Path, keep: int):
        self.connections = 0
        self.requests = 0
        self._keep = keep
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(str(path))
        self._sock.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            for _ in range(self._keep):
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                if b"\r\n\r\n" not in buf:
                    break
                _, _, buf = buf.partition(b"\r\n\r\n")
                with self._lock:
                    self.requests += 1
                    body = b'{"n": %d}' % self.requests
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "agent.sock"


@pytest.fixture
def keeping(sock_path: Path) -> Iterator[_Server]:
    server = _Server(sock_path, keep=100)
    yield server
    server.close()


@pytest.fixture
def closing(sock_path: Path) -> Iterator[_Server]:
    server = _Server(sock_path, keep=1)
    yield server
    server.close()


def test_requests_of_a_thread_share_one_connection(keeping: _Server, sock_path: Path) -> None:
    client = AgentClient(sock_path, retries=0)
    assert [client.health()["n"] for _ in range(3)] == [1, 2, 3]
    assert keeping.connections == 1
    client.close()


def test_a_connection_the_agent_closed_is_replaced_even_without_retries(closing: _Server, sock_path: Path) -> None:
    client = AgentClient(sock_path, retries=0)
    assert [client.health()["n"] for _ in range(3)] == [1, 2, 3]
    assert closing.connections == 3, "each answer's connection was closed by the server: a new one per request"
    client.close()


def test_threads_do_not_share_a_connection(keeping: _Server, sock_path: Path) -> None:
    client = AgentClient(sock_path, retries=0)
    answers: list[int] = []

    def work() -> None:
        answers.extend(client.health()["n"] for _ in range(2))
        client.close()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(answers) == [1, 2, 3, 4, 5, 6]
    assert keeping.connections == 3


def test_a_forked_child_does_not_use_its_parents_connection(keeping: _Server, sock_path: Path) -> None:
    client = AgentClient(sock_path, retries=0)
    assert client.health()["n"] == 1
    pid = os.fork()
    if pid == 0:  # the child: its own connection, or the parent's answers would interleave with its own
        try:
            ok = client.health()["n"] == 2
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client.health()["n"] == 3, "the parent's connection still works"
    assert keeping.connections == 2
    client.close()
