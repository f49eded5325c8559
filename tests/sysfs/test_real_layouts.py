"""The fake tree against what real machines of each profile show: public captures and vendor documents.

Every expected value here comes from outside the model (a real ``numactl -H``, a user guide's port table, a
vendor's published figure), with its source in the test's docstring; the model is what is being checked.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import System
from fakehw.model.system import Node
from fakehw.sysfs.hwloc import lstopo, lstopo_path

CAPTURES = Path(__file__).parent / "captures"
Rendered = Callable[[str], list[tuple[System, Node, Path]]]


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)


def _flags(root: Path) -> list[str]:
    for line in (root / "proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return line.split(":", 1)[1].split()
    raise AssertionError("no flags line in /proc/cpuinfo")


def test_dgx_h100_cpus_are_bare_metal_sapphire_rapids(rendered: Rendered) -> None:
    """A DGX H100 runs its Xeon 8480Cs on bare metal: CPUID.1:ECX[31] (``hypervisor``) is set only by a
    hypervisor (Intel SDM vol. 2A, CPUID), and Sapphire Rapids has no HLE (``hle``) while keeping RTM.
    util-linux lscpu reports VT-x from the ``vmx`` flag a VM would hide."""
    ((_, _, root),) = rendered("dgx-h100")
    flags = _flags(root)
    assert "hypervisor" not in flags and "hle" not in flags
    assert {"vmx", "rtm", "amx_tile", "avx512_fp16"} <= set(flags)
    if shutil.which("lscpu") is None:
        pytest.skip("util-linux lscpu is not installed")
    out = _run(["lscpu", "--sysroot", str(root)]).stdout
    assert "Virtualization:" in out and "VT-x" in out
    assert "Hypervisor" not in out


def on_node(root: Path, argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` run as on the node, with ``env`` (default: this process's): testbed.nodeview puts the tree at
    /sys, /dev and /proc/driver, and the paths ``env`` names stay where they are."""
    from testbed.nodeview import NodeView, command, unavailable

    problem = unavailable()
    if problem is not None:
        pytest.skip(f"no node view here: {problem}")
    return _run(command(NodeView(str(root)), argv), env)


def _numactl_hardware(root: Path) -> str:
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (tools/install-system-deps.sh)")
    proc = on_node(root, ["numactl", "--hardware"])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _distance_rows(text: str) -> dict[int, list[int]]:
    return {int(ln.split(":")[0]): [int(x) for x in ln.split(":")[1].split()]
            for ln in text.splitlines() if re.match(r"^\s*\d+:", ln)}


def _capture(name: str) -> str:
    """A real machine's output kept under ``captures/`` (its first comment lines say where it comes from)."""
    text = (CAPTURES / name).read_text()
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("#"))


@pytest.mark.root
@pytest.mark.parametrize(("profile", "capture"), [("gb200-nvl72", "gb200-tray-numactl-H.txt"),
                                                  ("gh200", "gh200-numactl-H.txt")], ids=["gb200-tray", "gh200"])
def test_numactl_shows_the_numa_layout_of_the_real_machine(profile: str, capture: str, rendered: Rendered) -> None:
    """Node count, per-node sizes (CPU-less GPU memory and MIG-reserved nodes included) and the distance rows that
    the real machine's numactl printed (captures/: a GB200 tray from NVIDIA's TensorRT-LLM blog, a GH200 from a
    Linux commit message)."""
    _, _, root = rendered(profile)[0]
    out = _numactl_hardware(root)
    capture = _capture(capture)
    want_rows = _distance_rows(capture)
    got_rows = _distance_rows(out)
    for line in capture.splitlines():
        if not re.match(r"^\s*\d+:", line):
            assert line in out.splitlines(), f"{line!r} not in numactl output:\n{out[:2000]}"
    for node, row in want_rows.items():
        assert got_rows[node] == row, f"distance row {node}"


@pytest.mark.skipif(lstopo_path() is None, reason="hwloc is not installed (tools/install-system-deps.sh)")
@pytest.mark.parametrize("profile", ["gh200", "gb200-nvl72"])
def test_a_grace_cpu_reaches_gpu_memory_at_c2c_speed(profile: str, rendered: Rendered) -> None:
    """The CPU reaches a GPU's HBM over NVLink-C2C: NVIDIA gives 900 GB/s bidirectional (GH200 and GB200 data
    sheets), so 450 GB/s each way, not the HBM's own 4 TB/s (GH200) or 8 TB/s (GB200) that only the GPU gets.
    hwloc's lstopo reads it from the HMAT files as the HBM node's bandwidth from its initiator."""
    _, node, root = rendered(profile)[0]
    topo = lstopo(root)
    hbm = [n.id for n in node.numa if n.kind == "hbm"]
    assert hbm
    for numa in hbm:
        assert topo.memattrs["Bandwidth"][numa] == 450_000  # MB/s


DGX_H100_PORTS = {
    # RDMA name: (PCI bus, default network interface, link layer) as the DGX H100/H200 User Guide's "Network Port
    # Mapping" table (Table 5) lists them: OSFP compute ports InfiniBand by default, slot 1/2 dual-port cards with
    # port 1 InfiniBand and port 2 Ethernet.
    "mlx5_0": ("0000:18:00.0", "ibp24s0", "InfiniBand"), "mlx5_3": ("0000:40:00.0", "ibp64s0", "InfiniBand"),
    "mlx5_4": ("0000:4f:00.0", "ibp79s0", "InfiniBand"), "mlx5_5": ("0000:5e:00.0", "ibp94s0", "InfiniBand"),
    "mlx5_6": ("0000:9a:00.0", "ibp154s0", "InfiniBand"), "mlx5_9": ("0000:c0:00.0", "ibp192s0", "InfiniBand"),
    "mlx5_10": ("0000:ce:00.0", "ibp206s0", "InfiniBand"), "mlx5_11": ("0000:dc:00.0", "ibp220s0", "InfiniBand"),
    "mlx5_7": ("0000:aa:00.0", "ibp170s0f0", "InfiniBand"), "mlx5_8": ("0000:aa:00.1", "enp170s0f1np1", "Ethernet"),
    "mlx5_1": ("0000:29:00.0", "ibp41s0f0", "InfiniBand"), "mlx5_2": ("0000:29:00.1", "enp41s0f1np1", "Ethernet"),
}
DGX_H100_GPU_NIC = {0: "mlx5_0", 1: "mlx5_3", 2: "mlx5_4", 3: "mlx5_5", 4: "mlx5_6", 5: "mlx5_9", 6: "mlx5_10",
                    7: "mlx5_11"}
"""The guide's "Network Modules" table (Table 6): the compute NIC of each GPU."""


def test_dgx_h100_has_the_nics_of_its_user_guide(rendered: Rendered) -> None:
    """RDMA names, PCI addresses, network interface names and link layers of all 12 ConnectX-7 ports, and which
    GPU each compute port serves (same PCIe switch), as the DGX H100/H200 User Guide tables list them."""
    ((_, node, root),) = rendered("dgx-h100")
    ib = root / "sys/class/infiniband"
    assert sorted(p.name for p in ib.iterdir()) == sorted(DGX_H100_PORTS)
    for name, (bdf, netdev, layer) in DGX_H100_PORTS.items():
        device = (ib / name / "device").resolve()
        assert device.name == bdf
        assert (ib / name / "ports/1/link_layer").read_text().strip() == layer
        assert [p.name for p in (device / "net").iterdir()] == [netdev]
        # An IPoIB interface is ARPHRD_INFINIBAND (32) with a 20-byte address; Ethernet is type 1 with a MAC.
        net = root / "sys/class/net" / netdev
        assert (net / "type").read_text().strip() == ("32" if layer == "InfiniBand" else "1")
        assert len((net / "address").read_text().strip().split(":")) == (20 if layer == "InfiniBand" else 6)
    for index, nic in DGX_H100_GPU_NIC.items():
        gpu = next(g for g in node.gpus if g.index == index)
        gpu_port = (root / "sys/bus/pci/devices" / str(gpu.address)).resolve().parent.parent
        nic_port = (ib / nic / "device").resolve().parent.parent
        assert gpu_port == nic_port, f"GPU{index} and {nic} share a PCIe switch"


GB200_TRAY_PORTS = {
    # RDMA name: (PCI function, network interface, link layer). PCI functions and RDMA names as NVIDIA's Mission
    # Control "North-South Network GB200 Deployment Guide" (2.3.0, Introduction, "Compute Tray Network Ports",
    # GB200 compute tray table; https://docs.nvidia.com/mission-control/docs/ext-north-south-network-gb200-deploy-
    # guide/2.3.0/ext-north-south-network-gb200-intro.html) lists them: left/right bay OSFP P3/P4 (InfiniBand
    # ConnectX-7) at 00/02/10/12:03:00.0 = mlx5_0/1/4/5, left/right bay BF3 P1/P2 (Ethernet QSFP) at 06:03:00.0/.1
    # = mlx5_2/3 and 16:03:00.0/.1 = mlx5_6/7. Interface names as udev gives them (systemd.net-naming-scheme(7),
    # PCI path names: "P<domain>" in decimal only for a domain other than 0, "f<function>" only on a
    # multi-function device, "n<phys_port_name>" for an Ethernet port; the same rules give the DGX H100 guide's
    # ibp24s0, ibp41s0f0 and enp41s0f1np1 above).
    "mlx5_0": ("0000:03:00.0", "ibp3s0", "InfiniBand"), "mlx5_1": ("0002:03:00.0", "ibP2p3s0", "InfiniBand"),
    "mlx5_4": ("0010:03:00.0", "ibP16p3s0", "InfiniBand"), "mlx5_5": ("0012:03:00.0", "ibP18p3s0", "InfiniBand"),
    "mlx5_2": ("0006:03:00.0", "enP6p3s0f0np0", "Ethernet"), "mlx5_3": ("0006:03:00.1", "enP6p3s0f1np1", "Ethernet"),
    "mlx5_6": ("0016:03:00.0", "enP22p3s0f0np0", "Ethernet"),
    "mlx5_7": ("0016:03:00.1", "enP22p3s0f1np1", "Ethernet"),
}
GB200_TRAY_NIC_DEVICES = {"mlx5_0": "0x1021", "mlx5_1": "0x1021", "mlx5_4": "0x1021", "mlx5_5": "0x1021",
                          "mlx5_2": "0xa2dc", "mlx5_3": "0xa2dc", "mlx5_6": "0xa2dc", "mlx5_7": "0xa2dc"}
"""PCI device ids (pci.ids: 15b3:1021 MT2910 Family [ConnectX-7], 15b3:a2dc MT43244 BlueField-3 integrated
ConnectX-7 network controller): the guide's OSFP ports are ConnectX-7, its BF3 ports BlueField-3."""


def test_gb200_tray_has_the_nics_of_nvidias_deployment_guide(rendered: Rendered) -> None:
    """A GB200 NVL72 compute tray's eight RDMA ports: PCI functions, RDMA names, network interface names, link
    layers and adapters as NVIDIA's deployment guide lists them and udev names them (see GB200_TRAY_PORTS)."""
    ((_, _, root), *_) = rendered("gb200-nvl72")
    ib = root / "sys/class/infiniband"
    assert sorted(p.name for p in ib.iterdir()) == sorted(GB200_TRAY_PORTS)
    for name, (bdf, netdev, layer) in GB200_TRAY_PORTS.items():
        device = (ib / name / "device").resolve()
        assert device.name == bdf, name
        assert (device / "device").read_text().strip() == GB200_TRAY_NIC_DEVICES[name], name
        assert (ib / name / "ports/1/link_layer").read_text().strip() == layer, name
        assert [p.name for p in (device / "net").iterdir()] == [netdev], name
        assert (root / "sys/class/net" / netdev / "type").read_text().strip() == ("32" if layer == "InfiniBand"
                                                                                 else "1")


@pytest.mark.root
@pytest.mark.skipif(shutil.which("ibv_devices") is None or shutil.which("ibstat") is None,
                    reason="rdma-core's ibverbs-utils and infiniband-diags are not installed "
                           "(tools/install-system-deps.sh)")
def test_libibverbs_and_ibstat_find_every_rdma_device(rendered: Rendered) -> None:
    """rdma-core's libibverbs (ibv_devices) enumerates the verbs devices from /sys/class/infiniband_verbs and
    /dev/infiniband/uverbsN when the kernel has no RDMA netlink, as here; libibumad (ibstat) reads the ports."""
    ((_, node, root),) = rendered("dgx-h100")
    proc = on_node(root, ["ibv_devices"])
    assert proc.returncode == 0, proc.stderr
    listed = dict(line.split() for line in proc.stdout.splitlines()[2:])
    assert set(listed) == set(DGX_H100_PORTS)
    for nic in node.nics:
        assert listed[nic.name] == nic.node_guid.replace(":", "")
    proc = on_node(root, ["sh", "-c", "ibstat mlx5_0 && ibstat mlx5_2"])
    assert proc.returncode == 0, proc.stderr
    blocks = proc.stdout.split("CA '")[1:]
    assert "Link layer: InfiniBand" in blocks[0] and "State: Active" in blocks[0] and "Rate: 400" in blocks[0]
    assert "Link layer: Ethernet" in blocks[1]


def test_gpudirect_rdma_readiness_checks_pass(rendered: Rendered) -> None:
    """What GPUDirect RDMA users probe before trusting it: the peer-memory client nvidia-peermem registers
    (``/sys/kernel/mm/memory_peers/nv_mem/version``: NCCL, UCX, NVSHMEM, GDS), the module itself
    (``/sys/module/nvidia_peermem/version``), and the verbs ABI and devices (``/sys/class/infiniband_verbs``)."""
    ((system, _, root),) = rendered("dgx-h100")
    for probe in ("sys/kernel/mm/memory_peers/nv_mem/version", "sys/kernel/mm/memory_peers/nv_mem_nc/version",
                  "sys/module/nvidia_peermem/version"):
        assert (root / probe).read_text().strip() == system.driver.version
    assert (root / "sys/class/infiniband_verbs/abi_version").read_text().strip() == "6"
    verbs = sorted((root / "sys/class/infiniband_verbs").glob("uverbs*"))
    assert len(verbs) == len(DGX_H100_PORTS)
    for v in verbs:
        major, minor = (v / "dev").read_text().strip().split(":")
        assert major == "231" and int(minor) == 192 + int(v.name.removeprefix("uverbs"))
        dev = root / "dev/infiniband" / v.name
        if os.geteuid() == 0:
            st = os.lstat(dev)
            assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (231, int(minor))


@pytest.mark.root
def test_nvidia_smi_topo_shows_the_nic_columns_of_the_node(fast_node_tmp: Path) -> None:
    """The real nvidia-smi (535) against the fake NVML in the node view: its embedded hwloc finds
    the ConnectX ports in sysfs and prints a NIC column for each, and every GPU is PIX to the compute NIC the
    DGX H100 User Guide pairs it with (Table 6: one network-module ConnectX-7 per GPU, same PCIe switch)."""
    from fakehw.cli import main as fakehw_main
    from fakehw.nvml import library_dir
    from fakehw.nvml.smi import SmiUnavailable, find_real_nvidia

    try:
        real = find_real_nvidia()
    except SmiUnavailable as exc:
        pytest.skip(str(exc))
    # The real nvidia-smi accepts only its own driver's NVML: the node runs 535 (dgx-h100 itself runs 580).
    profile = fast_node_tmp / "dgx-h100-535.yaml"
    profile.write_text(f"extends: dgx-h100\ndriver: {{version: {real.driver_version}}}\n")
    # On tmpfs where it can be: the view binds the snapshot's directory again when it lies under /dev/shm, as the
    # environment names it.
    assert fakehw_main(["render", str(profile), "--out", str(fast_node_tmp)]) == 0
    node_dir = fast_node_tmp / "dgx-h100-0"
    proc = on_node(node_dir / "root", [str(real.smi), "topo", "-m"],
                   {**os.environ, "FAKEHW_NVML_SNAPSHOT": str(node_dir / "nvml.snapshot"),
                    "LD_LIBRARY_PATH": str(library_dir())})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[0].replace("\x1b[4m", "").replace("\x1b[0m", "").split("\t")
    legend = dict(re.findall(r"^\s+(NIC\d+): (\S+)$", proc.stdout, re.M))
    assert sorted(legend.values()) == sorted(DGX_H100_PORTS)
    rows = {ln.split("\t")[0]: ln.split("\t") for ln in lines[1:] if ln.startswith("GPU")}
    for gpu, nic in DGX_H100_GPU_NIC.items():
        column = next(k for k, v in legend.items() if v == nic)
        assert rows[f"GPU{gpu}"][header.index(column)].strip() == "PIX", (gpu, nic)


SNC_HOST = """\
name: snc-host
description: two sockets in SNC3 mode (three NUMA nodes each) with an asymmetric SLIT
groups:
  - name: snc
    node:
      cpu: {arch: amd64, vendor: GenuineIntel, model: Intel(R) Xeon(R) Platinum 8480+, sockets: 2,
            coresPerSocket: 6}
      numa:
        nodes:
          - {id: 0, socket: 0, memory: 16GiB}
          - {id: 1, socket: 0, memory: 16GiB}
          - {id: 2, socket: 0, memory: 16GiB}
          - {id: 3, socket: 1, memory: 16GiB}
          - {id: 4, socket: 1, memory: 16GiB}
          - {id: 5, socket: 1, memory: 16GiB}
        distances:
%s
      pcie:
        hostBridges: [{name: hb0, numa: 0}]
"""


@pytest.mark.root
def test_an_asymmetric_slit_reaches_its_readers_the_right_way_round(tmp_path: Path) -> None:
    """A real SLIT need not be symmetric (gramineproject/gramine#2122: an SNC host with UPI affinity has
    d(0,4) = 28 but d(4,0) = 23). Row i of the profile's matrix is node i's ``distance`` file, and numactl -H
    prints it as row i: a transposed matrix anywhere on the way fails here, where a symmetric one cannot."""
    from fakehw.agent.state import derive_state
    from fakehw.model import load_profile
    from fakehw.render import RenderContext
    from fakehw.render.atomic import OutputDir
    from fakehw.sysfs import ROOT_DIR, render_tree

    rows = _distance_rows(_capture("snc-upi-slit.txt"))
    assert rows[0][4] != rows[4][0] and rows[1][3] != rows[3][1]
    matrix = "\n".join(f"          - {rows[i]}" for i in range(6))
    path = tmp_path / "snc.yaml"
    path.write_text(SNC_HOST % matrix)
    system = load_profile(path)
    node = system.nodes[0]
    render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(tmp_path / node.name))
    root = tmp_path / node.name / ROOT_DIR
    for i, row in rows.items():
        assert [int(x) for x in (root / f"sys/devices/system/node/node{i}/distance").read_text().split()] == row
    assert _distance_rows(_numactl_hardware(root)) == rows


@pytest.mark.root
@pytest.mark.parametrize(("profile", "want"), [
    # DGX H100: GPU0-3 on socket 0, GPU4-7 on socket 1 (reference/hardware.md; its user guide's topology figure).
    ("dgx-h100", {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}),
    # GB200 tray: GPUs 0,1 with Grace 0, GPUs 2,3 with Grace 1 (reference/hardware.md; srt-slurm#164's binding).
    ("gb200-nvl72", {0: 0, 1: 0, 2: 1, 3: 1}),
])
def test_readers_of_pci_numa_node_find_each_gpu_on_its_socket(profile: str, want: dict[int, int],
                                                             rendered: Rendered) -> None:
    """What NVIDIA's device plugin and GFD do: read /sys/bus/pci/devices/<bdf>/numa_node at the real path (here
    with cat in the node view) for each GPU NVML lists; the node is the CPU socket's, never the GPU-memory node."""
    _, node, root = rendered(profile)[0]
    bdfs = [str(g.address) for g in sorted(node.gpus, key=lambda g: g.index)]
    proc = on_node(root, ["sh", "-c", " ".join(f"cat /sys/bus/pci/devices/{b}/numa_node;" for b in bdfs)])
    assert proc.returncode == 0, proc.stderr
    assert {i: int(v) for i, v in enumerate(proc.stdout.split())} == want


def test_dgx_h100_caches_are_sapphire_rapids_caches(rendered: Rendered) -> None:
    """A Xeon Platinum 8480C core has a 48 KiB 12-way L1d, a 32 KiB 8-way L1i and a 2 MiB 16-way L2, and each
    56-core socket 105 MiB of 15-way L3, all with 64-byte lines (Intel's 4th Gen Xeon Scalable cache hierarchy
    article 000027820: 48 KB data, 32 KB instruction, 2 MB MLC per core, 1.875 MB LLC per core; the ways as CPUID
    leaf 4 reports them on Sapphire Rapids): ``lscpu -C`` of a DGX H100 shows those geometries, 112 instances of
    the per-core caches and 2 of the L3."""
    if shutil.which("lscpu") is None:
        pytest.skip("util-linux lscpu is not installed")
    ((_, _, root),) = rendered("dgx-h100")
    proc = _run(["lscpu", "--caches=NAME,ONE-SIZE,ALL-SIZE,WAYS,TYPE,LEVEL,SETS,COHERENCY-SIZE", "-B", "--sysroot",
                 str(root)])
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert rows == [
        ["L1d", str(48 << 10), str(112 * 48 << 10), "12", "Data", "1", "64", "64"],
        ["L1i", str(32 << 10), str(112 * 32 << 10), "8", "Instruction", "1", "64", "64"],
        ["L2", str(2 << 20), str(112 * 2 << 20), "16", "Unified", "2", "2048", "64"],
        ["L3", str(105 << 20), str(2 * 105 << 20), "15", "Unified", "3", "114688", "64"],
    ], proc.stdout
