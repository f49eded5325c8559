"""The fake tree against what real machines of each profile show: public captures and vendor documents.

Every expected value here comes from outside the model (a real ``numactl -H``, a user guide's port table, a
vendor's published figure), with its source in the test's docstring; the model is what is being checked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import System
from fakehw.model.system import Node
from fakehw.sysfs.hwloc import lstopo, lstopo_path

CAPTURES = Path(__file__).parent / "captures"
Rendered = Callable[[str], list[tuple[System, Node, Path]]]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


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


def _numactl_hardware(root: Path) -> str:
    """``numactl --hardware`` run against the tree bind-mounted over /sys in a private mount namespace."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("numactl") is None:
        pytest.skip("needs root, unshare and numactl (tools/install-system-deps.sh)")
    script = (f"mount --bind {root}/sys/devices/system/node /sys/devices/system/node && "
              f"mount --bind {root}/sys/devices/system/cpu /sys/devices/system/cpu && numactl --hardware")
    proc = _run(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip(f"mount namespaces are not available here: {proc.stderr.strip()}")
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
