"""The real nvidia-smi 535.261.03 (Debian non-free) against the fake, compared with the model.

nvidia-smi is extracted by tools/fetch-real-nvidia.sh; tests skip with that reason when it is missing.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model.system import Driver
from fakehw.nvml.smi import RealNvidia, _namespace_prefix, run_nvidia_smi
from fakehw.nvml.snapshot import build_snapshot, write_snapshot
from tests.nvml.helpers import NodeSnap

PROFILES = ["dgx-h100", "gb200-nvl72", "edge-pcie", "dgx-a100"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ARCHITECTURE_NAMES = {"ampere": "Ampere", "hopper": "Hopper", "ada": "Ada Lovelace", "blackwell": "Unknown"}
"""How nvidia-smi 535 names NVML's architecture values (Blackwell, 10, postdates it)."""


def smi(snap: NodeSnap, real: RealNvidia, *args: str, sysfs: bool = True) -> subprocess.CompletedProcess[str]:
    proc = run_nvidia_smi(list(args), snap.path, real, sysfs=sysfs)
    assert "Mismatch" not in proc.stdout + proc.stderr
    return proc


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"nvidia-smi exited {proc.returncode}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("profile", PROFILES)
def test_list(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap], profile: str) -> None:
    snap = node_snapshot(profile)
    expected = []
    for g in snap.node.gpus:
        expected.append(f"GPU {g.index}: {g.sku.name} (UUID: {g.uuid})")
        # MIG devices are numbered in GPU instance id order (MIG user guide, "nvidia-smi -L": Device 0 is GPU
        # instance 1 after "-cgi 9,9" made instances 2 and 1).
        for k, m in enumerate(sorted(g.mig_instances, key=lambda m: m.gpu_instance_id)):
            expected.append(f"  MIG {m.profile.name:<11} Device {k:>2}: (UUID: {m.uuid})")
    assert ok(smi(snap, real_nvidia, "-L")).splitlines() == expected


def test_version_check_is_live(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap]) -> None:
    """The profile's driver version is what nvidia-smi checks: the default passes, another one fails."""
    snap = node_snapshot("edge-pcie")
    assert snap.system.driver.version == real_nvidia.driver_version
    other = dataclasses.replace(snap.system, driver=Driver("535.999.01", snap.system.driver.cuda_version))
    write_snapshot(snap.path, build_snapshot(other, other.nodes[0], snap.state).to_bytes())
    proc = run_nvidia_smi(["-L"], snap.path, real_nvidia)
    assert "Mismatch in versions between nvidia-smi and NVML" in proc.stdout + proc.stderr


def as_float32(x: float) -> float:
    """nvidia-smi formats watts from a C float: round through one to print what it prints."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def parse_query(text: str) -> list[dict[str, str]]:
    """``nvidia-smi -q`` text: one dict per GPU of 'Section/Key' -> value."""
    gpus: list[dict[str, str]] = []
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpus.append({"Bus": line[4:]})
            stack = []
            continue
        if not gpus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [key.strip()])
        if value.strip() or ":" in line:
            gpus[-1][path] = value.strip()
        else:
            stack.append((indent, key.strip()))
    return gpus


@pytest.mark.parametrize("profile", PROFILES)
def test_query_text(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap], profile: str) -> None:
    faults = [{"kind": "thermal", "device": "gpu1", "temperature_c": 97}]
    snap = node_snapshot(profile, faults=faults)
    gpus = parse_query(ok(smi(snap, real_nvidia, "-q")))
    assert len(gpus) == len(snap.node.gpus)
    for gpu, q, rec in zip(snap.node.gpus, gpus, snap.snapshot.gpus, strict=True):
        state = snap.state.gpu(gpu.name)
        assert state is not None
        sku = gpu.sku
        assert q["Bus"] == gpu.address.nvml_bus_id
        assert q["Product Name"] == sku.name
        assert q["GPU UUID"] == gpu.uuid
        assert q["Serial Number"] == gpu.serial
        assert q["Minor Number"] == str(gpu.minor)
        assert q["VBIOS Version"] == sku.vbios
        assert q["Board Part Number"] == sku.board_part_number
        assert q["PCI/Bus Id"] == gpu.address.nvml_bus_id
        assert q["PCI/Device Id"] == f"0x{sku.pci_device_vendor_id:08X}"
        assert q["FB Memory Usage/Total"] == f"{sku.memory_mib} MiB"
        assert q["Temperature/GPU Current Temp"] == f"{state.temperature_c} C"
        assert q["Temperature/GPU Shutdown Temp"] == f"{sku.thermal.shutdown_c} C"
        assert q["Max Clocks/SM"] == f"{sku.clocks.sm_max_mhz} MHz"
        assert q["GPU Power Readings/Power Draw"] == f"{as_float32(rec.power_usage_mw / 1000):.2f} W"
        assert q["MIG Mode/Current"] == ("Enabled" if gpu.mig_enabled else "Disabled" if sku.mig else "N/A")
        throttled = "Active" if state.throttle_reasons & 0x20 else "Not Active"
        assert q["Clocks Event Reasons/SW Thermal Slowdown"] == throttled


@pytest.mark.parametrize("profile", PROFILES)
def test_query_xml(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap], profile: str) -> None:
    faults = [{"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 3, "location": "device-memory"},
              {"kind": "power-cap", "device": "gpu1", "limit_w": None}]
    snap0 = node_snapshot(profile)
    faults[1]["limit_w"] = snap0.node.gpus[1].sku.power.min_limit_w
    snap = node_snapshot(profile, faults=faults)
    text = ok(smi(snap, real_nvidia, "-q", "-x"))
    root = ET.fromstring(text[text.index("<nvidia_smi_log>"):])
    assert root.findtext("driver_version") == snap.system.driver.version
    assert root.findtext("cuda_version") == snap.system.driver.cuda_version
    assert root.findtext("attached_gpus") == str(len(snap.node.gpus))
    gpus = root.findall("gpu")
    domain = snap.system.domain_of(snap.node)
    for gpu, x in zip(snap.node.gpus, gpus, strict=True):
        state = snap.state.gpu(gpu.name)
        assert state is not None
        sku = gpu.sku
        assert x.get("id") == gpu.address.nvml_bus_id
        assert x.findtext("product_name") == sku.name
        assert x.findtext("product_architecture") == ARCHITECTURE_NAMES[sku.architecture]
        assert x.findtext("uuid") == gpu.uuid
        assert x.findtext("serial") == gpu.serial
        assert x.findtext("minor_number") == str(gpu.minor)
        assert x.findtext("pci/pci_bus_id") == gpu.address.nvml_bus_id
        assert x.findtext("pci/pci_device_id") == f"{sku.pci_device_vendor_id:08X}"
        assert x.findtext("pci/pci_gpu_link_info/pcie_gen/max_link_gen") == str(sku.pcie.generation)
        assert x.findtext("fb_memory_usage/total") == f"{sku.memory_mib} MiB"
        assert x.findtext("bar1_memory_usage/total") == f"{sku.bar1_mib} MiB"
        assert x.findtext("temperature/gpu_temp") == f"{state.temperature_c} C"
        dbe = sum(state.ecc_dbe.values())
        assert x.findtext("ecc_errors/volatile/dram_uncorrectable") == str(dbe)
        assert x.findtext("remapped_rows/remapped_row_unc") == str(state.retired_pages_dbe)
        assert x.findtext("max_clocks/graphics_clock") == f"{sku.clocks.graphics_max_mhz} MHz"
        fabric = x.findtext("fabric/state")
        if domain is not None and domain.fabric is not None:
            assert fabric == "Completed" and x.findtext("fabric/status") == "Success"
        else:
            assert fabric == "N/A"
        migs = x.findall("mig_devices/mig_device")
        assert len(migs) == len(gpu.mig_instances)
        for m, inst, rec in zip(migs, gpu.mig_instances, [r for r in snap.snapshot.migs if
                                                          r.parent == gpu.index], strict=True):
            assert m.findtext("index") == str(inst.index)
            assert m.findtext("gpu_instance_id") == str(rec.gpu_instance_id)
            assert m.findtext("device_attributes/shared/multiprocessor_count") == str(rec.multiprocessors)
            assert m.findtext("fb_memory_usage/total") == f"{inst.profile.memory_mib} MiB"


def topo_fakehw(profile: str, node_index: int) -> str:
    out = subprocess.run([sys.executable, "-m", "fakehw.cli", "topo", profile, "--node", str(node_index)],
                         capture_output=True, text=True, check=True).stdout
    # For multi-node profiles the CLI names the node on a first "#" line; nvidia-smi has no such line.
    return "".join(line for line in out.splitlines(keepends=True) if not line.startswith("# "))


@pytest.mark.parametrize(("profile", "node_index"), [("dgx-h100", 0), ("gb200-nvl72", 0), ("gb200-nvl72", 11),
                                                     ("edge-pcie", 0), ("dgx-a100", 0)])
def test_topo_matrix_equals_fakehw_topo(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap],
                                        profile: str, node_index: int) -> None:
    if _namespace_prefix() is None:
        pytest.skip("nvidia-smi finds NICs in /sys: giving it the node's needs a mount namespace (unshare -m as "
                    "root, or unprivileged user namespaces)")
    snap = node_snapshot(profile, node_index)
    assert ok(smi(snap, real_nvidia, "topo", "-m")) == topo_fakehw(profile, node_index)


def test_topo_matrix_sees_a_link_fault(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap]) -> None:
    """An NVLink down shrinks the bond of that GPU to every peer (NV18 -> NV17), as the model derives it."""
    snap = node_snapshot("dgx-h100", faults=[{"kind": "nvlink-down", "device": "gpu3", "link": 0}])
    rows = {r.split("\t")[0]: r.split("\t")[1:] for r in ANSI.sub("", ok(smi(snap, real_nvidia, "topo", "-m",
                                                                              sysfs=False))).splitlines() if r}
    from fakehw.nvml.snapshot import node_topology

    topo = node_topology(snap.system, snap.node, snap.state)
    for b in range(8):
        expected = " X " if b == 3 else f"NV{topo.nvlinks[3][b]}"
        assert rows["GPU3"][b] == expected
    assert rows["GPU3"][0] == "NV17" and rows["GPU0"][1] == "NV18"


def test_nvlink_status(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("dgx-h100", faults=[{"kind": "nvlink-down", "device": "gpu2", "link": 5}])
    out = ok(smi(snap, real_nvidia, "nvlink", "-s"))
    blocks = re.split(r"^GPU \d+: ", out, flags=re.M)[1:]
    assert len(blocks) == len(snap.node.gpus)
    for gpu, block in zip(snap.node.gpus, blocks, strict=True):
        state = snap.state.gpu(gpu.name)
        assert state is not None
        assert block.startswith(f"{gpu.sku.name} (UUID: {gpu.uuid})")
        links = dict(re.findall(r"Link (\d+): (.+)", block))
        assert len(links) == len(gpu.ports)
        for port, link in zip(gpu.ports, state.links, strict=True):
            want = f"{port.bandwidth_gbs:g} GB/s" if link.up else "<inactive>"
            assert links[str(port.port)].strip() == want
    assert "<inactive>" in blocks[2] and "<inactive>" not in blocks[1]


def test_a_lost_gpu_is_reported_lost(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("dgx-h100", faults=[{"kind": "xid", "device": "gpu6", "code": 79}])
    proc = smi(snap, real_nvidia, "-L")
    assert "GPU is lost" in proc.stdout
    assert f"GPU 7: {snap.node.gpus[7].sku.name} (UUID: {snap.node.gpus[7].uuid})" in proc.stdout


def test_smi_runner_cli(real_nvidia: RealNvidia, node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    snap = node_snapshot("edge-pcie")
    proc = subprocess.run([sys.executable, "-m", "fakehw.nvml", "smi", "--snapshot", str(snap.path), "--", "-L"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.count("NVIDIA L4") == len(snap.node.gpus)
    missing = subprocess.run([sys.executable, "-m", "fakehw.nvml", "smi", "--snapshot", str(tmp_path / "none"), "--",
                              "-L"], capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
