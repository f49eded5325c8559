"""End to end on the local testbed: the agent process, its HTTP API, the ``testbed cxl``/``testbed pool`` verbs,
hwloc reading the node's tree as a CXL memdev goes offline and comes back, and ``testbed exec`` seeing the node's
live ``/sys`` (mounted on first use, replaced when its server dies, kept across an agent restart, gone with the
cluster)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.client import AgentRequestError
from fakehw.agent.cxl import GiB
from fakehw.livefs import unavailable
from fakehw.livefs.mount import LiveMount, live_mounts
from fakehw.sysfs.hwloc import HwlocTopology, lstopo, lstopo_path
from testbed import nodeview
from testbed.api import Testbed
from testbed.backends.local import LocalBackend

NODE = "cxl-host-0"
TESTBED = str(Path(sys.executable).with_name("testbed"))


def _memory(topo: HwlocTopology, numa: int) -> int:
    return int(topo.numa()[numa].attrs.get("local_memory", "0"))


@pytest.fixture(scope="module")
def cluster(testbed_state_dir: Path) -> Iterator[Testbed]:
    """One cluster for the module (standing one up is the slow part); every test leaves mem0 online."""
    tb = Testbed.up("cxl-pool", name="cxl-e2e", state_dir=testbed_state_dir)
    yield tb
    live = tb.record.dir / "live"
    tb.down()
    assert live_mounts(live) == [], "a live /sys stayed mounted after down"


def cli(tb: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TESTBED, *args, "--name", tb.name, "--state-dir", str(tb.record.dir.parent)],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(lstopo_path() is None, reason="hwloc is not installed (tools/install-system-deps.sh)")
def test_hwloc_sees_a_cxl_memdev_go_offline_and_come_back(cluster: Testbed) -> None:
    root = Path(cluster.node(NODE).env["FAKEHW_ROOT"])
    node = cluster.system.node(NODE)
    assert node is not None
    cxl = cluster.agent().cxl(NODE)
    region = next(r for r in cxl["regions"] if "mem0" in r["targets"])
    numa, size = region["numa"], region["size"]
    memdev = next(m["memdev"] for m in cxl["memdevs"] if m["name"] == "mem0")
    dax = f"dax{region['name'].removeprefix('region')}.0"

    def look() -> tuple[int, bool, str]:
        topo = lstopo(root)
        # libcxl's test for an enabled memdev: a driver link (cxl_mem bound)
        state = "online" if (root / "sys/bus/cxl/devices" / memdev / "driver").is_symlink() else "offline"
        return _memory(topo, numa), dax in topo.osdevs(), state

    boot = look()
    assert boot == (next(n.memory for n in node.numa if n.id == numa), False, "online") and boot[0] == size
    # An operator takes the memdev offline with the testbed CLI: cxl_mem unbinds, its region loses a target, so the
    # region is torn down as the kernel does (no DAX device) and its memory leaves the NUMA node.
    done = cli(cluster, "cxl", "offline", NODE, "mem0")
    assert done.returncode == 0, done.stderr
    assert look() == (boot[0] - size, False, "offline")
    assert cli(cluster, "cxl", "online", NODE, "mem0").returncode == 0
    assert look() == boot
    # The same through a fault (a device that fails rather than an operator's choice), healed.
    fault = cluster.inject(NODE, "cxl-offline", "mem0")
    assert look() == (boot[0] - size, False, "offline")
    cluster.heal(fault["id"])
    assert look() == boot


@pytest.mark.skipif(lstopo_path() is None, reason="hwloc is not installed (tools/install-system-deps.sh)")
def test_cli_regions_pools_and_refusals(cluster: Testbed) -> None:
    root = Path(cluster.node(NODE).env["FAKEHW_ROOT"])
    made = cli(cluster, "cxl", "create-region", NODE, "--window", "cfmws0", "--targets", "mem1,mem2", "--size",
               "2GiB", "--json")
    assert made.returncode == 0, made.stderr
    region = json.loads(made.stdout)
    topo = lstopo(root)
    assert _memory(topo, region["numa"]) == 2 * GiB
    assert topo.numa()[region["numa"]].info("DAXDevice") == f"dax{region['name'].removeprefix('region')}.0"
    bad = cli(cluster, "cxl", "create-region", NODE, "--window", "cfmws0", "--targets", "mem1,mem5")
    assert bad.returncode == 2
    assert "mem5 sits under host bridge cxlhb1, which window cfmws0 does not interleave" in bad.stderr
    held = cli(cluster, "cxl", "assign", "pool0", "0", "cxl-host-1")
    assert held.returncode == 2 and "held by cxl-host-0" in held.stderr
    grant = cli(cluster, "pool", "reserve", NODE, "cxl-pooled", "team-a", "4GiB", "--json")
    assert grant.returncode == 0, grant.stderr
    token = json.loads(grant.stdout)["token"]
    refused = cli(cluster, "pool", "map", NODE, "cxl-pooled", "--who", "pod-x", "--token", "forged")
    assert refused.returncode == 2 and "mapping refused" in refused.stderr
    mapped = cli(cluster, "pool", "map", NODE, "cxl-pooled", "--who", "pod-a", "--token", token)
    assert mapped.returncode == 0, mapped.stderr
    audit = cli(cluster, "pool", "audit", "--json")
    assert [e["action"] for e in json.loads(audit.stdout)] == ["grant-reservation", "map-refused", "map"]


def test_http_errors_carry_the_reason(cluster: Testbed) -> None:
    agent = cluster.agent()
    with pytest.raises(AgentRequestError) as info:
        agent.create_region(NODE, "cfmws2", ["mem1", "mem2"])
    assert info.value.status == 422 and "spread evenly" in info.value.message
    with pytest.raises(AgentRequestError) as info:
        agent.request("POST", f"/v1/nodes/{NODE}/cxl/regions", ["not", "an", "object"])
    assert info.value.status == 400
    with pytest.raises(AgentRequestError) as info:
        agent.map_pool(NODE, "hbm", None, "pod-1")
    assert info.value.status == 403 and "no access token" in info.value.message
    with pytest.raises(AgentRequestError) as info:
        agent.request("GET", "/v1/pools/audit?limit=0")
    assert info.value.status == 400
    assert agent.health()["status"] == "ok"


# --------------------------------------------------------------------------------------------------- live /sys

needs_live = pytest.mark.skipif(unavailable() is not None or os.geteuid() != 0,
                                reason=f"a live /sys needs root and FUSE: {unavailable() or 'not root'}")


def _server(tb: Testbed, node: str) -> LiveMount:
    mounts = LocalBackend().live_mounts(tb.record)
    return LiveMount(tb.record.node_dir(node) / "root/sys", mounts.mountpoint(node), Path(), node)


@needs_live
def test_exec_mounts_the_live_sys_on_first_use_and_real_cxl_writes_reach_the_agent(cluster: Testbed) -> None:
    assert _server(cluster, "cxl-host-1").server_pid() is None  # lazy: no command ran on the other node
    listed = cluster.exec(NODE, ["cxl", "list", "-M", "-m", "mem3"])
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)[0]["memdev"]
    assert _server(cluster, NODE).alive()
    done = cluster.exec(NODE, ["cxl", "disable-memdev", json.loads(listed.stdout)[0]["memdev"], "--force"])
    assert done.returncode == 0, done.stderr
    try:
        memdev = next(m for m in cluster.agent().cxl(NODE)["memdevs"] if m["name"] == "mem3")
        assert memdev["online"] is False and memdev["admin_online"] is False
    finally:
        cluster.agent().memdev_online(NODE, "mem3", True)
    # The node's /sys is the live one: a write the kernel refuses fails with its errno inside the node view too.
    refused = cluster.exec(NODE, ["sh", "-c", "echo 7 > /sys/bus/cxl/devices/mem0/numa_node"])
    assert refused.returncode != 0 and b"Permission denied" in refused.stderr


@needs_live
def test_a_dead_server_is_replaced_by_the_next_exec(cluster: Testbed) -> None:
    assert cluster.exec(NODE, ["true"]).returncode == 0
    server = _server(cluster, NODE)
    pid = server.server_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the server of this test's own mount, by its pid
    deadline = time.monotonic() + 10
    while server.server_pid() == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.server_pid() is None and live_mounts(server.mountpoint)  # stale: mounted, nobody serving
    serial = cluster.exec(NODE, ["cat", "/sys/bus/cxl/devices/mem0/serial"])
    assert serial.returncode == 0 and serial.stdout.startswith(b"0x"), serial.stderr
    assert server.alive() and server.server_pid() != pid


@needs_live
def test_the_live_sys_outlives_an_agent_restart(cluster: Testbed) -> None:
    """A kernel's sysfs outlives any daemon; so does a node's live /sys outlive its agent. A command that runs
    across the restart reads on, one started afterwards in a view made before it (the device-plugin suite's
    launcher) finds /sys, and a write while the agent is down fails with EIO and changes nothing. (When an agent
    stop unmounted every live /sys, NVIDIA's device plugin, restarted after DP-CHAOS-004's agent restart, got the
    bare mount point as /sys: ENOENT for every numa_node, so NUMA "none" for every GPU.)"""
    backend = LocalBackend()
    view = backend.node_view(cluster.record, NODE)
    server = _server(cluster, NODE)
    pid = server.server_pid()
    assert pid is not None
    serial = "/sys/bus/cxl/devices/mem0/serial"
    across = subprocess.Popen(nodeview.command(view, ["sh", "-c", f"read go; cat {serial}"]),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        before = _run_in(view, ["cat", serial])
        backend.stop_agent(cluster.record)
        try:
            assert server.server_pid() == pid and server.alive()
            assert _run_in(view, ["cat", serial]) == before
            unbind = _run_in(view, ["sh", "-c", "echo mem0 > /sys/bus/cxl/drivers/cxl_mem/unbind"], check=False)
            assert b"I/O error" in unbind, unbind  # dash's words for EIO
        finally:
            backend.start_agent(cluster.record)
        out, err = across.communicate(b"go\n", timeout=60)
        assert across.returncode == 0 and out == before, err
        assert _run_in(view, ["cat", serial]) == before
        assert server.server_pid() == pid
        assert next(m for m in cluster.agent().cxl(NODE)["memdevs"] if m["name"] == "mem0")["online"] is True
    finally:
        across.kill()
        across.wait()


def _run_in(view: nodeview.NodeView, argv: list[str], check: bool = True) -> bytes:
    """``argv``'s stdout in ``view`` (stdout and stderr when ``check`` is off: what a failure says)."""
    done = subprocess.run(nodeview.command(view, argv), capture_output=True, timeout=120, check=False)
    if check:
        assert done.returncode == 0, done.stderr
        return done.stdout
    assert done.returncode != 0, done.stdout
    return done.stdout + done.stderr


@needs_live
def test_a_view_whose_live_sys_is_not_mounted_is_refused(cluster: Testbed) -> None:
    """An empty mount point is never shown as /sys: a reader would take ENOENT for "no such device"."""
    view = LocalBackend().node_view(cluster.record, NODE)
    empty = cluster.record.dir / "not-mounted"
    empty.mkdir(exist_ok=True)
    bare = nodeview.NodeView(view.root, (nodeview.Bind(str(empty), "/sys"),), writable_sys=True)
    done = subprocess.run(nodeview.command(bare, ["true"]), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == nodeview.EXIT_SETUP
    assert f"{empty} (for /sys) is empty: the node's live /sys is not mounted there" in done.stderr
