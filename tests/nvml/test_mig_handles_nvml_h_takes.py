"""A MIG device handle given to a function whose nvml.h doc says it takes one is not refused as an invalid handle.

nvml.h 13.4.92 says of some device functions that they take a MIG device handle: "@param device The device handle
or MIG device handle", "When used with MIG device handles the API returns ...", "This API supports the device handle
and MIG device handle", "If MIG is enabled on a GPU, device must be MIG device handle", "per instance information
can be queried by using specific MIG device handles". A MIG device handle is a valid handle (nvmlDeviceIsMigDevice-
Handle: "can be used (with some restrictions) interchangeably with a GPU device handle"), so such a function may
answer anything its doc lists, but not NVML_ERROR_INVALID_ARGUMENT for the handle: nvml.h gives INVALID_ARGUMENT
"if device is invalid". The sweep reads the functions from the header (a function the header adds such a sentence
to is covered without a new row) and calls each on dgx-a100's gpu7 (MIG on, two MIG devices) with the first MIG
device's handle and with gpu7's own handle, every other argument as test_documented_argument_errors.py's probe
passes it (zeroed 64 KiB buffers, 4096 for sizes, 0 for scalars); where the GPU's own call answers INVALID_ARGUMENT
too (an argument of the probe's the function refuses), the MIG call is not judged.

Besides, nvmlDeviceGetNumGpuCores: NOT_SUPPORTED "if this query is not supported by the device or a mig device"
(test_more_board_getters.py). Found with it (2026-11-29, while judging seed 10619's links.c:486, a MIG handle
accepted where nvml.h says nothing): nvmlGpmSampleGet and nvmlGpmQueryDeviceSupport ("This API supports the device
handle and MIG device handle") refused MIG device handles as invalid.
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
from tests.nvml.test_documented_argument_errors import kind_of
from tests.nvml.test_uninitialized import DECLARATION

INVALID_ARGUMENT = 2
"""nvml.h: ``NVML_ERROR_INVALID_ARGUMENT = 2``."""
TAKES_A_MIG_HANDLE = re.compile(
    r"device handle or MIG device handle|When used with MIG device handles|supports the device handle and MIG "
    r"device handle|device must be MIG device handle|queried by using specific MIG device handles|queried using "
    r"specific\s+\*?\s*MIG device handles")
"""nvml.h's sentences that say a function takes a MIG device handle."""
PARENT, MIG_INDEX = 7, 0
"""dgx-a100's gpu7 runs MIG with two 3g.40gb instances (its profile); the first MIG device's handle is probed."""

PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
rows = json.loads(sys.stdin.read())
assert lib.nvmlInit_v2() == 0
parent = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(int(sys.argv[2]), ctypes.byref(parent)) == 0
mig = ctypes.c_void_p()
assert lib.nvmlDeviceGetMigDeviceHandleByIndex(parent, int(sys.argv[3]), ctypes.byref(mig)) == 0
is_mig = ctypes.c_uint()
assert lib.nvmlDeviceIsMigDeviceHandle(mig, ctypes.byref(is_mig)) == 0 and is_mig.value == 1

def call(name, kinds, device):
    keep = []
    args = []
    for i, kind in enumerate(kinds):
        if kind == "device":
            args.append(ctypes.c_void_p(device))
        elif kind == "sample":
            sample = ctypes.c_void_p()
            assert lib.nvmlGpmSampleAlloc(ctypes.byref(sample)) == 0
            keep.append(sample)
            args.append(sample)
        elif kind == "ptr":
            buffer = ctypes.create_string_buffer(65536)
            keep.append(buffer)
            args.append(ctypes.cast(buffer, ctypes.c_void_p))
        elif kind == "size":
            args.append(ctypes.c_uint(4096))
        else:
            args.append(ctypes.c_uint(0))
    answer = getattr(lib, name)(*args)
    for k in keep:
        if isinstance(k, ctypes.c_void_p):
            lib.nvmlGpmSampleFree(k)
    return answer

out = {name: {"mig": call(name, kinds, mig.value), "parent": call(name, kinds, parent.value)} for name, kinds in rows}
lib.nvmlShutdown()
print(json.dumps(out))
"""


def takes_a_mig_handle(header: str) -> dict[str, list[str]]:
    """Name -> parameter kinds of every function whose first parameter is ``nvmlDevice_t device`` and whose doc
    comment says it takes a MIG device handle (a ``nvmlGpmSample_t`` is given an allocated sample)."""
    rows: dict[str, list[str]] = {}
    for doc, name, params in DECLARATION.findall(header):
        if not TAKES_A_MIG_HANDLE.search(doc):
            continue
        plist = [p.strip() for p in params.split(",")]
        kinds = ["sample" if p.split()[-2:-1] == ["nvmlGpmSample_t"] else kind_of(p) for p in plist]
        if kinds[0] != "device" or None in kinds:
            continue
        rows[name] = [k for k in kinds if k is not None]
    return rows


@pytest.fixture(scope="module")
def rows() -> dict[str, list[str]]:
    return takes_a_mig_handle(references.newest_header().read_text())


@pytest.fixture(scope="module")
def answers(nvml_library: Path, rows: dict[str, list[str]],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    snap = write_node(tmp_path_factory.mktemp("mig-handles") / "nvml.snapshot", "dgx-a100")
    proc = subprocess.run([sys.executable, "-c", PROBE, str(nvml_library), str(PARENT), str(MIG_INDEX)],
                          input=json.dumps(sorted(rows.items())), capture_output=True, text=True, timeout=120,
                          check=False, env=subprocess_env(snap.path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_the_header_names_the_functions_that_take_mig_handles(rows: dict[str, list[str]]) -> None:
    """The sweep is not empty by accident: nvml.h 13.4.92 says it of the name, UUID, index, memory, BAR1, compute
    mode, running processes and GPM queries (15 functions whose first parameter is a device)."""
    assert {"nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetIndex", "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlGpmSampleGet", "nvmlGpmQueryDeviceSupport"} <= set(rows)
    assert len(rows) >= 15


def test_a_mig_device_handle_is_not_an_invalid_device_where_nvml_h_takes_one(answers: dict[str, Any]) -> None:
    refused = sorted(name for name, a in answers.items()
                     if a["mig"] == INVALID_ARGUMENT and a["parent"] != INVALID_ARGUMENT)
    assert refused == []
