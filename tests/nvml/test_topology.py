"""Topology, P2P and pairwise getters against the documented hardware and NVIDIA's rules, not the model's code.

Expected values are written here from two outside sources:

- the boards' documented layouts (each profile's header comment, the DGX H100 and GB200 NVL72 descriptions):
  which GPUs share a PCIe switch, a host bridge, a socket, which are NVLink-connected;
- NVIDIA's definitions of the levels and P2P answers (nvml.h: nvmlGpuTopologyLevel_t; ``nvidia-smi topo -p2p``):
  PIX one PCIe switch, PXB several, PHB a host bridge, NODE host bridges of one NUMA node, SYS across the
  sockets' interconnect; P2P reads and writes go over NVLink wherever GPUs are NVLink-connected, else over PCIe
  unless the path crosses sockets ("CNS", chipset not supported); NVLINK and ATOMICS need NVLink.

The pairwise getters must index the second device by its snapshot slot under FAKEHW_VISIBLE_DEVICES subsets; a
library built with the other device indexed by its visible index instead (a mutant) must fail these tests.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakehw.nvml import build
from tests.nvml.helpers import NodeSnap, run_python

SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 10, 20, 30, 40, 50
OK, CHIPSET_NOT_SUPPORTED, NOT_SUPPORTED = 0, 1, 5
READ, WRITE, NVLINK, ATOMICS, PCI = 0, 1, 2, 3, 4

# edge-pcie (its YAML header): socket 0: hb0 -> sw0 -> {sw1: gpu0, gpu1; sw2: gpu2}, hb0 -> gpu3, hb1 -> gpu4;
# socket 1: hb2 -> sw3 -> {gpu5, gpu6}, hb3 -> gpu7.
P, X, H, N, S = SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM
EDGE_PCIE_LEVELS = [
    [0, P, X, H, N, S, S, S],
    [P, 0, X, H, N, S, S, S],
    [X, X, 0, H, N, S, S, S],
    [H, H, H, 0, N, S, S, S],
    [N, N, N, N, 0, S, S, S],
    [S, S, S, S, S, 0, P, N],
    [S, S, S, S, S, P, 0, N],
    [S, S, S, S, S, N, N, 0],
]

PAIRS = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
count = ctypes.c_uint()
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
hs = []
for i in range(count.value):
    h = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    hs.append(h)
levels, p2p, nearest = {}, {}, {}
for a, ha in enumerate(hs):
    for b, hb in enumerate(hs):
        if a == b:
            continue
        v = ctypes.c_int()
        assert lib.nvmlDeviceGetTopologyCommonAncestor(ha, hb, ctypes.byref(v)) == 0
        levels[f"{a},{b}"] = v.value
        for cap in range(5):
            s = ctypes.c_int()
            assert lib.nvmlDeviceGetP2PStatus(ha, hb, cap, ctypes.byref(s)) == 0
            p2p[f"{a},{b},{cap}"] = s.value
    for level in (10, 20, 30, 40, 50):
        n = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetTopologyNearestGpus(ha, level, ctypes.byref(n), None) == 0
        arr = (ctypes.c_void_p * max(1, n.value))()
        assert lib.nvmlDeviceGetTopologyNearestGpus(ha, level, ctypes.byref(n), arr) == 0
        idx = []
        for k in range(n.value):
            i = ctypes.c_uint()
            assert lib.nvmlDeviceGetIndex(ctypes.c_void_p(arr[k]), ctypes.byref(i)) == 0
            idx.append(i.value)
        nearest[f"{a},{level}"] = sorted(idx)
print(json.dumps({"count": count.value, "levels": levels, "p2p": p2p, "nearest": nearest}))
"""


def pairs(snap: NodeSnap, lib_dir: Path | None = None, visible: str | None = None) -> dict[str, object]:
    extra: dict[str, Any] = {}
    if visible is not None:
        extra["FAKEHW_VISIBLE_DEVICES"] = visible
    if lib_dir is not None:
        extra["LD_LIBRARY_PATH"] = str(lib_dir)
    result: dict[str, object] = run_python(PAIRS, snap.path, **extra)
    return result


def pcie_p2p(level: int) -> int:
    return CHIPSET_NOT_SUPPORTED if level == SYSTEM else OK


def check_edge_pcie(got: dict[str, object], members: list[int]) -> None:
    """``members``: the model GPUs the process sees, in visible-index order."""
    levels, p2p, nearest = got["levels"], got["p2p"], got["nearest"]
    assert isinstance(levels, dict) and isinstance(p2p, dict) and isinstance(nearest, dict)
    for a, ga in enumerate(members):
        for b, gb in enumerate(members):
            if a == b:
                continue
            level = EDGE_PCIE_LEVELS[ga][gb]
            assert levels[f"{a},{b}"] == level, (ga, gb)
            for cap in (READ, WRITE, PCI):
                assert p2p[f"{a},{b},{cap}"] == pcie_p2p(level), (ga, gb, cap)
            for cap in (NVLINK, ATOMICS):
                assert p2p[f"{a},{b},{cap}"] == NOT_SUPPORTED
        for level in (SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM):
            want = sorted(b for b, gb in enumerate(members) if b != a and EDGE_PCIE_LEVELS[ga][gb] == level)
            assert nearest[f"{a},{level}"] == want, (ga, level)


def test_pcie_levels_and_p2p_of_the_documented_layout(node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("edge-pcie")
    check_edge_pcie(pairs(snap), list(range(8)))


SUBSETS = ["gpu0,gpu5", "gpu0,gpu3", "gpu2,gpu7,gpu4", "5,1", "gpu6,gpu5,gpu0"]


@pytest.mark.parametrize("visible", SUBSETS)
def test_pairwise_getters_under_visible_subsets(node_snapshot: Callable[..., NodeSnap], visible: str) -> None:
    """Visible devices keep the model's order; each pair answers for the two GPUs it names, whatever indices they
    have in this process (gpu0 and gpu5 are SYS apart: the mutant answers PIX, gpu0 and gpu1)."""
    snap = node_snapshot("edge-pcie")
    tokens = [t.removeprefix("gpu") for t in visible.split(",")]
    members = sorted(int(t) for t in tokens)
    got = pairs(snap, visible=visible)
    assert got["count"] == len(members)
    check_edge_pcie(got, members)


def test_p2p_reads_go_over_nvlink_across_sockets(node_snapshot: Callable[..., NodeSnap]) -> None:
    """DGX H100: all 8 GPUs are NVLink-connected through the NVSwitches, so reads and writes are OK even between
    the sockets, where the PCIe path alone is CNS; NVLink and atomics are OK everywhere."""
    got = pairs(node_snapshot("dgx-h100"))
    p2p, levels = got["p2p"], got["levels"]
    assert isinstance(p2p, dict) and isinstance(levels, dict)
    for a in range(8):
        for b in range(8):
            if a == b:
                continue
            cross = a // 4 != b // 4  # GPUs 0-3 on socket 0, 4-7 on socket 1
            assert levels[f"{a},{b}"] == (SYSTEM if cross else NODE)
            for cap in (READ, WRITE, NVLINK, ATOMICS):
                assert p2p[f"{a},{b},{cap}"] == OK, (a, b, cap)
            assert p2p[f"{a},{b},{PCI}"] == (CHIPSET_NOT_SUPPORTED if cross else OK)


def test_gb200_tray_gpus_reach_each_other_over_nvlink(node_snapshot: Callable[..., NodeSnap]) -> None:
    """A GB200 tray: GPUs 0,1 on Grace 0 and 2,3 on Grace 1, each in its own PCIe domain, all on the NVL72
    switches: the PCIe levels are NODE within a socket and SYS across, P2P reads are OK over NVLink everywhere."""
    got = pairs(node_snapshot("gb200-nvl72", 3))
    p2p, levels = got["p2p"], got["levels"]
    assert isinstance(p2p, dict) and isinstance(levels, dict)
    for a in range(4):
        for b in range(4):
            if a != b:
                assert levels[f"{a},{b}"] == (SYSTEM if a // 2 != b // 2 else NODE)
                assert [p2p[f"{a},{b},{cap}"] for cap in (READ, WRITE, NVLINK, ATOMICS)] == [OK] * 4


@pytest.fixture(scope="module")
def visible_index_mutant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library with the second device of a pair looked up by its visible index instead of its snapshot slot."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path_factory.mktemp("mutant")
    tree = src / "nvml"
    shutil.copytree(build.CSRC, tree / "csrc")
    for name in ("layout.py", "build.py", "nvml_symbols.txt"):
        shutil.copy(build.HERE / name, tree / name)
    links = tree / "csrc" / "links.c"
    original = links.read_text()
    mutated = original.replace("int sb = c->s->dev_slot[db];", "int sb = db;")
    assert mutated != original, "the mutation point moved: update this fixture"
    links.write_text(mutated)
    out = src / "lib"
    saved = (build.HERE, build.CSRC, build.SYMBOLS_FILE)
    try:
        build.HERE, build.CSRC, build.SYMBOLS_FILE = tree, tree / "csrc", tree / "nvml_symbols.txt"
        built = build.build_library(out)
    finally:
        build.HERE, build.CSRC, build.SYMBOLS_FILE = saved
    return built.path.parent


def test_the_visible_index_mutant_is_caught(node_snapshot: Callable[..., NodeSnap], visible_index_mutant: Path) -> None:
    snap = node_snapshot("edge-pcie")
    with pytest.raises(AssertionError):
        check_edge_pcie(pairs(snap, visible_index_mutant, visible="gpu0,gpu5"), [0, 5])
    check_edge_pcie(pairs(snap, visible_index_mutant), list(range(8)))  # with every GPU visible it cannot tell


SHORT_ARRAY = r"""
import ctypes, json, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
CANARY = 0x5A5A5A5A5A5A5A5A
def short(call):
    # Room for two handles, then a canary the library must not touch: the array's size is what *count says.
    arr = (ctypes.c_void_p * 3)(None, None, CANARY)
    count = ctypes.c_uint(2)
    ret = call(ctypes.byref(count), arr)
    return {"ret": ret, "count": count.value, "canary": arr[2] == CANARY, "filled": [a is not None for a in arr[:2]]}
gpu0 = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(gpu0)) == 0
print(json.dumps({
    "set": short(lambda count, arr: lib.nvmlSystemGetTopologyGpuSet(0, count, arr)),
    "nearest": short(lambda count, arr: lib.nvmlDeviceGetTopologyNearestGpus(gpu0, 50, count, arr)),
}))
"""


def test_a_short_device_array_is_filled_to_its_size_and_no_further(node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvmlSystemGetTopologyGpuSet and nvmlDeviceGetTopologyNearestGpus take the array's size in ``*count`` (nvml.h:
    "count: When zero, is set to the number of matching GPUs such that deviceArray can be malloc'd. When non-zero,
    deviceArray will be filled with count number of device handles"). A DGX H100 has four GPUs on each socket
    (CPU 0's set is GPUs 0-3; gpu0's NVML_TOPOLOGY_SYSTEM (50) GPUs are 4-7: `nvidia-smi topo -m` of the DGX H100
    user guide), so an array of two is short: both calls answer INSUFFICIENT_SIZE with the count needed, fill the
    two slots given, and leave the word after them alone (a write one past the caller's array, seed 10616's
    system.c:385, changed no answer any other test looked at)."""
    snap = node_snapshot("dgx-h100")
    got = run_python(SHORT_ARRAY, snap.path)
    for call in ("set", "nearest"):
        assert got[call] == {"ret": 7, "count": 4, "canary": True, "filled": [True, True]}, call  # 7: INSUFFICIENT_SIZE


# ----------------------------------------------------------------------------- the export table's topology cells

CELLS = r"""
import ctypes, json, mmap, os
lib = ctypes.CDLL("libnvidia-ml.so.1")
libc = ctypes.CDLL(None, use_errno=True)
assert lib.nvmlInit_v2() == 0
guid = (ctypes.c_ubyte * 16)(0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                             0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4)
table = ctypes.c_void_p()
assert lib.nvmlInternalGetExportTable(ctypes.byref(table), guid) == 0
slot = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p))[23])
# Each record is what nvidia-smi passes: it starts with the endpoint's 32-byte PCI bus id.
page = mmap.PAGESIZE
pages = mmap.mmap(-1, 4 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + page, page, 0) == 0 and libc.mprotect(base + 3 * page, page, 0) == 0
# the two records sit at the ends of pages 0 and 2: the byte after each is PROT_NONE
ends = (page - 32, 3 * page - 32)

def cell(a, b):
    for at, text in zip(ends, (a, b)):
        pages[at:at + 32] = text.encode().ljust(32, b"\0")[:32]
    out = ctypes.c_int(-99)
    rc = slot(base + ends[0], base + ends[1], ctypes.addressof(out), None)
    return [rc, out.value]

gpus = []
for i in range(8):
    h = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    info = ctypes.create_string_buffer(68)  # nvmlPciInfo_t: busIdLegacy[16], 5 unsigned ints, busId[32]
    assert lib.nvmlDeviceGetPciInfo_v3(h, info) == 0
    gpus.append(info.raw[36:68].split(b"\0")[0].decode())
nics = os.environ["FHW_TEST_NICS"].split(",")
padded = "0" * (31 - len(gpus[0].split(":", 1)[1]) - 1) + ":" + gpus[0].split(":", 1)[1]
out = {
    "gpu_nic": [[cell(g, k) for k in nics] for g in gpus],
    "nic_gpu": [[cell(k, g) for k in nics] for g in gpus],
    "nic_nic": [[cell(k, m) for m in nics] for k in nics],
    "gpu_self": [cell(g, g) for g in gpus],
    "nobody": [cell("00000000:ff:1f.7", nics[0]), cell(gpus[0], "00000000:ff:1f.7")],
    "unterminated": cell("Z" * 32, nics[0]),
    "padded": [len(padded), cell(padded, nics[0])],
    "unterminated_id": [len("0" + padded), cell("0" + padded, nics[0])],
}
print(json.dumps(out))
"""

PIX, PXB, PHB, NODE_CELL, SYS_CELL = 0, 1, 2, 3, 4
"""Cells of slot 23 as nvidia-smi 535 prints them (csrc/export.c; test_smi.py's topology tests compare its
matrix with fakehw's), one per nvmlGpuTopologyLevel_t from SINGLE to SYSTEM."""
DGX_H100_GPU_NIC = (0, 3, 4, 5, 6, 9, 10, 11)
"""mlx5_N of each GPU's compute ConnectX-7, on its PCIe switch (DGX H100/H200 User Guide, Table 6)."""


def test_the_export_table_s_topology_cells_between_gpus_and_nics_are_the_dgx_h100_s(
        node_snapshot: Callable[..., NodeSnap]) -> None:
    """Slot 23 of the export table answers the cell of `nvidia-smi topo -m` between two endpoints (records that
    start with a 32-byte PCI bus id; nvml.h: NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32, the busId's
    "domain:bus:device.function" in "%x:%x:%x.%x"). The DGX H100 User Guide (Table 6): each GPU shares a PCIe switch
    with its compute ConnectX-7 (PIX), GPUs 0-3 and mlx5_0-5 are socket 0's, the rest socket 1's: a GPU and a NIC
    of one socket are NODE, of two sockets SYS, either way round; two compute NICs are each on their own switch,
    NODE within a socket and SYS across. An endpoint is itself "X" in the matrix's legend, not a PCIe distance: no
    cell (seed 10680's export.c:150, -1 -> +1, answered PXB). A bus id nobody has, or a record with no NUL in its 32
    bytes, has no cell (NOT_SUPPORTED); a 31-character bus id (the domain written with leading zeros, which "%x"
    takes) in a record of exactly 32 bytes before an unreadable page is an endpoint like any."""
    snap = node_snapshot("dgx-h100")
    nics = [next(n for n in snap.node.nics if n.name == f"mlx5_{i}") for i in range(12)]
    cells = run_python(CELLS, snap.path, timeout=60, FHW_TEST_NICS=",".join(str(n.address) for n in nics))

    def gpu_nic(i: int, j: int) -> int:
        return PIX if j == DGX_H100_GPU_NIC[i] else NODE_CELL if j // 6 == i // 4 else SYS_CELL

    assert cells["gpu_nic"] == [[[0, gpu_nic(i, j)] for j in range(12)] for i in range(8)]
    assert cells["nic_gpu"] == cells["gpu_nic"]
    for a in DGX_H100_GPU_NIC:
        for b in DGX_H100_GPU_NIC:
            if a != b:
                assert cells["nic_nic"][a][b] == [0, NODE_CELL if a // 6 == b // 6 else SYS_CELL], (a, b)
    not_supported = 3
    assert all(rc == not_supported for rc, _ in cells["gpu_self"])
    assert [cells["nic_nic"][j][j][0] for j in range(12)] == [not_supported] * 12
    assert [rc for rc, _ in cells["nobody"]] == [not_supported] * 2
    assert cells["unterminated"][0] == not_supported
    assert cells["padded"] == [31, [0, PIX]]
    # 32 characters of a valid id fill the record with no NUL: not nvml.h's busId, so no endpoint either (the shim
    # read it as one before, though its own rule above refused "Z" * 32)
    assert cells["unterminated_id"][0] == 32 and cells["unterminated_id"][1][0] == not_supported


BUS_ID_AT_A_PAGE_END = r"""
import ctypes, json, mmap
lib = ctypes.CDLL("libnvidia-ml.so.1")
libc = ctypes.CDLL(None, use_errno=True)
assert lib.nvmlInit_v2() == 0
page = mmap.PAGESIZE
pages = mmap.mmap(-1, 2 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + page, page, 0) == 0  # the byte after the id is unreadable

def by_bus_id(text):
    pages[page - len(text):page] = text.encode()
    h = ctypes.c_void_p()
    return lib.nvmlDeviceGetHandleByPciBusId_v2(ctypes.c_void_p(base + page - len(text)), ctypes.byref(h))

print(json.dumps({"zeros": by_bus_id("0" * 64), "padded": by_bus_id("0" * 56 + ":07:00.0")}))
"""


def test_a_bus_id_with_no_nul_in_its_64_bytes_is_refused_without_reading_past_them(
        node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvmlDeviceGetHandleByPciBusId_v2 takes a NUL-terminated "domain:bus:device.function" (nvml.h: the busId of
    nvmlPciInfo_t, NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32 with its terminator); a caller's string with no NUL in the
    first 64 bytes the shim looks at is INVALID_ARGUMENT ("pciBusId is invalid"), and nothing past them is read: the
    bytes sit at the end of a page whose next page is unreadable, so a parse that went on (system.c's bound made
    `>= 65`: sscanf's "%x" takes any number of zeros) would end the process. Both 64 zeros and 64 characters of an
    id that parses (56 zeros as its domain) are refused."""
    snap = node_snapshot("dgx-h100")
    got = run_python(BUS_ID_AT_A_PAGE_END, snap.path)
    invalid_argument = 2
    assert got == {"zeros": invalid_argument, "padded": invalid_argument}
