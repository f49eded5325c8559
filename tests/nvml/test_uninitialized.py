"""Before ``nvmlInit`` every entry point answers NVML_ERROR_UNINITIALIZED, as nvml.h says of each.

nvml.h 13.4.92 lists "NVML_ERROR_UNINITIALIZED if the library has not been successfully initialized" among the
return codes of most of its functions. A consumer meets it when it calls a function before ``nvmlInit`` or with a
handle kept past ``nvmlShutdown`` (pynvml raises ``NVMLError_Uninitialized``). The test reads the list of those
functions from the header itself, so a function the shim adds is covered without a new row.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.nvml import references

DECLARATION = re.compile(
    r"/\*\*((?:(?!\*/).)*)\*/\s*(?:DEPRECATED\([^)]*\)\s*)?nvmlReturn_t\s+DECLDIR\s+(nvml\w+)\s*\(([^;]*?)\)\s*;", re.S)
"""A documented declaration: its doc comment, its name and its parameter list."""
UNINITIALIZED = 1
"""nvml.h: ``NVML_ERROR_UNINITIALIZED = 1``."""

PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
answers = {}
for name, arity in json.loads(sys.stdin.read()):
    # Every argument points at its own zeroed buffer: no NULL, so "not initialized" is the only condition of
    # nvml.h's list that holds for the call (a handle cannot be valid before nvmlInit in any case).
    buffers = [ctypes.create_string_buffer(65536) for _ in range(arity)]
    answers[name] = getattr(lib, name)(*[ctypes.cast(b, ctypes.c_void_p) for b in buffers])
print(json.dumps(answers))
"""


def documented_uninitialized(header: str) -> dict[str, int]:
    """Name -> parameter count of every function whose doc comment lists NVML_ERROR_UNINITIALIZED (the nvmlInit
    family aside: they are what initializes)."""
    out = {}
    for doc, name, params in DECLARATION.findall(header):
        if "NVML_ERROR_UNINITIALIZED" in doc and not name.startswith("nvmlInit"):
            out[name] = 0 if params.strip() in ("", "void") else params.count(",") + 1
    return out


def test_the_header_lists_the_functions_this_test_calls() -> None:
    """The parse finds what nvml.h 13.4.92 has: hundreds of documented functions, among them ones a consumer calls
    first (``nvmlDeviceGetCount_v2``), setters, MIG creation and ``nvmlShutdown`` (UNINITIALIZED when nothing was
    initialized); not ``nvmlInit_v2``."""
    functions = documented_uninitialized(references.newest_header().read_text())
    assert len(functions) > 300
    assert functions["nvmlDeviceGetCount_v2"] == 1
    assert functions["nvmlDeviceCreateGpuInstanceWithPlacement"] == 4
    assert functions["nvmlDeviceFreezeNvLinkUtilizationCounter"] == 4
    assert functions["nvmlShutdown"] == 0
    assert "nvmlInit_v2" not in functions


def test_every_function_answers_uninitialized_before_init(nvml_library: Path) -> None:
    """Each function nvml.h documents with NVML_ERROR_UNINITIALIZED answers it in a process that never called
    nvmlInit (a fresh interpreter: the library's init count is its own)."""
    functions = documented_uninitialized(references.newest_header().read_text())
    proc = subprocess.run([sys.executable, "-c", PROBE, str(nvml_library)], input=json.dumps(sorted(functions.items())),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    answers = json.loads(proc.stdout)
    assert set(answers) == set(functions)
    wrong = {name: code for name, code in answers.items() if code != UNINITIALIZED}
    assert not wrong, f"answered other than NVML_ERROR_UNINITIALIZED before nvmlInit: {wrong}"



KNOWN_DIFFERENT = {"nvmlSystemGetNVMLVersion": 9}
"""The fake's answers known to differ from the real library's before nvmlInit (reported, system.c): the real 535,
550 and 555 libraries give their own NVML version (SUCCESS) without a driver, the fake answers DRIVER_NOT_LOADED."""


def _probe(library: Path, functions: dict[str, int]) -> dict[str, int]:
    """PROBE's answers of ``library`` for the ``functions`` it exports, in a process that never called nvmlInit."""
    import ctypes

    exported = {name: arity for name, arity in functions.items() if hasattr(ctypes.CDLL(str(library)), name)}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(library)], input=json.dumps(sorted(exported.items())),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{library}: exit {proc.returncode}: {proc.stderr[-2000:]}"
    answers: dict[str, int] = json.loads(proc.stdout)
    return answers


def test_functions_nvml_h_is_silent_on_answer_before_init_as_the_real_library(nvml_library: Path) -> None:
    """The documented functions whose nvml.h comment does not list NVML_ERROR_UNINITIALIZED (GPM sample allocation
    and freeing, nvmlGpmMetricsGet, field values, vGPU calls, ...) answer, in a process that never called nvmlInit,
    what the real libnvidia-ml of 535, 550 and 555 answers there (every argument a zeroed buffer, as above; the real
    libraries run without a GPU or driver here): UNINITIALIZED for all but KNOWN_DIFFERENT. Compared on the
    functions both libraries export."""
    header = references.newest_header().read_text()
    documented = documented_uninitialized(header)
    silent = {}
    for _doc, name, params in DECLARATION.findall(header):
        if name not in documented and not name.startswith("nvmlInit"):
            silent[name] = 0 if params.strip() in ("", "void") else params.count(",") + 1
    fake = _probe(nvml_library, silent)
    assert {"nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmMetricsGet", "nvmlDeviceGetFieldValues"} <= set(fake)
    for branch in (535, 550, 555):
        real = _probe(references.real_nvidia(branch).library, silent)
        both = set(real) & set(fake)
        assert len(both) > 20, branch
        differ = {name: fake[name] for name in both if fake[name] != real[name]}
        assert differ == {name: code for name, code in KNOWN_DIFFERENT.items() if name in both}, (branch, real)
