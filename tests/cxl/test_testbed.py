"""End to end on the local testbed: the agent process, its HTTP API, the ``testbed cxl``/``testbed pool`` verbs,
and hwloc reading the node's tree as a CXL memdev goes offline and comes back."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehw.agent.client import AgentRequestError
from fakehw.agent.cxl import GiB
from fakehw.sysfs.hwloc import HwlocTopology, lstopo, lstopo_path
from testbed.api import Testbed

NODE = "cxl-host-0"
TESTBED = str(Path(sys.executable).with_name("testbed"))


def _memory(topo: HwlocTopology, numa: int) -> int:
    return int(topo.numa()[numa].attrs.get("local_memory", "0"))


@pytest.fixture(scope="module")
def cluster(testbed_state_dir: Path) -> Iterator[Testbed]:
    """One cluster for the module (standing one up is the slow part); every test leaves mem0 online."""
    tb = Testbed.up("cxl-pool", name="cxl-e2e", state_dir=testbed_state_dir)
    yield tb
    tb.down()


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
