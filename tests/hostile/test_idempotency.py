"""Finding 3 (retries): a client that repeats a change whose answer it lost gets the first answer, not a second
change. Before: no idempotency keys, so a retrying client duplicated faults."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakehw.agent.client import AgentClient
from tests.hostile.conftest import AgentProcess, error_of, http_request, raw_http
from tests.http_message import read_message

NODE = "gh200-0"
ON_DEMAND = ("--files", "on-demand")
"""The agents here make no node files (none is asked for): idempotency is what the API answers and journals, and
rendering each agent's node (~14,000 entries) cost more than the requests."""


@pytest.fixture
def agent(agents: Callable[..., AgentProcess], tmp_path: Path) -> AgentProcess:
    return agents("gh200", tmp_path / "state", tmp_path / "agent.sock", *ON_DEMAND)


def post(agent: AgentProcess, path: str, body: object, key: str | None) -> tuple[int, dict[str, str], object]:
    headers = {"Idempotency-Key": key} if key else {}
    status, head, raw = raw_http(agent.socket, http_request("POST", path, json.dumps(body).encode(), headers))
    return status, head, json.loads(raw)


def test_the_same_key_gets_the_same_answer_and_one_fault(agent: AgentProcess) -> None:
    body = {"node": NODE, "kind": "xid", "device": "gpu0", "code": 13}
    first = post(agent, "/v1/faults", body, "k-1")
    again = post(agent, "/v1/faults", body, "k-1")
    assert first[0] == again[0] == 201 and first[2] == again[2]
    assert again[1].get("idempotent-replayed") == "true" and "idempotent-replayed" not in first[1]
    assert len(agent.client().faults()) == 1
    other = post(agent, "/v1/faults", {**body, "code": 31}, "k-1")
    assert other[0] == 422 and "used for a different request" in str(other[2])
    assert len(agent.client().faults()) == 1


def test_answers_survive_a_restart(agents: Callable[..., AgentProcess], agent: AgentProcess) -> None:
    body = {"node": NODE, "kind": "thermal", "device": "gpu0", "temperature_c": 90}
    first = post(agent, "/v1/faults", body, "inject-1")
    healed = post(agent, "/v1/heal", {"id": first[2]["id"]}, "heal-1")  # type: ignore[index]
    agent.stop()
    again = agents("gh200", agent.state_dir, agent.socket, *ON_DEMAND)
    assert post(again, "/v1/faults", body, "inject-1")[2] == first[2], "the inject is not applied twice"
    assert post(again, "/v1/heal", {"id": first[2]["id"]}, "heal-1")[2] == healed[2]  # type: ignore[index]
    assert again.client().faults() == []


def test_a_malformed_key_is_refused(agent: AgentProcess) -> None:
    status, _, raw = raw_http(agent.socket, http_request(
        "POST", "/v1/faults", b"{}", {"Idempotency-Key": "x" * 300}))
    assert status == 400 and "Idempotency-Key must be 1-255 visible ASCII characters" in error_of(raw)


class DropFirstAnswer:
    """A unix-socket proxy that forwards the first request but hangs up before relaying its answer (the answer
    is lost on the way), and relays everything after that."""

    def __init__(self, target: Path, path: Path):
        self.target = target
        self.path = path
        self.dropped = 0
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn, socket.socket(socket.AF_UNIX) as up:
                conn.settimeout(10)
                up.settimeout(10)
                up.connect(str(self.target))
                with contextlib.suppress(OSError):
                    up.sendall(read_message(conn))
                answer = read_message(up)
                if self.dropped == 0:
                    self.dropped += 1
                    continue  # the change was made; its answer never arrives
                conn.sendall(answer)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def lossy(agent: AgentProcess, tmp_path: Path) -> Iterator[DropFirstAnswer]:
    proxy = DropFirstAnswer(agent.socket, tmp_path / "lossy.sock")
    yield proxy
    proxy.close()


def test_the_client_retries_a_lost_answer_without_applying_twice(agent: AgentProcess,
                                                                 lossy: DropFirstAnswer) -> None:
    client = AgentClient(lossy.path)
    fault = client.inject(NODE, "xid", "gpu0", code=43)
    assert lossy.dropped == 1, "the first answer was lost on the way"
    assert [f["id"] for f in agent.client().faults()] == [fault["id"]], "one fault, not two"
