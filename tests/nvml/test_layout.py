"""The snapshot format is defined once (fakehw/nvml/layout.py) and checked from both sides.

The C side: a program compiled against the generated header prints every record's size and every field's
offset; they must equal what Python packs at. (The header also carries _Static_asserts of the same numbers, so
a disagreeing build, cross builds included, does not even compile.)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
import yaml

from fakehw.model.loader import builtin_dir
from fakehw.model.spec import MAX_GPUS_PER_NODE
from fakehw.nvml import layout
from fakehw.nvml.build import generate
from fakehw.nvml.layout import Char, GpuRecord, HeaderRecord, LayoutError, LinkRecord
from fakehw.nvml.snapshot import Snapshot, SnapshotError
from tests.nvml.helpers import NodeSnap

NV_MAX_DEVICES = 32
"""GPUs NVIDIA's driver supports in one system: ``#define NV_MAX_DEVICES 32`` ("the maximum number of GPUs supported
in a single system"), src/common/sdk/nvidia/inc/nvlimits.h of NVIDIA/open-gpu-kernel-modules, the same at tags
535.261.03, 550.163.01, 555.58.02, 580.95.05 and 595.45.04."""


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
    gpu = GpuRecord(uuid="GPU-x", name="A GPU", links=(link,), p2p=tuple(i % 7 for i in range(5 * layout.MAX_GPUS)))
    back = layout.unpack(GpuRecord, layout.pack(gpu))
    assert back.uuid == "GPU-x" and back.links[0] == link and back.p2p == gpu.p2p
    snap = Snapshot(HeaderRecord(driver_version="535.261.03", generation=9), (gpu,))
    parsed = Snapshot.from_bytes(snap.to_bytes())
    assert parsed.header.generation == 9 and parsed.gpus[0].uuid == "GPU-x"


def test_values_that_do_not_fit_are_refused_with_the_field_named() -> None:
    """The name field is nvml.h's NVML_DEVICE_NAME_V2_BUFFER_SIZE (96) buffer, so it holds 95 characters and the
    NUL: 96 characters are refused, and the error says how many bytes fit."""
    too_long = "x" * 96
    layout.pack(GpuRecord(name=too_long[:95]))
    with pytest.raises(LayoutError, match=r"GpuRecord\.name: .* does not fit 95 bytes without NUL"):
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


def pcie_host(tmp_path: Path, count: int) -> tuple[Path, int, list[str]]:
    """edge-pcie's host with ``count`` L4s over four host bridges: the file, the line of its ``gpus:`` key and the
    bus ids it gives the GPUs."""
    doc: dict[str, Any] = yaml.safe_load((builtin_dir() / "edge-pcie.yaml").read_text())
    doc["name"] = f"pcie-{count}"
    node = doc["groups"][0]["node"]
    buses = (0x10, 0x50, 0x90, 0xD0)
    node["pcie"] = {"hostBridges": [{"name": f"hb{i}", "numa": i // 2, "bus": b} for i, b in enumerate(buses)],
                    "switches": []}
    bus_ids = [f"0000:{buses[k % 4] + 1 + k // 4:02x}:00.0" for k in range(count)]
    node["gpus"] = [{"name": f"gpu{k}", "sku": "l4", "bus": bus, "parent": f"hb{k % 4}"}
                    for k, bus in enumerate(bus_ids)]
    node["nics"] = []
    text = yaml.safe_dump(doc, sort_keys=False)
    path = tmp_path / f"pcie-{count}.yaml"
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == "gpus:")
    return path, line, bus_ids


def test_the_format_holds_what_one_host_can_have() -> None:
    assert layout.MAX_GPUS == MAX_GPUS_PER_NODE == NV_MAX_DEVICES


@pytest.mark.parametrize("count", [NV_MAX_DEVICES + 1, 72])
def test_more_gpus_than_a_host_holds_is_a_located_profile_error(tmp_path: Path, count: int) -> None:
    """72 is the NVL72 rack as one host: no driver presents that; the error says to write trays."""
    path, line, _ = pcie_host(tmp_path, count)
    proc = subprocess.run([sys.executable, "-m", "fakehw.cli", "validate", str(path)], capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{path}:{line}: groups[0].node.gpus: {count} GPUs on one node; NVIDIA's driver supports at most " \
           f"{NV_MAX_DEVICES} per host" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_host_with_the_most_gpus_loads(tmp_path: Path, pynvml_module: ModuleType,
                                          nvml: Callable[..., NodeSnap]) -> None:
    """nvidia-ml-py on a 32-GPU node sees every GPU, at the bus ids the profile gives."""
    path, _, bus_ids = pcie_host(tmp_path, NV_MAX_DEVICES)
    nvml(path)
    pynvml = pynvml_module
    assert pynvml.nvmlDeviceGetCount() == NV_MAX_DEVICES
    got = [pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId for i in range(NV_MAX_DEVICES)]
    assert sorted(b.lower() for b in got) == sorted("0000" + b for b in bus_ids)


A100_80GB_1G_INSTANCES = 7
"""``MIG 1g.10gb`` instances an A100-SXM4-80GB holds at once: the "Instances Total" column of its published
``nvidia-smi mig -lgip`` (tests/nvml/migtools.py ``A100_80GB_LGIP``, NVIDIA/mig-parted#97), which NVIDIA's MIG user
guide gives as "up to seven" instances per A100."""


def test_a_host_with_every_gpu_split_into_seven_mig_devices_loads(tmp_path: Path, pynvml_module: ModuleType,
                                                                  nvml: Callable[..., NodeSnap]) -> None:
    """The snapshot holds a DGX A100 with each of its 8 GPUs split into seven 1g.10gb instances (56 MIG devices,
    far more than one GPU's worth): nvidia-ml-py sees all seven on every GPU."""
    doc: dict[str, Any] = yaml.safe_load((builtin_dir() / "dgx-a100.yaml").read_text())
    for gpu in doc["groups"][0]["node"]["gpus"]:
        gpu["mig"] = {"enabled": True, "instances": ["1g.10gb"] * A100_80GB_1G_INSTANCES}
    path = tmp_path / "dgx-a100-1g.yaml"
    path.write_text(yaml.safe_dump(doc))
    snap = nvml(str(path))
    assert len(snap.snapshot.migs) == 8 * A100_80GB_1G_INSTANCES
    pynvml = pynvml_module
    for i in range(pynvml.nvmlDeviceGetCount()):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == A100_80GB_1G_INSTANCES
        uuids = {pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, k))
                 for k in range(A100_80GB_1G_INSTANCES)}
        assert len(uuids) == A100_80GB_1G_INSTANCES and all(u.startswith("MIG-") for u in uuids), uuids


def test_a_profile_name_longer_than_its_field_is_cut_to_what_the_field_holds() -> None:
    """The header's profile field is a 64-byte NUL-terminated string (layout.py, checked by the shim at load): a
    profile whose name is longer still renders, keeping the first 63 characters."""
    import dataclasses

    from fakehw.agent.state import derive_state
    from fakehw.model import load_profile
    from fakehw.nvml.snapshot import build_snapshot

    assert layout.layout_of(HeaderRecord).field("profile").size == 64
    system = load_profile("edge-pcie")
    long_name = "a-very-long-profile-name-" * 4
    renamed = dataclasses.replace(system, name=long_name)
    node = renamed.nodes[0]
    snap = build_snapshot(renamed, node, derive_state(node, [], 1, renamed.seed))
    assert Snapshot.from_bytes(snap.to_bytes()).header.profile == long_name[:63]


def test_an_nvlink_port_past_nvmls_last_link_is_refused_by_name() -> None:
    """NVML numbers a GPU's NVLinks 0 to NVML_NVLINK_MAX_LINKS - 1 (18 links, 0-17, nvml.h): a GPU whose port is
    numbered 18 cannot be rendered, and the refusal names the GPU and the port (not an IndexError)."""
    import dataclasses

    from fakehw.agent.state import derive_state
    from fakehw.model import load_profile
    from fakehw.nvml.snapshot import build_snapshot

    system = load_profile("dgx-h100")
    node = system.nodes[0]
    gpu = node.gpus[0]
    assert layout.MAX_LINKS == 18 and len(gpu.ports) == 18
    ports = (*gpu.ports[:-1], dataclasses.replace(gpu.ports[-1], port=18))
    bad = dataclasses.replace(node, gpus=(dataclasses.replace(gpu, ports=ports), *node.gpus[1:]))
    with pytest.raises(SnapshotError, match=rf"{gpu.id} NVLink port 18 exceeds"):
        build_snapshot(system, bad, derive_state(bad, [], 1, system.seed))


def many_cpu_host(tmp_path: Path, cores_per_socket: int) -> Path:
    """edge-pcie's host (two sockets, two threads per core; gpu5-gpu7 on the second socket) with more cores."""
    doc: dict[str, Any] = yaml.safe_load((builtin_dir() / "edge-pcie.yaml").read_text())
    doc["name"] = f"edge-{cores_per_socket}-cores"
    doc["groups"][0]["node"]["cpu"]["coresPerSocket"] = cores_per_socket
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_host_with_1024_cpus_gives_each_gpu_its_whole_socket(tmp_path: Path, pynvml_module: ModuleType,
                                                               nvml: Callable[..., NodeSnap]) -> None:
    """Two sockets of 256 cores with two threads each: Linux numbers the second socket's cores 256-511 and their
    siblings 768-1023 (the numbering `nvidia-smi topo -m` shows on a DGX H100, CPUs 56-111 and 168-223), and
    nvmlDeviceGetCpuAffinity of a GPU on that socket holds all 512, the last CPU (1023) included."""
    nvml(many_cpu_host(tmp_path, 256))
    n = pynvml_module
    words = n.nvmlDeviceGetCpuAffinity(n.nvmlDeviceGetHandleByIndex(5), 16)
    cpus = {w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1}
    assert cpus == set(range(256, 512)) | set(range(768, 1024))


def test_cpus_past_what_the_snapshot_holds_are_refused_not_dropped(tmp_path: Path) -> None:
    """The snapshot holds NVML's CPU affinity for CPUs 0-1023 (16 words). A host of 2 x 600 cores x 2 threads (a
    valid profile: 2,400 CPUs) would have its second socket's GPUs report CPUs 600-1023 only, silently, so the
    render refuses it and says why."""
    from fakehw.agent.state import derive_state
    from fakehw.model import load_profile
    from fakehw.nvml.snapshot import build_snapshot

    system = load_profile(str(many_cpu_host(tmp_path, 600)))
    node = system.nodes[0]
    with pytest.raises(SnapshotError, match=r"gpu0's CPUs reach CPU 1799; .* holds CPUs 0-1023"):
        build_snapshot(system, node, derive_state(node, [], 1, system.seed))


def test_a_gpu_whose_cpus_end_one_past_what_the_snapshot_holds_is_refused(tmp_path: Path) -> None:
    """The boundary of the refusal above: four sockets of 205 cores with two threads each are 1640 CPUs, and Linux
    numbers the first socket's cores 0-204 and their siblings 820-1024 (every socket's cores first, then the
    siblings, as on the DGX H100 above). gpu0 sits on that socket, so its affinity reaches CPU 1024: the first CPU
    past NVML's 16 words of 64 (0-1023), refused rather than dropped."""
    from fakehw.agent.state import derive_state
    from fakehw.model import load_profile
    from fakehw.nvml.snapshot import build_snapshot

    doc: dict[str, Any] = yaml.safe_load((builtin_dir() / "edge-pcie.yaml").read_text())
    doc["name"] = "edge-4-sockets"
    node_doc = doc["groups"][0]["node"]
    node_doc["cpu"].update(sockets=4, coresPerSocket=205, threadsPerCore=2)
    node_doc["numa"]["nodes"] += [{"id": k, "socket": k, "memory": "256GiB"} for k in (2, 3)]
    path = tmp_path / "edge-4-sockets.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    system = load_profile(str(path))
    node = system.nodes[0]
    with pytest.raises(SnapshotError, match=r"gpu0's CPUs reach CPU 1024; .* holds CPUs 0-1023"):
        build_snapshot(system, node, derive_state(node, [], 1, system.seed))


@pytest.mark.parametrize("record", layout.RECORDS, ids=lambda r: r.__name__)
def test_a_record_made_from_mappings_is_the_one_its_class_makes(record: type[Any]) -> None:
    """``layout.make`` (the snapshot's hot path builds GPU and NVLink records with it) against the standard
    library's own dataclass ``__init__`` and ``dataclasses.replace``: for every record class, from the defaults, from
    one mapping, from two mappings and keywords where later values win, the same instance (equal, every field in the
    same place, still frozen); a name that is not a field is refused as the class refuses it."""
    import dataclasses

    def other(value: Any) -> Any:  # a value of the field's type that is not its default
        return value + "x" if isinstance(value, str) else value + 1 if isinstance(value, int) else (*value, 1)

    fields = [f.name for f in dataclasses.fields(record)]
    first, last = fields[0], fields[-1]
    default = record()
    sample = {first: other(getattr(default, first)), last: other(getattr(default, last))}
    assert layout.make(record) == default and vars(layout.make(record)) == vars(default)
    made = layout.make(record, sample)
    assert made == record(**sample) and vars(made) == vars(record(**sample)) and made != default
    made = layout.make(record, {last: getattr(default, last)}, {first: sample[first]}, **{last: sample[last]})
    assert vars(made) == vars(record(**sample)) and list(vars(made)) == fields
    again = layout.replaced(made, **{first: getattr(default, first)})
    assert again == dataclasses.replace(made, **{first: getattr(default, first)}) and again != made
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, first, sample[first])
    with pytest.raises(TypeError):
        record(not_a_field=1)
    with pytest.raises(TypeError, match="not_a_field"):
        layout.make(record, {"not_a_field": 1})
    # The same through a template (what the snapshot keeps of a GPU's static fields): made from it, the instance
    # is the class's own, and the template is left as it was for the next record.
    fields_of = layout.template(record, {first: sample[first]})
    kept = dict(fields_of)
    made = layout.make_from(record, fields_of, **{last: sample[last]})
    assert made == record(**sample) and vars(made) == vars(record(**sample)) and list(vars(made)) == fields
    assert fields_of == kept and layout.make_from(record, fields_of) == record(**{first: sample[first]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, first, sample[first])
    with pytest.raises(TypeError, match="not_a_field"):
        layout.make_from(record, fields_of, {"not_a_field": 1})
    with pytest.raises(TypeError, match="not_a_field"):
        layout.template(record, {"not_a_field": 1})


def test_a_string_that_fits_one_field_is_still_refused_by_a_shorter_one() -> None:
    """The packer remembers the bytes of strings that fit (a GPU's identity strings are the same on every render),
    per field size: a bus id of 16 characters fits ``remote_bus_id`` (char[32], nvml.h's
    NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE) but not ``remote_bus_id_legacy`` (char[16],
    NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, which holds 15 characters and the NUL), before and after it was packed
    into the first, twice: the error names the field each time."""
    bus_id = "00000000:05:00.0"
    assert len(bus_id) == 16
    assert layout.pack(LinkRecord(remote_bus_id=bus_id))[32:48] == bus_id.encode()
    for _ in range(2):
        with pytest.raises(LayoutError, match="remote_bus_id_legacy"):
            layout.pack(LinkRecord(remote_bus_id=bus_id, remote_bus_id_legacy=bus_id))
    assert layout.pack(LinkRecord(remote_bus_id=bus_id))[32:48] == bus_id.encode()


def test_make_refuses_a_class_whose_init_does_more_than_copy_defaults() -> None:
    """``layout.make`` fills a record from each field's ``default`` and never runs ``__init__``. The dataclasses
    documentation (https://docs.python.org/3/library/dataclasses.html: ``default_factory`` "will be called when a
    default value is needed", ``__post_init__`` is called by the generated ``__init__``) says what it would skip:
    a per-instance value from a factory, a ``__post_init__``'s work, a field without a default. Such a class is
    refused with a ``TypeError`` rather than made into a record its own ``__init__`` would not make."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Factory:
        a: int = 0
        b: tuple[int, ...] = dataclasses.field(default_factory=tuple)

    @dataclasses.dataclass(frozen=True)
    class PostInit:
        a: int = 0

        def __post_init__(self) -> None:
            object.__setattr__(self, "a", self.a + 1)

    @dataclasses.dataclass(frozen=True)
    class NoDefault:
        a: int

    with pytest.raises(TypeError, match=r"Factory\.b has a default_factory"):
        layout.make(Factory)
    with pytest.raises(TypeError, match="PostInit has a __post_init__"):
        layout.make(PostInit, a=1)
    with pytest.raises(TypeError, match=r"NoDefault\.a has no default"):
        layout.make(NoDefault, a=1)


def test_a_gpu_record_made_from_mappings_packs_the_bytes_its_class_does() -> None:
    """Values that are not the defaults (a GPU record's identity strings, counts, tuples and its NVLink records),
    through ``layout.make`` and through ``GpuRecord(**...)``: the same bytes from the packer (what the shim reads)."""
    link = {"present": 1, "up": 1, "version": 4, "remote_bus_id": "00000000:05:00.0", "errors": (1, 2, 3, 4, 5)}
    gpu = {"uuid": "GPU-0123", "name": "NVIDIA H100 80GB HBM3", "index": 3, "temperature": 71,
           "ecc_counts": tuple(range(2 * 2 * layout.ECC_LOCATIONS)),
           "links": (LinkRecord(**link),) * 2}
    made = layout.make(GpuRecord, {**gpu, "links": (layout.make(LinkRecord, link),) * 2})
    assert layout.pack(made) == layout.pack(GpuRecord(**gpu))
    assert layout.unpack(GpuRecord, layout.pack(made)).temperature == 71


def test_a_scalar_field_packed_alone_is_what_packing_the_record_writes_there() -> None:
    """``scalar_packer`` (how the snapshot cache writes a revised record's Xid fields): writing it into the bytes
    of a record gives the bytes of the record with that value; a value that does not fit the field's C type is a
    ``LayoutError`` naming the field, and a field that is not a scalar is refused."""
    gpu = layout.make(GpuRecord, {"uuid": "GPU-0123", "xid_count": 1, "last_xid": 13})
    buf = bytearray(b"\xee" * 8) + bytearray(layout.pack(gpu))
    written = [layout.scalar_packer(GpuRecord, "xid_count", 2).pack_into(buf, 8),
               layout.scalar_packer(GpuRecord, "last_xid", 79).pack_into(buf, 8)]
    assert bytes(buf[8:]) == layout.pack(layout.replaced(gpu, xid_count=2, last_xid=79))
    assert buf[:8] == b"\xee" * 8 and all(end - start == 4 for start, end in written)  # U32: nvml.h's unsigned int
    with pytest.raises(LayoutError, match=r"GpuRecord\.xid_count: -1"):
        layout.scalar_packer(GpuRecord, "xid_count", -1)
    with pytest.raises(TypeError, match="not a scalar"):
        layout.scalar_packer(GpuRecord, "uuid", 0)


EMPTY_RECORD_SENTINELS: dict[tuple[str, str], tuple[int | str, str]] = {
    ("LinkRecord", "remote_type"): (0xFF, "nvml.h: NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF (no link, nothing at the "
                                          "far end)"),
    ("GpuRecord", "numa_node"): (-1, "no NUMA node: the shim answers nvmlDeviceGetNumaNodeId NOT_SUPPORTED for a "
                                     "negative node (nvml.h: 'not supported on the current platform')"),
    ("GpuRecord", "gpu_numa_id"): (-1, "GPU memory that is no NUMA node (links.c, export.c: NOT_SUPPORTED)"),
    ("ProcessRecord", "gpu_instance_id"): (0xFFFFFFFF, "nvml.h nvmlProcessInfo_t: 'set to 0xFFFFFFFF otherwise'"),
    ("ProcessRecord", "compute_instance_id"): (0xFFFFFFFF, "nvml.h nvmlProcessInfo_t: 'set to 0xFFFFFFFF "
                                                           "otherwise'"),
    ("EventRecord", "gpu_instance_id"): (0xFFFFFFFF, "nvml.h nvmlEventData_t: 'set to 0xFFFFFFFF otherwise'"),
    ("EventRecord", "compute_instance_id"): (0xFFFFFFFF, "nvml.h nvmlEventData_t: 'set to 0xFFFFFFFF otherwise'"),
    ("HeaderRecord", "magic"): ("FHWNVML", "docs/nvml.md's header table: magic FHWNVML"),
    ("HeaderRecord", "format_version"): (4, "docs/nvml.md's header table: format_version (4)"),
    ("HeaderRecord", "byte_order"): (0x01020304, "the byte order mark, which reads 04 03 02 01 in a little-endian "
                                                 "file (docs/nvml.md: little endian)"),
}
"""The fields whose "nothing here" is not zero, with where that value comes from."""


@pytest.mark.parametrize("record", layout.RECORDS, ids=lambda r: r.__name__)
def test_a_record_made_without_fields_says_nothing_is_there(record: type[Any]) -> None:
    """A record's class defaults are what the file holds wherever a construction leaves a field out (an absent
    NVLink is ``LinkRecord()`` in all 18 places of a GPU with fewer ports), so each default must be the format's
    "nothing": zero (absent records and unused capacity are zero bytes in the file, docs/nvml.md), except the
    fields nvml.h or the format give another sentinel (:data:`EMPTY_RECORD_SENTINELS`). Read back from the packed
    bytes, so a default the packer would write differently is caught too."""
    raw = layout.pack(record())
    back = layout.unpack(record, raw)
    for f in layout.layout_of(record).fields:
        sentinel = EMPTY_RECORD_SENTINELS.get((record.__name__, f.name))
        if sentinel is not None:
            assert getattr(back, f.name) == sentinel[0], (f.name, sentinel[1])
        else:
            assert raw[f.offset:f.offset + f.size] == bytes(f.size), f.name


@dataclass(frozen=True)
class _TailPadded:
    """A record with C's trailing padding: a uint64_t then a uint32_t is 16 bytes (aligned to 8), 4 of them padding
    (no record of the format has any: each declares its reserved words; this one shows the packer writes them)."""

    c_name: ClassVar[str] = "tail_padded_t"

    wide: layout.U64 = 0
    narrow: layout.U32 = 0


def test_a_record_s_trailing_padding_is_c_s() -> None:
    """C's natural alignment (C11 6.7.2.1: a struct may have unnamed padding at its end; x86-64 psABI: aligned to its
    largest member): ``struct { uint64_t; uint32_t; }`` is 16 bytes."""
    assert layout.layout_of(_TailPadded).size == 16 and layout.pack(_TailPadded(1, 2)) == bytes([1, *[0] * 7, 2,
                                                                                                   *[0] * 7])


@pytest.mark.parametrize("record", [*layout.RECORDS, _TailPadded], ids=lambda r: r.__name__)
def test_packing_over_old_bytes_writes_every_byte_of_the_record(record: type[Any]) -> None:
    """``pack_into`` writes a record's padding (between fields and at its end, C's natural alignment) and its
    absent nested records as zeros: the snapshot's writer packs a changed record over the last file's bytes, so a
    byte it left alone would keep whatever was there. Packed over 0xFF bytes, the record's place holds exactly what
    it holds packed into zeros, and the bytes around it are untouched."""
    size = layout.layout_of(record).size
    buf = bytearray(b"\xff" * (size + 16))
    layout.pack_into(buf, 8, record())
    assert buf[8:8 + size] == layout.pack(record()) and buf[:8] == buf[8 + size:] == b"\xff" * 8
