"""A node's CXL hierarchy as the kernel enumerates it: ports and their ids, the path from a memory device up to
its host bridge, the downstream port ids each HDM decoder targets, DPA partitions and window addresses.

Everything here is a function of the model (it does not change at run time), shared by the agent's CXL state
machine (:mod:`fakehw.agent.cxlhdm`), the sysfs writer (:mod:`fakehw.agent.cxlsysfs`) and the renderer
(:mod:`fakehw.sysfs.cxl`), so that ``decoder5.1`` means the same decoder to all three.

Port ids: ``root0`` is port 0, then one per host bridge (by uid; a restricted host bridge has none), one per
switch, one per pooled device's virtual switch, then one per endpoint (memdev), as the kernel's port IDA hands
them out when the root, the host bridges and then the devices below probe in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakehw.model.memblock import block_size
from fakehw.model.system import Cxl, CxlHostBridge, CxlMemdev, CxlPool, CxlSwitch, CxlWindow, Node, System

MiB = 2**20
GiB = 2**30
WINDOW_BASE = 0x40_0000_0000
"""Host physical address of the first fixed memory window (256 GiB); windows follow each other 1 GiB aligned."""


@dataclass(frozen=True, slots=True)
class Hop:
    """One port on a memdev's way up: the port (host bridge or switch) and the downstream port it routes through."""

    port: str
    dport: str
    dport_id: int


def window_bases(cxl: Cxl) -> dict[str, int]:
    """Host physical address of every fixed memory window: from 256 GiB up, each 1 GiB aligned."""
    bases, addr = {}, WINDOW_BASE
    for w in cxl.windows:
        bases[w.name] = addr
        addr += -(-w.size // GiB) * GiB
    return bases


class NodeTopology:
    """The CXL hierarchy of one node."""

    def __init__(self, system: System, node: Node):
        self.node = node
        self.cxl = node.cxl
        self.pools: tuple[CxlPool, ...] = tuple(p for p in system.cxl_pools if node.name in p.nodes and p.window)
        self.hbs = {h.name: h for h in self.cxl.host_bridges}
        self.switches = {s.name: s for s in self.cxl.switches}
        self.memdevs = {m.name: m for m in self.cxl.memdevs}
        self.windows = {w.name: w for w in self.cxl.windows}
        self.bases = window_bases(self.cxl)
        self.block = block_size(node)
        """The node's memory block size: the unit dax kmem hot-adds and daxctl onlines."""
        self.hb_of_rp = {rp: h.name for h in self.cxl.host_bridges for rp in h.root_ports}
        self.sw_of_dp = {dp: s.name for s in self.cxl.switches for dp in s.downstream_ports}
        self.sw_at = {s.parent: s.name for s in self.cxl.switches}
        self._ids()
        self._sysfs_ids(system)

    # ------------------------------------------------------------------------------------------ ids

    def _ids(self) -> None:
        self.port_id: dict[str, int] = {}
        next_id = 1
        for hb in sorted(self.cxl.host_bridges, key=lambda h: h.uid):
            if not hb.restricted:
                self.port_id[hb.name] = next_id
                next_id += 1
        for sw in self.cxl.switches:
            self.port_id[sw.name] = next_id
            next_id += 1
        for p in self.pools:
            self.port_id[f"{p.name}.vcs"] = next_id
            next_id += 1
        self.endpoint_base = next_id
        self.port_by_id = {v: k for k, v in self.port_id.items()}

    def _sysfs_ids(self, system: System) -> None:
        """``memN`` numbering: local devices in model order, then per pool its LDs and its DCD interface."""
        self.memdev_id: dict[str, int] = {m.name: i for i, m in enumerate(self.cxl.memdevs)}
        base = len(self.cxl.memdevs)
        for p in system.cxl_pools:
            for ld in range(p.logical_devices):
                self.memdev_id[f"{p.name}.ld{ld}"] = base + ld
            self.memdev_id[f"{p.name}.dcd"] = base + p.logical_devices
            base += p.logical_devices + 1
        self.memdev_by_id = {v: k for k, v in self.memdev_id.items()}

    def endpoint_id(self, memdev: str) -> int:
        return self.endpoint_base + self.memdev_id[memdev]

    def memdev_of_endpoint(self, endpoint_id: int) -> str | None:
        return self.memdev_by_id.get(endpoint_id - self.endpoint_base)

    # ------------------------------------------------------------------------------------------ paths

    def host_bridge_of(self, memdev: CxlMemdev) -> CxlHostBridge:
        return self.hbs[memdev.host_bridge]

    def hops(self, memdev: CxlMemdev) -> list[Hop]:
        """Ports between the root and the memdev's endpoint, top down (none for a device of a restricted host)."""
        hb = self.hbs[memdev.host_bridge]
        if hb.restricted:
            return []
        if not memdev.behind_switch:
            return [Hop(hb.name, memdev.parent, hb.port_id(memdev.parent))]
        sw = self.switches[self.sw_of_dp[memdev.parent]]
        return [Hop(hb.name, sw.parent, hb.port_id(sw.parent)), Hop(sw.name, memdev.parent, sw.port_id(memdev.parent))]

    def port_decoders(self, port: str) -> int:
        if port in self.hbs:
            return self.hbs[port].decoders
        return self.switches[port].decoders

    def port_dports(self, port: str) -> tuple[int, ...]:
        """Hardware ids of the port's downstream ports."""
        if port in self.hbs:
            return self.hbs[port].port_ids
        return self.switches[port].port_ids

    def port_depth(self, port: str) -> int:
        return 1 if port in self.hbs else 2

    def switch_of(self, port: str) -> CxlSwitch | None:
        return self.switches.get(port)

    def under(self, port: str) -> list[CxlMemdev]:
        """Local memdevs below a host bridge or switch port."""
        return [m for m in self.cxl.memdevs if any(h.port == port for h in self.hops(m))]

    # ------------------------------------------------------------------------------------------ capacity

    @staticmethod
    def partitions(memdev: CxlMemdev) -> dict[str, tuple[int, int]]:
        """DPA partitions (start, size): RAM first, then persistent capacity."""
        return {"ram": (0, memdev.ram_size), "pmem": (memdev.ram_size, memdev.pmem_size)}

    def window(self, name: str) -> CxlWindow | None:
        return self.windows.get(name)

    def target_node(self, window: CxlWindow) -> int:
        """The NUMA node a window's hot-added RAM goes to: its proximity domain's, else (no SRAT entry, as for
        cxl_test's windows) the first node, which is where the kernel's memory_add_physaddr_to_nid() falls back."""
        if window.numa is not None:
            return window.numa
        return min((n.id for n in self.node.numa), default=0)
