"""The fake tree against what real machines of each profile show: public captures and vendor documents.

Every expected value here comes from outside the model (a real ``numactl -H``, a user guide's port table, a
vendor's published figure), with its source in the test's docstring; the model is what is being checked.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import System
from fakehw.model.system import Node

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
