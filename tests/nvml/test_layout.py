"""The snapshot format is defined once (fakehw/nvml/layout.py) and checked from both sides.

The C side: a program compiled against the generated header prints every record's size and every field's
offset; they must equal what Python packs at. (The header also carries _Static_asserts of the same numbers, so
a disagreeing build, cross builds included, does not even compile.)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fakehw.nvml import layout
from fakehw.nvml.build import generate
from fakehw.nvml.layout import Char, GpuRecord, HeaderRecord, LayoutError, LinkRecord
from fakehw.nvml.snapshot import Snapshot, SnapshotError


def test_c_and_python_agree_on_every_offset(tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    gen = generate(tmp_path)
    lines = ["#include <stdio.h>", '#include "snapshot_layout.h"', "int main(void) {"]
    expected = []
    for rec in layout.RECORDS:
        lay = layout.layout_of(rec)
        lines.append(f'printf("{lay.c_name} %zu\\n", sizeof({lay.c_name}));')
        expected.append(f"{lay.c_name} {lay.size}")
        for f in lay.fields:
            lines.append(f'printf("{lay.c_name}.{f.name} %zu\\n", offsetof({lay.c_name}, {f.name}));')
            expected.append(f"{lay.c_name}.{f.name} {f.offset}")
    lines += ["return 0;", "}"]
    (tmp_path / "probe.c").write_text("\n".join(lines))
    subprocess.run(["cc", "-std=gnu11", f"-I{gen}", str(tmp_path / "probe.c"), "-o", str(tmp_path / "probe")],
                   check=True)
    got = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True).stdout.split()
    assert got == " ".join(expected).split()


def test_header_asserts_every_field() -> None:
    header = layout.c_header()
    for rec in layout.RECORDS:
        lay = layout.layout_of(rec)
        assert f"sizeof({lay.c_name}) == {lay.size}" in header
        for f in lay.fields:
            assert f"offsetof({lay.c_name}, {f.name}) == {f.offset}" in header


def test_records_round_trip() -> None:
    link = LinkRecord(present=1, up=1, remote_bus_id="00000000:05:00.0", errors=(1, 2, 3, 4, 5))
    gpu = GpuRecord(uuid="GPU-x", name="A GPU", links=(link,), p2p=tuple(i % 7 for i in range(5 * 64)))
    back = layout.unpack(GpuRecord, layout.pack(gpu))
    assert back.uuid == "GPU-x" and back.links[0] == link and back.p2p == gpu.p2p
    snap = Snapshot(HeaderRecord(driver_version="535.261.03", generation=9), (gpu,))
    parsed = Snapshot.from_bytes(snap.to_bytes())
    assert parsed.header.generation == 9 and parsed.gpus[0].uuid == "GPU-x"


def test_values_that_do_not_fit_are_refused_with_the_field_named() -> None:
    too_long = "x" * layout.layout_of(GpuRecord).field("name").kind.size
    with pytest.raises(LayoutError, match=r"GpuRecord\.name"):
        layout.pack(GpuRecord(name=too_long))
    with pytest.raises(LayoutError, match="index"):
        layout.pack(GpuRecord(index=-1))
    with pytest.raises(LayoutError, match="at most 18 records"):
        layout.pack(GpuRecord(links=(LinkRecord(),) * 19))
    with pytest.raises(LayoutError, match="expected 16 values"):
        layout.pack(GpuRecord(cpu_affinity=(0,)))
    assert isinstance(layout.layout_of(GpuRecord).field("uuid").kind, Char)


def test_reading_a_bad_snapshot_says_what_is_wrong() -> None:
    good = Snapshot(HeaderRecord(), (GpuRecord(uuid="GPU-x"),)).to_bytes()
    with pytest.raises(SnapshotError, match="shorter than"):
        Snapshot.from_bytes(good[:10])
    with pytest.raises(SnapshotError, match="header says"):
        Snapshot.from_bytes(good[:-8])
    with pytest.raises(SnapshotError, match="checksum"):
        Snapshot.from_bytes(good[:600] + bytes([good[600] ^ 1]) + good[601:])
    with pytest.raises(SnapshotError, match="magic"):
        Snapshot.from_bytes(b"X" + good[1:])
