"""The real nvidia-smi of three driver branches (Debian non-free 535, 550, 555) against the fake.

Each runs against a profile of its own branch (the built-in profile with its driver pinned, as a user would) and
refuses every other pairing the way it refuses a library of another release. Oracles: the real nvidia-smi's own
output, the real captures (N/A counts, model values), and the documented DGX H100 topology.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.nvml.smi import RealNvidia, _namespace_prefix, run_nvidia_smi
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import FakeProcess
from testbed import nodeview
from tests.nvml import references
from tests.nvml.captures import board_capture, capture_dir
from tests.nvml.helpers import NodeSnap, with_driver

RELEASES = {535: "535.261.03", 550: "550.163.01", 555: "555.58.02"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TESTS = Path(__file__).resolve().parent
BOARD_PROFILES = {"h100": "dgx-h100", "a100": str(TESTS / "profiles" / "a100-40gb.yaml"), "l40s": "l40s-server",
                  "t4": "t4-cloud"}
"""Captured boards whose profiles the 535-555 drivers can run (Blackwell needs 570 or newer)."""


def at_branch(node_snapshot: Callable[..., NodeSnap], tmp_path: Path, profile: str, branch: int,
              **kwargs: object) -> NodeSnap:
    if profile.endswith(".yaml"):
        path = tmp_path / f"pinned-{branch}.yaml"
        path.write_text(f"extends: {profile}\ndriver: {{version: {RELEASES[branch]}}}\n")
        return node_snapshot(path, **kwargs)
    return node_snapshot(with_driver(tmp_path, profile, RELEASES[branch]), **kwargs)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nvidia-smi exited {proc.returncode}: {out}"
    for bad in ("Mismatch in versions", "Function Not Found", "Unknown Error", "Invalid Argument"):
        assert bad not in out, f"{bad!r} in nvidia-smi's output:\n{out}"
    return proc.stdout


@pytest.fixture(params=sorted(RELEASES), ids=lambda b: f"smi{b}")
def real(request: pytest.FixtureRequest) -> RealNvidia:
    branch: int = request.param
    return references.real_nvidia(branch)


@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-h100"])
def test_list(node_snapshot: Callable[..., NodeSnap], tmp_path: Path, real: RealNvidia, profile: str) -> None:
    snap = at_branch(node_snapshot, tmp_path, profile, real.branch)
    expected = []
    for g in snap.node.gpus:
        expected.append(f"GPU {g.index}: {g.sku.name} (UUID: {g.uuid})")
        # MIG devices are numbered in GPU instance id order (MIG user guide, "nvidia-smi -L": Device 0 is GPU
        # instance 1 after "-cgi 9,9" made instances 2 and 1).
        for k, m in enumerate(sorted(g.mig_instances, key=lambda m: m.gpu_instance_id)):
            expected.append(f"  MIG {m.profile.name:<11} Device {k:>2}: (UUID: {m.uuid})")
    assert ok(run_nvidia_smi(["-L"], snap.path, real, sysfs=False)).splitlines() == expected


def test_query_compute_apps_lists_each_gpu_s_compute_processes(node_snapshot: Callable[..., NodeSnap],
                                                                tmp_path: Path, real: RealNvidia) -> None:
    """``nvidia-smi --query-compute-apps`` prints a line per compute process (nvidia-smi's documentation: "List of
    currently active compute processes") with the GPU's bus id, the pid and the memory it uses, in MiB: of the test's
    own processes, the one computing on gpu0 and the one computing and drawing on gpu1 are listed; the one only
    drawing on gpu0 is not. (Real pids: nvidia-smi looks each one up in /proc.) The export table's process slots
    are its only source (LD_DEBUG=bindings: no public process call is bound)."""
    compute, graphics, both = os.getpid(), os.getppid(), 1
    processes = [FakeProcess("gpu0", compute, 512 << 20, kinds=1), FakeProcess("gpu0", graphics, 256 << 20, kinds=2),
                 FakeProcess("gpu1", both, 1 << 30, kinds=3)]
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch, processes=processes)
    out = ok(run_nvidia_smi(["--query-compute-apps=gpu_bus_id,pid,used_memory", "--format=csv,noheader"],
                            snap.path, real, sysfs=False))
    gpu0, gpu1 = (g.address.nvml_bus_id for g in snap.node.gpus[:2])
    assert out.splitlines() == [f"{gpu0}, {compute}, 512 MiB", f"{gpu1}, {both}, 1024 MiB"]


def test_query_shows_each_process_with_the_type_its_release_documents(node_snapshot: Callable[..., NodeSnap],
                                                                     tmp_path: Path, real: RealNvidia) -> None:
    """The man page each release ships (nvidia-smi.1 of Debian's 535, 550 and 555 packages, "Processes", "Type"):
    "C" for a compute process, "G" for a graphics process, "C+G" for one with both contexts; 555's adds "M+C" for
    one with an MPS compute and a compute context. ``nvidia-smi -q -x`` on gpu0 with one process of each kind lists
    every one of them with that type (the export table's process slots, csrc/export.c, are how it asks)."""
    kinds = {1001: (1, "C"), 1002: (2, "G"), 1003: (3, "C+G")}
    if real.branch >= 555:
        kinds[1005] = (5, "M+C")
    processes = [FakeProcess("gpu0", pid, 256 << 20, kinds=kind) for pid, (kind, _) in kinds.items()]
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch, processes=processes)
    root = ET.fromstring(ok(run_nvidia_smi(["-q", "-x", "-i", "0"], snap.path, real, sysfs=False)))
    shown = {int(p.findtext("pid", "")): p.findtext("type") for p in root.iter("process_info")}
    assert shown == {pid: type_ for pid, (_, type_) in kinds.items()}


def test_query_lists_each_mig_device_s_processes_under_its_own_instances(node_snapshot: Callable[..., NodeSnap],
                                                                        tmp_path: Path, real: RealNvidia) -> None:
    """``nvidia-smi -q -x`` on a GPU in MIG mode lists, in ``<processes>``, every process of the GPU once with the GPU
    and compute instance ids of the MIG device it runs on (nvml.h, nvmlProcessInfo_v2_t: "If MIG is enabled, stores
    a valid GPU instance ID" / "compute instance ID"). dgx-a100's gpu7 holds two MIG devices; the test puts one
    process on each (its input) and reads each MIG device's ids from the same output's ``<mig_devices>``, nvidia-smi's
    own account. It asks the export table's process slots once per MIG device handle (csrc/export.c), so a filter
    that kept another compute instance's processes, or dropped the device's own, shows here (seed 10619's
    export.c:65: the MIG devices listed nothing)."""
    placed = {os.getpid(): 0, os.getppid(): 1}
    processes = [FakeProcess("gpu7", pid, (256 << 20) * (1 + index), mig_index=index) for pid, index in placed.items()]
    snap = at_branch(node_snapshot, tmp_path, "dgx-a100", real.branch, processes=processes)
    root = ET.fromstring(ok(run_nvidia_smi(["-q", "-x", "-i", "7"], snap.path, real, sysfs=False)))
    instances = {int(m.findtext("index", "")): (m.findtext("gpu_instance_id"), m.findtext("compute_instance_id"))
                 for m in root.iter("mig_device")}
    assert sorted(instances) == [0, 1]
    shown = [(int(p.findtext("pid", "")), (p.findtext("gpu_instance_id"), p.findtext("compute_instance_id")))
             for p in root.iter("process_info")]
    assert sorted(shown) == sorted((pid, instances[index]) for pid, index in placed.items())


def test_each_nvidia_smi_accepts_only_its_own_release(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                                     real: RealNvidia) -> None:
    """A driver's nvidia-smi and its libnvidia-ml come as one release (Debian's nvidia-smi depends on exactly its
    libnvidia-ml1): against a library of another release nvidia-smi prints its mismatch message and exits."""
    for branch, version in (*RELEASES.items(), (580, "580.105.08")):
        snap = node_snapshot(with_driver(tmp_path / str(branch), "dgx-h100", version))
        proc = run_nvidia_smi(["-L"], snap.path, real, sysfs=False)
        if version == real.driver_version:
            assert ok(proc).count("NVIDIA H100 80GB HBM3") == 8
        else:
            assert proc.returncode == 255
            assert "Mismatch in versions between nvidia-smi and NVML" in proc.stdout + proc.stderr


def test_the_runner_picks_the_branch_of_the_snapshot(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                                     real: RealNvidia) -> None:
    snap = at_branch(node_snapshot, tmp_path, "t4-cloud", real.branch)
    assert "Tesla T4" in ok(run_nvidia_smi(["-L"], snap.path, sysfs=False))


def count_na(gpu: ET.Element) -> tuple[int, int]:
    leaves = [e for e in gpu.iter() if len(e) == 0]
    return len(leaves), sum(1 for e in leaves if (e.text or "").strip() == "N/A")


@pytest.mark.parametrize("board", sorted(BOARD_PROFILES))
def test_query_runs_cleanly_with_no_more_na_than_the_real_board(node_snapshot: Callable[..., NodeSnap],
                                                                tmp_path: Path, real: RealNvidia, board: str) -> None:
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    snap = at_branch(node_snapshot, tmp_path, BOARD_PROFILES[board], real.branch)
    ok(run_nvidia_smi(["-q"], snap.path, real, sysfs=False))
    text = ok(run_nvidia_smi(["-q", "-x"], snap.path, real, sysfs=False))
    fake_gpu = ET.fromstring(text[text.index("<nvidia_smi_log>"):]).find("gpu")
    real_gpu = ET.parse(d / f"qx-{board}.xml").getroot().find("gpu")
    assert fake_gpu is not None and real_gpu is not None
    (fake_leaves, fake_na), (real_leaves, real_na) = count_na(fake_gpu), count_na(real_gpu)
    print(f"\nnvidia-smi {real.driver_version} -q -x, {board}: {fake_na} of {fake_leaves} elements N/A "
          f"(the real {board}: {real_na} of {real_leaves})")
    assert fake_na <= real_na


def test_query_values_of_the_model_are_the_real_boards(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                                       real: RealNvidia) -> None:
    """Elements that describe the H100 (not the unit) read as on the real H100, through each nvidia-smi."""
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch)
    text = ok(run_nvidia_smi(["-q", "-x"], snap.path, real, sysfs=False))
    fake = ET.fromstring(text[text.index("<nvidia_smi_log>"):]).find("gpu")
    truth = ET.parse(d / "qx-h100.xml").getroot().find("gpu")
    assert fake is not None and truth is not None
    for path in ("product_name", "product_architecture", "vbios_version", "board_part_number", "gpu_part_number",
                 "inforom_version/img_version", "inforom_version/ecc_object", "pci/pci_device_id",
                 "pci/pci_sub_system_id", "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
                 "bar1_memory_usage/total", "addressing_mode",
                 "clocks/graphics_clock", "clocks/mem_clock", "clocks/video_clock", "max_clocks/graphics_clock",
                 "max_clocks/video_clock", "applications_clocks/graphics_clock", "temperature/gpu_temp_tlimit",
                 "temperature/gpu_temp_max_tlimit_threshold", "temperature/gpu_temp_slow_tlimit_threshold",
                 "gpu_power_readings/current_power_limit", "gpu_power_readings/min_power_limit",
                 "gpu_power_readings/max_power_limit",
                 "remapped_rows/row_remapper_histogram/row_remapper_histogram_max",
                 "clocks_event_reasons/clocks_event_reason_gpu_idle", "sparse_operation_mode", "fabric/state",
                 "fabric/status", "retired_pages/double_bit_retirement/retired_count",
                 "pci/pci_bridge_chip/bridge_chip_type", *(["fabric/cliqueId"] if real.branch >= 550 else [])):
        assert fake.findtext(path) == truth.findtext(path), path
    # Framebuffer MiB: 550, 555 and the captures' nvidia-smi (570+) round each byte count, halves up (81559 total,
    # 480 reserved, 81080 free as on the real H100); 535 floors each (81559, 479, 81079).
    memory = {k: fake.findtext(f"fb_memory_usage/{k}") for k in ("total", "reserved", "free")}
    expected = {535: {"total": "81559 MiB", "reserved": "479 MiB", "free": "81079 MiB"}}.get(
        real.branch, {"total": "81559 MiB", "reserved": "480 MiB", "free": "81080 MiB"})
    assert memory == expected


PCIE_ATOMICS_CAP = {"FETCHADD_32": 0x01, "FETCHADD_64": 0x02, "SWAP_32": 0x04, "SWAP_64": 0x08, "CAS_32": 0x10,
                    "CAS_64": 0x20}
"""nvml.h's NVML_PCIE_ATOMICS_CAP_* bits (FETCHADD32 0x01 ... CAS64 0x20), under the names nvidia-smi prints for them
(qx-b200.xml's ``atomic_caps_outbound``: all six, in this order, each followed by a space)."""


def test_query_and_topology_print_the_host_s_pcie_gen_the_gpu_s_atomics_and_its_memory_s_numa_node(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path, real: RealNvidia) -> None:
    """Three values nvidia-smi reads through the export table's own slots (csrc/export.c: 230, 226, 241), none of
    which the built-in boards of 535-555 have (every capture but GB300's prints ``max_host_link_gen`` N/A, every
    one but the Blackwells' ``atomic_caps_outbound`` N/A, and none of them a GPU NUMA node), so the snapshot is edited
    to hold them: a host whose PCIe goes to gen 4 (qx-gb300.xml's ``max_host_link_gen``), gpu0 issuing every atomic
    of nvml.h's six 32/64-bit capabilities (mask 0x3F: qx-b200.xml prints exactly that ``atomic_caps_outbound``),
    gpu1 only SWAP_32 and CAS_32 (0x14), and the memory of gpu0 and gpu1 NUMA nodes 5 and 0 (Linux numbers nodes
    from 0: node 0 is a node). ``-q -x`` prints the host's generation under every GPU, each GPU's capabilities by
    name (N/A where the mask is 0, as on the H100 capture), and ``topo -m``'s "GPU NUMA ID" column the node of
    each GPU whose memory is one, N/A for the others."""
    b200 = board_capture("b200")
    assert b200["/pci/atomic_caps_outbound"].split() == list(PCIE_ATOMICS_CAP)
    assert board_capture("gb300")["/pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"] == "4"
    assert board_capture("h100")["/pci/atomic_caps_outbound"] == "N/A"
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch)
    s = snap.snapshot
    masks = {0: sum(PCIE_ATOMICS_CAP.values()), 1: PCIE_ATOMICS_CAP["SWAP_32"] | PCIE_ATOMICS_CAP["CAS_32"]}
    numa = {0: 5, 1: 0}
    gpus = [dataclasses.replace(g, pcie_atomics_outbound=masks.get(i, 0), gpu_numa_id=numa.get(i, -1))
            for i, g in enumerate(s.gpus)]
    header = dataclasses.replace(s.header, host_pcie_gen_max=4)
    write_snapshot(snap.path, dataclasses.replace(s, gpus=tuple(gpus), header=header).to_bytes())
    root = ET.fromstring(ok(run_nvidia_smi(["-q", "-x", "-i", "0,1,2"], snap.path, real, sysfs=False)))
    shown = [(g.findtext("pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"),
              (g.findtext("pci/atomic_caps_outbound") or "").split()) for g in root.iter("gpu")]
    assert shown == [("4", list(PCIE_ATOMICS_CAP)), ("4", ["SWAP_32", "CAS_32"]), ("4", ["N/A"])]
    text = ANSI.sub("", ok(run_nvidia_smi(["topo", "-m"], snap.path, real, sysfs=False)))
    lines = text.splitlines()
    assert lines[0].split("\t")[-1] == "GPU NUMA ID"  # the last column (rows have an empty cell before it)
    rows = {r.split("\t")[0]: r.split("\t") for r in lines[1:] if r.startswith("GPU")}
    assert [rows[f"GPU{i}"][-1] for i in range(len(gpus))] == ["5", "0", *["N/A"] * (len(gpus) - 2)]


DGX_H100_CPUS = ("0-55,112-167", "56-111,168-223")


DGX_H100_GPU_NIC = (0, 3, 4, 5, 6, 9, 10, 11)
"""mlx5_N of each GPU's compute ConnectX-7, the one on its PCIe switch (DGX H100/H200 User Guide, Table 6)."""
DGX_H100_NICS = 12
"""8 compute ports and two dual-port slot cards (mlx5_1/2 and mlx5_7/8), the guide's Table 5; mlx5_0-5 sit on
socket 0's buses, mlx5_6-11 on socket 1's."""


def dgx_h100_expected_row(i: int) -> list[str]:
    """The DGX H100's documented topology: all 8 GPUs NV18 through the NVSwitches; each GPU shares a PCIe switch
    with its compute ConnectX-7 (PIX), NICs of its socket are NODE away, the other socket's SYS; socket 0 holds
    GPUs 0-3."""
    row = [" X " if j == i else "NV18" for j in range(8)]
    row += ["PIX" if j == DGX_H100_GPU_NIC[i] else "NODE" if j // 6 == i // 4 else "SYS"
            for j in range(DGX_H100_NICS)]
    return [*row, DGX_H100_CPUS[i // 4], str(i // 4), "", "N/A"]


def test_topology_matrix_with_nic_columns(node_snapshot: Callable[..., NodeSnap], fast_node_tmp: Path,
                                          real: RealNvidia) -> None:
    """550 and 555 find NICs with their embedded hwloc over all of /sys: they run in the node's view (its tree at
    /sys, testbed.nodeview); 535 looks only at /sys/bus/pci, which the runner's own small tree gives it. The tree
    is on tmpfs where it can be (fast_node_tmp): some 28,000 files."""
    why = nodeview.unavailable()
    if why is not None:
        pytest.skip(f"showing nvidia-smi the node's /sys needs a mount namespace: {why}")
    out = fast_node_tmp / "render"
    profile = with_driver(fast_node_tmp, "dgx-h100", real.driver_version)
    subprocess.run([sys.executable, "-m", "fakehw.cli", "render", str(profile), "--out", str(out)], check=True,
                   capture_output=True, timeout=300)
    node = out / "dgx-h100-0"

    def wrap(argv: list[str]) -> list[str]:
        return nodeview.command(nodeview.NodeView(root=str(node / "root")), argv)

    text = ANSI.sub("", ok(run_nvidia_smi(["topo", "-m"], node / "nvml.snapshot", real, wrap=wrap)))
    lines = [line for line in text.splitlines() if line]
    header = lines[0].split("\t")[1:]
    assert header[:20] == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(DGX_H100_NICS)]
    rows = {r.split("\t")[0]: r.split("\t")[1:] for r in lines[1:] if r.startswith(("GPU", "NIC"))}
    for i in range(8):
        assert rows[f"GPU{i}"] == dgx_h100_expected_row(i)
    assert [f"NIC{i}: mlx5_{i}" for i in range(DGX_H100_NICS)] == re.findall(r"NIC\d+: mlx5_\d+", text)


def topo_fakehw(profile: str, node_index: int) -> str:
    out = subprocess.run([sys.executable, "-m", "fakehw.cli", "topo", profile, "--node", str(node_index)],
                         capture_output=True, text=True, check=True).stdout
    # For multi-node profiles the CLI names the node on a first "#" line; nvidia-smi has no such line.
    return "".join(line for line in out.splitlines(keepends=True) if not line.startswith("# "))


@pytest.mark.parametrize(("profile", "node_index"), [("dgx-h100", 0), ("edge-pcie", 0), ("dgx-a100", 0),
                                                     ("l40s-server", 0)])
def test_fakehw_topo_prints_what_nvidia_smi_535_prints(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                                       profile: str, node_index: int) -> None:
    """``fakehw topo`` renders the matrix without a driver; the real nvidia-smi 535 is its judge, byte for byte."""
    if _namespace_prefix() is None:
        pytest.skip("nvidia-smi finds NICs in /sys: giving it the node's needs a mount namespace (unshare -m as "
                    "root, or unprivileged user namespaces)")
    real = references.real_nvidia(535)
    snap = at_branch(node_snapshot, tmp_path, profile, 535, node_index=node_index)
    assert ok(run_nvidia_smi(["topo", "-m"], snap.path, real)) == topo_fakehw(profile, node_index)


def test_topology_matrix_sees_a_link_fault(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                           real: RealNvidia) -> None:
    """A link down removes one link of GPU3's bond to every peer: NV18 -> NV17 on its row, others keep NV18."""
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch,
                     faults=[{"kind": "nvlink-down", "device": "gpu3", "link": 0}])
    text = ANSI.sub("", ok(run_nvidia_smi(["topo", "-m"], snap.path, real, sysfs=False)))
    rows = {r.split("\t")[0]: r.split("\t")[1:] for r in text.splitlines() if r.startswith("GPU")}
    assert rows["GPU3"][:8] == ["NV17", "NV17", "NV17", " X ", "NV17", "NV17", "NV17", "NV17"]
    for i in (0, 1, 2, 4, 5, 6, 7):
        assert [cell for j, cell in enumerate(rows[f"GPU{i}"][:8]) if j not in (i, 3)] == ["NV18"] * 6


def test_nvlink_status(node_snapshot: Callable[..., NodeSnap], tmp_path: Path, real: RealNvidia) -> None:
    """Per-link speed as a real H100 reports it (26.562 GB/s, NVLink 4's signalling rate); a link down inactive."""
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch,
                     faults=[{"kind": "nvlink-down", "device": "gpu2", "link": 5}])
    out = ok(run_nvidia_smi(["nvlink", "-s"], snap.path, real, sysfs=False))
    blocks = re.split(r"^GPU \d+: ", out, flags=re.M)[1:]
    assert len(blocks) == 8
    for i, block in enumerate(blocks):
        assert block.startswith("NVIDIA H100 80GB HBM3 (UUID: GPU-")
        links = dict(re.findall(r"Link (\d+): (.+)", block))
        assert sorted(map(int, links)) == list(range(18))
        expected = {str(k): "26.562 GB/s" for k in range(18)}
        if i == 2:
            expected["5"] = "<inactive>"
        assert {k: v.strip() for k, v in links.items()} == expected


def test_query_gpu_csv(node_snapshot: Callable[..., NodeSnap], tmp_path: Path, real: RealNvidia) -> None:
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch)
    out = ok(run_nvidia_smi(["--query-gpu=name,driver_version,power.limit,clocks.max.sm,pcie.link.gen.max,"
                             "memory.total,temperature.gpu", "--format=csv,noheader"], snap.path, real, sysfs=False))
    rows = [line.split(", ") for line in out.strip().splitlines()]
    assert len(rows) == 8
    total = board_capture("h100")["/fb_memory_usage/total"]  # 81559 MiB, as every branch prints it
    for name, driver, power, sm, gen, memory, temp in rows:
        assert (name, driver, power, sm, gen, memory) == ("NVIDIA H100 80GB HBM3", real.driver_version, "700.00 W",
                                                          "1980 MHz", "5", total)
        assert temp.isdigit()


def test_a_lost_gpu_is_reported_lost(node_snapshot: Callable[..., NodeSnap], tmp_path: Path, real: RealNvidia) -> None:
    snap = at_branch(node_snapshot, tmp_path, "dgx-h100", real.branch,
                     faults=[{"kind": "xid", "device": "gpu6", "code": 79}])
    proc = run_nvidia_smi(["-L"], snap.path, real, sysfs=False)
    assert "GPU is lost" in proc.stdout
    assert "GPU 7: NVIDIA H100 80GB HBM3 (UUID: GPU-" in proc.stdout


def test_smi_runner_cli(node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    references.real_nvidia(535)
    snap = at_branch(node_snapshot, tmp_path, "edge-pcie", 535)
    proc = subprocess.run([sys.executable, "-m", "fakehw.nvml", "smi", "--snapshot", str(snap.path), "--", "-L"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.count("NVIDIA L4") == 8
    missing = subprocess.run([sys.executable, "-m", "fakehw.nvml", "smi", "--snapshot", str(tmp_path / "none"), "--",
                              "-L"], capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    newer = node_snapshot("dgx-b200")
    proc = subprocess.run([sys.executable, "-m", "fakehw.nvml", "smi", "--snapshot", str(newer.path), "--", "-L"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "no real nvidia-smi of branch 580" in proc.stderr
