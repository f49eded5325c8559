"""Finding 8: request framing and field types are strict; refused pool releases and unmaps are audited.

Before: POST /v1/heal with a body but no Content-Length healed everything (the docs promise 411); POST
/v1/faults without Content-Length got 400; a duplicate Content-Length was accepted; a 5,000-digit integer got a
500; Xid code "79", 79.0 and true were all accepted; refused releases and unmaps left no audit entry;
``audit.jsonl`` was 0644.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator

import pytest

from fakehw.agent.client import AgentRequestError
from tests.hostile.conftest import AgentProcess, error_of, http_request, raw_http, start_agent


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """A cxl-pool agent that renders no node files (``--files on-demand``): every test here speaks HTTP or looks at
    the agent's own state files (journals, lock, audit), none at a node's tree (~20,000 entries on disk)."""
    d = tmp_path_factory.mktemp("strict")
    started = start_agent("cxl-pool", d / "state", d / "agent.sock", "--files", "on-demand")
    yield started
    started.stop()


@pytest.fixture(scope="module")
def node(agent: AgentProcess) -> str:
    return str(agent.client().nodes()[0]["name"])


def send(agent: AgentProcess, request: bytes) -> tuple[int, str]:
    status, _, body = raw_http(agent.socket, request)
    return status, error_of(body) if body else ""


def test_a_body_without_content_length_is_411_and_heals_nothing(agent: AgentProcess, node: str) -> None:
    fault = agent.client().inject(node, "xid", "gpu0", code=13)
    status, error = send(agent, http_request("POST", "/v1/heal", b'{"id": "f-999999"}', content_length=False))
    assert status == 411 and "needs a Content-Length" in error
    assert fault["id"] in {f["id"] for f in agent.client().faults()}, "nothing was healed"
    status, error = send(agent, http_request("POST", "/v1/faults", None))
    assert status == 411
    agent.client().heal(fault["id"])


@pytest.mark.parametrize(("extra", "message"), [
    ({"Content-Length": "40"}, "2 Content-Length headers"),
    ({"Transfer-Encoding": "chunked"}, "chunked bodies are not accepted"),
    ({}, None),
])
def test_content_length_must_be_single_and_plain(agent: AgentProcess, node: str, extra: dict[str, str],
                                                 message: str | None) -> None:
    body = json.dumps({"node": node, "kind": "xid", "device": "gpu0", "code": 13}).encode()
    status, error = send(agent, http_request("POST", "/v1/faults", body, extra))
    if message is None:
        assert status == 201
        agent.client().heal(node=node)
    else:
        assert status == 400 and message in error, (status, error)


@pytest.mark.parametrize("length", ["+41", " 0x29", "41, 41", "-1", "9" * 30])
def test_odd_content_lengths_are_refused(agent: AgentProcess, length: str) -> None:
    request = b"POST /v1/faults HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: %s\r\n\r\n{}" % (
        length.encode())
    status, error = send(agent, request)
    assert status in (400, 413) and ("Content-Length" in error or "larger than" in error), (status, error)


@pytest.mark.parametrize(("code", "message"), [
    ('"79"', "Input should be a valid integer"),
    ("79.0", "Input should be a valid integer"),
    ("true", "Input should be a valid integer"),
    ("7" * 5000, "does not fit in 64 bits"),
    ("1e999", "out of range"),
    ("NaN", "NaN is not JSON"),
])
def test_field_types_are_strict(agent: AgentProcess, node: str, code: str, message: str) -> None:
    body = b'{"node": "%s", "kind": "xid", "device": "gpu0", "code": %s}' % (node.encode(), code.encode())
    status, error = send(agent, http_request("POST", "/v1/faults", body))
    assert status in (400, 422) and message in error, (status, error[:200])
    assert agent.client().faults() == []


def test_refused_releases_and_unmaps_are_audited(agent: AgentProcess, node: str) -> None:
    client = agent.client()
    pool = client.request("GET", f"/v1/nodes/{node}/pools")[0]["name"]
    grant = client.request("POST", f"/v1/nodes/{node}/pools/{pool}/reservations", {"tenant": "a", "size": 2**20})
    mapping = client.request("POST", f"/v1/nodes/{node}/pools/{pool}/mappings", {"token": grant["token"],
                                                                                 "who": "consumer"})
    before = len(client.request("GET", "/v1/pools/audit"))
    wrong = f"fhw1.{grant['grant']['token_id']}.not-the-secret"
    for method, path in (("DELETE", f"/v1/pools/grants/{grant['grant']['id']}"),
                         ("DELETE", f"/v1/pools/mappings/{mapping['id']}"),
                         ("DELETE", "/v1/pools/grants/g-999999")):
        with pytest.raises(AgentRequestError) as refused:
            client.request(method, path, {"token": wrong})
        assert refused.value.status in (403, 404)
    entries = client.request("GET", "/v1/pools/audit")[before:]
    assert [e["action"] for e in entries] == ["release-refused", "unmap-refused", "release-refused"]
    assert entries[0]["grant"] == grant["grant"]["id"] and "does not belong" in entries[0]["reason"]
    assert entries[1]["who"] == "consumer" and entries[1]["target"] == mapping["id"]
    assert entries[2]["target"] == "g-999999" and entries[2]["reason"] == "no such live grant"
    assert all(e["token_id"] == grant["grant"]["token_id"] for e in entries), "token ids only, never secrets"
    client.request("DELETE", f"/v1/pools/grants/{grant['grant']['id']}", {"token": grant["token"]})


def test_the_state_files_are_private(agent: AgentProcess) -> None:
    for name in ("audit.jsonl", "journal.jsonl", "journal.jsonl.meta", "platform.jsonl", "agent.lock"):
        mode = stat.S_IMODE(os.stat(agent.state_dir / name).st_mode)
        assert mode == 0o600, f"{name} is {mode:04o}"
    assert stat.S_IMODE(os.stat(agent.state_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(agent.socket).st_mode) == 0o600
    assert json.loads((agent.state_dir / "agent.lock").read_text())["pid"] == agent.proc.pid


def test_the_health_report_names_the_journals(agent: AgentProcess) -> None:
    health = agent.client().health()
    assert health["status"] == "ok" and health["disk_full"] is None and health["stale_nodes"] == {}
    assert health["journals"]["faults"]["problems"] == [] and health["journals"]["platform"]["kept"] is None
