"""The shim refuses a snapshot that breaks any rule of the format, and only such a snapshot.

The rules are docs/nvml.md's ("The snapshot format"): "Validation on load is complete before anything is answered:
sizes and offsets in bounds, counts within limits, every string NUL-terminated inside its field, enum values in
range, records pointing at existing records, events in sequence order, checksum. A snapshot that fails any check is
not used: nvmlInit returns UNKNOWN"; a different format version is LIB_RM_VERSION_MISMATCH. Where each field sits
comes from the format's one declaration (:mod:`fakehw.nvml.layout`), which is not the code under test: the C
validator is (``fhw_validate`` and ``snap_load`` in csrc/core.c).

Each damage breaks one rule of one good snapshot and then fixes the checksum up, as a forger would, so that the rule
under test is the only one broken; each is paired, where the rule has a bound, with an edit just inside the bound
that must be accepted (a validator that refuses too much is as wrong as one that lets too much through). The string
rule is checked for every ``Char`` field the layout declares, so a field added to a record without a check is
found. The refusals are judged by the return code and by the reason ``FAKEHW_NVML_TRACE=1`` logs (documented: "log
... refused snapshots"), so a damage caught by some other, later check does not pass for the rule's own.

Every case is loaded by one subprocess (``nvmlInit_v2`` on each file in turn, the trace of each captured on its own),
so the whole table costs about a second.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from fakehw.nvml import layout
from fakehw.nvml.layout import (
    CiProfileRecord,
    EventRecord,
    GpuInstanceRecord,
    GpuRecord,
    HeaderRecord,
    LinkRecord,
    MigProfileRecord,
    MigRecord,
    NicRecord,
    ProcessRecord,
)
from fakehw.nvml.snapshot import FakeProcess
from tests.nvml.helpers import subprocess_env, write_node

UNKNOWN = 999
"""NVML_ERROR_UNKNOWN (nvml.h)."""
VERSION_MISMATCH = 18
"""NVML_ERROR_LIB_RM_VERSION_MISMATCH (nvml.h)."""
PSTATE_UNKNOWN = 32
"""NVML_PSTATE_UNKNOWN (nvml.h): the one value past NVML_PSTATE_15 a GPU may report."""
P2P_STATUS_UNKNOWN = 6
"""NVML_P2P_STATUS_UNKNOWN (nvml.h, the last of nvmlGpuP2PStatus_t)."""
MAX_SNAPSHOT_BYTES = 64 << 20
"""The largest file the shim reads (docs/nvml.md)."""

SECTIONS: dict[str, tuple[str, type[Any], int]] = {
    # header prefix: (the trace's name of the section, its record, its count limit per docs/nvml.md "Limits")
    "gpu": ("GPU section", GpuRecord, layout.MAX_GPUS),
    "mig": ("MIG section", MigRecord, layout.MAX_GPUS * layout.MAX_MIG_PER_GPU),
    "mig_profile": ("MIG profile section", MigProfileRecord, layout.MAX_GPUS * layout.MAX_MIG_PROFILES_PER_GPU),
    "process": ("process section", ProcessRecord, layout.MAX_PROCESSES),
    "event": ("event section", EventRecord, layout.MAX_EVENTS),
    "nic": ("NIC section", NicRecord, layout.MAX_NICS),
    "gi": ("GPU instance section", GpuInstanceRecord, layout.MAX_GPUS * layout.MAX_GI_PER_GPU),
    "ci_profile": ("compute instance profile section", CiProfileRecord,
                   layout.MAX_GPUS * layout.MAX_CI_PROFILES_PER_GPU),
    "platform": ("platform section", layout.PlatformRecord, layout.MAX_GPUS),
}
RECORD_REASONS: dict[type[Any], str] = {
    GpuRecord: "bad GPU record", MigRecord: "bad MIG record", MigProfileRecord: "bad MIG profile record",
    ProcessRecord: "bad process record", EventRecord: "bad event record", NicRecord: "bad NIC record",
    GpuInstanceRecord: "bad GPU instance record", CiProfileRecord: "bad compute instance profile record",
}
SECTION_OF = {record: prefix for prefix, (_, record, _) in SECTIONS.items()}


class Snap:
    """A snapshot's bytes, edited field by field at the offsets the layout declares."""

    def __init__(self, data: bytes):
        self.data = bytearray(data)

    def _put(self, offset: int, size: int, value: int) -> None:
        self.data[offset:offset + size] = value.to_bytes(size, "little", signed=value < 0)

    def header(self, name: str) -> int:
        f = layout.layout_of(HeaderRecord).field(name)
        return int.from_bytes(self.data[f.offset:f.offset + f.size], "little")

    def set_header(self, name: str, value: int) -> None:
        f = layout.layout_of(HeaderRecord).field(name)
        self._put(f.offset, f.size, value)

    def record_at(self, record: type[Any], index: int) -> int:
        prefix = SECTION_OF[record]
        return self.header(f"{prefix}_offset") + index * self.header(f"{prefix}_record_size")

    def get(self, record: type[Any], index: int, name: str) -> int:
        f = layout.layout_of(record).field(name)
        at = self.record_at(record, index) + f.offset
        return int.from_bytes(self.data[at:at + f.size], "little")

    def set(self, record: type[Any], index: int, name: str, value: int) -> None:
        f = layout.layout_of(record).field(name)
        self._put(self.record_at(record, index) + f.offset, f.size, value)

    def fill(self, base: int, record: type[Any], name: str, byte: int = ord("x")) -> None:
        """Fill a string field whole: no NUL inside it."""
        f = layout.layout_of(record).field(name)
        self.data[base + f.offset:base + f.offset + f.size] = bytes([byte]) * f.size

    def link_at(self, gpu: int, link: int) -> int:
        return (self.record_at(GpuRecord, gpu) + layout.layout_of(GpuRecord).field("links").offset
                + link * layout.layout_of(LinkRecord).size)

    def sealed(self) -> bytes:
        """The bytes with their checksum made right again (the forger's move)."""
        data = bytearray(self.data)
        chk = layout.layout_of(HeaderRecord).field("checksum").offset
        data[chk:chk + 4] = layout.checksum(data).to_bytes(4, "little")
        return bytes(data)


@dataclass(frozen=True)
class Case:
    """One edit of the good snapshot and what loading it must give."""

    id: str
    edit: Callable[[Snap], bytes]
    """Returns the file's bytes (sealed, unless the case is about the seal)."""
    reason: str | None
    """The refusal the trace must name; None: the snapshot is good and must load."""
    status: int = UNKNOWN


def _edit(fn: Callable[[Snap], object]) -> Callable[[Snap], bytes]:
    def run(s: Snap) -> bytes:
        fn(s)
        return s.sealed()
    return run


def _refused(id: str, fn: Callable[[Snap], object], reason: str, status: int = UNKNOWN) -> Case:
    return Case(id, _edit(fn), reason, status)


def _accepted(id: str, fn: Callable[[Snap], object]) -> Case:
    return Case(id, _edit(fn), None, 0)


def _strings() -> Iterator[Case]:
    """Every string field of every record, as the layout declares them, filled to its end without a NUL."""
    header_strings = [f.name for f in layout.layout_of(HeaderRecord).fields if isinstance(f.kind, layout.Char)]
    for name in header_strings:
        yield _refused(f"header.{name}-unterminated", partial(_unterminated, HeaderRecord, name),
                       "bad magic" if name == "magic" else "unterminated header string")
    for record, reason in RECORD_REASONS.items():
        for f in layout.layout_of(record).fields:
            if isinstance(f.kind, layout.Char):
                yield _refused(f"{record.__name__}.{f.name}-unterminated", partial(_unterminated, record, f.name),
                               reason)
    for f in layout.layout_of(LinkRecord).fields:
        if isinstance(f.kind, layout.Char):  # the last link of the last GPU: the loops reach every one
            yield _refused(f"LinkRecord.{f.name}-unterminated", partial(_unterminated, LinkRecord, f.name),
                           "bad GPU record")
    yield _accepted("GpuRecord.name-its-field-long-but-one", _longest_name)


def _unterminated(record: type[Any], name: str, s: Snap) -> None:
    """The field ``name`` of the first ``record`` (of the header; of the last link of the last GPU, so the loops
    over links and GPUs must reach their ends) filled without a NUL."""
    if record is HeaderRecord:
        base = 0
    elif record is LinkRecord:
        base = s.link_at(s.header("gpu_count") - 1, layout.MAX_LINKS - 1)
    else:
        base = s.record_at(record, 0)
    s.fill(base, record, name)


def _longest_name(s: Snap) -> None:
    """A GPU name as long as its field holds: every byte a character but the last, a NUL."""
    base = s.record_at(GpuRecord, 0)
    s.fill(base, GpuRecord, "name")
    f = layout.layout_of(GpuRecord).field("name")
    s.data[base + f.offset + f.size - 1] = 0


def _header_cases() -> Iterator[Case]:
    yield Case("good", lambda s: s.sealed(), None, 0)
    yield _refused("magic", lambda s: s.data.__setitem__(0, ord("G")), "bad magic")
    yield _refused("byte-order", lambda s: s.set_header("byte_order", 0x04030201), "wrong byte order")
    yield _refused("format-version-next", lambda s: s.set_header("format_version", layout.FORMAT_VERSION + 1),
                   "format version", VERSION_MISMATCH)
    yield _refused("format-version-previous", lambda s: s.set_header("format_version", layout.FORMAT_VERSION - 1),
                   "format version", VERSION_MISMATCH)
    yield _refused("header-size", lambda s: s.set_header("header_size", s.header("header_size") + 8),
                   "header size differs")
    yield _refused("total-size-larger", lambda s: s.set_header("total_size", len(s.data) + 8), "size differs")
    yield _refused("total-size-smaller", lambda s: s.set_header("total_size", len(s.data) - 8), "size differs")
    yield Case("checksum", lambda s: bytes(s.data[:-1]) + bytes([s.data[-1] ^ 1]), "checksum mismatch")
    yield Case("checksum-over-the-header", _flip_in_the_header, "checksum mismatch")


def _flip_in_the_header(s: Snap) -> bytes:
    """A bit of the header's ``generation`` flipped after sealing: the checksum covers the file's start (before
    ``superseded``) as well as what follows it."""
    data = bytearray(s.sealed())
    data[layout.layout_of(HeaderRecord).field("generation").offset] ^= 0x01
    return bytes(data)


def _section_cases() -> Iterator[Case]:
    for prefix, (reason, _, limit) in SECTIONS.items():
        for damage, edit in SECTION_DAMAGES.items():
            yield _refused(f"{prefix}-{damage}", partial(edit, prefix, limit), f"bad {reason}")
        yield _accepted(f"{prefix}-records-ending-at-the-end", partial(_move_to_the_end, prefix))
    yield _accepted("empty-section-of-any-shape", _no_processes_anywhere)
    yield _refused("platform-count-not-the-gpu-count", lambda s: s.set_header("platform_count",
                                                                             s.header("gpu_count") - 1),
                   "bad platform section")
    yield _accepted("no-platform-records", lambda s: s.set_header("platform_count", 0))


def _count_over_its_limit(prefix: str, limit: int, s: Snap) -> None:
    s.set_header(f"{prefix}_count", limit + 1)


def _record_size_off(prefix: str, _limit: int, s: Snap) -> None:
    s.set_header(f"{prefix}_record_size", s.header(f"{prefix}_record_size") + 8)


def _offset_misaligned(prefix: str, _limit: int, s: Snap) -> None:
    s.set_header(f"{prefix}_offset", s.header(f"{prefix}_offset") + 4)


def _offset_in_the_header(prefix: str, _limit: int, s: Snap) -> None:
    s.set_header(f"{prefix}_offset", s.header("header_size") - 8)


def _offset_past_the_end(prefix: str, _limit: int, s: Snap) -> None:
    s.set_header(f"{prefix}_offset", len(s.data) + 8)


def _records_past_the_end(prefix: str, _limit: int, s: Snap) -> None:
    """The section moved so that its last record's last 8 bytes lie past the end of the file."""
    span = s.header(f"{prefix}_count") * s.header(f"{prefix}_record_size")
    s.set_header(f"{prefix}_offset", (len(s.data) - span + 8) // 8 * 8)


SECTION_DAMAGES: dict[str, Callable[[str, int, Snap], None]] = {
    "count-over-its-limit": _count_over_its_limit, "record-size": _record_size_off,
    "offset-misaligned": _offset_misaligned, "offset-in-the-header": _offset_in_the_header,
    "offset-past-the-end": _offset_past_the_end, "records-past-the-end": _records_past_the_end,
}


def _no_processes_anywhere(s: Snap) -> None:
    """No process records, the empty section's size and offset left as nonsense: an empty section is in bounds
    wherever it says it is."""
    for g in range(s.header("gpu_count")):
        s.set(GpuRecord, g, "process_first", 0)
        s.set(GpuRecord, g, "process_count", 0)
    s.set_header("process_count", 0)
    s.set_header("process_record_size", 12345)
    s.set_header("process_offset", 3)


def _move_to_the_end(prefix: str, s: Snap) -> None:
    """Copy a section's records to the very end of the file (its last byte the file's last), pointing the header
    at the copy: in bounds, so good."""
    count, size, offset = (s.header(f"{prefix}_{k}") for k in ("count", "record_size", "offset"))
    records = bytes(s.data[offset:offset + count * size])
    s.data += bytes(-len(s.data) % 8) + records
    s.set_header(f"{prefix}_offset", len(s.data) - len(records))
    s.set_header("total_size", len(s.data))


def _gpu_cases() -> Iterator[Case]:
    last = layout.MAX_LINKS
    yield _refused("gpu-uuid-empty", lambda s: s.set(GpuRecord, 1, "uuid", 0), "bad GPU record")
    yield _refused("gpu-nvlink-count-over-18", lambda s: s.set(GpuRecord, 0, "nvlink_count", last + 1),
                   "bad GPU record")
    yield _accepted("gpu-nvlink-count-18", lambda s: s.set(GpuRecord, 0, "nvlink_count", last))
    yield _refused("gpu-mig-count-over-8", _nine_mig_devices_on_one_gpu, "bad GPU record")
    yield _accepted("gpu-mig-count-8", _eight_mig_devices_on_one_gpu)
    yield _refused("gpu-mig-range-past-the-mig-records", lambda s: _past_the_range(s, "mig"), "bad GPU record")
    yield _accepted("gpu-mig-range-ending-at-the-last-mig-record", lambda s: _at_the_range_end(s, "mig"))
    yield _refused("gpu-mig-profile-range-past-its-records", lambda s: _past_the_range(s, "mig_profile"),
                   "bad GPU record")
    yield _accepted("gpu-mig-profile-range-ending-at-the-last", lambda s: _at_the_range_end(s, "mig_profile"))
    yield _refused("gpu-process-range-past-its-records", lambda s: _past_the_range(s, "process"), "bad GPU record")
    yield _accepted("gpu-process-range-ending-at-the-last", lambda s: _at_the_range_end(s, "process"))
    yield _refused("gpu-pstate-16", lambda s: s.set(GpuRecord, 0, "pstate", 16), "bad GPU record")
    yield _accepted("gpu-pstate-15", lambda s: s.set(GpuRecord, 0, "pstate", 15))
    yield _accepted("gpu-pstate-unknown", lambda s: s.set(GpuRecord, 0, "pstate", PSTATE_UNKNOWN))
    p2p = layout.layout_of(GpuRecord).field("p2p").offset + layout.P2P_CAPS * layout.MAX_GPUS - 1
    yield _refused("gpu-p2p-status-past-unknown-in-its-last-cell",
                   lambda s: s.data.__setitem__(s.record_at(GpuRecord, 0) + p2p, P2P_STATUS_UNKNOWN + 1),
                   "bad GPU record")
    yield _accepted("gpu-p2p-status-unknown-in-its-last-cell",
                    lambda s: s.data.__setitem__(s.record_at(GpuRecord, 0) + p2p, P2P_STATUS_UNKNOWN))


def _nine_mig_devices_on_one_gpu(s: Snap) -> None:
    """GPU 0 claims 9 MIG devices, within a MIG section that has 16 (only the per-GPU limit is broken)."""
    s.set_header("mig_count", 16)
    s.set(GpuRecord, 0, "mig_first", 0)
    s.set(GpuRecord, 0, "mig_count", layout.MAX_MIG_PER_GPU + 1)


def _eight_mig_devices_on_one_gpu(s: Snap) -> None:
    """The MIG section made eight copies of its first record, at the end of the file, all of them the MIG devices
    of that record's GPU: as many as a GPU may have (docs/nvml.md: 8 MIG devices per GPU)."""
    size, offset = s.header("mig_record_size"), s.header("mig_offset")
    first = bytes(s.data[offset:offset + size])
    owner = _get(s, MigRecord, 0, "parent")
    s.data += bytes(-len(s.data) % 8)
    s.set_header("mig_offset", len(s.data))
    s.data += first * layout.MAX_MIG_PER_GPU
    s.set_header("mig_count", layout.MAX_MIG_PER_GPU)
    s.set_header("total_size", len(s.data))
    s.set(GpuRecord, owner, "mig_first", 0)
    s.set(GpuRecord, owner, "mig_count", layout.MAX_MIG_PER_GPU)


def _owner(s: Snap, prefix: str) -> int:
    """The GPU whose range of ``prefix`` records is not empty (the snapshot has one for each kind)."""
    return next(i for i in range(s.header("gpu_count")) if _get(s, GpuRecord, i, f"{prefix}_count"))


def _get(s: Snap, record: type[Any], index: int, name: str) -> int:
    f = layout.layout_of(record).field(name)
    at = s.record_at(record, index) + f.offset
    return int.from_bytes(s.data[at:at + f.size], "little")


def _past_the_range(s: Snap, prefix: str) -> None:
    g = _owner(s, prefix)
    s.set(GpuRecord, g, f"{prefix}_first", s.header(f"{prefix}_count") - _get(s, GpuRecord, g, f"{prefix}_count") + 1)


def _at_the_range_end(s: Snap, prefix: str) -> None:
    g = _owner(s, prefix)
    s.set(GpuRecord, g, f"{prefix}_first", s.header(f"{prefix}_count") - _get(s, GpuRecord, g, f"{prefix}_count"))


def _reference_cases() -> Iterator[Case]:
    """Records pointing at records that exist (a parent GPU, a GPU instance, MIG devices)."""
    for record in (MigRecord, MigProfileRecord, GpuInstanceRecord, CiProfileRecord):
        yield _refused(f"{record.__name__}-parent-past-the-gpus", partial(_parent, record, 0),
                       RECORD_REASONS[record])
        yield _accepted(f"{record.__name__}-parent-the-last-gpu", partial(_parent, record, -1))
    yield _refused("ProcessRecord-gpu-past-the-gpus",
                   lambda s: s.set(ProcessRecord, 0, "gpu", s.header("gpu_count")), "bad process record")
    yield _refused("EventRecord-gpu-past-the-gpus",
                   lambda s: s.set(EventRecord, 0, "gpu", s.header("gpu_count")), "bad event record")
    yield _refused("MigRecord-uuid-empty", lambda s: s.set(MigRecord, 0, "uuid", 0), "bad MIG record")
    yield _refused("MigRecord-gpu-instance-past-the-instances",
                   lambda s: s.set(MigRecord, 0, "gi_record", s.header("gi_count")), "bad MIG record")
    yield _accepted("MigRecord-gpu-instance-the-last",
                    lambda s: s.set(MigRecord, 0, "gi_record", s.header("gi_count") - 1))
    yield _refused("MigRecord-gpu-instance-of-another-gpu", _gpu_instance_on_another_gpu, "bad MIG record")
    yield _refused("GpuInstanceRecord-mig-range-past-the-mig-records",
                   lambda s: s.set(GpuInstanceRecord, 0, "mig_first", s.header("mig_count")), "bad GPU instance record")
    for record in (MigProfileRecord, CiProfileRecord):
        yield _refused(f"{record.__name__}-placements-over-8", partial(_placements, record, layout.MAX_PLACEMENTS + 1),
                       RECORD_REASONS[record])
        yield _accepted(f"{record.__name__}-placements-8", partial(_placements, record, layout.MAX_PLACEMENTS))


def _parent(record: type[Any], past_the_gpus: int, s: Snap) -> None:
    """The first ``record``'s parent GPU set ``past_the_gpus`` from the GPU count (0: one past the last GPU)."""
    s.set(record, 0, "parent", s.header("gpu_count") + past_the_gpus)


def _gpu_instance_on_another_gpu(s: Snap) -> None:
    """The first MIG device's GPU instance moved to another GPU than the device's own. A MIG device is a compute
    instance made inside a GPU instance, a partition of one GPU (NVIDIA's MIG user guide, "Concepts"), and nvml.h's
    nvmlComputeInstanceGetInfo names its device and GPU instance while nvmlGpuInstanceGetInfo names the GPU
    instance's device: the two must be the same GPU, and a snapshot where they are not describes no machine (the
    shim answered the compute instance's GPU instance on the other GPU, or, with that GPU hidden, no GPU instance at
    all). dgx-a100's records: both GPU instances and both MIG devices on gpu7."""
    mig_gpu = s.get(MigRecord, 0, "parent")
    s.set(GpuInstanceRecord, s.get(MigRecord, 0, "gi_record"), "parent", (mig_gpu + 1) % s.header("gpu_count"))


def _placements(record: type[Any], count: int, s: Snap) -> None:
    s.set(record, 0, "placement_count", count)


def _event_cases() -> Iterator[Case]:
    yield _refused("events-repeating-a-sequence-number",
                   lambda s: s.set(EventRecord, 1, "seq", _get(s, EventRecord, 0, "seq")), "events out of order")
    yield _refused("event-beyond-the-last-sequence-number",
                   lambda s: s.set_header("event_last_seq", _get(s, EventRecord, 1, "seq") - 1),
                   "beyond the last sequence number")
    yield _accepted("events-up-to-a-later-last-sequence-number",
                    lambda s: s.set_header("event_last_seq", _get(s, EventRecord, 1, "seq") + 5))


def _size_cases() -> Iterator[Case]:
    size = layout.layout_of(HeaderRecord).size
    yield Case("shorter-than-the-header", lambda s: bytes(s.sealed()[:size - 8]), "impossible size")
    yield _accepted("a-header-and-no-sections", _header_only)
    yield Case("larger-than-the-limit", lambda s: _padded(s, MAX_SNAPSHOT_BYTES + 8), "impossible size")
    yield Case("as-large-as-the-limit", lambda s: _padded(s, MAX_SNAPSHOT_BYTES), None, 0)


def _header_only(s: Snap) -> None:
    size = layout.layout_of(HeaderRecord).size
    del s.data[size:]
    for prefix in SECTIONS:
        s.set_header(f"{prefix}_count", 0)
    s.set_header("total_size", size)


def _padded(s: Snap, size: int) -> bytes:
    """The good snapshot followed by zeros up to ``size`` bytes (a file longer than its sections is in bounds)."""
    s.data += bytes(size - len(s.data))
    s.set_header("total_size", size)
    return s.sealed()


CASES = [*_header_cases(), *_size_cases(), *_strings(), *_section_cases(), *_gpu_cases(), *_reference_cases(),
         *_event_cases()]

LOADER = r"""
import ctypes, json, os, sys, tempfile
lib = ctypes.CDLL(sys.argv[1])
out = []
for path in json.loads(sys.stdin.read()):
    os.environ["FAKEHW_NVML_SNAPSHOT"] = path
    with tempfile.TemporaryFile() as trace:
        saved = os.dup(2)
        os.dup2(trace.fileno(), 2)
        try:
            status = lib.nvmlInit_v2()
            count = ctypes.c_uint(0)
            if status == 0:
                lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
                lib.nvmlShutdown()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        trace.seek(0)
        out.append({"status": status, "count": count.value, "trace": trace.read().decode(errors="replace")})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, nvml_library: Path) -> dict[str, dict[str, Any]]:
    """Every case's file, loaded by one process: case id -> {status, count, trace}."""
    tmp = tmp_path_factory.mktemp("validation")
    good = write_node(tmp / "good.snapshot", "dgx-a100",
                      faults=[{"kind": "xid", "device": "gpu0", "code": 13},
                              {"kind": "xid", "device": "gpu1", "code": 31}],
                      processes=[FakeProcess("gpu0", 4242, 1 << 30, "python3")])
    base = good.path.read_bytes()
    paths = []
    for i, case in enumerate(CASES):
        path = tmp / f"{i:03d}.snapshot"
        path.write_bytes(case.edit(Snap(base)))
        paths.append(str(path))
    env = subprocess_env(good.path, FAKEHW_NVML_TRACE="1")
    proc = subprocess.run([sys.executable, "-c", LOADER, str(nvml_library)],
                          input=json.dumps(paths), env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return {case.id: result for case, result in zip(CASES, json.loads(proc.stdout), strict=True)}


def test_the_good_snapshot_has_a_record_in_every_section(tmp_path: Path) -> None:
    """The damages below reach every kind of record only if the good snapshot has each (dgx-a100 boots gpu7 in MIG
    mode with two instances; two Xids make two events; one process)."""
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-a100",
                      faults=[{"kind": "xid", "device": "gpu0", "code": 13}],
                      processes=[FakeProcess("gpu0", 4242, 1 << 30, "python3")])
    s = Snap(snap.path.read_bytes())
    assert all(s.header(f"{prefix}_count") > 0 for prefix in SECTIONS)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_snapshot_is_refused_exactly_when_it_breaks_a_rule_of_the_format(
        case: Case, loaded: dict[str, dict[str, Any]]) -> None:
    result = loaded[case.id]
    if case.reason is None:
        assert result["status"] == 0, f"a good snapshot was refused: {result['trace']}"
        assert result["count"] == (0 if case.id == "a-header-and-no-sections" else 8)
    else:
        assert result["status"] == case.status, result["trace"]
        assert case.reason in result["trace"], f"refused for another reason than {case.reason!r}: {result['trace']}"
