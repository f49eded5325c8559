"""Every nvml* symbol of the real libnvidia-ml.so.535.261.03 is exported by the fake; nothing else is."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fakehw.nvml.build import real_symbols
from fakehw.nvml.smi import RealNvidia

EXTRAS = {"nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetPciInfoExt", "nvmlDeviceGetNumaNodeId",
          "nvmlDeviceGetGpuInstanceProfileInfoByIdV", "nvmlDeviceGetPlatformInfo"}
"""Later-header entry points the fake adds (the issue asks for the versioned fabric and PCI ext forms, MIG profile
info by ID and platform info of the CUDA 13 header)."""


def defined_symbols(lib: Path) -> dict[str, str]:
    """``nm -D --defined-only``: symbol name -> type letter (T strong, W weak)."""
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            symbols[parts[2]] = parts[1]
    return symbols


def test_no_symbol_of_the_real_library_is_missing(nvml_library: Path, real_nvidia: RealNvidia) -> None:
    real = {s for s in defined_symbols(real_nvidia.library) if s.startswith("nvml")}
    fake = defined_symbols(nvml_library)
    assert len(real) == 332
    assert sorted(real - fake.keys()) == []
    # The list the build uses is the real library's, so the two cannot drift apart silently.
    assert set(real_symbols()) == real


def test_exports_only_nvml_symbols(nvml_library: Path) -> None:
    fake = defined_symbols(nvml_library)
    assert sorted(s for s in fake if not s.startswith("nvml")) == []
    assert set(fake) == set(real_symbols()) | EXTRAS


def test_at_least_150_functions_are_implemented(nvml_library: Path) -> None:
    """Strong definitions are implementations; weak ones are the generated NOT_SUPPORTED stubs."""
    fake = defined_symbols(nvml_library)
    implemented = {s for s, kind in fake.items() if kind == "T"}
    stubs = {s for s, kind in fake.items() if kind == "W"}
    assert len(implemented) >= 150, len(implemented)
    assert implemented | stubs == set(fake)
    for name in ("nvmlInit_v2", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                 "nvmlEventSetWait_v2", "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetComputeRunningProcesses",
                 "nvmlInternalGetExportTable", "nvmlErrorString", "nvmlDeviceGetFieldValues"):
        assert name in implemented


def test_soname_and_no_symbol_versions(nvml_library: Path) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    dyn = subprocess.run(["readelf", "-d", str(nvml_library)], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dyn
    versions = subprocess.run(["readelf", "--dyn-syms", "-W", str(nvml_library)], capture_output=True, text=True,
                              check=True).stdout
    nvml_lines = [line for line in versions.splitlines() if " nvml" in line]
    assert nvml_lines and not any("@" in line for line in nvml_lines)
