"""A RoCE fabric over Docker nodes: every node's NICs appear inside its container, cabled to the fabric's
switches, and real frames cross between containers; tearing the fabric down takes the NICs away again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.fabric.emulate import root_problem
from fakehw.fabric.model import load_fabric
from testbed import Testbed

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(root_problem() is not None, reason=f"needs root for namespaces: {root_problem()}")


def _testbed(tb: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    command, *rest = args
    sub = [command] if command != "fabric" else [command, rest.pop(0)]
    return subprocess.run([str(BIN / "testbed"), *sub, "--name", tb.name, "--state-dir", str(tb.record.dir.parent),
                           *rest], capture_output=True, text=True, timeout=300)


def _netdevs(tb: Testbed, node: str) -> set[str]:
    """Interfaces of the container's network namespace, from netlink (its /sys/class/net is the fake tree)."""
    out = tb.exec(node, ["ip", "-o", "link", "show"], timeout=60).stdout.decode()
    return {line.split(": ")[1].split("@")[0] for line in out.splitlines() if ": " in line}


def test_a_fabric_cables_the_containers_and_probes_cross_between_them(
        docker_testbed: Callable[..., Testbed]) -> None:
    model = load_fabric("dgx-h100-rail")
    tb = docker_testbed("dgx-h100-roce", nodes=len(model.system.nodes))
    expected = {n.nic.netdev for n in model.nics if n.node == model.system.nodes[0].name}  # what the fabric cables
    assert not expected & _netdevs(tb, "dgx-h100-1"), "no NICs before the fabric is up"
    up = _testbed(tb, "fabric", "up", "dgx-h100-rail")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        for node in model.system.nodes:
            assert expected <= _netdevs(tb, node.name), node.name
        probe = _testbed(tb, "fabric", "probe")
        assert probe.returncode == 0, probe.stdout[-3000:]
        assert "FAB-DYN-REACH-001" in probe.stdout and "all passed" in probe.stdout
    finally:
        down = _testbed(tb, "fabric", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not expected & _netdevs(tb, "dgx-h100-1"), "the fabric's NICs left with it"


def test_a_fabric_for_nodes_the_cluster_lacks_is_refused(docker_testbed: Callable[..., Testbed]) -> None:
    tb = docker_testbed("dgx-h100-roce", nodes=2)
    r = _testbed(tb, "fabric", "up", "dgx-h100-rail")
    assert r.returncode == 2 and "cables node(s) dgx-h100-2, dgx-h100-3, which cluster" in r.stderr
