"""What the reference plugin learns from NVML at start: the GPUs, their NUMA nodes, NVLink bonds and PCIe levels.

Only public NVML calls are used (through pynvml), so the plugin runs unchanged against the real driver:

- identity: index, UUID, minor number, PCI bus id;
- NUMA: ``nvmlDeviceGetMemoryAffinity`` at node scope (the CPU NUMA node(s) the GPU hangs off);
- NVLink bond of two GPUs: for every active link, the remote end (``nvmlDeviceGetNvLinkRemotePciInfo`` and
  ``nvmlDeviceGetNvLinkRemoteDeviceType``): direct links to the other GPU, plus, per switch both reach, the smaller
  number of links to it (what ``nvidia-smi topo -m`` prints as NV#);
- PCIe level of two GPUs: ``nvmlDeviceGetTopologyCommonAncestor``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

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


def read_inventory(nvml: Any) -> Inventory:
    """Read the node's GPUs through NVML (``nvml`` is the pynvml module, already initialised)."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    gpus: list[GpuInfo] = []
    ends: list[Counter[tuple[str, str]]] = []
    for i, h in enumerate(handles):
        active, counts = _link_ends(nvml, h)
        pci = nvml.nvmlDeviceGetPciInfo(h)
        gpus.append(GpuInfo(i, _text(nvml.nvmlDeviceGetUUID(h)), int(nvml.nvmlDeviceGetMinorNumber(h)),
                            _text(pci.busId).upper(), _numa_nodes(nvml, h), active))
        ends.append(counts)
    n = len(gpus)
    bonds = [[0] * n for _ in range(n)]
    levels = [[0] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            direct = ends[a].get(("gpu", gpus[b].bus_id), 0)
            shared = sum(min(count, ends[b].get(end, 0)) for end, count in ends[a].items() if end[0] == "switch")
            bonds[a][b] = direct + shared
            try:
                levels[a][b] = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
            except nvml.NVMLError:
                levels[a][b] = 50
    return Inventory(tuple(gpus), TopologyMatrix(tuple(map(tuple, bonds)), tuple(map(tuple, levels))))
