"""Unit tests of the device plugin pieces: the .proto on the wire, the generator, response checks, exposure
parsing and the reference plugin's allocator."""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.suites.device_plugin import mig
from conformance.suites.device_plugin.component import component_version
from conformance.suites.device_plugin.optimum import ModelTopology, _partitions
from fakehw import __version__
from fakehw.model import load_profile
from fakehw.model.topology import domain_bond
from testbed.kubelet import protogen
from testbed.kubelet.api import DEVICE_PLUGIN, REGISTRATION, method_path, pb
from testbed.kubelet.cdi import MAX_SPEC_BYTES, CdiRegistry
from testbed.kubelet.checks import device_problems, registration_problems, resource_name_problems
from testbed.kubelet.driver_root import DriverRootError, build_driver_root
from testbed.kubelet.exposure import GpuRef, container_dev_nodes, exposure
from testbed.reference.device_plugin.allocator import TopologyMatrix, best_set

# --------------------------------------------------------------------------------------------------- wire format

# Field numbers and types of device plugin API v1beta1 (shared/reference/protocols.md): what interoperability with
# a real kubelet or plugin depends on.
WIRE = {
    "DevicePluginOptions": {"pre_start_required": (1, "bool"), "get_preferred_allocation_available": (2, "bool")},
    "RegisterRequest": {"version": (1, "string"), "endpoint": (2, "string"), "resource_name": (3, "string"),
                        "options": (4, "DevicePluginOptions")},
    "Empty": {},
    "ListAndWatchResponse": {"devices": (1, "Device*")},
    "Device": {"ID": (1, "string"), "health": (2, "string"), "topology": (3, "TopologyInfo")},
    "TopologyInfo": {"nodes": (1, "NUMANode*")},
    "NUMANode": {"ID": (1, "int64")},
    "PreStartContainerRequest": {"devices_ids": (1, "string*")},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {"container_requests": (1, "ContainerPreferredAllocationRequest*")},
    "ContainerPreferredAllocationRequest": {"available_deviceIDs": (1, "string*"),
                                            "must_include_deviceIDs": (2, "string*"), "allocation_size": (3, "int32")},
    "PreferredAllocationResponse": {"container_responses": (1, "ContainerPreferredAllocationResponse*")},
    "ContainerPreferredAllocationResponse": {"deviceIDs": (1, "string*")},
    "AllocateRequest": {"container_requests": (1, "ContainerAllocateRequest*")},
    "ContainerAllocateRequest": {"devices_ids": (1, "string*")},
    "AllocateResponse": {"container_responses": (1, "ContainerAllocateResponse*")},
    "ContainerAllocateResponse": {"envs": (1, "map"), "mounts": (2, "Mount*"), "devices": (3, "DeviceSpec*"),
                                  "annotations": (4, "map"), "cdi_devices": (5, "CDIDevice*")},
    "CDIDevice": {"name": (1, "string")},
    "Mount": {"container_path": (1, "string"), "host_path": (2, "string"), "read_only": (3, "bool")},
    "DeviceSpec": {"container_path": (1, "string"), "host_path": (2, "string"), "permissions": (3, "string")},
}
SCALARS = {8: "bool", 9: "string", 3: "int64", 5: "int32"}


def _kind(field: object) -> str:
    f = field  # a google.protobuf FieldDescriptor
    if f.message_type is not None:  # type: ignore[attr-defined]
        if f.message_type.GetOptions().map_entry:  # type: ignore[attr-defined]
            return "map"
        name = f.message_type.name  # type: ignore[attr-defined]
    else:
        name = SCALARS[f.type]  # type: ignore[attr-defined]
    repeated = getattr(f, "is_repeated", None)
    if repeated is None:
        repeated = f.label == 3  # type: ignore[attr-defined]
    return f"{name}*" if repeated else name


def test_messages_match_the_wire_contract() -> None:
    desc = pb.DESCRIPTOR
    assert desc.package == "v1beta1"
    assert set(desc.message_types_by_name) == set(WIRE)
    for name, fields in WIRE.items():
        msg = desc.message_types_by_name[name]
        got = {f.name: (f.number, _kind(f)) for f in msg.fields}
        assert got == fields, name


def test_services_and_method_paths() -> None:
    assert method_path(REGISTRATION, "Register") == "/v1beta1.Registration/Register"
    assert {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in DEVICE_PLUGIN.methods} == {
        "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "GetPreferredAllocation": ("PreferredAllocationRequest", "PreferredAllocationResponse", False),
        "Allocate": ("AllocateRequest", "AllocateResponse", False),
        "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
    }


def test_bytes_on_the_wire() -> None:
    # RegisterRequest{version=1:"v1beta1"} -> tag 0x0a, length 7; options (4) is a nested message, tag 0x22.
    raw = pb.RegisterRequest(version="v1beta1", options=pb.DevicePluginOptions(pre_start_required=True))
    assert raw.SerializeToString() == b"\x0a\x07v1beta1\x22\x02\x08\x01"
    # NUMANode{ID=1: int64 -1} is a 10-byte varint.
    assert pb.NUMANode(ID=-1).SerializeToString() == b"\x08" + b"\xff" * 9 + b"\x01"


# --------------------------------------------------------------------------------------------------- generator


def test_generation_stamp_and_descriptor_fallback(tmp_path: Path) -> None:
    proto = tmp_path / "deviceplugin.proto"
    shutil.copyfile(protogen.PROTO, proto)
    out = protogen.generate(tmp_path / "gen", proto)
    assert protogen.is_current(out, protogen.stamp(proto))
    assert {p.name for p in out.iterdir()} >= {*protogen.OUTPUTS, protogen.STAMP}
    proto.write_text(proto.read_text() + "\n// changed\n")
    assert not protogen.is_current(out, protogen.stamp(proto)), "a changed .proto makes the code stale"
    from testbed.kubelet import _gen

    module = _gen._from_descriptor_set(out)
    message = module.RegisterRequest(version="v1beta1")
    assert pb.RegisterRequest.FromString(message.SerializeToString()).version == "v1beta1"


# --------------------------------------------------------------------------------------------------- checks


@pytest.mark.parametrize(("name", "ok"), [
    ("nvidia.com/gpu", True), ("nvidia.com/gpu.memoryPool.peer-hbm", True), ("example.org/a_b-c.d", True),
    ("gpu", False), ("kubernetes.io/gpu", False), ("x.kubernetes.io/gpu", False), ("Nvidia.com/gpu", False),
    ("nvidia.com/", False), ("nvidia.com/-gpu", False), ("nvidia.com/" + "g" * 64, False),
    ("requests.nvidia.com/gpu", False),
])
def test_resource_names(name: str, ok: bool) -> None:
    assert (resource_name_problems(name) == []) is ok


def test_registration_and_device_problems() -> None:
    checks = {p.check for p in registration_problems(pb.RegisterRequest(version="v1", endpoint="../x.sock",
                                                                         resource_name="gpu"))}
    assert checks == {"version", "endpoint", "resource-name"}
    devices = [pb.Device(ID="a", health="Healthy"), pb.Device(ID="a", health="Unhealthy"),
               pb.Device(ID="b" * 64, health="healthy")]
    assert sorted(p.check for p in device_problems(devices)) == ["device-health", "device-id-duplicate",
                                                                 "device-id-too-long"]


# --------------------------------------------------------------------------------------------------- exposure

GPUS = [GpuRef(f"gpu{i}", i, i, f"GPU-0000000{i}-0000-0000-0000-000000000000") for i in range(4)]


def test_exposure_reads_every_channel() -> None:
    response = pb.ContainerAllocateResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": f"{GPUS[1].uuid},2", "TOKEN": "fhw1.t-000004.abcDEF_-9"},
        devices=[pb.DeviceSpec(container_path="/dev/nvidiactl"), pb.DeviceSpec(container_path="/dev/nvidia1"),
                 pb.DeviceSpec(container_path="/dev/nvidia9"), pb.DeviceSpec(container_path="/dev/fuse")],
        cdi_devices=[pb.CDIDevice(name="nvidia.com/gpu=3"), pb.CDIDevice(name="other.com/x=1")],
        annotations={"cdi.k8s.io/extra": "nvidia.com/gpu=GPU-nope"})
    ex = exposure(response, GPUS)
    assert ex.env == {"gpu1", "gpu2"} and ex.specs == {"gpu1"} and ex.cdi == {"gpu3"}
    assert ex.all == {"gpu1", "gpu2", "gpu3"}
    assert ex.tokens == ("fhw1.t-000004.abcDEF_-9",)
    assert ex.other_nodes == ("/dev/fuse",)
    assert any("nvidia9" in u for u in ex.unknown) and any("GPU-nope" in u for u in ex.unknown)
    assert container_dev_nodes(response, GPUS) == ["fuse", "nvidia1", "nvidia2", "nvidia3", "nvidia9", "nvidiactl"]


def test_all_and_none() -> None:
    everything = exposure(pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": "all"}), GPUS)
    assert everything.env == {g.name for g in GPUS}
    assert exposure(pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": "none"}), GPUS).env == set()
    assert exposure(pb.ContainerAllocateResponse(), GPUS).env is None


# --------------------------------------------------------------------------------------------------- allocator


def _brute(m: TopologyMatrix, candidates: list[int], size: int, must: list[int]) -> int:
    rest = [c for c in candidates if c not in must]
    return max(m.score([*must, *combo]) for combo in itertools.combinations(rest, size - len(must)))


@st.composite
def problems(draw: st.DrawFn) -> tuple[TopologyMatrix, list[int], int, list[int]]:
    n = draw(st.integers(2, 8))
    bonds = [[0] * n for _ in range(n)]
    levels = [[0] * n for _ in range(n)]
    for a, b in itertools.combinations(range(n), 2):
        bonds[a][b] = bonds[b][a] = draw(st.sampled_from([0, 0, 2, 6, 12, 18]))
        levels[a][b] = levels[b][a] = draw(st.sampled_from([10, 20, 30, 40, 50]))
    candidates = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    size = draw(st.integers(1, len(candidates)))
    must = draw(st.lists(st.sampled_from(candidates), max_size=size, unique=True))
    return TopologyMatrix(tuple(map(tuple, bonds)), tuple(map(tuple, levels))), candidates, size, must


@settings(max_examples=200, deadline=None)
@given(problems())
def test_best_set_is_optimal(problem: tuple[TopologyMatrix, list[int], int, list[int]]) -> None:
    m, candidates, size, must = problem
    chosen = best_set(m, candidates, size, must)
    assert len(chosen) == size and set(must) <= set(chosen) <= set(candidates) | set(must)
    assert m.score(chosen) == _brute(m, candidates, size, must)


def test_greedy_on_a_72_gpu_nvlink_domain() -> None:
    """The NVL72 rack as one matrix (model bonds between any two GPUs of the domain; PCIe levels only within a
    tray): the greedy search, used at this size, finds the optimum (all pairs bonded; one tray first)."""
    system = load_profile("gb200-nvl72")
    gpus = list(system.gpus())
    n = len(gpus)
    assert n == 72
    node_levels = {node.name: system.topology.nodes[node.name].levels for node in system.nodes}
    bonds = [[0 if a == b else domain_bond(gpus[a], gpus[b]) for b in range(n)] for a in range(n)]
    levels = [[0 if a == b else int(node_levels[gpus[a].node][gpus[a].index][gpus[b].index])
               if gpus[a].node == gpus[b].node else 60 for b in range(n)] for a in range(n)]
    m = TopologyMatrix(tuple(map(tuple, bonds)), tuple(map(tuple, levels)))
    for size in (2, 4, 8):
        chosen = best_set(m, list(range(n)), size, exhaustive_limit=0)
        links, _ = m.score_parts(chosen)
        assert links == 18 * size * (size - 1) // 2, "every pair of the domain has all 18 links"
        if size <= 4:
            assert len({gpus[i].node for i in chosen}) == 1, "a small set stays in one tray"
    with pytest.raises(ValueError, match="wanted"):
        best_set(m, [0, 1], 3)


# --------------------------------------------------------------------------------------------------- docs, CLI


def test_the_requirement_table_in_the_docs_is_current() -> None:
    from conformance.suites.device_plugin import doc

    path = Path(__file__).resolve().parents[2] / "docs" / "device-plugin.md"
    text = path.read_text()
    assert doc.splice(text, doc.table()) == text, "run: python -m conformance.suites.device_plugin.doc --write " \
                                                  "docs/device-plugin.md"


def test_conformance_list_and_run_summary(capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.cli import main
    from conformance.cli_run import summarize

    assert main(["list", "--target", "device-plugin", "--level", "isolation"]) == 0
    out = capsys.readouterr().out
    assert out.count("DP-ISO-") == 4 and "DP-REG" not in out
    doc = {"requirements": {"DP-REG-001": {"status": "passed", "title": "t1", "tests": ["a"]},
                            "DP-HEALTH-006": {"status": "failed", "title": "t2", "tests": ["b"]},
                            "DP-ALLOC-001": {"status": "failed", "title": "t3", "tests": ["c"]}},
           "tests": [{"nodeid": "c", "message": "[Allocate-timeout] Allocate did not answer\nmore"}]}
    lines, ok = summarize(doc)
    assert not ok and "NOT CERTIFIED" in lines[-1]
    assert any("Allocate did not answer" in line for line in lines) and not any("more" in line for line in lines)
    doc["requirements"]["DP-ALLOC-001"]["status"] = "passed"
    lines, ok = summarize(doc)
    assert ok, "a failed recommended requirement (DP-HEALTH-006) does not block certification"
    assert main(["run", "--target", "nope", "--profile", "x"]) == 2
    assert main(["run", "--target", "device-plugin=cmd:x", "--plugin-cmd", "y"]) == 2
    from conformance.cli_run import parse_target

    assert parse_target("device-plugin=reference", None)[1] is None
    assert parse_target("device-plugin=cmd:my-plugin --x", None)[1] == "my-plugin --x"
    assert parse_target("device-plugin", "my-plugin")[1] == "my-plugin"


# --------------------------------------------------------------------------------------------------- optimum rules


def test_best_division_is_nvidia_best_effort_rule_on_edge_pcie() -> None:
    """edge-pcie by its profile's comments: gpu0-gpu1 and gpu5-gpu6 share a switch (PIX); gpu2-gpu3 meet at host
    bridge hb0 (PHB); gpu4 (hb1, socket 0) and gpu7 (hb3, socket 1) are SYS to each other. Dividing the eight
    GPUs into the best pairs therefore gives (0,1) (5,6) (2,3) (4,7), so with gpu7 a must-include, (gpu7, gpu4)
    is the set a best division holds, as NVIDIA's plugin answers, though (gpu7, gpu6) is better on its own."""
    system = load_profile("edge-pcie")
    node = system.nodes[0]
    topo = ModelTopology.of(system, node)
    names = [g.name for g in node.gpus]
    division = topo.partition_choice(names, 2, ["gpu7"], ["gpu7", "gpu4"])
    assert division is not None
    assert {frozenset(s) for s in division} == {frozenset(p) for p in (("gpu0", "gpu1"), ("gpu5", "gpu6"),
                                                                      ("gpu2", "gpu3"), ("gpu4", "gpu7"))}
    assert topo.partition_choice(names, 2, ["gpu7"], ["gpu7", "gpu6"]) is None
    assert topo.optimum(names, 2, ["gpu7"])[0] == topo.score(["gpu7", "gpu6"]) > topo.score(["gpu7", "gpu4"])


@pytest.mark.parametrize(("n", "k", "count"), [(8, 2, 105), (7, 2, 105), (8, 4, 35), (8, 3, 280), (6, 6, 1),
                                               (12, 2, 10395)])
def test_divisions_are_each_counted_once(n: int, k: int, count: int) -> None:
    """(2m-1)!! pairings of 2m items; 7 items in pairs = one single + 15 pairings of 6, times 7; 8 into 3+3+2."""
    items = [f"g{i}" for i in range(n)]
    parts = list(_partitions(items, k))
    assert len(parts) == count
    assert len({frozenset(frozenset(s) for s in p) for p in parts}) == count
    assert all(sorted(x for s in p for x in s) == sorted(items) for p in parts)


# --------------------------------------------------------------------------------------------------- MIG


def test_mig_resources_per_strategy_on_dgx_a100() -> None:
    """dgx-a100: gpu7 runs two 3g.40gb instances, the other seven GPUs are whole (its profile)."""
    node = load_profile("dgx-a100").nodes[0]
    whole = tuple(f"gpu{i}" for i in range(7))
    assert mig.expected_resources(node, "none", "nvidia.com/gpu") == {"nvidia.com/gpu": (*whole, "gpu7")}
    assert mig.expected_resources(node, "mixed", "nvidia.com/gpu") == {
        "nvidia.com/gpu": whole, "nvidia.com/mig-3g.40gb": ("gpu7/mig0", "gpu7/mig1")}
    with pytest.raises(mig.MigConfigError, match=r"gpu0, gpu1.*not"):
        mig.expected_resources(node, "single", "nvidia.com/gpu")
    uuids = [m.uuid for m in node.gpus[7].mig_instances]
    assert mig.detect(node, ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"], []) == "mixed"
    assert mig.detect(node, ["nvidia.com/gpu"], uuids) == "single"
    assert mig.detect(node, ["nvidia.com/gpu"], [node.gpus[0].uuid]) == "none"
    assert mig.detect(load_profile("dgx-h100").nodes[0], ["nvidia.com/mig-1g.10gb"], []) == "none"


def test_mig_devices_in_allocate_answers() -> None:
    """A MIG device is named by its UUID or as <gpu index>:<MIG index>; its GPU's device node alone exposes none
    of the GPU's MIG devices; naming the GPU's own UUID gives the whole GPU."""
    node = load_profile("dgx-a100").nodes[0]
    refs = mig.refs(node, "mixed")
    m0, m1 = node.gpus[7].mig_instances
    spec = [pb.DeviceSpec(container_path="/dev/nvidia7", host_path="/dev/nvidia7", permissions="rw")]
    by_uuid = exposure(pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": m1.uuid}, devices=spec), refs)
    assert by_uuid.env == frozenset({"gpu7/mig1"}) and by_uuid.specs == frozenset() and not by_uuid.unknown
    by_index = exposure(pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": "7:0"}), refs)
    assert by_index.env == frozenset({"gpu7/mig0"})
    whole = exposure(pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": node.gpus[7].uuid}), refs)
    assert whole.env == frozenset({"gpu7"})
    plain = exposure(pb.ContainerAllocateResponse(devices=spec), mig.refs(node, "none"))
    assert plain.specs == {"gpu7"}
    assert container_dev_nodes(pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": m0.uuid}), refs) == [
        "nvidia7", "nvidiactl"]


# --------------------------------------------------------------------------------------------------- CDI specs


NVIDIA_SPEC = {  # the shape NVIDIA's plugin v0.20.0 writes to /var/run/cdi (trimmed)
    "cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu",
    "devices": [{"name": "GPU-aaa", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia2"}]}},
                {"name": "MIG-bbb", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia7"},
                                                                       {"path": "/dev/nvidia-caps/nvidia-cap21"}]}}],
    "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]},
}


def test_cdi_devices_resolve_through_the_plugins_spec(tmp_path: Path) -> None:
    (tmp_path / "k8s.device-plugin.nvidia.com-gpu.json").write_text(json.dumps(NVIDIA_SPEC))
    (tmp_path / "broken.yaml").write_text("kind: [unterminated")
    (tmp_path / "huge.json").write_bytes(b" " * (MAX_SPEC_BYTES + 1))
    reg = CdiRegistry.load(tmp_path)
    assert reg.nodes("k8s.device-plugin.nvidia.com/gpu=GPU-aaa") == ("/dev/nvidia2", "/dev/nvidiactl",
                                                                    "/dev/nvidia-uvm")
    assert len(reg.problems) == 2 and any("huge.json" in p and "larger" in p for p in reg.problems)
    gpus = [GpuRef(f"gpu{i}", i, i, f"GPU-{i}") for i in range(4)]
    answer = pb.ContainerAllocateResponse(annotations={
        "cdi.k8s.io/nvidia-device-plugin_x": "k8s.device-plugin.nvidia.com/gpu=GPU-aaa"})
    ex = exposure(answer, gpus, reg)
    assert ex.cdi == {"gpu2"} and not ex.unknown
    stale = pb.ContainerAllocateResponse(cdi_devices=[pb.CDIDevice(name="k8s.device-plugin.nvidia.com/gpu=GPU-zzz")])
    assert exposure(stale, gpus, reg).unknown == ("CDI device 'k8s.device-plugin.nvidia.com/gpu=GPU-zzz' is not in "
                                                  "the plugin's CDI spec for k8s.device-plugin.nvidia.com/gpu",)
    toolkit = pb.ContainerAllocateResponse(cdi_devices=[pb.CDIDevice(name="nvidia.com/gpu=3")])
    assert exposure(toolkit, gpus, reg).cdi == {"gpu3"}


# --------------------------------------------------------------------------------------------------- driver root


def test_driver_root_holds_what_nvcdi_discovery_looks_for(tmp_path: Path) -> None:
    """nvcdi infers the driver version from libcuda.so.<version> and loads nothing else from it; a program that
    loads the stand-in libcuda learns the CUDA version (cuDriverGetVersion) and that there is no device."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    from fakehw.nvml import library_dir

    root = build_driver_root(tmp_path / "root", {"LD_LIBRARY_PATH": str(library_dir())}, "580.173.02", "13.0",
                             machine="x86_64")
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    assert (lib / "libnvidia-ml.so.1").resolve() == lib / "libnvidia-ml.so.580.173.02"
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.580.173.02" and os.readlink(lib / "libcuda.so") == \
        "libcuda.so.1"
    cuda = ctypes.CDLL(str(lib / "libcuda.so.1"))
    version = ctypes.c_int()
    assert cuda.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value == 13000
    assert cuda.cuInit(0) == 100  # CUDA_ERROR_NO_DEVICE
    with pytest.raises(DriverRootError, match="LD_LIBRARY_PATH"):
        build_driver_root(tmp_path / "other", {}, "535.261.03", "12.2", machine="x86_64")


# --------------------------------------------------------------------------------------------------- versions


def test_component_version_says_what_the_binary_says(tmp_path: Path) -> None:
    tool = tmp_path / "my-plugin"
    tool.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'my-plugin version v1.2.3' && exit 0\nexit 9\n")
    tool.chmod(0o755)
    said = component_version(f"{tool} --socket-dir {{plugin_dir}}")
    digest = hashlib.sha256(tool.read_bytes()).hexdigest()
    assert said == f"my-plugin version v1.2.3 (sha256:{digest})"
    mute = tmp_path / "mute"
    mute.write_text("#!/bin/sh\nexit 1\n")
    mute.chmod(0o755)
    assert component_version(str(mute)) == f"sha256:{hashlib.sha256(mute.read_bytes()).hexdigest()}"
    assert component_version("python -m testbed.reference.device_plugin") == (
        f"testbed.reference.device_plugin (fakehw {__version__})")
    assert component_version("no-such-plugin-binary") is None and component_version("'unbalanced") is None


def test_device_list_mounts() -> None:
    """NVIDIA's volume-mounts strategy: NVIDIA_VISIBLE_DEVICES names the directory, the mounts under it name the
    GPUs (what the NVIDIA container runtime reads)."""
    gpus = [GpuRef(f"gpu{i}", i, i, f"GPU-{i}") for i in range(4)]
    answer = pb.ContainerAllocateResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
        mounts=[pb.Mount(container_path="/var/run/nvidia-container-devices/GPU-2", host_path="/dev/null"),
                pb.Mount(container_path="/var/run/nvidia-container-devices/3", host_path="/dev/null")])
    ex = exposure(answer, gpus)
    assert ex.env is None and ex.mounts == frozenset({"gpu2", "gpu3"}) and ex.all == frozenset({"gpu2", "gpu3"})
    assert container_dev_nodes(answer, gpus) == ["nvidia2", "nvidia3", "nvidiactl"]
    bogus = pb.ContainerAllocateResponse(mounts=[pb.Mount(container_path="/var/run/nvidia-container-devices/GPU-9")])
    assert exposure(bogus, gpus).unknown == ("device-list mount names 'GPU-9'",)
