"""Exports: every link symbol of the newest public nvml.h and of the real 535/550/555 libraries, nothing else.

Oracles: nvidia-nvml-dev 13.4.92's nvml.h (PyPI) and the real libnvidia-ml of each Debian branch (nm -D). The
symbol table the build uses (fakehw/nvml/nvml_symbols.txt) must agree with both, so the branch gating cannot
drift from the real libraries.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fakehw.nvml.build import symbol_table
from fakehw.nvml.headers import link_symbols
from tests.nvml import references


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


def test_every_link_symbol_of_the_newest_header_is_exported(nvml_library: Path) -> None:
    header = references.newest_header()
    wanted = link_symbols(header.read_text())
    # 410 through the header's #define mapping, plus nvmlErrorString (declared "const DECLDIR char*").
    assert len(wanted) >= 410
    fake = defined_symbols(nvml_library)
    assert sorted(wanted - fake.keys()) == []
    print(f"\n{len(wanted)} link symbols of nvml.h {references.NEWEST_HEADER}: all exported; "
          f"{sum(1 for s in wanted if fake[s] == 'T')} implemented, the rest NOT_SUPPORTED stubs")


@pytest.mark.parametrize("branch", [535, 550, 555])
def test_the_symbol_table_is_each_real_library(branch: int, nvml_library: Path) -> None:
    """Every export of the real library of a branch is in the table with that branch or an older one, and the
    table claims nothing for the branch that its library lacks."""
    real = {s for s in defined_symbols(references.real_nvidia(branch).library) if s.startswith("nvml")}
    table = symbol_table()
    claimed = {name for name, since in table.items() if since <= branch}
    assert sorted(real - claimed) == []
    assert sorted(claimed - real) == []
    assert sorted(real - defined_symbols(nvml_library).keys()) == []
    if branch == 535:
        assert len(real) == 332


def test_the_symbol_table_covers_the_newest_header() -> None:
    wanted = link_symbols(references.newest_header().read_text())
    table = symbol_table()
    assert sorted(wanted - table.keys()) == []
    assert max(table.values()) == 615  # the branch of the 13.4 header


def test_exports_only_the_table(nvml_library: Path) -> None:
    fake = defined_symbols(nvml_library)
    assert sorted(s for s in fake if not s.startswith("nvml")) == []
    assert set(fake) == set(symbol_table())


def test_new_getters_are_implemented(nvml_library: Path) -> None:
    """Strong definitions are implementations; weak ones are the generated stubs."""
    fake = defined_symbols(nvml_library)
    implemented = {s for s, kind in fake.items() if kind == "T"}
    assert len(implemented) >= 260, len(implemented)
    for name in ("nvmlDeviceGetPlatformInfo", "nvmlDeviceGetC2cModeInfoV", "nvmlDeviceGetAddressingMode",
                 "nvmlDeviceGetNvLinkInfo", "nvmlDeviceGetTemperatureV", "nvmlDeviceGetMarginTemperature",
                 "nvmlDeviceGetCurrentClockFreqs", "nvmlDeviceGetPerformanceModes", "nvmlDeviceGetRepairStatus",
                 "nvmlDeviceGetUnrepairableMemoryFlag_v1", "nvmlDeviceGetPdi", "nvmlSystemGetDriverBranch",
                 "nvmlDeviceGetHostname_v1", "nvmlEventSetWait_v3", "nvmlSystemEventSetCreate",
                 "nvmlSystemEventSetWait", "nvmlDeviceGetClockOffsets",
                 "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles", "nvmlDevicePowerSmoothingSetState",
                 "nvmlDeviceGetDramEncryptionMode", "nvmlDeviceGetNvlinkBwMode", "nvmlDeviceGetDriverModel_v2",
                 "nvmlGpmMetricsGet", "nvmlGpmSampleGet", "nvmlDeviceGetGpuFabricInfo_v4",
                 "nvmlInternalGetExportTable", "nvmlDeviceGetFieldValues"):
        assert name in implemented, name


def test_soname_and_no_symbol_versions(nvml_library: Path) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    dyn = subprocess.run(["readelf", "-d", str(nvml_library)], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dyn
    versions = subprocess.run(["readelf", "--dyn-syms", "-W", str(nvml_library)], capture_output=True, text=True,
                              check=True).stdout
    nvml_lines = [line for line in versions.splitlines() if " nvml" in line]
    assert nvml_lines and not any("@" in line for line in nvml_lines)
