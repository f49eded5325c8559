"""Chaos verbs that need containers: kill, restart (faults come back from the journal), pause, partition.

They run on amd64 nodes: what they exercise (the engine, the agent's journal, the network) does not depend on
the node's architecture, and emulated nodes would only make them slower.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakehw.agent.client import AgentClient, AgentRequestError
from testbed import BackendError, Testbed
from testbed.backends.docker import DockerBackend
from tests.docker.probes import NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED, NVML_PROBE, parse

BIN = Path(sys.executable).parent
CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection((sys.argv[1], 8080), timeout=3).close(); print('connected')\n"
           "except OSError as exc:\n"
           "    print('failed', type(exc).__name__)\n")


def _links(tb: Testbed, node: str, gpu: int) -> dict[int, int]:
    answer: dict[str, Any] = parse(tb.exec(node, ["python", "-c", NVML_PROBE], timeout=120))
    return {int(k): v for k, v in answer["gpus"][gpu]["links"].items()}


def _backend(tb: Testbed) -> DockerBackend:
    assert isinstance(tb.backend, DockerBackend)
    return tb.backend


def test_kill_and_restart_bring_the_faults_back_from_the_journal(docker_testbed: Callable[..., Testbed]) -> None:
    tb = docker_testbed("dgx-h100", nodes=2)
    backend = _backend(tb)
    node, other = tb.record.nodes
    fault = tb.inject(node, "nvlink-down", "gpu1", link=3)
    assert _links(tb, node, 1)[3] == NVML_FEATURE_DISABLED

    assert backend.kill_node(tb.record, node) == f"node {node} killed"
    assert not tb.alive()
    with pytest.raises(BackendError, match="not running"):
        tb.exec(node, ["true"])
    assert _links(tb, other, 1)[3] == NVML_FEATURE_ENABLED  # the other node is untouched

    message = backend.restart_node(tb.record, node)
    assert message == f"node {node} restarted; 1 fault(s) restored from its journal"
    assert tb.alive()
    assert [f["id"] for f in tb.agent(node).faults(node)] == [fault["id"]]
    assert _links(tb, node, 1)[3] == NVML_FEATURE_DISABLED
    tb.heal(fault["id"])
    assert _links(tb, node, 1)[3] == NVML_FEATURE_ENABLED


def test_pause_freezes_the_node_and_unpause_resumes_it(docker_testbed: Callable[..., Testbed]) -> None:
    tb = docker_testbed("dgx-h100")
    backend = _backend(tb)
    node = tb.record.nodes[0]
    socket_path = tb.node(node).dir.parent.parent / "agent.sock"
    backend.pause_node(tb.record, node)
    assert tb.alive()  # paused, not gone
    with pytest.raises(AgentRequestError):
        AgentClient(socket_path, timeout=2).health()
    backend.unpause_node(tb.record, node)
    assert AgentClient(socket_path, timeout=10).health()


def test_partition_cuts_the_node_off_the_others_but_not_off_its_agent(
        docker_testbed: Callable[..., Testbed]) -> None:
    tb = docker_testbed("dgx-h100", nodes=2)
    backend = _backend(tb)
    a, b = tb.record.nodes
    import docker

    client = docker.from_env()
    client.containers.get(backend.container_name(tb.record, b)).exec_run(
        ["python", "-m", "http.server", "8080"], detach=True)

    def reach() -> str:
        for _ in range(50):  # the server may still be starting
            out = tb.exec(a, ["python", "-c", CONNECT, b]).stdout.decode().strip()
            if out == "connected":
                return out
            time.sleep(0.2)
        return out

    assert reach() == "connected"
    address = backend.node_address(tb.record, b)
    assert address is not None
    assert backend.partition_node(tb.record, b) == f"node {b} partitioned from the other nodes"
    assert backend.node_address(tb.record, b) is None
    out = tb.exec(a, ["python", "-c", CONNECT, b]).stdout.decode().strip()
    assert out.startswith("failed"), out
    fault = tb.inject(b, "xid", "gpu0", code=48)  # the control path does not use the cluster network
    assert tb.state(b)["faults"]
    tb.heal(fault["id"])
    assert backend.unpartition_node(tb.record, b) == f"node {b} rejoined the cluster network"
    assert backend.node_address(tb.record, b) is not None
    assert reach() == "connected"
    client.close()


def test_chaos_cli(docker_testbed: Callable[..., Testbed], testbed_state_dir: Path) -> None:
    tb = docker_testbed("dgx-h100")
    node = tb.record.nodes[0]
    state = ["--name", tb.name, "--state-dir", str(testbed_state_dir)]
    for verb, expect in (("pause", "paused"), ("unpause", "unpaused"), ("kill", "killed"),
                         ("restart", "restarted; 0 fault(s) restored")):
        proc = subprocess.run([str(BIN / "testbed"), "chaos", verb, node, *state], capture_output=True, text=True,
                              timeout=180)
        assert proc.returncode == 0 and expect in proc.stdout, (verb, proc.stdout, proc.stderr)
    bad = subprocess.run([str(BIN / "testbed"), "chaos", "kill", "no-such-node", *state], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "has no node 'no-such-node'" in bad.stderr and "Traceback" not in bad.stderr
    status = subprocess.run([str(BIN / "testbed"), "status", *state], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and node in status.stdout and "8 healthy" in status.stdout
