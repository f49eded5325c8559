"""Every caller's length, count and struct version the shim takes, at and around the bounds nvml.h documents
(issue 16, the "buffer sizes and struct versions" class of the nvml C getters' mutants).

The oracle is nvml.h 13.4.92 itself, compiled: the ``*_BUFFER_SIZE`` constants, each struct's size and version word
(``NVML_STRUCT_VERSION(data, ver)``: sizeof | ver << 24) and each array element's size come from a small C program
built against the header (never from the shim's own ``nvml_abi.h``), and the doc comments say what each bound answers:

* string getters ("The maximum allowed length of the string returned", ``NVML_ERROR_INSUFFICIENT_SIZE if \\a length is
  too small``): length 0 and strlen (no room for the NUL) answer INSUFFICIENT_SIZE; strlen + 1 (the exact fit) and the
  header's buffer size answer SUCCESS with the same whole string. No call writes a byte past the length it was given
  (a canary fills the caller's buffer beyond it).
* count in/out arrays: the query form nvml.h documents (``*count = 0``, NULL array) answers INSUFFICIENT_SIZE with the
  needed count, or SUCCESS when there is nothing to list (the process lists' "or NVML_SUCCESS if none are running";
  the topology lists' "When zero, is set to the number of matching GPUs" answers SUCCESS); one short answers
  INSUFFICIENT_SIZE and sets the needed count; exact and larger answer SUCCESS with the count written and the same
  entries; nothing is written past the count given.
* lists inside a versioned struct (nvmlDeviceGetRunningProcessDetailList, nvmlDeviceGetProcessesUtilizationInfo):
  the same bounds on the count member, the array member NULL in the query form.
* caller-sized arrays (the CPU and memory affinity masks, the P-state list sized in bytes): size 0 answers the
  documented error, the documented sizes answer SUCCESS, nothing is written past the size given.
* versioned structs (a function of a device, plain integers and one pointer to a struct nvml.h gives
  ``NVML_STRUCT_VERSION`` macros): version word 0 and the newest version + 1 answer
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH ("The provided version is invalid/unsupported"); the declared version answers
  SUCCESS on some board; no version the header defines is written past its own size.

Each board runs in one fresh interpreter (the probe below), the pattern of test_documented_argument_errors.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from fakehw.nvml.snapshot import FakeProcess
from tests.nvml import references
from tests.nvml.helpers import subprocess_env, write_node
from tests.nvml.test_uninitialized import DECLARATION

SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
INSUFFICIENT_SIZE = 7
FUNCTION_NOT_FOUND = 13
ARGUMENT_VERSION_MISMATCH = 25
"""nvml.h's nvmlReturn_t values."""

BOARDS = ("dgx-h100", "dgx-b200", "gb200-nvl72", "l40s-server", "t4-cloud", "dgx-a100")
"""Hopper, Blackwell, Grace Blackwell, Ada, Turing, Ampere: between them every feature the shim answers."""
PROCESSES = (FakeProcess("gpu0", 4101, 1 << 30, "train", kinds=1), FakeProcess("gpu0", 4102, 2 << 30, "viz", kinds=2),
             FakeProcess("gpu0", 4103, 3 << 30, "mps", kinds=5), FakeProcess("gpu0", 4104, 4 << 30, "both", kinds=3))
"""The test's input: four processes on the first GPU (kinds: bit 0 compute, bit 1 graphics, bit 2 MPS), so the compute
list has three entries, the graphics list two and the MPS list one."""
T4_FAULT = {"kind": "ecc", "device": "gpu0", "type": "dbe", "count": 3, "location": "device-memory"}
"""A Turing board retires pages (test_pynvml's test_a_turing_board_retires_pages): three double-bit pages to list."""

STRINGS: tuple[tuple[str, list[Any], str], ...] = (
    ("nvmlDeviceGetName", ["dev"], "NVML_DEVICE_NAME_V2_BUFFER_SIZE"),
    ("nvmlDeviceGetUUID", ["dev"], "NVML_DEVICE_UUID_V2_BUFFER_SIZE"),
    ("nvmlDeviceGetSerial", ["dev"], "NVML_DEVICE_SERIAL_BUFFER_SIZE"),
    ("nvmlDeviceGetBoardPartNumber", ["dev"], "NVML_DEVICE_PART_NUMBER_BUFFER_SIZE"),
    ("nvmlDeviceGetVbiosVersion", ["dev"], "NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE"),
    ("nvmlDeviceGetInforomVersion", ["dev", 0], "NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE"),
    ("nvmlDeviceGetInforomVersion", ["dev", 1], "NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE"),
    # Object 2 (the power infoROM) is N/A on every captured board: NOT_SUPPORTED, nothing to bound.
    ("nvmlDeviceGetInforomImageVersion", ["dev"], "NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE"),
    ("nvmlSystemGetDriverVersion", [], "NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE"),
    ("nvmlSystemGetNVMLVersion", [], "NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE"),
    # The branch string is the second member of a versioned struct (nvmlSystemDriverBranchInfo_v1_t).
    ("nvmlSystemGetDriverBranch", ["branch"], "NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE"),
)
"""(function, the arguments before the buffer, nvml.h's buffer size constant named in its doc comment)."""

ARRAYS: tuple[tuple[str, list[Any], str, bool], ...] = (
    ("nvmlDeviceGetSupportedMemoryClocks", ["dev", "count", "array"], "unsigned int", False),
    ("nvmlDeviceGetSupportedGraphicsClocks", ["dev", "memclock", "count", "array"], "unsigned int", False),
    ("nvmlDeviceGetRetiredPages", ["dev", 1, "count", "array"], "unsigned long long", False),
    ("nvmlDeviceGetRetiredPages_v2", ["dev", 1, "count", "array", "array"], "unsigned long long", False),
    ("nvmlDeviceGetComputeRunningProcesses", ["dev", "count", "array"], "nvmlProcessInfo_v1_t", False),
    ("nvmlDeviceGetComputeRunningProcesses_v2", ["dev", "count", "array"], "nvmlProcessInfo_v2_t", False),
    ("nvmlDeviceGetComputeRunningProcesses_v3", ["dev", "count", "array"], "nvmlProcessInfo_t", False),
    ("nvmlDeviceGetGraphicsRunningProcesses", ["dev", "count", "array"], "nvmlProcessInfo_v1_t", False),
    ("nvmlDeviceGetGraphicsRunningProcesses_v2", ["dev", "count", "array"], "nvmlProcessInfo_v2_t", False),
    ("nvmlDeviceGetGraphicsRunningProcesses_v3", ["dev", "count", "array"], "nvmlProcessInfo_t", False),
    ("nvmlDeviceGetMPSComputeRunningProcesses", ["dev", "count", "array"], "nvmlProcessInfo_v1_t", False),
    ("nvmlDeviceGetMPSComputeRunningProcesses_v2", ["dev", "count", "array"], "nvmlProcessInfo_v2_t", False),
    ("nvmlDeviceGetMPSComputeRunningProcesses_v3", ["dev", "count", "array"], "nvmlProcessInfo_t", False),
    ("nvmlDeviceGetProcessUtilization", ["dev", "array", "count", 0], "nvmlProcessUtilizationSample_t", False),
    ("nvmlDeviceGetAccountingPids", ["dev", "count", "array"], "unsigned int", False),
    ("nvmlDeviceGetEncoderSessions", ["dev", "count", "array"], "nvmlEncoderSessionInfo_t", False),
    ("nvmlDeviceGetFBCSessions", ["dev", "count", "array"], "nvmlFBCSessionInfo_t", False),
    ("nvmlDeviceGetTopologyNearestGpus", ["dev", "level", "count", "array"], "nvmlDevice_t", True),
    ("nvmlSystemGetTopologyGpuSet", [0, "count", "array"], "nvmlDevice_t", True),
)
"""(function, its arguments: "dev" the first GPU, "count" the count in/out, "array" an array of that count (NULL in
the query form), "memclock" the board's first supported memory clock, "level" the topology level with the most GPUs;
the element type; whether nvml.h's query form answers SUCCESS ("When zero, is set to the number of matching GPUs"))."""

INLISTS: tuple[tuple[str, str, str, str, str, dict[str, int]], ...] = (
    ("nvmlDeviceGetRunningProcessDetailList", "nvmlProcessDetailList_v1_t", "nvmlProcessDetail_v1_t",
     "numProcArrayEntries", "procArray", {"mode": 0}),
    ("nvmlDeviceGetRunningProcessDetailList", "nvmlProcessDetailList_v1_t", "nvmlProcessDetail_v1_t",
     "numProcArrayEntries", "procArray", {"mode": 1}),
    ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlProcessesUtilizationInfo_v1_t", "nvmlProcessUtilizationInfo_v1_t",
     "processSamplesCount", "procUtilArray", {}),
)
"""Lists whose count and array are members of a versioned struct: (function, struct, element, count member, array
member, other members set; mode 0 compute, 1 graphics). nvml.h: "call this function with \\a
plist->numProcArrayEntries set to zero and \\a plist->procArray set to NULL. The return code will be either
NVML_ERROR_INSUFFICIENT_SIZE ... or NVML_SUCCESS (if no processes ...)"; the utilization list: INSUFFICIENT_SIZE "If
\\a procesesUtilInfo->procUtilArray is NULL, or the buffer size ... is too small" with the minimal count set."""

FIXED: tuple[tuple[str, list[Any], str, int], ...] = (
    ("nvmlDeviceGetCpuAffinity", ["dev", "size", "array"], "unsigned long", INVALID_ARGUMENT),
    ("nvmlDeviceGetCpuAffinityWithinScope", ["dev", "size", "array", 0], "unsigned long", INVALID_ARGUMENT),
    ("nvmlDeviceGetCpuAffinityWithinScope", ["dev", "size", "array", 1], "unsigned long", INVALID_ARGUMENT),
    ("nvmlDeviceGetMemoryAffinity", ["dev", "size", "array", 0], "unsigned long", INVALID_ARGUMENT),
    ("nvmlDeviceGetSupportedPerformanceStates", ["dev", "array", "bytes"], "unsigned int", INSUFFICIENT_SIZE),
)
"""Arrays of a size the caller gives and the call fills (no count comes back): (function, arguments, element, the
answer to size 0). nvml.h: the affinity masks' size is "The size of the cpuSet array that is safe to access",
INVALID_ARGUMENT if "cpuSetSize == 0" / "nodeSetSize == 0"; the P-states' ``size`` is the array's "Size ... in bytes",
INSUFFICIENT_SIZE "if the the container supplied was not large enough", and "If the number of supported P-States is
fewer than the size of the array supplied missing elements would contain NVML_PSTATE_UNKNOWN" (32)."""
PSTATE_UNKNOWN = 32
"""nvml.h: ``NVML_PSTATE_UNKNOWN = 32``."""

VERSION_MACRO = re.compile(r"#define\s+(nvml(\w+)_v(\d+))\s+NVML_STRUCT_VERSION\(\s*(\w+)\s*,\s*(\d+)\s*\)")
TYPEDEF = re.compile(r"typedef\s+(nvml\w+_t)\s+(nvml\w+_t)\s*;")
BUFFER_SIZE = re.compile(r"#define\s+(NVML_\w+_BUFFER_SIZE)\s+(\d+)")
STRUCT = re.compile(r"typedef\s+struct\s*\w*\s*\{([^{}]*)\}\s*(nvml\w+_v\d+_t)\s*;", re.S)
NOTHING_TO_LIST = frozenset({"nvmlDeviceGetAccountingPids", "nvmlDeviceGetEncoderSessions", "nvmlDeviceGetFBCSessions"})
"""Lists no built-in board fills (accounting mode is off on every capture, no encoder or frame-buffer capture runs):
their query form is judged, their bounds are not."""

PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
job = json.loads(sys.stdin.read())
assert lib.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
CANARY = 0xA5
PAD = 64

def fresh(n):
    buf = ctypes.create_string_buffer(n + PAD)
    ctypes.memset(buf, CANARY, n + PAD)
    return buf

def intact(buf, start):
    return all(b == CANARY for b in buf.raw[start:])

# ---- strings
strings = []
for name, before, size in job["strings"]:
    fn = getattr(lib, name)
    def call(length):
        if before == ["branch"]:  # {unsigned int version; char branch[80];}
            buf = fresh(4 + length)
            ctypes.c_uint.from_buffer(buf, 0).value = job["branch_version"]
            ret = fn(buf, ctypes.c_uint(length))
            return ret, intact(buf, 4 + length), buf.raw[4:4 + length]
        args = [dev if a == "dev" else ctypes.c_uint(a) for a in before]
        buf = fresh(length)
        ret = fn(*args, buf, ctypes.c_uint(length))
        return ret, intact(buf, length), buf.raw[:length]
    ret, ok, raw = call(size)
    row = {"name": name, "before": before, "full": [ret, ok], "lengths": {}}
    if ret == 0 and b"\0" in raw:
        text = raw.split(b"\0")[0]
        row["text"] = text.decode("latin-1")
        for length in (0, len(text), len(text) + 1):
            r, k, got = call(length)
            row["lengths"][str(length)] = [r, k, got.split(b"\0")[0].decode("latin-1") if b"\0" in got else None]
    strings.append(row)

# ---- arrays
def nearest_level():
    best, most = 10, -1
    for level in (10, 20, 30, 40, 50):
        n = ctypes.c_uint(0)
        if lib.nvmlDeviceGetTopologyNearestGpus(dev, level, ctypes.byref(n), None) == 0 and n.value > most:
            best, most = level, n.value
    return best

def first_memclock():
    n = ctypes.c_uint(64)
    clocks = (ctypes.c_uint * 64)()
    lib.nvmlDeviceGetSupportedMemoryClocks(dev, ctypes.byref(n), clocks)
    return clocks[0]

arrays = []
for name, spec, elem in job["arrays"]:
    fn = getattr(lib, name)
    size = job["sizes"][elem]
    def call(count, null=False):
        c = ctypes.c_uint(count)
        bufs, args = [], []
        for a in spec:
            if a == "dev":
                args.append(dev)
            elif a == "count":
                args.append(ctypes.byref(c))
            elif a == "array":
                if null:
                    args.append(None)
                else:
                    b = fresh(count * size)
                    bufs.append(b)
                    args.append(b)
            elif a == "memclock":
                args.append(ctypes.c_uint(first_memclock()))
            elif a == "level":
                args.append(ctypes.c_int(nearest_level()))
            else:
                args.append(ctypes.c_ulonglong(a) if spec.index("count") < spec.index(a) else ctypes.c_uint(a))
        ret = fn(*args)
        return {"ret": ret, "count": c.value, "intact": all(intact(b, count * size) for b in bufs),
                "entries": [b.raw[:min(count, c.value) * size].hex() for b in bufs]}
    q = call(0, null=True)
    row = {"name": name, "query": q, "calls": {}}
    n = q["count"]
    if q["ret"] in (0, 7) and n > 0:
        for label, count in (("short", n - 1), ("exact", n), ("larger", n + 2)):
            row["calls"][label] = call(count)
    arrays.append(row)

# ---- lists inside a versioned struct
def struct_call(name, stype, etype, count_field, array_field, extra, count, null=False):
    off = job["offsets"]
    size, esize = job["sizes"][stype], job["sizes"][etype]
    st = ctypes.create_string_buffer(size)
    ctypes.c_uint.from_buffer(st, 0).value = job["versions"][stype]
    for field, value in extra.items():
        ctypes.c_uint.from_buffer(st, off[stype + "." + field]).value = value
    ctypes.c_uint.from_buffer(st, off[stype + "." + count_field]).value = count
    arr = None if null else fresh(count * esize)
    ctypes.c_void_p.from_buffer(st, off[stype + "." + array_field]).value = None if null else ctypes.addressof(arr)
    ret = getattr(lib, name)(dev, st)
    got = ctypes.c_uint.from_buffer(st, off[stype + "." + count_field]).value
    return {"ret": ret, "count": got, "intact": arr is None or intact(arr, count * esize),
            "entries": [] if arr is None else [arr.raw[:min(count, got) * esize].hex()]}

inlists = []
for row_args in job["inlists"]:
    q = struct_call(*row_args, 0, null=True)
    row = {"name": row_args[0], "query": q, "calls": {}}
    n = q["count"]
    if q["ret"] in (0, 7) and n > 0:
        for label, count in (("short", n - 1), ("exact", n), ("larger", n + 2)):
            row["calls"][label] = struct_call(*row_args, count)
    inlists.append(row)

# ---- caller-sized arrays
fixed = []
for name, spec, elem, sizes in job["fixed"]:
    esize = job["sizes"][elem]
    out = {}
    for count in sizes:
        buf = fresh(count * esize)
        args = [dev if a == "dev" else buf if a == "array" else ctypes.c_uint(count) if a == "size"
                else ctypes.c_uint(count * esize) if a == "bytes" else ctypes.c_uint(a) for a in spec]
        ret = getattr(lib, name)(*args)
        words = [int.from_bytes(buf.raw[i * esize:(i + 1) * esize], "little") for i in range(count)]
        out[str(count)] = [ret, intact(buf, count * esize), words]
    fixed.append({"name": name, "answers": out})

# ---- versioned structs
structs = []
for name, before, versions in job["structs"]:
    fn = getattr(lib, name, None)
    if fn is None:
        continue
    row = {"name": name, "answers": {}}
    for label, word in versions:
        size = word & 0xFFFFFF
        buf = fresh(size)
        ctypes.memset(buf, 0, size)
        ctypes.c_uint.from_buffer(buf, 0).value = word
        args = [dev if a == "dev" else ctypes.c_uint(a) for a in before]
        ret = fn(*args, buf)
        row["answers"][label] = [ret, intact(buf, size)]
    structs.append(row)

lib.nvmlShutdown()
print(json.dumps({"strings": strings, "arrays": arrays, "structs": structs, "inlists": inlists, "fixed": fixed}))
"""


def header_text() -> str:
    return references.newest_header().read_text()


def header_facts(header: Path, types: list[str], macros: list[str], fields: list[str]) -> dict[str, int]:
    """sizeof each of ``types`` and the value of each of ``macros``, as a C compiler reads nvml.h: the ABI the real
    library was built with (a struct's padding, a version word's size half), not the shim's own copy of it."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    lines = [f'printf("%s\\t%llu\\n", "{t}", (unsigned long long)sizeof({t}));' for t in types]
    lines += [f'printf("%s.%s\\t%llu\\n", "{t}", "{f}", (unsigned long long)offsetof({t}, {f}));'
              for t, f in (f.split(".") for f in fields)]
    lines += [f'printf("%s\\t%llu\\n", "{m}", (unsigned long long)({m}));' for m in macros]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        body = "\n".join(lines)
        head = '#include <stddef.h>\n#include <stdio.h>\n#include "nvml.h"\n'
        (out / "facts.c").write_text(f"{head}int main(void) {{\n{body}return 0; }}\n")
        subprocess.run(["cc", "-I", str(header.parent), str(out / "facts.c"), "-o", str(out / "facts")], check=True)
        text = subprocess.run([str(out / "facts")], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in text.splitlines())}


def versioned_rows(header: str) -> list[tuple[str, list[Any], str, list[str]]]:
    """Functions of (``nvmlDevice_t device``,) plain unsigned integers and one pointer to a struct with version
    macros: (name, the arguments before the pointer, the declared version's macro, every version macro of the
    struct). The declared version is the struct type the declaration names, through its typedef
    (``typedef nvmlGpuFabricInfo_v3_t nvmlGpuFabricInfoV_t``)."""
    aliases = {new: old for old, new in TYPEDEF.findall(header)}
    versioned = {name for body, name in STRUCT.findall(header)
                 if re.sub(r"//[^\n]*|/\*.*?\*/", "", body, flags=re.S).split(";")[0].split()[-1:] == ["version"]}
    macros: dict[str, list[str]] = {}
    for macro, base, _, _, _ in VERSION_MACRO.findall(header):
        macros.setdefault(base, []).append(macro)
    rows = []
    for _, name, params in DECLARATION.findall(header):
        plist = [" ".join(p.split()) for p in params.split(",")] if params.strip() not in ("", "void") else []
        if not plist or plist[-1].count("*") != 1:
            continue
        before: list[Any] = []
        for p in plist[:-1]:
            if p.startswith("nvmlDevice_t ") and not before:
                before.append("dev")
            elif p.startswith("unsigned int ") and "*" not in p:
                before.append(0)
            else:
                break
        else:
            type_ = plist[-1].replace("const ", "").split("*")[0].split()[-1]
            while type_ in aliases:
                type_ = aliases[type_]
            match = re.fullmatch(r"nvml(\w+)_v(\d+)_t", type_)
            declared = f"nvml{match.group(1)}_v{match.group(2)}" if match else ""
            if match and type_ in versioned and declared in macros.get(match.group(1), []):
                rows.append((name, before, declared, macros[match.group(1)]))
    return rows


def run_probe(library: Path, snapshot: Path, job: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(library)], input=json.dumps(job), capture_output=True,
                          text=True, timeout=120, check=False, env=subprocess_env(snapshot))
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-1500:]}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.fixture(scope="module")
def facts() -> dict[str, int]:
    """Buffer size constants, element sizes and every version word, from nvml.h."""
    header = header_text()
    types = sorted({elem for _, _, elem, _ in ARRAYS} | {t for row in INLISTS for t in row[1:3]}
                   | {elem for _, _, elem, _ in FIXED})
    macros = sorted({m for row in versioned_rows(header) for m in row[3]}
                    | {"nvmlSystemDriverBranchInfo_v1", "NVML_MAX_GPU_PERF_PSTATES"}
                    | {row[1].removesuffix("_t") for row in INLISTS})
    fields = sorted({f"{row[1]}.{f}" for row in INLISTS for f in (row[3], row[4], *row[5])})
    out = header_facts(references.newest_header(), types, macros, fields)
    out.update({k: int(v) for k, v in BUFFER_SIZE.findall(header)})
    return out


@pytest.fixture(scope="module")
def answers(nvml_library: Path, facts: dict[str, int],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The probe's answers on each of ``BOARDS``, by board."""
    header = header_text()
    structs = []
    for name, before, declared, versions in versioned_rows(header):
        newest = max(versions, key=lambda m: int(m.rsplit("_v", 1)[1]))
        past = facts[declared] & 0xFFFFFF | (int(newest.rsplit("_v", 1)[1]) + 1) << 24
        labelled = [["zero", facts[declared] & 0xFFFFFF], ["declared", facts[declared]], ["past newest", past]]
        labelled += [[m, facts[m]] for m in versions if m != declared]
        structs.append([name, before, labelled])
    job = {"strings": [[n, b, facts[c]] for n, b, c in STRINGS], "arrays": [[n, s, e] for n, s, e, _ in ARRAYS],
           "sizes": {k: v for k, v in facts.items() if k.endswith("_t") or " " in k}, "structs": structs,
           "branch_version": facts["nvmlSystemDriverBranchInfo_v1"],
           "inlists": [list(row) for row in INLISTS],
           "offsets": {k: v for k, v in facts.items() if "." in k},
           "versions": {row[1]: facts[row[1].removesuffix("_t")] for row in INLISTS},
           "fixed": [[n, s, e, [0, 1, 2] if "size" in s else [0, 1, facts["NVML_MAX_GPU_PERF_PSTATES"] - 1,
                                                             facts["NVML_MAX_GPU_PERF_PSTATES"],
                                                             facts["NVML_MAX_GPU_PERF_PSTATES"] + 4]]
                     for n, s, e, _ in FIXED]}
    out = {}
    for board in BOARDS:
        faults = [T4_FAULT] if board == "t4-cloud" else []
        snap = write_node(tmp_path_factory.mktemp(board) / "nvml.snapshot", board, faults=faults, processes=PROCESSES)
        out[board] = run_probe(nvml_library, snap.path, job)
    return out



def judged_on(answers: dict[str, dict[str, Any]], kind: str, index: int) -> list[tuple[str, dict[str, Any]]]:
    """(board, row) of the ``index``-th row of ``kind`` on each board."""
    return [(board, a[kind][index]) for board, a in answers.items()]


def test_the_header_gives_what_this_test_reads(facts: dict[str, int]) -> None:
    """The compiled header's facts as nvml.h 13.4.92 states them in its text: a 96-byte name buffer, the 16-byte v1
    process entry (pid, usedGpuMemory) and the 24-byte v2 one (plus the instance ids), nvmlMemory_v2 as
    ``NVML_STRUCT_VERSION(Memory, 2)`` of the 40-byte struct; and the versioned-struct parse finds the memory
    getter's v2 and the fabric getter's v2 and v3, and not nvmlC2cModeInfo_v1_t (no version member)."""
    assert facts["NVML_DEVICE_NAME_V2_BUFFER_SIZE"] == 96
    assert facts["NVML_DEVICE_SERIAL_BUFFER_SIZE"] == 30
    assert facts["nvmlProcessInfo_v1_t"] == 16 and facts["nvmlProcessInfo_v2_t"] == 24
    assert facts["nvmlMemory_v2"] == 40 | 2 << 24
    rows = {name: (declared, versions) for name, _, declared, versions in versioned_rows(header_text())}
    assert rows["nvmlDeviceGetMemoryInfo_v2"] == ("nvmlMemory_v2", ["nvmlMemory_v2"])
    assert rows["nvmlDeviceGetGpuFabricInfoV"][0] == "nvmlGpuFabricInfo_v3"
    assert sorted(rows["nvmlDeviceGetGpuFabricInfoV"][1]) == ["nvmlGpuFabricInfo_v2", "nvmlGpuFabricInfo_v3"]
    assert "nvmlDeviceGetC2cModeInfoV" not in rows
    assert len(rows) > 25


def test_a_string_getter_needs_room_for_the_nul_and_never_writes_past_the_length(
        answers: dict[str, dict[str, Any]], facts: dict[str, int]) -> None:
    """nvml.h: each string getter's \\a length is "The maximum allowed length of the string returned" and
    NVML_ERROR_INSUFFICIENT_SIZE answers "if \\a length is too small"; the string with its NUL terminator fits the
    ``*_BUFFER_SIZE`` its doc names. So with the header's size the call succeeds; length 0 and strlen (no room for
    the NUL) answer INSUFFICIENT_SIZE; strlen + 1 succeeds with the same whole string; no call changes a byte past
    the length it was given. Each row is judged on every board where the header-sized call succeeds, and on one at
    least."""
    wrong, unjudged = [], []
    for i, (name, before, constant) in enumerate(STRINGS):
        judged = 0
        for board, row in judged_on(answers, "strings", i):
            what = f"{board} {name}{before}"
            ret, intact = row["full"]
            if not intact:
                wrong.append(f"{what}: wrote past the length {facts[constant]}")
            if ret != SUCCESS:
                continue
            judged += 1
            n = len(row["text"])
            if n + 1 > facts[constant]:
                wrong.append(f"{what}: {row['text']!r} does not fit {constant}")
            for length, expected in ((0, INSUFFICIENT_SIZE), (n, INSUFFICIENT_SIZE), (n + 1, SUCCESS)):
                r, ok, text = row["lengths"][str(length)]
                if r != expected:
                    wrong.append(f"{what} length {length}: answered {r}, nvml.h {expected}")
                if not ok:
                    wrong.append(f"{what} length {length}: wrote past it")
                if expected == SUCCESS and text != row["text"]:
                    wrong.append(f"{what} length {length}: {text!r}, not {row['text']!r}")
        if not judged:
            unjudged.append(f"{name}{before}")
    assert not wrong, "\n".join(wrong)
    assert not unjudged, f"no board answers: {unjudged}"


def judge_list(what: str, row: dict[str, Any], query_success: bool) -> tuple[list[str], bool]:
    """What is wrong with one list's answers on one board, and whether it had entries to bound (see below)."""
    wrong = []
    q, n = row["query"], row["query"]["count"]
    if q["ret"] not in (SUCCESS, INSUFFICIENT_SIZE):
        return [], False  # the board has no such list (NOT_SUPPORTED, NOT_FOUND): nothing about sizes to judge
    expected = SUCCESS if query_success or n == 0 else INSUFFICIENT_SIZE
    if q["ret"] != expected:
        wrong.append(f"{what} query form: answered {q['ret']} with count {n}, nvml.h {expected}")
    if n == 0:
        return wrong, False
    calls = row["calls"]
    short = calls["short"]
    if not query_success and short["ret"] != INSUFFICIENT_SIZE:
        wrong.append(f"{what} count {n - 1}: answered {short['ret']}, nvml.h INSUFFICIENT_SIZE")
    if short["ret"] == INSUFFICIENT_SIZE and short["count"] != n:
        wrong.append(f"{what} count {n - 1}: set the count to {short['count']}, not the {n} needed")
    for label in ("exact", "larger"):
        if calls[label]["ret"] != SUCCESS or calls[label]["count"] != n:
            wrong.append(f"{what} {label}: answered {calls[label]['ret']} with count {calls[label]['count']}"
                         f", not SUCCESS with {n}")
    if calls["exact"]["entries"] != calls["larger"]["entries"]:
        wrong.append(f"{what}: the exact and the larger array hold different entries")
    given = {"short": n - 1, "exact": n, "larger": n + 2}
    for label, call in calls.items():
        if call["ret"] == SUCCESS and 0 < given[label] < call["count"]:  # 0: the query form
            wrong.append(f"{what} {label}: SUCCESS with count {call['count']}, more than the "
                         f"{given[label]} entries the array holds")
        if not call["intact"]:
            wrong.append(f"{what} {label}: wrote past the count it was given")
    return wrong, True


def test_an_array_getter_answers_its_query_form_and_bounds_as_nvml_h_documents(
        answers: dict[str, dict[str, Any]]) -> None:
    """nvml.h, e.g. nvmlDeviceGetComputeRunningProcesses_v3: "To query the current number of running compute
    processes, call this function with *infoCount = 0. The return code will be NVML_ERROR_INSUFFICIENT_SIZE, or
    NVML_SUCCESS if none are running. For this call \\a infos is allowed to be NULL"; INSUFFICIENT_SIZE "if \\a
    infoCount indicates that the \\a infos array is too small", setting it to the size needed; the clocks' and
    retired pages' docs say the same of \\a count / \\a pageCount. The topology lists: "When zero, is set to the
    number of matching GPUs" with SUCCESS. So: the query form answers the needed count n (INSUFFICIENT_SIZE when n > 0
    except the topology lists' SUCCESS); n - 1 answers INSUFFICIENT_SIZE with count n (the topology lists document no
    short answer: only the count and the bound are judged there); n and n + 2 answer SUCCESS with count n and the
    same entries; no call writes past the count it was given, and none answers SUCCESS with a count larger than the
    array it was given (the caller would read entries never written). The same for the two lists inside a versioned
    struct (``INLISTS``)."""
    wrong: list[str] = []
    judged_rows = set()
    for board, a in answers.items():
        for (name, _, _, query_success), row in zip(ARRAYS, a["arrays"], strict=True):
            found, judged = judge_list(f"{board} {name}", row, query_success)
            wrong += found
            if judged:
                judged_rows.add(name)
        for (name, *_, extra), row in zip(INLISTS, a["inlists"], strict=True):
            found, judged = judge_list(f"{board} {name}{extra}", row, False)
            wrong += found
            if judged:
                judged_rows.add(f"{name}{extra}")
    assert not wrong, "\n".join(wrong)
    every = {name for name, *_ in ARRAYS} | {f"{name}{extra}" for name, *_, extra in INLISTS}
    assert every - judged_rows == NOTHING_TO_LIST


def test_a_caller_sized_array_is_filled_within_its_size(answers: dict[str, dict[str, Any]],
                                                        facts: dict[str, int]) -> None:
    """``FIXED``'s nvml.h text: size 0 answers the documented error; the affinity masks succeed with 1 and with 2
    words, the first word the same both times (bit i of word w is CPU/node 64 w + i, whatever the size); the
    P-states succeed with NVML_MAX_GPU_PERF_PSTATES entries' bytes and more, "a contiguous list of valid P-States"
    then NVML_PSTATE_UNKNOWN; no call writes past the size it was given (1 and NVML_MAX_GPU_PERF_PSTATES - 1 entries
    are judged by that alone: whether a container that holds the board's one P-state but not the maximum is "large
    enough" nvml.h leaves open)."""
    wrong = []
    for board, a in answers.items():
        for (name, spec, _, at_zero), row in zip(FIXED, a["fixed"], strict=True):
            what, got = f"{board} {name}{spec}", row["answers"]
            for size, (_, intact, _) in got.items():
                if not intact:
                    wrong.append(f"{what} size {size}: wrote past it")
            if got["0"][0] != at_zero:
                wrong.append(f"{what} size 0: answered {got['0'][0]}, nvml.h {at_zero}")
            if "size" in spec:
                if got["1"][0] != SUCCESS or got["2"][0] != SUCCESS:
                    wrong.append(f"{what}: sizes 1 and 2 answered {got['1'][0]} and {got['2'][0]}, not SUCCESS")
                elif got["1"][2][0] != got["2"][2][0]:
                    wrong.append(f"{what}: the first word differs between sizes 1 and 2")
                continue
            for size in (facts["NVML_MAX_GPU_PERF_PSTATES"], facts["NVML_MAX_GPU_PERF_PSTATES"] + 4):
                ret, _, words = got[str(size)]
                listed = words[:facts["NVML_MAX_GPU_PERF_PSTATES"]]
                valid = [w for w in listed if w != PSTATE_UNKNOWN]
                if ret != SUCCESS or not valid or listed != valid + [PSTATE_UNKNOWN] * (len(listed) - len(valid)) \
                        or any(w > 15 for w in valid):
                    wrong.append(f"{what} {size} entries: answered {ret} with {listed}")
    assert not wrong, "\n".join(wrong)


def test_a_versioned_struct_takes_the_versions_nvml_h_defines_and_no_other(
        answers: dict[str, dict[str, Any]]) -> None:
    """nvml.h: NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "The provided version is invalid/unsupported". A version word
    of 0 is none of the ``NVML_STRUCT_VERSION`` values, nor is the newest version + 1; on each board where the
    declared version answers (SUCCESS, or INSUFFICIENT_SIZE for the lists inside a struct), both answer
    ARGUMENT_VERSION_MISMATCH. On every board, no version the header defines, older ones included (a caller built
    against an older header passes the smaller struct), is written past its size."""
    wrong, judged = [], set()
    for board, a in answers.items():
        for row in a["structs"]:
            what = f"{board} {row['name']}"
            got = row["answers"]
            for label, (_, intact) in got.items():
                if not intact:
                    wrong.append(f"{what} {label}: wrote past the struct's size")
            if got["declared"][0] not in (SUCCESS, INSUFFICIENT_SIZE):
                continue
            judged.add(row["name"])
            for label in ("zero", "past newest"):
                if got[label][0] != ARGUMENT_VERSION_MISMATCH:
                    wrong.append(f"{what} version {label}: answered {got[label][0]}, nvml.h "
                                 f"ARGUMENT_VERSION_MISMATCH")
    assert not wrong, "\n".join(wrong)
    assert len(judged) >= 20, sorted(judged)
