"""Driver branches: a profile's driver selects the NVML generation the library presents.

Oracles: the real libraries' exports and the public headers of each branch (which functions and struct versions
exist: fakehw/nvml/nvml_symbols.txt is checked against them in test_symbols.py), the captures' driver and CUDA
versions, and the branch facts of the header history cited next to each expectation.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.model import load_profile
from fakehw.nvml.build import symbol_table
from tests.nvml.captures import capture_dir
from tests.nvml.helpers import NodeSnap, run_python, with_driver
from tests.nvml.test_symbols import defined_symbols

FUNCTION_NOT_FOUND, NOT_SUPPORTED, ARGUMENT_VERSION_MISMATCH, UNINITIALIZED = 13, 3, 25, 1

CALL_EACH = r"""
import ctypes, json, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
names = json.loads(sys.argv[1])
before = {name: getattr(lib, name)() for name in names[:5]}
assert lib.nvmlInit_v2() == 0
print(json.dumps({"before": before, "after": {name: getattr(lib, name)() for name in names}}))
"""


def call_each(snap: NodeSnap, names: list[str]) -> dict[str, dict[str, int]]:
    """Call each function with no arguments (the branch gate and the stubs answer before reading any)."""
    code = CALL_EACH.replace("sys.argv[1]", repr(__import__("json").dumps(names)))
    result: dict[str, dict[str, int]] = run_python(code, snap.path)
    return result


@pytest.mark.parametrize(("version", "branch"), [("535.261.03", 535), ("550.163.01", 550), ("580.105.08", 580)])
def test_functions_newer_than_the_branch_are_not_found(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                                       version: str, branch: int) -> None:
    """A loader finds nothing in an older branch's library: pynvml and go-nvml get FUNCTION_NOT_FOUND."""
    snap = node_snapshot(with_driver(tmp_path, "dgx-h100", version))
    newer = sorted(name for name, since in symbol_table().items() if since > branch)
    assert newer and "nvmlDeviceGetAddressingMode" in newer if branch < 580 else True
    got = call_each(snap, newer)
    assert {name: code for name, code in got["after"].items() if code != FUNCTION_NOT_FOUND} == {}
    assert set(got["before"].values()) == {UNINITIALIZED}


def test_stubs_of_the_branch_answer_not_supported(node_snapshot: Callable[..., NodeSnap], tmp_path: Path,
                                                  nvml_library: Path) -> None:
    """Functions the branch has but the fake does not implement (vGPU, setters) answer NOT_SUPPORTED."""
    snap = node_snapshot(with_driver(tmp_path, "dgx-h100", "615.10.01"))
    stubs = sorted(s for s, kind in defined_symbols(nvml_library).items() if kind == "W")
    assert len(stubs) > 100
    got = call_each(snap, stubs)
    assert {name: code for name, code in got["after"].items() if code != NOT_SUPPORTED} == {}


VERSIONS = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
def call(fn, size, version, word=None):
    buf = (ctypes.c_ubyte * 4096)()
    ctypes.c_uint.from_buffer(buf).value = word if word is not None else size | version << 24
    return getattr(lib, fn)(h, buf)
print(json.dumps({
    "fabric_v2": call("nvmlDeviceGetGpuFabricInfoV", 36, 2), "fabric_v3": call("nvmlDeviceGetGpuFabricInfoV", 40, 3),
    "fabric_bad": call("nvmlDeviceGetGpuFabricInfoV", 40, 9),
    "temperature_v1": call("nvmlDeviceGetTemperatureV", 12, 1),
    "temperature_bad": call("nvmlDeviceGetTemperatureV", 16, 1),
    "margin_v1": call("nvmlDeviceGetMarginTemperature", 8, 1),
    "margin_bad": call("nvmlDeviceGetMarginTemperature", 8, 2),
    "pdi_v1": call("nvmlDeviceGetPdi", 16, 1), "pdi_bad": call("nvmlDeviceGetPdi", 8, 1),
    "memory_v2": call("nvmlDeviceGetMemoryInfo_v2", 40, 2), "memory_bad": call("nvmlDeviceGetMemoryInfo_v2", 40, 1),
}))
"""


@pytest.mark.parametrize(("version", "expected"), [
    # nvmlDeviceGetGpuFabricInfoV arrived with the 12.4 header (550) taking v2; v3 arrived with 13.0 (580).
    # TemperatureV and MarginTemperature arrived with 12.8 (570), nvmlDeviceGetPdi with 13.0 (580).
    ("550.163.01", {"fabric_v2": 0, "fabric_v3": ARGUMENT_VERSION_MISMATCH, "temperature_v1": FUNCTION_NOT_FOUND,
                    "pdi_v1": FUNCTION_NOT_FOUND}),
    ("570.148.08", {"fabric_v2": 0, "fabric_v3": ARGUMENT_VERSION_MISMATCH, "temperature_v1": 0, "margin_v1": 0,
                    "pdi_v1": FUNCTION_NOT_FOUND}),
    ("580.105.08", {"fabric_v2": 0, "fabric_v3": 0, "temperature_v1": 0, "margin_v1": 0, "pdi_v1": 0}),
])
def test_versioned_structs_per_branch(node_snapshot: Callable[..., NodeSnap], tmp_path: Path, version: str,
                                      expected: dict[str, int]) -> None:
    snap = node_snapshot(with_driver(tmp_path, "dgx-h100", version))
    got = run_python(VERSIONS, snap.path)
    assert {k: got[k] for k in expected} == expected
    for bad in ("fabric_bad", "memory_bad"):
        assert got[bad] == ARGUMENT_VERSION_MISMATCH
    for bad, present in (("temperature_bad", "temperature_v1"), ("margin_bad", "margin_v1"), ("pdi_bad", "pdi_v1")):
        if got[present] == 0:
            assert got[bad] == ARGUMENT_VERSION_MISMATCH
    assert got["memory_v2"] == 0


SYSTEM = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
version = ctypes.create_string_buffer(80)
nvml = ctypes.create_string_buffer(80)
cuda = ctypes.c_int()
assert lib.nvmlSystemGetDriverVersion(version, 80) == 0 and lib.nvmlSystemGetNVMLVersion(nvml, 80) == 0
assert lib.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)) == 0
branch = (ctypes.c_ubyte * 84)()
ctypes.c_uint.from_buffer(branch).value = 84 | 1 << 24
rc = lib.nvmlSystemGetDriverBranch(branch, 80)
text = bytes(branch[4:]).split(b"\0")[0].decode()
print(json.dumps({"driver": version.value.decode(), "nvml": nvml.value.decode(), "cuda": cuda.value,
                  "branch_rc": rc, "branch": text}))
"""

CAPTURED_PROFILES = {"a100": "tests/nvml/profiles/a100-40gb.yaml", "h100": "dgx-h100", "b200": "dgx-b200",
                     "gb200": "gb200-nvl72", "gb300": "gb300-nvl72", "l40s": "l40s-server", "t4": "t4-cloud"}


@pytest.mark.parametrize("board", sorted(CAPTURED_PROFILES))
def test_built_in_profiles_run_the_captured_drivers(node_snapshot: Callable[..., NodeSnap], board: str) -> None:
    """Each captured board's profile defaults to the driver and CUDA version the real board reported."""
    d = capture_dir()
    if d is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    root = ET.parse(d / f"qx-{board}.xml").getroot()
    profile = CAPTURED_PROFILES[board]
    ref = str(Path(__file__).resolve().parents[2] / profile) if profile.endswith(".yaml") else profile
    snap = node_snapshot(ref)
    got = run_python(SYSTEM, snap.path)
    real_driver, real_cuda = root.findtext("driver_version"), root.findtext("cuda_version")
    assert got["driver"] == real_driver
    major, minor = (real_cuda or "0.0").split(".")
    assert got["cuda"] == int(major) * 1000 + int(minor) * 10
    assert got["nvml"] == f"{major}.{real_driver}"
    assert (got["branch_rc"], got["branch"]) == (0, f"r{real_driver.split('.')[0]}_00")  # type: ignore[union-attr]


def test_blackwell_boards_default_to_570_or_newer() -> None:
    """Blackwell support arrived with R570: no built-in Blackwell profile may name an older driver."""
    for name in ("dgx-b200", "gb200-nvl72", "gb300-nvl72", "riscv-nvlink-fusion", "mixed-arch"):
        assert load_profile(name).driver.branch >= 570, name


def fakehw_show(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return subprocess.run([sys.executable, "-m", "fakehw.cli", "show", str(path)], capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.mark.parametrize(("text", "line", "message"), [
    ("extends: dgx-b200\ndriver:\n  version: 535.261.03\n", 3,
     "driver 535.261.03 (branch 535) cannot run NVIDIA B200 (b200-sxm6-180gb, gpu0 of group dgx-b200): it needs "
     "branch 570 or newer"),
    ("extends: gb200-nvl72\ndriver: {version: 555.58.02}\n", 2, "cannot run NVIDIA GB200"),
    ("extends: dgx-h100\ndriver: {version: 540.10.01}\n", 2, "driver 540.10.01 is of branch 540, which fakehw does "
     "not know (known: 535, 550, 555, 560, 570, 575, 580, 590, 595, 610, 615)"),
    ("extends: dgx-h100\ndriver: {version: 999.1.1}\n", 2, "branch 999, which fakehw does not know"),
    ("extends: dgx-h100\ndriver: {version: 550.163.01, cudaVersion: '12.2'}\n", 2,
     "driver 550.163.01 (branch 550) reports CUDA 12.4, not 12.2"),
    ("extends: dgx-h100\ndriver: {version: banana}\n", 2, "driver.version"),
])
def test_impossible_drivers_are_profile_errors(tmp_path: Path, text: str, line: int, message: str) -> None:
    proc = fakehw_show(tmp_path, text)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"profile.yaml:{line}:" in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_known_branch_gets_its_cuda_version(tmp_path: Path) -> None:
    proc = fakehw_show(tmp_path, "extends: dgx-h100\ndriver: {version: 555.58.02}\n")
    assert proc.returncode == 0, proc.stderr
    assert "driver 555.58.02 (CUDA 12.5)" in proc.stdout
