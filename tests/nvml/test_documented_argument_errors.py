"""Every NULL output and every foreign device handle that nvml.h documents as NVML_ERROR_INVALID_ARGUMENT is one.

nvml.h 13.4.92's doc comment of each function lists "NVML_ERROR_INVALID_ARGUMENT if \\a device is invalid, or \\a X
is NULL". The sweep reads those names from the header itself (reusing test_uninitialized's parse of the
declarations), so a function the shim adds is covered without a new row, and calls each function in one fresh
interpreter per board:

* NULL outputs: once with valid arguments (the first GPU's handle, a zeroed 64 KiB buffer behind every pointer,
  0 for scalars, 4096 for sizes and lengths), then once per documented NULL-able pointer with that pointer NULL.
  The NULL call must answer INVALID_ARGUMENT. A function is judged on the first board (in ``BOARDS``' order) on
  which its valid call answers neither NOT_SUPPORTED nor INVALID_ARGUMENT; one that answers so on every board is
  listed in ``not_judged`` (nvml.h's check order between "not supported" and "NULL" is not stated; we take the
  conservative reading that a board without the feature may answer NOT_SUPPORTED first, as the valid call shows,
  and judge only where the feature exists).
* Foreign device handles: every function whose first parameter is ``nvmlDevice_t device`` and whose doc says
  "\\a device is invalid" is called with handles that are not the library's: NULL, a zeroed struct on the caller's
  side, one slot past and one before the library's handle table, and a misaligned pointer into it; each must answer
  INVALID_ARGUMENT. nvml.h lists INVALID_ARGUMENT for an invalid handle without a precondition, and a handle is
  checked before anything about the device can be known, so no board is needed for it to hold.

Functions taking other handle kinds (units, GPU/compute instances, event sets, vGPU ids) are outside this sweep.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.nvml import references
from tests.nvml.helpers import subprocess_env, write_node
from tests.nvml.test_uninitialized import DECLARATION

INVALID_ARGUMENT = 2
"""nvml.h: ``NVML_ERROR_INVALID_ARGUMENT = 2``."""
NOT_SUPPORTED = 3
"""nvml.h: ``NVML_ERROR_NOT_SUPPORTED = 3``."""
BOARDS = ("dgx-h100", "dgx-b200", "gb200-nvl72", "l40s-server", "t4-cloud", "dgx-a100")
"""Built-in profiles tried in turn: Hopper, Blackwell, Grace Blackwell, Ada, Turing, Ampere (MIG-capable)."""
SIZE_NAMES = re.compile(r"(?i)^(length|size|bufferSize|.*Size|.*Length)$")
"""Scalar parameters that bound a caller's buffer: given 4096 (the buffers are 64 KiB) so the size is valid."""
COUNT_NAMES = re.compile(r"(?i)count|size")
"""A pointer parameter that carries the length of another one's array."""
SUCCESS = 0
"""nvml.h: ``NVML_SUCCESS = 0``."""
OTHER_HANDLES = frozenset({"nvmlUnit_t", "nvmlGpuInstance_t", "nvmlComputeInstance_t", "nvmlEventSet_t",
                           "nvmlVgpuInstance_t", "nvmlVgpuTypeId_t", "nvmlGpmSample_t", "nvmlPdi_t"})
"""Handle kinds this sweep does not build: a function taking one is left out."""
Row = tuple[list[str], list[int], bool]
"""Parameter kinds, indexes of the documented NULL-able pointers, whether an invalid \\a device is documented."""
NULL_CLAUSE = re.compile(r"((?:\\a\s+\w+[\s,]*(?:(?:or|and|either)\s+)?)+)is (?:NULL|null)(?!\s+(?:with|while|and))")
""""\\a X is NULL", "either \\a A or \\a B is NULL", "\\a A, \\a B is NULL"; not "... is NULL with a non-zero
count" nor "is NULL and the value of ... is not 0" (conditional on another argument)."""

PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
rows = json.loads(sys.stdin.read())
assert lib.nvmlInit_v2() == 0
handle = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
zeroed = ctypes.create_string_buffer(4096)
foreign = {"NULL": None, "zeroed struct": ctypes.addressof(zeroed), "misaligned": handle.value + 1}
# The library's table: handles of consecutive indexes are consecutive entries of one array.
count = ctypes.c_uint()
lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
last = ctypes.c_void_p()
lib.nvmlDeviceGetHandleByIndex_v2(count.value - 1, ctypes.byref(last))
stride = 0
if count.value > 1:
    second = ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(second))
    stride = second.value - handle.value
if stride:
    foreign["one before the table"] = handle.value - stride
    foreign["one past the table"] = last.value + stride

def call(name, kinds, null_at=None, device=None):
    buffers = [ctypes.create_string_buffer(65536) for _ in kinds]
    args = []
    for i, kind in enumerate(kinds):
        if i == null_at:
            args.append(ctypes.c_void_p(None))
        elif kind == "device":
            args.append(ctypes.c_void_p(handle.value if device is None or i != 0 else device))
        elif kind == "ptr":
            args.append(ctypes.cast(buffers[i], ctypes.c_void_p))
        elif kind == "size":
            args.append(ctypes.c_uint(4096))
        else:
            args.append(ctypes.c_uint(0))
    sys.stderr.write(f"{name} {null_at} {device}\n"); sys.stderr.flush()
    return getattr(lib, name)(*args)

out = {"valid": {}, "null": {}, "foreign": {}}
for name, kinds, nulls, device_first in rows:
    out["valid"][name] = call(name, kinds)
    out["null"][name] = {str(i): call(name, kinds, null_at=i) for i in nulls}
    if device_first:
        out["foreign"][name] = {what: call(name, kinds, null_at=0) if h is None else call(name, kinds, device=h)
                                for what, h in foreign.items()}
lib.nvmlShutdown()
print(json.dumps(out))
"""


def kind_of(param: str) -> str | None:
    """How the probe fills a parameter: ``device``, ``ptr``, ``size`` or ``int``; None for a handle kind this sweep
    does not build (unit, instances, event set, vGPU ids)."""
    words = param.replace("*", " * ").split()
    if "*" in words:
        return "ptr"
    type_, name = words[-2], words[-1]
    if type_ == "nvmlDevice_t":
        return "device"
    if type_ in OTHER_HANDLES:
        return None
    return "size" if SIZE_NAMES.match(name) else "int"


def documented_rows(header: str) -> dict[str, Row]:
    """Name -> (parameter kinds, indexes of the pointers nvml.h documents INVALID_ARGUMENT for when NULL, whether
    the doc says an invalid first-parameter ``device`` is INVALID_ARGUMENT)."""
    rows: dict[str, Row] = {}
    for doc, name, params in DECLARATION.findall(header):
        match = re.search(r"NVML_ERROR_INVALID_ARGUMENT(.*?)(?=-\s*\\ref|\Z)", doc, re.S)
        if match is None or name.startswith(("nvmlInit", "nvmlShutdown")):
            continue
        text = " ".join(match.group(1).replace("*", " ").split())
        plist = [p.strip() for p in params.split(",")] if params.strip() not in ("", "void") else []
        kinds = [kind_of(p) for p in plist]
        if None in kinds:
            continue
        names = [p.replace("*", " ").split()[-1] for p in plist]
        documented = {x for clause in NULL_CLAUSE.finditer(text) for x in re.findall(r"\\a\s+(\w+)", clause.group(1))}
        # The size-query idiom: with a count pointer beside it, NULL with a count of 0 asks for the count
        # (pynvml's own nvmlDeviceGetComputeRunningProcesses passes exactly that), so such a NULL is not judged.
        counted = "NVML_ERROR_INSUFFICIENT_SIZE" in doc and any(kinds[i] == "ptr" and COUNT_NAMES.search(n)
                                                                for i, n in enumerate(names))
        nulls = [i for i, n in enumerate(names)
                 if n in documented and kinds[i] == "ptr" and not (counted and not COUNT_NAMES.search(n))]
        device_first = bool(names) and names[0] == "device" and kinds[0] == "device" and bool(
            re.search(r"\\a device\b[^.;]*?\binvalid", text))
        if nulls or device_first:
            rows[name] = ([k for k in kinds if k is not None], nulls, device_first)
    return rows


def run_probe(library: Path, snapshot: Path, rows: dict[str, Row]) -> dict[str, Any]:
    """All calls of one board in one fresh interpreter (its own nvmlInit)."""
    payload = json.dumps([[name, *row] for name, row in sorted(rows.items())])
    proc = subprocess.run([sys.executable, "-c", PROBE, str(library)], input=payload, capture_output=True, text=True,
                          timeout=120, check=False, env=subprocess_env(snapshot))
    assert proc.returncode == 0, f"exit {proc.returncode}; last calls: {proc.stderr[-600:]}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.fixture(scope="module")
def rows() -> dict[str, Row]:
    return documented_rows(references.newest_header().read_text())


@pytest.fixture(scope="module")
def answers(nvml_library: Path, rows: dict[str, Row],
            tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The probe's answers on each of ``BOARDS``."""
    out = []
    for board in BOARDS:
        snap = write_node(tmp_path_factory.mktemp(board) / "nvml.snapshot", board)
        out.append(run_probe(nvml_library, snap.path, rows))
    return out


def test_the_header_documents_the_arguments_this_test_passes(rows: dict[str, Row]) -> None:
    """The parse finds what nvml.h 13.4.92 says: nvmlDeviceGetName's \\a name and an invalid \\a device,
    nvmlDeviceGetDramEncryptionMode's two outputs ("either \\a current or \\a pending is NULL"), only
    nvmlSystemGetHicVersion's count (its \\a hwbcEntries NULL with a count of 0 is the size query), and not
    nvmlDeviceGetTopologyNearestGpus's \\a deviceArray (NULL only "with a non-zero \\a count")."""
    assert rows["nvmlDeviceGetName"] == (["device", "ptr", "size"], [1], True)
    assert rows["nvmlDeviceGetDramEncryptionMode"][1] == [1, 2]
    assert rows["nvmlSystemGetHicVersion"][1] == [0]
    assert rows["nvmlDeviceGetEncoderStats"][1] == [1, 2, 3]
    assert rows["nvmlDeviceGetTopologyNearestGpus"][1] == []
    assert len(rows) > 150


def test_a_documented_null_output_answers_invalid_argument(rows: dict[str, Row],
                                                           answers: list[dict[str, Any]]) -> None:
    """On the first board where the function works with valid arguments, each documented NULL pointer answers
    NVML_ERROR_INVALID_ARGUMENT."""
    wrong, judged = {}, 0
    for name, (_, nulls, _) in rows.items():
        board = next((i for i, a in enumerate(answers) if a["valid"][name] == SUCCESS),
                     None)
        if board is None or not nulls:
            continue
        judged += 1
        bad = {i: c for i, c in answers[board]["null"][name].items() if c != INVALID_ARGUMENT}
        if bad:
            wrong[name] = (BOARDS[board], bad)
    assert judged > 90
    assert not wrong, f"a documented NULL argument answered other than INVALID_ARGUMENT: {wrong}"


def test_a_handle_that_is_not_the_librarys_answers_invalid_argument(answers: list[dict[str, Any]]) -> None:
    """NULL, a zeroed struct, one before/past the handle table and a misaligned pointer are each refused with
    NVML_ERROR_INVALID_ARGUMENT by every function whose doc says so of an invalid \\a device."""
    wrong = {(BOARDS[i], name): {what: c for what, c in by.items() if c != INVALID_ARGUMENT}
             for i, a in enumerate(answers) for name, by in a["foreign"].items() if a["valid"][name] == SUCCESS}
    wrong = {k: v for k, v in wrong.items() if v}
    assert answers[0]["foreign"]
    assert not wrong, f"a foreign device handle answered other than INVALID_ARGUMENT: {wrong}"


REFUSED_WITH_THESE_ARGUMENTS = {
    "nvmlUnitGetHandleByIndex": "index 0, and no built-in board has an S-class unit (nvml.h: \\a index is invalid)",
    "nvmlGetExcludedDeviceInfoByIndex": "index 0, and no board excludes a device (nvml.h: \\a index is invalid)",
    "nvmlDeviceGetHandleByPciBusId_v2": "an empty bus id (nvml.h: \\a pciBusId is invalid)",
    "nvmlDeviceGetSamples": "a count of 0 for a non-NULL \\a samples (nvml.h says so)",
    "nvmlDeviceGetFieldValues": "a count of 0 (nvml.h is silent; the fake refuses it: open, see the write-up)",
    "nvmlDeviceClearFieldValues": "a count of 0 (as nvmlDeviceGetFieldValues)",
}
"""The functions whose zero-filled "valid" call the sweep's arguments make invalid on every board, and why."""


def test_only_arguments_nvml_h_calls_invalid_are_refused(rows: dict[str, Row], answers: list[dict[str, Any]]) -> None:
    """The sweep judges a NULL only where the valid call answers SUCCESS somewhere; a NULL check turned around
    (``x != NULL`` refused) would instead make the valid call answer INVALID_ARGUMENT everywhere and drop the
    function from the sweep. So the set of functions refusing the sweep's valid arguments on every board is pinned:
    each entry of ``REFUSED_WITH_THESE_ARGUMENTS`` has its reason in nvml.h's own list."""
    refused = {name for name in rows if all(a["valid"][name] != SUCCESS for a in answers)
               and any(a["valid"][name] == INVALID_ARGUMENT for a in answers)}
    assert refused == set(REFUSED_WITH_THESE_ARGUMENTS)
