"""The real ``nvidia-smi mig`` (535, 550, 555: Debian non-free) against a running node: profiles, create/list/destroy.

Each branch's nvidia-smi runs against the profile pinned to its own driver (``extends`` + ``driver.version``).
Traced with ``LD_DEBUG=bindings`` and ``FAKEHW_NVML_TRACE=1``, 550 and 555 bind the same 26 NVML functions for
``-mig``, ``-lgip``, ``-lgipp``, ``-cgi -C``, ``-lgi``, ``-lci``, ``-lcip``, ``-dci``, ``-dgi`` as 535 (the
versioned ``nvmlDeviceGetGpuInstanceProfileInfoV``/``nvmlGpuInstanceGetComputeInstanceProfileInfoV`` and
``nvmlDeviceGetGpuInstancePossiblePlacements_v2`` among them) and reach no stub or unknown export-table slot.

A testbed node with its agent is what a user has: nvidia-smi changes MIG through the fake library, which asks the
node agent; the agent journals the change and re-renders. Expected values are real ``nvidia-smi`` outputs
(``tests/nvml/migtools.py`` names the sources) and the NVIDIA MIG user guide:

- ``nvidia-smi mig -cgi 9,3g.20gb -C`` on an A100 printed GPU instance ids 2 then 1, ``-lgi`` showed id 1 at 4:4 and
  id 2 at 0:4, and ``/proc/driver/nvidia/capabilities/gpu0/mig/gi2/access`` read ``DeviceFileMinor: 21``
  (MIG user guide, "Creating GPU Instances" and "Device Nodes and Capabilities");
- ``nvidia-smi mig -cgi 19,19,19,19,19,19,19`` on a fresh A100 printed ids 9, 7, 8, 11, 12, 13, 14
  (rapidsai/dask-cuda#583).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.api import Testbed
from tests.nvml import references
from tests.nvml.helpers import with_driver
from tests.nvml.migtools import A100_80GB_LGIP, H100_80GB_LGIP, LGIPP, MigNode, parse_lci, parse_lgi, parse_lgip

PUBLISHED = {"dgx-h100": H100_80GB_LGIP, "dgx-a100": A100_80GB_LGIP}


@pytest.fixture
def mig_node(testbed_factory: Callable[..., Testbed], tmp_path: Path) -> Callable[..., MigNode]:
    """``mig_node(profile, branch)``: a running node of ``profile`` pinned to ``branch``'s driver, with that
    branch's real nvidia-smi (a nvidia-smi refuses a library of another release)."""

    def make(profile: str, branch: int = 535) -> MigNode:
        real = references.real_nvidia(branch)
        tb = testbed_factory(str(with_driver(tmp_path, profile, real.driver_version)))
        return MigNode(tb, tb.system.nodes[0].name, real)

    return make


# The real nvidia-smi of every branch Debian ships (535 bookworm, 550 trixie, 555 experimental) runs the profile
# listing and the create/list/destroy cycle; the rest of the file runs 535.
BRANCHES = [535, 550, 555]


def _enable(node: MigNode, gpu: int = 0) -> None:
    out = node.ok("-i", str(gpu), "-mig", "1")
    assert out.startswith("Enabled MIG Mode for GPU"), out


@pytest.mark.parametrize("branch", BRANCHES, ids=lambda b: f"smi{b}")
@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-a100"])
def test_lgip_is_the_published_table(mig_node: Callable[..., MigNode], profile: str, branch: int) -> None:
    node = mig_node(profile, branch)
    _enable(node)
    rows = {r.name: r for r in parse_lgip(node.ok("mig", "-i", "0", "-lgip"))}
    for published in PUBLISHED[profile]:
        row = rows[published[0]]
        assert row.published() == published
        assert (row.free, row.p2p) == (row.total, "No")  # nothing created yet
    if profile == "dgx-h100":  # that output lists every profile an H100 80GB offers
        assert sorted(rows) == sorted(p[0] for p in H100_80GB_LGIP)
    placements = {}
    for line in node.ok("mig", "-i", "0", "-lgipp").splitlines():
        head, _, where = line.partition(":")
        placements[int(head.split("Profile ID")[1].split()[0])] = where.strip()
    assert {pid: placements[pid] for pid in LGIPP} == LGIPP


@pytest.mark.parametrize("branch", BRANCHES, ids=lambda b: f"smi{b}")
@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-h100"])
def test_create_list_destroy(mig_node: Callable[..., MigNode], profile: str, branch: int) -> None:
    node = mig_node(profile, branch)
    _enable(node)
    gi = "3g.40gb"
    out = node.ok("mig", "-i", "0", "-cgi", f"9,{gi}", "-C")
    assert out.splitlines() == [
        f"Successfully created GPU instance ID  2 on GPU  0 using profile MIG {gi} (ID  9)",
        f"Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG {gi} (ID  2)",
        f"Successfully created GPU instance ID  1 on GPU  0 using profile MIG {gi} (ID  9)",
        f"Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using profile MIG {gi} (ID  2)",
    ]
    assert parse_lgi(node.ok("mig", "-i", "0", "-lgi")) == {1: (f"MIG {gi}", 9, 4, 4), 2: (f"MIG {gi}", 9, 0, 4)}
    assert parse_lci(node.ok("mig", "-i", "0", "-lci")) == {(1, 0): (f"MIG {gi}", 2, 0, 3),
                                                            (2, 0): (f"MIG {gi}", 2, 0, 3)}
    free = {r.id: r.free for r in parse_lgip(node.ok("mig", "-i", "0", "-lgip"))}
    assert free[9] == 0 and free[19] == 0  # every memory slice is taken

    # Every process sees the new MIG devices, in GPU instance order, with the UUIDs the agent made.
    agent = node.tb.agent(node.name).mig(node.name)["gpus"]["gpu0"]
    uuids = {g["id"]: g["compute_instances"][0]["uuid"] for g in agent["gpu_instances"]}
    lines = [line for line in node.ok("-L").splitlines() if line.startswith("  MIG")]
    assert lines[:2] == [f"  MIG {gi}     Device  {k}: (UUID: {uuids[k + 1]})" for k in range(2)]

    # The capabilities NVIDIA's device plugin looks up, with the kernel module's minors.
    caps = node.root / "proc/driver/nvidia/capabilities/gpu0/mig"
    assert (caps / "gi2/access").read_text() == "DeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    assert (caps / "gi2/ci0/access").read_text().startswith("DeviceFileMinor: 22\n")
    assert (caps / "gi1/access").read_text().startswith("DeviceFileMinor: 12\n")

    out = node.ok("mig", "-i", "0", "-dci")
    done = "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID"
    assert sorted(out.splitlines()) == [f"{done}  {g}" for g in (1, 2)]
    out = node.ok("mig", "-i", "0", "-dgi")
    assert sorted(out.splitlines()) == [f"Successfully destroyed GPU instance ID  {g} from GPU  0" for g in (1, 2)]
    assert "No GPU instances found" in node.smi("mig", "-i", "0", "-lgi").stdout
    assert not (caps / "gi2").exists()
    assert node.ok("-i", "0", "-mig", "0").startswith("Disabled MIG Mode for GPU")
    assert node.ok("-i", "0", "--query-gpu=mig.mode.current", "--format=csv,noheader").strip() == "Disabled"


def test_seven_1g_instances_get_the_ids_a_real_a100_gives(mig_node: Callable[..., MigNode]) -> None:
    node = mig_node("dgx-a100")
    _enable(node)
    out = node.ok("mig", "-i", "0", "-cgi", ",".join(["19"] * 7))
    ids = [int(line.split("GPU instance ID")[1].split()[0]) for line in out.splitlines()]
    assert ids == [9, 7, 8, 11, 12, 13, 14]
    assert node.smi("mig", "-i", "0", "-cgi", "19").returncode != 0  # the eighth memory slice has no compute slice


def test_refused_requests_get_nvmls_answers_and_change_nothing(mig_node: Callable[..., MigNode]) -> None:
    """Bad MIG requests through the real nvidia-smi: its exit code is the NVML return code (nvml.h), and neither the
    agent's state nor the snapshot generation moves."""
    node = mig_node("dgx-h100")
    agent = node.tb.agent(node.name)

    def unchanged(args: list[str], rc: int, message: str) -> None:
        before = agent.mig(node.name), agent.state(node.name)["generation"]
        proc = node.smi(*args)
        assert (proc.returncode, message in proc.stdout + proc.stderr) == (rc, True), proc.stdout + proc.stderr
        assert (agent.mig(node.name), agent.state(node.name)["generation"]) == before

    unchanged(["mig", "-i", "0", "-cgi", "19"], 6, "No MIG-enabled devices found")  # MIG disabled
    _enable(node)
    unchanged(["mig", "-i", "0", "-cgi", "99"], 2, "Invalid Argument")  # no such profile ID
    node.ok("mig", "-i", "0", "-cgi", "0", "-C")  # 7g.80gb takes the whole GPU
    unchanged(["mig", "-i", "0", "-cgi", "19"], 23, "Insufficient Resources")
    unchanged(["mig", "-i", "0", "-cci", "0", "-gi", "0"], 23, "Insufficient Resources")
    unchanged(["mig", "-i", "0", "-dgi", "-gi", "0"], 19, "In use by another client")  # it has a compute instance
    unchanged(["-i", "0", "-mig", "0"], 0, "pending disable state")  # GPU instances left: MIG stays on
    assert node.ok("-i", "0", "--query-gpu=mig.mode.current", "--format=csv,noheader").strip() == "Enabled"
