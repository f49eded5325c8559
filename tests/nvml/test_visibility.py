"""A process sees only the GPUs its node exposes: FAKEHW_VISIBLE_DEVICES (local backend) or /dev/nvidiaN
(containers; FAKEHW_DEV_ROOT points at the directory to look in)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fakehw.model.system import TopologyLevel
from fakehw.nvml.snapfile import write_snapshot
from tests.nvml.helpers import NodeSnap, run_python

LIST = ("import json, pynvml\npynvml.nvmlInit()\nhs=[pynvml.nvmlDeviceGetHandleByIndex(i) for i in "
        "range(pynvml.nvmlDeviceGetCount())]\nprint(json.dumps([[pynvml.nvmlDeviceGetIndex(h), "
        "pynvml.nvmlDeviceGetMinorNumber(h), pynvml.nvmlDeviceGetUUID(h)] for h in hs]))\n")


def visible(snap: NodeSnap, **env: Any) -> list[list[object]]:
    result: list[list[object]] = run_python(LIST, snap.path, **env)
    return result


def test_everything_is_visible_by_default(node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("dgx-h100")
    assert visible(snap) == [[g.index, g.minor, g.uuid] for g in snap.node.gpus]


def test_explicit_list_by_index_name_uuid_and_bus_id(node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("dgx-h100")
    g = snap.node.gpus
    spec = f"1, gpu3,{g[5].uuid} ,{g[7].address.nvml_bus_id}"
    chosen = [g[1], g[3], g[5], g[7]]
    # NVML indices are positions among the visible devices; minor numbers stay the node's.
    assert visible(snap, FAKEHW_VISIBLE_DEVICES=spec) == [[i, x.minor, x.uuid] for i, x in enumerate(chosen)]
    assert visible(snap, FAKEHW_VISIBLE_DEVICES="none") == []
    assert visible(snap, FAKEHW_VISIBLE_DEVICES="all") == [[x.index, x.minor, x.uuid] for x in g]


def test_an_index_with_leading_zeros_is_that_index_however_long(node_snapshot: Callable[..., NodeSnap]) -> None:
    """docs/nvml.md: FAKEHW_VISIBLE_DEVICES lists "model indices"; a decimal index may carry leading zeros (POSIX
    strtoul: optional white space, sign, then "a non-empty sequence of decimal digits"), and nothing bounds its
    length (a variable's value is as long as the environment allows). "3" zero-padded to 2, 127, 128 and 300
    characters selects gpu3 each time, beside "1"; the same padding of a name that is no GPU's selects none."""
    snap = node_snapshot("dgx-h100")
    g = snap.node.gpus
    for width in (2, 127, 128, 300):
        assert visible(snap, FAKEHW_VISIBLE_DEVICES="1," + "3".rjust(width, "0")) == [
            [0, g[1].minor, g[1].uuid], [1, g[3].minor, g[3].uuid]], width
        assert visible(snap, FAKEHW_VISIBLE_DEVICES="gpu3".rjust(4 + width, "x")) == [], width


def test_a_uuid_prefix_names_its_gpu_from_eight_characters_on(node_snapshot: Callable[..., NodeSnap]) -> None:
    """docs/nvml.md: FAKEHW_VISIBLE_DEVICES takes "UUIDs (or 8+ character prefixes)". The first 8 characters of
    gpu5's UUID ("GPU-" and four hex digits; the node's UUIDs differ there) select gpu5, the first 7 select
    nothing."""
    snap = node_snapshot("dgx-h100")
    g = snap.node.gpus
    assert len({x.uuid[:8] for x in g}) == len(g)
    assert visible(snap, FAKEHW_VISIBLE_DEVICES=g[5].uuid[:8]) == [[0, g[5].minor, g[5].uuid]]
    assert visible(snap, FAKEHW_VISIBLE_DEVICES=g[5].uuid[:7]) == []


def test_indices_past_nine_are_read_in_decimal(node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """docs/nvml.md: the list holds "model indices", decimal numbers as the model numbers its GPUs (0, 1, ...): on
    a node of twelve GPUs (the t4-cloud profile's host with twelve T4s on its host bridge) "9" selects gpu9 and "10"
    gpu10, and "09" is 9 too (strtoul, base 10)."""
    text = (Path(__file__).parents[2] / "fakehw" / "profiles" / "t4-cloud.yaml").read_text()
    one = '        - {name: gpu0, sku: t4, bus: "0000:00:1e.0", parent: hb0}'
    assert text.count(one) == 1
    twelve = "\n".join(f'        - {{name: gpu{i}, sku: t4, bus: "0000:{0x20 + i:02x}:00.0", parent: hb0}}'
                        for i in range(12))
    profile = tmp_path / "t4-twelve.yaml"
    profile.write_text(text.replace(one, twelve))
    snap = node_snapshot(profile)
    g = snap.node.gpus
    assert [x.index for x in g] == list(range(12))
    for spec, chosen in (("9", [9]), ("10", [10]), ("09,11", [9, 11])):
        assert visible(snap, FAKEHW_VISIBLE_DEVICES=spec) == [[i, g[k].minor, g[k].uuid]
                                                              for i, k in enumerate(chosen)], spec


def test_separators_after_the_last_device_name_no_device(node_snapshot: Callable[..., NodeSnap]) -> None:
    """docs/nvml.md: FAKEHW_VISIBLE_DEVICES is "a comma list" of device names; what follows the last comma when
    nothing does (a trailing comma, a comma and spaces, spaces) names no device: "1," "1, " and " 1 " select gpu1
    alone, not gpu0 as an empty index would read."""
    snap = node_snapshot("dgx-h100")
    g = snap.node.gpus
    for spec in ("1,", "1, ", " 1 ", ",1,,"):
        assert visible(snap, FAKEHW_VISIBLE_DEVICES=spec) == [[0, g[1].minor, g[1].uuid]], spec


def test_device_nodes_decide_in_containers(node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    snap = node_snapshot("edge-pcie")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia2", "nvidia6"):
        (dev / name).touch()
    g = snap.node.gpus
    assert visible(snap, FAKEHW_DEV_ROOT=str(dev)) == [[0, 2, g[2].uuid], [1, 6, g[6].uuid]]
    # Without nvidiactl the directory is not a node's /dev: no filtering.
    (dev / "nvidiactl").unlink()
    assert len(visible(snap, FAKEHW_DEV_ROOT=str(dev))) == len(g)


def test_invisible_devices_cannot_be_reached(node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("dgx-h100")
    hidden = snap.node.gpus[0]
    code = ("import json, pynvml\npynvml.nvmlInit()\nout = {}\n"
            f"try:\n    pynvml.nvmlDeviceGetHandleByUUID({hidden.uuid!r})\nexcept pynvml.NVMLError as e:\n"
            "    out['uuid'] = e.value\n"
            f"try:\n    pynvml.nvmlDeviceGetHandleByPciBusId({hidden.address.nvml_bus_id!r})\n"
            "except pynvml.NVMLError as e:\n    out['bus'] = e.value\n"
            "h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
            "out['near'] = len(pynvml.nvmlDeviceGetTopologyNearestGpus(h, 40))\nprint(json.dumps(out))\n")
    out = run_python(code, snap.path, FAKEHW_VISIBLE_DEVICES="1,2")
    assert out["uuid"] == out["bus"] == 6  # NOT_FOUND
    topo = snap.system.topology.nodes[snap.node.name]
    visible_neighbours = [b for b in topo.nearest(1, TopologyLevel.NODE) if b in (1, 2)]
    assert out["near"] == len(visible_neighbours)
    assert out["near"] == 1  # gpu1's NODE-level neighbours among the visible ones: gpu2 only


def test_the_gpus_near_a_cpu_are_handed_out_as_visible_devices(node_snapshot: Callable[..., NodeSnap]) -> None:
    """A DGX H100's second socket is CPUs 56-111 and 168-223 (two 56-core Xeon 8480C with Hyper-Threading, Linux
    numbering: what `nvidia-smi topo -m` prints as the CPU affinity of GPUs 4-7). With gpu5 and gpu6 the visible
    ones, nvmlSystemGetTopologyGpuSet of CPU 56 or 168 hands out both, as devices of this process (the handles its
    own index 0 and 1 give), and CPU 0 (first socket) none. CPUs 63 (second socket) and 127 (first) are the last
    CPU of the first and second word of the CPU mask nvmlDeviceGetCpuAffinity hands out ("64 CPUs per unsigned long
    on 64-bit machines", nvml.h): each answers by its own socket."""
    snap = node_snapshot("dgx-h100")
    g = snap.node.gpus
    code = ("import json, pynvml\npynvml.nvmlInit()\n"
            "print(json.dumps({cpu: [pynvml.nvmlDeviceGetUUID(h) for h in pynvml.nvmlSystemGetTopologyGpuSet(cpu)]"
            " for cpu in (0, 56, 63, 127, 168)}))\n")
    out = run_python(code, snap.path, FAKEHW_VISIBLE_DEVICES="5,6")
    both = [g[5].uuid, g[6].uuid]
    assert out == {"0": [], "56": both, "63": both, "127": [], "168": both}


def test_the_nearest_gpus_are_handed_out_as_visible_devices(node_snapshot: Callable[..., NodeSnap]) -> None:
    """A DGX H100's gpu1 and gpu2 sit on the first CPU socket under different PCIe switches (NODE level in
    `nvidia-smi topo -m`). With gpu1 and gpu2 the visible ones, nvmlDeviceGetTopologyNearestGpus of gpu1 at NODE
    level hands out gpu2 as a device of this process: the handle that answers gpu2's UUID."""
    snap = node_snapshot("dgx-h100")
    code = ("import json, pynvml\npynvml.nvmlInit()\nh = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
            "print(json.dumps([pynvml.nvmlDeviceGetUUID(x) for x in pynvml.nvmlDeviceGetTopologyNearestGpus(h, 40)]))"
            "\n")
    assert run_python(code, snap.path, FAKEHW_VISIBLE_DEVICES="1,2") == [snap.node.gpus[2].uuid]


def test_a_bus_id_in_the_kernels_lower_case_spelling_selects_its_gpu(node_snapshot: Callable[..., NodeSnap]) -> None:
    """docs/nvml.md lets FAKEHW_VISIBLE_DEVICES name a GPU by its bus id; a bus id copied from the kernel's view of the
    node is lower case: the kernel names a PCI function "%04x:%02x:%02x.%d" (drivers/pci/probe.c, pci_setup_device;
    `ls /sys/bus/pci/devices`, `lspci -D`), while NVML prints "%08X:%02X:%02X.%X" (nvml.h's busId, "0000:1B:00.0"
    style in nvidia-smi). Hex digits are the same number in either case, so the kernel's spelling of two GPUs'
    addresses selects those two GPUs, as their NVML spelling does. (The two are the first whose bus number has a hex
    letter: the test checks their spellings differ, else it would prove nothing.)"""
    snap = node_snapshot("dgx-h100")
    g = snap.node.gpus
    chosen = [x for x in g if str(x.address) != x.address.nvml_bus_id_legacy][:2]
    assert len(chosen) == 2, [str(x.address) for x in g]
    spec = ",".join(str(x.address) for x in chosen)
    assert spec == spec.lower() and spec != spec.upper()
    assert visible(snap, FAKEHW_VISIBLE_DEVICES=spec) == [[i, x.minor, x.uuid] for i, x in enumerate(chosen)]


def test_a_containers_device_nodes_name_gpus_by_minor_number_not_index(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """nvml.h, nvmlDeviceGetMinorNumber: "The minor number for the device is such that the Nvidia device node file
    for each GPU will have the form /dev/nvidia[minor number]", and nvmlDeviceGetIndex warns that NVML's enumeration
    order carries no such guarantee: a GPU's node is named by its minor number, which need not be its index. The
    edge-pcie node is rewritten with its GPUs' minor numbers in the reverse of their index order (the file records
    each GPU's minor number on its own); a container given nvidiactl, nvidia<n-1> and nvidia1 sees the GPUs whose
    minor numbers those are, index 0 and index n-2, in that order, each with the minor number its node has."""
    snap = node_snapshot("edge-pcie")
    gpus = snap.snapshot.gpus
    count = len(gpus)
    assert count >= 3
    reversed_minors = tuple(replace(g, minor=count - 1 - g.index) for g in gpus)
    write_snapshot(snap.path, replace(snap.snapshot, gpus=reversed_minors).to_bytes(), changed=True)
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", f"nvidia{count - 1}", "nvidia1"):
        (dev / name).touch()
    uuid = {g.index: g.uuid for g in snap.node.gpus}
    assert visible(snap, FAKEHW_DEV_ROOT=str(dev)) == [[0, count - 1, uuid[0]], [1, 1, uuid[count - 2]]]
