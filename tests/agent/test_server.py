"""The control API over its unix socket and over loopback TCP: answers, refusals, and that nothing kills it."""

from __future__ import annotations

import contextlib
import json
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.agent.server import MAX_BODY
from fakehw.model import load_profile
from tests.agent_thread import agent_thread

NODE = "dgx-h100-0"
TOKEN = "s3cret-token-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    port = _free_port()
    sock = tmp_path / "agent.sock"
    # These tests speak HTTP and read no node's files: none are made (an eager dgx-h100 tree is ~48,000 entries,
    # seconds of CPU per test).
    with agent_thread(system=load_profile("dgx-h100"), state_dir=tmp_path, socket_path=sock,
                      listen=f"127.0.0.1:{port}", token=TOKEN, files="on-demand"):
        yield sock, port
    assert not sock.exists(), "the socket is removed on shutdown"


def _raw(sock_path: Path, request: bytes) -> tuple[int, dict]:  # type: ignore[type-arg]
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock_path))
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def test_socket_is_private_and_serves_the_verbs(agent: tuple[Path, int]) -> None:
    sock, _ = agent
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    client = AgentClient(sock)
    assert client.health()["nodes"] == [NODE]
    assert {k["kind"] for k in client.kinds()} >= {"xid", "fallen-off-bus", "ecc", "nvlink-down", "nvlink-errors",
                                                    "thermal", "power-cap", "fabric-degraded", "cxl-offline",
                                                    "pool-shrink"}
    fault = client.inject(NODE, "fallen-off-bus", "gpu6")
    assert client.device(NODE, "gpu6")["lost"] is True
    assert [f["id"] for f in client.faults()] == [fault["id"]]
    events = client.events(since=0)["events"]
    assert [(e["device"], e["kind"], e["data"]) for e in events] == [("gpu6", "xid", 79)]
    assert [f["id"] for f in client.heal(fault["id"])] == [fault["id"]]
    assert client.device(NODE, "gpu6")["lost"] is False
    assert client.nodes()[0]["health"] == "healthy"


@pytest.mark.parametrize(
    ("request_bytes", "status", "message"),
    [
        (b"POST /v1/faults HTTP/1.1\r\nContent-Length: 9\r\n\r\n{not json", 400, "malformed JSON body"),
        (b"POST /v1/faults HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]", 400, "expected a JSON object"),
        (b"POST /v1/faults HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1), 413, "larger than"),
        (b"POST /v1/faults HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411, "Content-Length"),
        (b"POST /v1/faults HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "bad Content-Length"),
        (b"GET /v1/nope HTTP/1.1\r\n\r\n", 404, "no such endpoint /v1/nope"),
        (b"PUT /v1/faults HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405, "PUT is not allowed on /v1/faults"),
        (b"GET /v1/nodes/ghost HTTP/1.1\r\n\r\n", 404, "unknown node 'ghost'"),
        (b"GET /v1/nodes/dgx-h100-0/devices/gpu99 HTTP/1.1\r\n\r\n", 404, "has no device 'gpu99'"),
        (b"DELETE /v1/faults/f-999999 HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 404, "no active fault 'f-999999'"),
        (b"GET /v1/events?since=x HTTP/1.1\r\n\r\n", 400, "since and limit are integers"),
        (b"GET /v1/events?wait=600 HTTP/1.1\r\n\r\n", 400, "wait must be 0..60"),
        (b"POST /v1/heal HTTP/1.1\r\nContent-Length: 13\r\n\r\n{\"color\": 1}\n", 422, "unknown field(s) color"),
    ],
)
def test_bad_requests_get_a_4xx_with_a_message(agent: tuple[Path, int], request_bytes: bytes, status: int,
                                               message: str) -> None:
    sock, _ = agent
    got, body = _raw(sock, request_bytes.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1))
    assert got == status and message in body["error"], body
    assert AgentClient(sock).health()["status"] == "ok"


def test_inject_errors_come_back_through_the_client(agent: tuple[Path, int]) -> None:
    client = AgentClient(agent[0])
    with pytest.raises(AgentRequestError) as info:
        client.inject(NODE, "xid", "gpu0", code=5000)
    assert info.value.status == 422 and "code: Input should be less than or equal to 999" in info.value.message
    with pytest.raises(AgentRequestError, match="missing \"node\""):
        client.request("POST", "/v1/faults", {"kind": "xid", "device": "gpu0", "code": 1})


def test_garbage_on_the_socket_does_not_stop_the_agent(agent: tuple[Path, int]) -> None:
    sock, _ = agent
    for junk in (b"\x00\xff" * 100 + b"\r\n\r\n", b"GET\r\n\r\n", b"", b"GET / HTTP/1.1\r\nHost: " + b"x" * 70000):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(sock))
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                s.recv(4096)
    assert AgentClient(sock).health()["status"] == "ok"


def test_tcp_listener_wants_the_token(agent: tuple[Path, int]) -> None:
    _, port = agent
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(AgentRequestError) as info:
        AgentClient(url=url).health()
    assert info.value.status == 401
    with pytest.raises(AgentRequestError) as info:
        AgentClient(url=url, token="wrong-token-0123456789").health()
    assert info.value.status == 401
    client = AgentClient(url=url, token=TOKEN)
    assert client.health()["status"] == "ok"
    assert client.inject(NODE, "thermal", "gpu0", temperature_c=91)["temperature_c"] == 91


def test_the_tcp_listener_is_loopback_only(tmp_path: Path) -> None:
    from fakehw.agent.server import TcpAgentServer
    from fakehw.agent.service import AgentService

    svc = AgentService(load_profile("gh200"), tmp_path, files="on-demand")  # the listener's checks read no file
    with pytest.raises(ValueError, match="loopback only"):
        TcpAgentServer("0.0.0.0", 0, TOKEN, svc)
    with pytest.raises(ValueError, match="at least 16 characters"):
        TcpAgentServer("127.0.0.1", 0, "short", svc)


def replaced_files_held(under: Path) -> list[str]:
    """Files under ``under`` that this process (the agent runs in it) still holds open after they were replaced:
    proc(5) gives an unlinked file's link target with " (deleted)" appended."""
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith(str(under)) and target.endswith(" (deleted)"):
                held.append(target)
    return held


def test_files_a_change_replaced_are_closed_once_it_is_answered(tmp_path: Path) -> None:
    """A render replaces files by rename and closes their last handle off the answer's path (Releaser): the
    server closes them on the thread that answered, right after the answer, so an agent whose injections are
    answered holds no replaced file open (their pages stay allocated while it does, and a full disk stays full)."""
    with agent_thread(system=load_profile("edge-pcie"), state_dir=tmp_path / "state",
                      socket_path=tmp_path / "agent.sock"):
        client = AgentClient(tmp_path / "agent.sock")
        for _ in range(3):
            client.inject("edge-0", "xid", "gpu1", code=13)
        deadline = time.monotonic() + 5
        while replaced_files_held(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert replaced_files_held(tmp_path) == []
