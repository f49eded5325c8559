"""Other real readers of the tree: lspci (pciutils), lscpu (util-linux), numactl in a mount namespace, and the
kernel text formats of /proc/cpuinfo and /proc/driver/nvidia that tools parse."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import System, builtin_profiles
from fakehw.model.system import Node
from fakehw.sysfs.cpu import riscv_isa

Rendered = Callable[[str], list[tuple[System, Node, Path]]]
SPEEDS = {1: "2.5", 2: "5", 3: "8", 4: "16", 5: "32"}


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, **kw)  # type: ignore[call-overload, no-any-return]


@pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils is not installed (tools/install-system-deps.sh)")
@pytest.mark.parametrize("profile", ["dgx-h100", "edge-pcie", "gb200-nvl72"])
def test_lspci_reads_ids_and_link_status_from_config_space(profile: str, rendered: Rendered) -> None:
    ((_, node, root),) = rendered(profile)
    base = ["lspci", "-A", "linux-sysfs", "-O", f"sysfs.path={root}/sys/bus/pci"]
    listing = _run([*base, "-n", "-D"])
    assert listing.returncode == 0, listing.stderr
    lines = {ln.split()[0]: ln for ln in listing.stdout.splitlines()}
    for g in node.gpus:
        assert f"0302: 10de:{g.sku.pci_device_id:04x}" in lines[str(g.address)]
        detail = _run([*base, "-vv", "-s", str(g.address)])
        match = re.search(r"LnkSta:\s+Speed ([0-9.]+)GT/s, Width x(\d+)", detail.stdout)
        assert match, detail.stdout
        assert (match.group(1), int(match.group(2))) == (SPEEDS[g.sku.pcie.generation], g.sku.pcie.width)
        assert f"NUMA node: {g.numa}" in detail.stdout
    for nic in node.nics:
        assert f"{nic.sku.vendor_id:04x}:{nic.sku.device_id:04x}" in lines[str(nic.address)]
    # The tree view nests every device under its bridges: each GPU bus appears in the bridge ranges.
    tree = _run([*base, "-t"])
    assert tree.returncode == 0 and tree.stdout.count("00.0") >= len(node.gpus)


@pytest.mark.parametrize("profile", sorted(p for p in builtin_profiles() if not p.startswith("gb200-nvl72")))
def test_lscpu_reads_the_cpu_topology(profile: str, rendered: Rendered) -> None:
    if shutil.which("lscpu") is None:
        pytest.skip("util-linux lscpu is not installed")
    for _, node, root in rendered(profile):
        proc = _run(["lscpu", "-J", "--sysroot", str(root)])
        assert proc.returncode == 0, proc.stderr
        fields = {e["field"].rstrip(":"): e["data"] for e in json.loads(proc.stdout)["lscpu"]}
        cpu = node.cpu
        assert int(fields["CPU(s)"]) == cpu.logical_cpus
        assert int(fields["NUMA node(s)"]) == len(node.numa)
        for n in node.numa:
            assert (fields[f"NUMA node{n.id} CPU(s)"] or "") == ",".join(_ranges(n.cpus))
        if cpu.arch == "amd64":  # lscpu parses x86 cpuinfo only on an x86 host, which this is
            assert fields["Model name"] == cpu.model
            assert int(fields["Socket(s)"]) == cpu.sockets
            assert int(fields["Core(s) per socket"]) == cpu.cores_per_socket
            assert int(fields["Thread(s) per core"]) == cpu.threads_per_core
            # one L3 per distinct set of CPUs sharing one (a socket, a NUMA node, an AMD CCX): what lscpu counts
            l3_instances = len({(root / f"sys/devices/system/cpu/cpu{c}/cache/index3/shared_cpu_list").read_text()
                                for c in range(cpu.logical_cpus)})
            assert f"({l3_instances} instance" in fields["L3 cache"]


def _ranges(cpus: tuple[int, ...]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return out


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("numactl") is None,
                    reason="needs root, unshare and numactl (tools/install-system-deps.sh)")
@pytest.mark.parametrize("profile", ["cxl-pool", "dgx-a100", "gh200"])
def test_numactl_sees_the_tree_bind_mounted_over_sys(profile: str, rendered: Rendered) -> None:
    ((_, node, root),) = rendered(profile)
    script = (f"mount --bind {root}/sys/devices/system/node /sys/devices/system/node && "
              f"mount --bind {root}/sys/devices/system/cpu /sys/devices/system/cpu && numactl --hardware")
    proc = _run(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip(f"mount namespaces are not available here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    ids = [n.id for n in node.numa]
    assert f"available: {len(ids)} nodes ({ids[0]}-{ids[-1]})" in out
    for n in node.numa:
        assert re.search(rf"^node {n.id} cpus:{''.join(' ' + str(c) for c in n.cpus)}$", out, re.M)
        assert f"node {n.id} size: {n.memory // 2**20} MB" in out
    rows = [ln.split()[1:] for ln in out.splitlines() if re.match(r"^\s+\d+:", ln)]
    assert [[int(x) for x in r] for r in rows] == [list(r) for r in node.distances]


def _cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    blocks = []
    for chunk in text.strip().split("\n\n"):
        fields = {}
        for line in chunk.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        blocks.append(fields)
    return blocks


def test_cpuinfo_in_the_format_of_each_architecture(rendered: Rendered) -> None:
    for profile in ("riscv-nvlink-fusion", "gh200", "dgx-h100"):
        ((_, node, root),) = rendered(profile)
        blocks = _cpuinfo_blocks((root / "proc/cpuinfo").read_text())
        cpu = node.cpu
        assert [int(b["processor"]) for b in blocks] == list(range(cpu.logical_cpus))
        first = blocks[0]
        if cpu.arch == "riscv64":
            assert first["isa"] == riscv_isa(cpu) == "_".join(cpu.isa) and first["isa"].startswith("rv64")
            assert first["hart"] == "0" and first["mmu"].startswith("sv")
        elif cpu.arch == "arm64":
            assert int(first["CPU implementer"], 16) == cpu.family and int(first["CPU part"], 16) == cpu.model_id
            assert first["Features"].split() == list(cpu.isa)
        else:
            assert first["model name"] == cpu.model and first["flags"].split() == list(cpu.isa)
            assert {b["physical id"] for b in blocks} == {str(s) for s in range(cpu.sockets)}


def test_nvidia_driver_files_and_device_nodes(rendered: Rendered) -> None:
    for profile in ("dgx-h100", "gh200"):
        ((system, node, root),) = rendered(profile)
        version = (root / "proc/driver/nvidia/version").read_text()
        assert re.match(rf"NVRM version: NVIDIA UNIX \S+ .*  {re.escape(system.driver.version)}  ", version)
        assert "ModifyDeviceFiles: 1" in (root / "proc/driver/nvidia/params").read_text()
        for g in node.gpus:
            info = dict(line.split(":", 1) for line in
                        (root / "proc/driver/nvidia/gpus" / str(g.address) / "information").read_text().splitlines())
            info = {k.strip(): v.strip() for k, v in info.items()}
            assert info["GPU UUID"] == g.uuid and int(info["Device Minor"]) == g.minor
            assert info["Bus Location"] == str(g.address) and info["Model"] == g.sku.name
            numa_status = root / "proc/driver/nvidia/gpus" / str(g.address) / "numa_status"
            assert numa_status.exists() == (g.hbm_numa is not None)
            if g.hbm_numa is not None:
                assert numa_status.read_text().startswith(f"Node: {g.hbm_numa}\n")
            dev = root / f"dev/nvidia{g.minor}"
            st = os.lstat(dev)
            if os.geteuid() == 0:
                assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, g.minor)
        devices = (root / "proc/devices").read_text()
        assert "195 nvidia\n" in devices and "195 nvidiactl\n" in devices  # 580's regions (test_kernel_abi)
        uvm = int(re.search(r"^\s*(\d+) nvidia-uvm$", devices, re.M).group(1))  # type: ignore[union-attr]
        if os.geteuid() == 0:
            assert os.major(os.lstat(root / "dev/nvidia-uvm").st_rdev) == uvm
            assert os.minor(os.lstat(root / "dev/nvidiactl").st_rdev) == 255
