"""What the reference plugin learns from NVML at start: the GPUs, their NUMA nodes, NVLink bonds and PCIe levels.

Only public NVML calls are used (through pynvml), so the plugin runs unchanged against the real driver:

- identity: index, UUID, minor number, PCI bus id;
- NUMA: ``nvmlDeviceGetMemoryAffinity`` at node scope (the CPU NUMA node(s) the GPU hangs off);
- NVLink bond of two GPUs: for every active link, the remote end (``nvmlDeviceGetNvLinkRemotePciInfo`` and
  ``nvmlDeviceGetNvLinkRemoteDeviceType``): direct links to the other GPU, plus, per switch both reach, the smaller
  number of links to it (what ``nvidia-smi topo -m`` prints as NV#);
- PCIe level of two GPUs: ``nvmlDeviceGetTopologyCommonAncestor``.

The inventory is cached in the plugin's state directory, so a plugin restarted while a GPU is off the bus still
knows that GPU's identity (NVML cannot tell it then) and keeps listing it, as Unhealthy, under the same ID.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fakehw.render.atomic import atomic_write
from testbed.reference.device_plugin.allocator import TopologyMatrix

NUMA_MASK_WORDS = 4
NVLINK_REMOTE_GPU = 0
NVLINK_REMOTE_SWITCH = 2


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    minor: int
    bus_id: str
    numa: tuple[int, ...]
    links: tuple[int, ...]
    """NVLink ports that were active at start."""

    @property
    def device_id(self) -> str:
        """The ID the plugin advertises: the UUID (stable across restarts and reboots, 40 characters)."""
        return self.uuid


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuInfo, ...]
    matrix: TopologyMatrix

    def by_id(self) -> dict[str, GpuInfo]:
        return {g.device_id: g for g in self.gpus}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _numa_nodes(nvml: Any, handle: Any) -> tuple[int, ...]:
    try:
        words = nvml.nvmlDeviceGetMemoryAffinity(handle, NUMA_MASK_WORDS, nvml.NVML_AFFINITY_SCOPE_NODE)
    except nvml.NVMLError:
        return ()
    out = []
    for w, word in enumerate(words):
        for bit in range(64):
            if int(word) >> bit & 1:
                out.append(w * 64 + bit)
    return tuple(out)


def _link_ends(nvml: Any, handle: Any) -> tuple[tuple[int, ...], Counter[tuple[str, str]]]:
    """Active links and how many go to each remote end, keyed by (kind, remote bus id)."""
    active: list[int] = []
    ends: Counter[tuple[str, str]] = Counter()
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
            remote = _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).upper()
            try:
                kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except nvml.NVMLError:
                kind = NVLINK_REMOTE_SWITCH
        except nvml.NVMLError:
            continue
        active.append(link)
        ends[("gpu" if kind == NVLINK_REMOTE_GPU else "switch", remote)] += 1
    return tuple(active), ends


def _read_gpu(nvml: Any, index: int) -> tuple[GpuInfo, Any, Counter[tuple[str, str]]]:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    active, counts = _link_ends(nvml, h)
    pci = nvml.nvmlDeviceGetPciInfo(h)
    info = GpuInfo(index, _text(nvml.nvmlDeviceGetUUID(h)), int(nvml.nvmlDeviceGetMinorNumber(h)),
                   _text(pci.busId).upper(), _numa_nodes(nvml, h), active)
    return info, h, counts


def read_inventory(nvml: Any, cache: Inventory | None = None) -> tuple[Inventory, list[int]]:
    """Read the node's GPUs through NVML (``nvml`` is the pynvml module, already initialised).

    A GPU that is off the bus answers nothing, not even its UUID. It is taken from ``cache`` (the inventory of an
    earlier run on this node) when that has it, so it is listed under its usual ID (as Unhealthy: the health
    monitor finds it lost); otherwise it is left out. Returns the inventory and the indices left out."""
    count = nvml.nvmlDeviceGetCount()
    cached = {g.index: g for g in cache.gpus} if cache is not None and len(cache.gpus) == count else {}
    gpus: list[GpuInfo] = []
    handles: list[Any] = []
    ends: list[Counter[tuple[str, str]] | None] = []
    missing: list[int] = []
    for i in range(count):
        try:
            info, handle, counts = _read_gpu(nvml, i)
        except nvml.NVMLError as exc:
            if exc.value != nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            if i not in cached:
                missing.append(i)
                continue
            info, handle, counts = cached[i], None, None
        gpus.append(info)
        handles.append(handle)
        ends.append(counts)
    n = len(gpus)
    bonds = [[0] * n for _ in range(n)]
    levels = [[0] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            ea, eb = ends[a], ends[b]
            ha, hb = handles[a], handles[b]
            if ea is None or eb is None or ha is None or hb is None:
                assert cache is not None  # a GPU without ends came from the cache
                bonds[a][b] = cache.matrix.bonds[gpus[a].index][gpus[b].index]
                levels[a][b] = cache.matrix.levels[gpus[a].index][gpus[b].index]
                continue
            direct = ea.get(("gpu", gpus[b].bus_id), 0)
            shared = sum(min(c, eb.get(end, 0)) for end, c in ea.items() if end[0] == "switch")
            bonds[a][b] = direct + shared
            try:
                levels[a][b] = int(nvml.nvmlDeviceGetTopologyCommonAncestor(ha, hb))
            except nvml.NVMLError:
                levels[a][b] = 50
    matrix = TopologyMatrix(tuple(map(tuple, bonds)), tuple(map(tuple, levels)))
    return Inventory(tuple(gpus), matrix), missing


def save_inventory(inventory: Inventory, path: Path) -> None:
    doc = {"gpus": [asdict(g) for g in inventory.gpus], "bonds": inventory.matrix.bonds,
           "levels": inventory.matrix.levels}
    atomic_write(path, json.dumps(doc).encode())


def load_inventory(path: Path) -> Inventory | None:
    try:
        doc = json.loads(path.read_text())
        gpus = tuple(GpuInfo(int(g["index"]), str(g["uuid"]), int(g["minor"]), str(g["bus_id"]),
                             tuple(int(x) for x in g["numa"]), tuple(int(x) for x in g["links"]))
                     for g in doc["gpus"])
        matrix = TopologyMatrix(tuple(tuple(int(x) for x in r) for r in doc["bonds"]),
                                tuple(tuple(int(x) for x in r) for r in doc["levels"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Inventory(gpus, matrix)
