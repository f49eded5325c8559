"""Expand a validated profile document into a :class:`System`, checking every cross-reference.

Field-level checks happen in :mod:`fakehw.model.spec` (pydantic). Here every object exists, so this is where a
link to a missing device, a GPU with more NVLinks than its SKU, duplicate bus IDs or a broken NUMA distance
matrix are found. Problems carry the path in the document so the loader can point at the line.

Work that is the same for every node of a group (parsing the node template, checking it, resolving link
patterns) is done once per group; per node only identities (names, UUIDs, ports) are stamped out. This keeps a
1,000-node fleet cheap to expand.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from pydantic import ValidationError

from fakehw.model import spec as s
from fakehw.model.catalogue import GpuSku, NVSwitchSku, catalogue
from fakehw.model.drivers import branch_of
from fakehw.model.errors import PathItem, Problems
from fakehw.model.merge import merge_documents
from fakehw.model.mig import MigGeometryError, place_in_order
from fakehw.model.system import (
    C2CLink,
    Caches,
    Cpu,
    Cxl,
    CxlHostBridge,
    CxlMemdev,
    CxlPool,
    CxlRegion,
    CxlSwitch,
    CxlWindow,
    Driver,
    Fabric,
    Gpu,
    HostBridge,
    Initiator,
    LatencyDomain,
    MemoryPool,
    MigInstance,
    Nic,
    Node,
    NumaNode,
    NVLinkDomain,
    NVLinkPort,
    NVSwitch,
    PcieSwitch,
    Roce,
    System,
)
from fakehw.model.units import PciAddress, parse_cpulist

Path = tuple[PathItem, ...]
ResolveProfile = Callable[[str], s.ProfileSpec]

_NAMESPACE = uuid.UUID("6f1c2d2e-8a59-4a53-9b0e-2f61a8c0d7b1")
_DEFAULT_DISTANCE = {"cxl": 50, "hbm": 80, "reserved": 80, "lpddr": 21, "dram": 21}


def stable_uuid(*parts: str) -> uuid.UUID:
    """A UUID that depends only on ``parts`` (so every run of a profile names devices the same)."""
    return uuid.uuid5(_NAMESPACE, "/".join(parts))


def _stable_int(*parts: str, digits: int) -> int:
    digest = int(hashlib.sha256("/".join(parts).encode()).hexdigest(), 16)
    modulus: int = 10**digits
    return digest % modulus


# --------------------------------------------------------------------------------------------------- templates


@dataclass(frozen=True, slots=True)
class _Wire:
    """``count`` NVLinks between two devices, resolved from a link pattern."""

    a: str
    b: str
    b_is_gpu: bool
    count: int
    up: bool


@dataclass
class _Template:
    """A node spec, checked once, with everything that is the same on every node of the group."""

    key: int
    group: str
    path: Path
    spec: s.NodeSpec
    cpu: Cpu
    numa: tuple[NumaNode, ...]
    distances: tuple[tuple[int, ...], ...]
    host_bridges: tuple[HostBridge, ...]
    switches: tuple[PcieSwitch, ...]
    gpu_specs: tuple[s.GpuSpec, ...]  # in NVML index order (by bus id)
    gpu_numa: dict[str, int]
    gpu_skus: dict[str, GpuSku]
    hbm_numa: dict[str, int]
    nvswitch_skus: dict[str, NVSwitchSku]
    wires: tuple[_Wire, ...]
    local_links: dict[str, int]
    cxl: Cxl
    nic_numa: dict[str, int]
    domain_link_count: dict[str, int] = field(default_factory=dict)


def _match(
    patterns: str | list[str], names: Sequence[str], what: str, problems: Problems, path: Path
) -> list[str]:
    """Names matching any of ``patterns``, in the order of ``names``; a pattern matching nothing is a problem."""
    pats = [patterns] if isinstance(patterns, str) else patterns
    out: list[str] = []
    for i, pat in enumerate(pats):
        hits = [n for n in names if fnmatchcase(n, pat)]
        if not hits:
            where = path if isinstance(patterns, str) else (*path, i)
            known = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
            problems.add(where, f"{pat!r} matches no {what} (known: {known or 'none'})")
        out.extend(h for h in hits if h not in out)
    return [n for n in names if n in out]


def _cpu(spec: s.CpuSpec) -> Cpu:
    c = spec.caches
    return Cpu(
        arch=spec.arch,
        vendor=spec.vendor,
        model=spec.model,
        sockets=spec.sockets,
        cores_per_socket=spec.cores_per_socket,
        threads_per_core=spec.threads_per_core,
        frequency_mhz=spec.frequency_mhz,
        isa=tuple(spec.isa),
        family=spec.family,
        model_id=spec.model_id,
        stepping=spec.stepping,
        caches=Caches(c.l1d, c.l1i, c.l2, c.l3, c.l3_shared_by),
    )


def _numa_cpus(spec: s.NodeSpec, cpu: Cpu, problems: Problems, path: Path) -> dict[int, tuple[int, ...]]:
    """CPU ids of every NUMA node: explicit lists, or each socket's cores split evenly over its nodes."""
    by_socket: dict[int, list[s.NumaNodeSpec]] = defaultdict(list)
    for i, node in enumerate(spec.numa.nodes):
        if node.socket is not None:
            if node.socket >= cpu.sockets:
                problems.add((*path, "numa", "nodes", i, "socket"), f"socket {node.socket} does not exist "
                             f"(the node has {cpu.sockets} socket(s))")
                continue
            by_socket[node.socket].append(node)
    for sock in range(cpu.sockets):
        if sock not in by_socket:
            problems.add((*path, "numa", "nodes"), f"socket {sock} has no NUMA node")
    result: dict[int, tuple[int, ...]] = {}
    owner: dict[int, int] = {}
    for sock, nodes in by_socket.items():
        implicit = [n for n in nodes if n.cpus is None]
        if implicit and cpu.cores_per_socket % len(implicit):
            problems.add((*path, "cpu", "coresPerSocket"), f"{cpu.cores_per_socket} cores of socket {sock} do "
                         f"not split evenly over its {len(implicit)} NUMA nodes")
            continue
        per = cpu.cores_per_socket // max(1, len(implicit))
        for k, node in enumerate(implicit):
            result[node.id] = tuple(
                sorted(
                    cpu.cpu_id(sock, core, t)
                    for core in range(k * per, (k + 1) * per)
                    for t in range(cpu.threads_per_core)
                )
            )
    for i, node in enumerate(spec.numa.nodes):
        if node.cpus is not None:
            try:
                cpus = parse_cpulist(node.cpus)
            except ValueError as exc:
                problems.add((*path, "numa", "nodes", i, "cpus"), str(exc))
                continue
            bad = [c for c in cpus if c >= cpu.logical_cpus]
            if bad:
                problems.add((*path, "numa", "nodes", i, "cpus"), f"cpu {bad[0]} does not exist (the node has "
                             f"{cpu.logical_cpus} logical CPUs)")
                continue
            result[node.id] = cpus
    for i, node in enumerate(spec.numa.nodes):
        for c in result.get(node.id, ()):
            if c in owner and owner[c] != node.id:
                problems.add((*path, "numa", "nodes", i, "cpus"), f"cpu {c} is also in NUMA node {owner[c]}")
                break
            owner[c] = node.id
    if not problems and len(owner) != cpu.logical_cpus:
        missing = sorted(set(range(cpu.logical_cpus)) - set(owner))
        problems.add((*path, "numa", "nodes"), f"cpus {missing[:8]} belong to no NUMA node")
    return result


def _distances(spec: s.NumaSpec, problems: Problems, path: Path) -> tuple[tuple[int, ...], ...]:
    n = len(spec.nodes)
    if spec.distances is None:
        rows = []
        for a in spec.nodes:
            row = []
            for b in spec.nodes:
                if a.id == b.id:
                    row.append(10)
                elif a.socket is not None and b.socket is not None:
                    row.append(12 if a.socket == b.socket else 21)
                else:
                    row.append(max(_DEFAULT_DISTANCE[a.kind], _DEFAULT_DISTANCE[b.kind]))
            rows.append(tuple(row))
        return tuple(rows)
    dpath = (*path, "numa", "distances")
    if len(spec.distances) != n:
        problems.add(dpath, f"distance matrix has {len(spec.distances)} rows for {n} NUMA nodes (must be square)")
        return ()
    for i, row in enumerate(spec.distances):
        if len(row) != n:
            problems.add((*dpath, i), f"row has {len(row)} entries for {n} NUMA nodes (matrix must be square)")
            return ()
        for j, value in enumerate(row):
            if i == j and value != 10:
                problems.add((*dpath, i, j), f"distance of a node to itself must be 10, not {value}")
            elif i != j and not 10 < value <= 255:
                problems.add((*dpath, i, j), f"distance between different nodes must be 11..255 (255: "
                             f"unreachable), not {value}")
    return tuple(tuple(r) for r in spec.distances)


def _initiator(node: s.NumaNodeSpec, spec: s.NodeSpec, skus: dict[str, GpuSku]) -> Initiator:
    if node.initiator is not None:
        i = node.initiator
        return Initiator(i.read_bandwidth_mbs, i.write_bandwidth_mbs, i.read_latency_ns, i.write_latency_ns)
    if node.kind == "hbm":
        return _hbm_initiator(node, spec, skus)
    if node.kind == "cxl":
        return _cxl_initiator(node.id, spec)
    if node.kind == "reserved":
        return Initiator(0, 0, 0, 0)
    if node.kind == "lpddr":
        return Initiator(500_000, 500_000, 110, 110)
    return Initiator(200_000, 200_000, 90, 90)


def _hbm_initiator(node: s.NumaNodeSpec, spec: s.NodeSpec, skus: dict[str, GpuSku]) -> Initiator:
    """GPU memory as the nearest CPU reaches it: over the coherent C2C link when there is one, whose one-way
    bandwidth (half the bidirectional figure: 450 GB/s of GH200's 900) caps the HBM's own (4 TB/s on GH200,
    which only the GPU itself gets), at the C2C latency domain's latency."""
    hbm = int(skus[node.gpu].hbm_bandwidth_gbs * 1000) if node.gpu in skus else 0
    link = next((c for c in spec.c2c if c.gpu == node.gpu), None)
    if link is None:
        return Initiator(hbm, hbm, 400, 400)
    bw = min(hbm, int(link.bandwidth_gbs * 1000 / 2)) if hbm else int(link.bandwidth_gbs * 1000 / 2)
    latency = LATENCY_DOMAINS["c2c"].latency_ns
    return Initiator(bw, bw, latency, latency)


def _cxl_initiator(numa_id: int, spec: s.NodeSpec) -> Initiator:
    cat = catalogue().cxl_memdevs
    devs = {m.name: m for m in spec.cxl.memdevs}
    regions = [r for r in spec.cxl.regions if r.numa == numa_id]
    if not regions:
        # A window maps the node but nothing is committed at boot: judge by what sits under its host bridges.
        # A host bridge without local memory devices reaches pooled memory, which is always behind a switch.
        hbs = {t for w in spec.cxl.windows if w.numa == numa_id for t in w.targets}
        if not hbs:
            return Initiator(64_000, 64_000, 210, 210)
        rps = {f"{hb.name}.rp{k}" for hb in spec.cxl.host_bridges if hb.name in hbs for k in range(hb.root_ports)}
        below = {sw.name for sw in spec.cxl.switches if sw.parent in rps}
        under = [m for m in spec.cxl.memdevs if m.parent in rps or m.parent.rsplit(".", 1)[0] in below]
        switched = not under or any(".dp" in m.parent for m in under)
        latency = 210 + (100 if switched else 0)
        return Initiator(64_000, 64_000, latency, latency)
    region = regions[0]
    members = [devs[t] for t in region.targets if t in devs]
    sku = cat.get(members[0].sku) if members else None
    latency = (sku.latency_ns if sku else 210) + (100 if any(".dp" in m.parent for m in members) else 0)
    bandwidth = int((sku.bandwidth_gbs if sku else 64) * 1000 * max(1, len(members)))
    return Initiator(bandwidth, bandwidth, latency, latency)


def _check_pcie(spec: s.NodeSpec, numa_ids: set[int], problems: Problems, path: Path) -> dict[str, str]:
    """Check the PCIe tree; return parent -> host bridge for every bridge name."""
    bridges: dict[str, str | None] = {}
    for i, hb in enumerate(spec.pcie.host_bridges):
        if hb.name in bridges:
            problems.add((*path, "pcie", "hostBridges", i, "name"), f"duplicate PCIe bridge name {hb.name!r}")
        bridges[hb.name] = None
        if hb.numa not in numa_ids:
            problems.add((*path, "pcie", "hostBridges", i, "numa"), f"NUMA node {hb.numa} does not exist")
    for i, sw in enumerate(spec.pcie.switches):
        if sw.name in bridges:
            problems.add((*path, "pcie", "switches", i, "name"), f"duplicate PCIe bridge name {sw.name!r}")
        bridges[sw.name] = sw.parent
    for i, sw in enumerate(spec.pcie.switches):
        if sw.parent not in bridges:
            problems.add((*path, "pcie", "switches", i, "parent"), f"PCIe parent {sw.parent!r} is not a host "
                         "bridge or switch of this node")
    roots: dict[str, str] = {}
    for name in bridges:
        seen = [name]
        cur: str | None = name
        while cur is not None and bridges.get(cur) is not None:
            cur = bridges[cur]
            if cur in seen:
                problems.add((*path, "pcie", "switches"), f"PCIe switches form a loop: {' -> '.join(seen)}")
                cur = None
                break
            seen.append(cur)  # type: ignore[arg-type]
        if cur is not None and cur in bridges and bridges[cur] is None:
            roots[name] = cur
    return roots


@dataclass
class _PcieChild:
    what: str
    where: Path
    address: PciAddress
    buses: set[int] = field(default_factory=set)
    """Buses of the child's subtree (its own included)."""


def _check_pcie_buses(spec: s.NodeSpec, problems: Problems, path: Path) -> None:
    """The PCIe tree must be one that hardware can build (PCI Express Base spec, sections 7.2 and 7.5.1.3).

    A root port or a switch's downstream port leads to one link, so to one device: everything behind one port sits
    on that port's secondary bus with one device number (several functions at most). A switch's upstream port on
    bus B owns internal bus B+1 for its downstream ports, so what is below it starts at bus B+2. Subtrees of one
    parent occupy disjoint bus ranges, all in the parent's PCI domain.
    """
    children: dict[str, list[_PcieChild]] = defaultdict(list)
    for i, sw in enumerate(spec.pcie.switches):
        children[sw.parent].append(_PcieChild(f"PCIe switch {sw.name}", (*path, "pcie", "switches", i, "bus"),
                                              sw.bus))
    placed: list[tuple[str, int, str, PciAddress | None, str | None]] = [
        *(("gpu", i, g.name, g.bus, g.parent) for i, g in enumerate(spec.gpus)),
        *(("nic", i, n.name, n.bus, n.parent) for i, n in enumerate(spec.nics)),
        *(("nvswitch", i, w.name, w.bus, w.parent) for i, w in enumerate(spec.nvswitches)),
    ]
    for kind, i, name, bus, parent in placed:
        if bus is not None and parent is not None:
            children[parent].append(_PcieChild(f"{kind} {name}", (*path, f"{kind}s" if kind != "nvswitch" else
                                                                  "nvswitches", i, "bus"), bus))
    hbs = {hb.name: hb for hb in spec.pcie.host_bridges}
    sws = {sw.name: sw for sw in spec.pcie.switches}

    def subtree(name: str, own: PciAddress) -> set[int]:
        out = {own.bus}
        for c in children.get(name, []):
            out |= c.buses
        return out

    def fill(name: str) -> None:
        for c in children.get(name, []):
            sw_name = c.what.removeprefix("PCIe switch ") if c.what.startswith("PCIe switch ") else None
            if sw_name is not None:
                fill(sw_name)
                c.buses = subtree(sw_name, c.address) | {c.address.bus + 1}
            else:
                c.buses = {c.address.bus}

    for name in hbs:
        fill(name)
    for parent, kids in children.items():
        if parent in hbs:
            domain, first = hbs[parent].domain, hbs[parent].bus
            behind = [k for k in kids if not (k.address.domain == domain and k.address.bus == first)]
            lowest, label = first + 1, f"host bridge {parent} (bus {first:02x})"
        elif parent in sws:
            up = sws[parent].bus
            domain, behind = up.domain, kids
            lowest, label = up.bus + 2, f"PCIe switch {parent} (upstream port {up}, internal bus {up.bus + 1:02x})"
        else:
            continue
        for k in kids:
            if k.address.domain != domain:
                problems.add(k.where, f"{k.what} at {k.address} is in PCI domain {k.address.domain:04x} but its "
                             f"parent {label} is in domain {domain:04x}")
        by_bus: dict[int, list[_PcieChild]] = defaultdict(list)
        for k in behind:
            if k.address.bus < lowest:
                problems.add(k.where, f"{k.what} at {k.address} cannot sit below {label}: buses below it start at "
                             f"{lowest:02x}")
            by_bus[k.address.bus].append(k)
        for group in by_bus.values():
            slots = {k.address.device for k in group}
            if len(slots) > 1:
                a, b = group[0], next(k for k in group if k.address.device != group[0].address.device)
                problems.add(b.where, f"{b.what} at {b.address} and {a.what} at {a.address} are both on bus "
                             f"{a.address.bus:02x} below {label}: a port leads to one device, so give each its own "
                             "bus (or make them functions of one device)")
            switches = [k for k in group if k.what.startswith("PCIe switch ")]
            if switches and len(group) > 1:
                problems.add(switches[0].where, f"{switches[0].what} at {switches[0].address} shares bus "
                             f"{group[0].address.bus:02x} with another device below {label}")
        ranges = sorted((min(k.buses), max(k.buses), k) for k in behind if k.what.startswith("PCIe switch "))
        for (_, hi, a), (lo, _, b) in itertools.pairwise(ranges):
            if lo <= hi:
                problems.add(b.where, f"the buses below {b.what} overlap those below {a.what} (both under {label})")


def _template(
    key: int, group: str, spec: s.NodeSpec, path: Path, problems: Problems
) -> _Template:
    """Check a node spec once and derive what every node of its group shares. The checks run in a fixed order
    (a profile's problems are reported in it): NUMA ids, CPUs, distances, PCIe, devices, HBM nodes, NVLink budgets,
    C2C, bus numbers, CXL, board serials."""
    cpu = _cpu(spec.cpu)
    numa_specs = spec.numa.nodes
    ids = [n.id for n in numa_specs]
    for i, (a, b) in enumerate(itertools.pairwise(ids)):
        if b <= a:
            problems.add((*path, "numa", "nodes", i + 1, "id"), f"NUMA node ids must ascend ({a} then {b})")
    cpus = _numa_cpus(spec, cpu, problems, path)
    distances = _distances(spec.numa, problems, path)
    devices = _Devices(spec, _check_pcie(spec, set(ids), problems, path), problems, path)
    devices.check()
    hbm_numa = _hbm_numa(numa_specs, devices.gpu_numa, problems, path)
    numa = tuple(
        NumaNode(n.id, n.kind, n.socket, cpus.get(n.id, ()), n.memory, n.gpu, _initiator(n, spec, devices.gpu_skus))
        for n in numa_specs
    )
    wires = _local_wires(spec, [g.name for g in spec.gpus], devices.gpu_skus, devices.nvswitch_skus, problems, path)
    local_links = _check_link_budgets(spec, wires, devices, problems, path)
    for i, c in enumerate(spec.c2c):
        if c.gpu not in devices.gpu_numa:
            problems.add((*path, "c2c", i, "gpu"), f"GPU {c.gpu!r} does not exist on this node")
        if c.socket >= cpu.sockets:
            problems.add((*path, "c2c", i, "socket"), f"socket {c.socket} does not exist")
    if not problems:
        _check_pcie_buses(spec, problems, path)
    cxl = _cxl(spec, set(ids), {n.id: n.kind for n in numa_specs}, problems, path)
    _check_board_serials(spec.gpus, problems, path)
    return _Template(
        key=key,
        group=group,
        path=path,
        spec=spec,
        cpu=cpu,
        numa=numa,
        distances=distances,
        host_bridges=tuple(HostBridge(h.name, h.numa, h.domain, h.bus) for h in spec.pcie.host_bridges),
        switches=tuple(PcieSwitch(w.name, w.parent, w.bus) for w in spec.pcie.switches),
        gpu_specs=tuple(sorted(spec.gpus, key=lambda g: g.bus)),
        gpu_numa=devices.gpu_numa,
        gpu_skus=devices.gpu_skus,
        hbm_numa=hbm_numa,
        nvswitch_skus=devices.nvswitch_skus,
        wires=wires,
        local_links=local_links,
        cxl=cxl,
        nic_numa=devices.nic_numa,
    )


class _Devices:
    """A node's PCI devices (GPUs, NVSwitches, NICs) checked against the catalogue and each other: known SKUs,
    unique names and PCI addresses, parents that are this node's host bridges or switches. Keeps what the rest of
    the template needs: each device's SKU and NUMA node."""

    def __init__(self, spec: s.NodeSpec, roots: dict[str, str], problems: Problems, path: Path):
        self.spec = spec
        self.roots = roots
        """PCIe parent (host bridge or switch) -> its host bridge."""
        self.problems = problems
        self.path = path
        self.hb_numa = {hb.name: hb.numa for hb in spec.pcie.host_bridges}
        self.addresses: dict[PciAddress, Path] = {}
        self.names: dict[str, Path] = {}
        self.gpu_skus: dict[str, GpuSku] = {}
        self.gpu_numa: dict[str, int] = {}
        self.nvswitch_skus: dict[str, NVSwitchSku] = {}
        self.nic_numa: dict[str, int] = {}

    def check(self) -> None:
        for i, sw in enumerate(self.spec.pcie.switches):
            self._claim(sw.bus, (*self.path, "pcie", "switches", i, "bus"))
        self._gpus()
        self._nvswitches()
        self._nics()

    def _claim(self, addr: PciAddress, where: Path) -> None:
        if addr in self.addresses:
            self.problems.add(where, f"PCI address {addr} is also used at {_fmt(self.addresses[addr])}")
        else:
            self.addresses[addr] = where

    def _claim_name(self, name: str, where: Path) -> None:
        if name in self.names:
            self.problems.add(where, f"duplicate device name {name!r} (also at {_fmt(self.names[name])})")
        self.names[name] = where

    def _numa_of(self, parent: str, where: Path) -> int:
        if parent not in self.roots:
            self.problems.add(where, f"PCIe parent {parent!r} is not a host bridge or switch of this node")
            return 0
        return self.hb_numa[self.roots[parent]]

    def _gpus(self) -> None:
        known = catalogue().gpus
        for i, g in enumerate(self.spec.gpus):
            where = (*self.path, "gpus", i)
            self._claim_name(g.name, (*where, "name"))
            self._claim(g.bus, (*where, "bus"))
            self.gpu_numa[g.name] = self._numa_of(g.parent, (*where, "parent"))
            sku = known.get(g.sku)
            if sku is None:
                self.problems.add((*where, "sku"), f"unknown GPU SKU {g.sku!r} (known: {', '.join(sorted(known))})")
                continue
            self.gpu_skus[g.name] = sku
            _check_mig(g, sku, self.problems, where)

    def _nvswitches(self) -> None:
        known = catalogue().nvswitches
        for i, nvsw in enumerate(self.spec.nvswitches):
            where = (*self.path, "nvswitches", i)
            self._claim_name(nvsw.name, (*where, "name"))
            if nvsw.bus is not None and nvsw.parent is not None:
                self._claim(nvsw.bus, (*where, "bus"))
                self._numa_of(nvsw.parent, (*where, "parent"))
            nsku = known.get(nvsw.sku)
            if nsku is None:
                self.problems.add((*where, "sku"), f"unknown NVSwitch SKU {nvsw.sku!r} (known: "
                                  f"{', '.join(sorted(known))})")
            else:
                self.nvswitch_skus[nvsw.name] = nsku

    def _nics(self) -> None:
        known = catalogue().nics
        netdevs: set[str] = set()
        for i, nic in enumerate(self.spec.nics):
            where = (*self.path, "nics", i)
            self._claim_name(nic.name, (*where, "name"))
            self._claim(nic.bus, (*where, "bus"))
            if nic.netdev in netdevs:
                self.problems.add((*where, "netdev"), f"duplicate network interface name {nic.netdev!r}")
            netdevs.add(nic.netdev)
            self.nic_numa[nic.name] = self._numa_of(nic.parent, (*where, "parent"))
            if nic.sku not in known:
                self.problems.add((*where, "sku"), f"unknown NIC SKU {nic.sku!r} (known: {', '.join(sorted(known))})")


def _hbm_numa(numa_specs: Sequence[s.NumaNodeSpec], gpu_numa: dict[str, int], problems: Problems,
              path: Path) -> dict[str, int]:
    """GPU -> its HBM NUMA node: each HBM node names an existing GPU, and a GPU has at most one."""
    hbm_numa: dict[str, int] = {}
    for i, n in enumerate(numa_specs):
        if n.kind == "hbm" and n.gpu is not None:
            if n.gpu not in gpu_numa:
                problems.add((*path, "numa", "nodes", i, "gpu"), f"GPU {n.gpu!r} does not exist on this node")
            elif n.gpu in hbm_numa:
                problems.add((*path, "numa", "nodes", i, "gpu"), f"GPU {n.gpu!r} already has HBM NUMA node "
                             f"{hbm_numa[n.gpu]}")
            else:
                hbm_numa[n.gpu] = n.id
    return hbm_numa


def _check_link_budgets(spec: s.NodeSpec, wires: Sequence[_Wire], devices: _Devices, problems: Problems,
                        path: Path) -> dict[str, int]:
    """No GPU wired with more NVLinks than its SKU has, no NVSwitch with more than its ports; returns each GPU's
    count of local links."""
    local_links: dict[str, int] = defaultdict(int)
    switch_links: dict[str, int] = defaultdict(int)
    for w in wires:
        local_links[w.a] += w.count
        if w.b_is_gpu:
            local_links[w.b] += w.count
        else:
            switch_links[w.b] += w.count
    for i, g in enumerate(spec.gpus):
        sku = devices.gpu_skus.get(g.name)
        if sku and local_links[g.name] > sku.nvlink.links:
            problems.add((*path, "gpus", i), f"GPU {g.name} is wired with {local_links[g.name]} NVLinks but "
                         f"{sku.id} has {sku.nvlink.links}")
    for i, nvsw in enumerate(spec.nvswitches):
        nsku = devices.nvswitch_skus.get(nvsw.name)
        if nsku and switch_links[nvsw.name] > nsku.ports:
            problems.add((*path, "nvswitches", i), f"NVSwitch {nvsw.name} is wired with {switch_links[nvsw.name]} "
                         f"links but {nsku.id} has {nsku.ports} ports")
    return dict(local_links)


def _check_board_serials(gpus: Sequence[s.GpuSpec], problems: Problems, path: Path) -> None:
    """GPUs of one board print one serial (nvml.h: the serial is "printed directly on the board"), so two GPUs
    naming the same board may not give it different serials."""
    given: dict[str, tuple[str, str]] = {}
    for i, g in enumerate(gpus):
        if g.board is None or g.serial is None:
            continue
        first = given.setdefault(g.board, (g.serial, g.name))
        if first[0] != g.serial:
            problems.add((*path, "gpus", i, "serial"), f"GPU {g.name} gives board {g.board} serial {g.serial} but "
                         f"{first[1]} gives it {first[0]}")


def _board_serials(gpus: Sequence[s.GpuSpec], uuids: Sequence[str]) -> list[str]:
    """Each GPU's serial (``gpus`` in NVML order, ``uuids`` theirs): the serial of its board.

    GPUs that name one board share its serial, as the real GB200/GB300 captures' compute boards do (two GPUs each);
    a GPU naming none is a board of its own. A board's serial is the one a GPU of it gives, else derived from the
    UUID of its first GPU, so a board of one GPU keeps the serial it always had."""
    def board(g: s.GpuSpec) -> tuple[str, str]:
        return ("board", g.board) if g.board is not None else ("gpu", g.name)

    given = {board(g): g.serial for g in gpus if g.serial is not None}
    serial_of: dict[tuple[str, str], str] = {}
    for g, uid in zip(gpus, uuids, strict=True):
        serial_of.setdefault(board(g), given.get(board(g)) or str(1650000000000 + _stable_int(uid, digits=10)))
    return [serial_of[board(g)] for g in gpus]


def _fmt(path: Path) -> str:
    from fakehw.model.errors import format_path

    return format_path(path)


def _check_mig(g: s.GpuSpec, sku: GpuSku, problems: Problems, where: Path) -> None:
    if g.mig is None:
        return
    if sku.mig is None:
        problems.add((*where, "mig"), f"{sku.id} does not support MIG")
        return
    profiles = []
    for j, name in enumerate(g.mig.instances):
        profile = sku.mig.profile(name)
        if profile is None:
            known = ", ".join(p.name for p in sku.mig.profiles)
            problems.add((*where, "mig", "instances", j), f"{sku.id} has no MIG profile {name!r} (known: {known})")
            continue
        profiles.append(profile)
    if len(profiles) == len(g.mig.instances):
        try:
            place_in_order(sku.mig, profiles)
        except MigGeometryError as exc:
            problems.add((*where, "mig", "instances"), f"these GPU instances cannot all be created on a {sku.id}: "
                         f"{exc} (the GPU has {sku.mig.max_instances} compute and {sku.mig.memory_slices} memory "
                         f"slices; see fakehw show --catalogue)")
    if g.mig.instances and not g.mig.enabled:
        problems.add((*where, "mig", "instances"), "MIG instances listed but MIG is not enabled")


def _local_wires(
    spec: s.NodeSpec,
    gpu_names: list[str],
    gpu_skus: dict[str, GpuSku],
    nvswitch_skus: dict[str, NVSwitchSku],
    problems: Problems,
    path: Path,
) -> tuple[_Wire, ...]:
    sw_names = [w.name for w in spec.nvswitches]
    wires: list[_Wire] = []
    for i, link in enumerate(spec.nvlinks):
        where = (*path, "nvlinks", i)
        sources = _match(link.from_, gpu_names, "GPU", problems, (*where, "from"))
        targets = _match(link.to, gpu_names + sw_names, "GPU or NVSwitch", problems, (*where, "to"))
        pairs: set[frozenset[str]] = set()
        for a in sources:
            for b in targets:
                if a == b:
                    continue
                b_is_gpu = b in gpu_skus or b in gpu_names
                if b_is_gpu:
                    pair = frozenset((a, b))
                    if pair in pairs:
                        continue
                    pairs.add(pair)
                else:
                    _check_generation(gpu_skus.get(a), nvswitch_skus.get(b), problems, where)
                wires.append(_Wire(a, b, b_is_gpu, link.count, link.state == "up"))
        if sources and targets and not wires:
            problems.add(where, "these patterns only pair each GPU with itself")
    return tuple(wires)


def _check_generation(gpu: GpuSku | None, sw: NVSwitchSku | None, problems: Problems, where: Path) -> None:
    if gpu and sw and gpu.nvlink.generation != sw.nvlink_generation:
        problems.add(where, f"{gpu.id} speaks NVLink {gpu.nvlink.generation} but {sw.id} is an NVLink "
                     f"{sw.nvlink_generation} switch")


def _memdev_qos(m: CxlMemdev, given: dict[str, int | None], windows: list[CxlWindow]) -> int:
    """A memdev's QoS class: the profile's, else the QTG of the first window over its host bridge."""
    own = given.get(m.name)
    if own is not None:
        return own
    return next((w.qos_class for w in windows if m.host_bridge in w.targets), 0)


def _cxl(spec: s.NodeSpec, numa_ids: set[int], numa_kind: dict[int, str], problems: Problems, path: Path) -> Cxl:
    c = spec.cxl
    cpath = (*path, "cxl")
    cat = catalogue().cxl_memdevs
    ports: dict[str, str] = {}  # port name -> host bridge
    occupied: dict[str, Path] = {}
    hbs: list[CxlHostBridge] = []
    names: set[str] = set()
    for i, hb in enumerate(c.host_bridges):
        if hb.name in names:
            problems.add((*cpath, "hostBridges", i, "name"), f"duplicate CXL name {hb.name!r}")
        names.add(hb.name)
        if hb.numa not in numa_ids:
            problems.add((*cpath, "hostBridges", i, "numa"), f"NUMA node {hb.numa} does not exist")
        rps = tuple(f"{hb.name}.rp{k}" for k in range(hb.root_ports))
        ports.update(dict.fromkeys(rps, hb.name))
        hbs.append(CxlHostBridge(hb.name, hb.uid, hb.numa, rps, tuple(hb.root_port_ids or range(hb.root_ports)),
                                 hb.decoders, hb.restricted))
    switches: list[CxlSwitch] = []
    behind: set[str] = set()
    restricted = {rp for h in hbs if h.restricted for rp in h.root_ports}
    for i, sw in enumerate(c.switches):
        where = (*cpath, "switches", i)
        if sw.name in names:
            problems.add((*where, "name"), f"duplicate CXL name {sw.name!r}")
        names.add(sw.name)
        if sw.parent not in ports:
            problems.add((*where, "parent"), f"CXL port {sw.parent!r} does not exist (ports are "
                         "<hostbridge>.rp<N> or <switch>.dp<N>)")
            continue
        if sw.parent in occupied:
            problems.add((*where, "parent"), f"CXL port {sw.parent} is already used by {_fmt(occupied[sw.parent])}")
        if sw.parent in restricted:
            problems.add((*where, "parent"), f"{sw.parent} belongs to a restricted host bridge (RCH): only a memory "
                         "device attaches there")
        occupied[sw.parent] = where
        dps = tuple(f"{sw.name}.dp{k}" for k in range(sw.downstream_ports))
        ports.update(dict.fromkeys(dps, ports[sw.parent]))
        behind.update(dps)
        switches.append(CxlSwitch(sw.name, sw.parent, dps, tuple(sw.downstream_port_ids or range(sw.downstream_ports)),
                                  sw.decoders))
    memdevs: list[CxlMemdev] = []
    for i, m in enumerate(c.memdevs):
        where = (*cpath, "memdevs", i)
        if m.name in names:
            problems.add((*where, "name"), f"duplicate CXL name {m.name!r}")
        names.add(m.name)
        sku = cat.get(m.sku)
        if sku is None:
            problems.add((*where, "sku"), f"unknown CXL memory device SKU {m.sku!r} (known: {', '.join(cat)})")
            continue
        if m.parent not in ports:
            problems.add((*where, "parent"), f"CXL port {m.parent!r} does not exist")
            continue
        if m.parent in occupied:
            problems.add((*where, "parent"), f"CXL port {m.parent} is already used by {_fmt(occupied[m.parent])}")
        occupied[m.parent] = where
        serial = m.serial if m.serial is not None else _stable_int(m.name, m.parent, digits=12)
        if m.numa is not None and m.numa not in numa_ids:
            problems.add((*where, "numa"), f"NUMA node {m.numa} does not exist")
        if m.parent in restricted and m.pmem_size:
            problems.add((*where, "pmemSize"), "a device behind a restricted host bridge (RCD) is volatile only")
        memdevs.append(
            CxlMemdev(m.name, sku, m.parent, ports[m.parent], m.parent in behind, m.ram_size, m.pmem_size, serial,
                      decoders=m.decoders, numa=m.numa)
        )
    hb_names = {h.name for h in hbs}
    windows: list[CxlWindow] = []
    for i, w in enumerate(c.windows):
        where = (*cpath, "windows", i)
        for j, t in enumerate(w.targets):
            if t not in hb_names:
                problems.add((*where, "targets", j), f"CXL host bridge {t!r} does not exist")
        if len(w.targets) not in s.CXL_INTERLEAVE_WAYS:
            problems.add((*where, "targets"), f"{len(w.targets)}-way interleave is not allowed "
                         f"(ways: {', '.join(map(str, s.CXL_INTERLEAVE_WAYS))})")
        if w.name in names:
            problems.add((*where, "name"), f"duplicate CXL name {w.name!r}")
        names.add(w.name)
        if w.numa is not None and numa_kind.get(w.numa) != "cxl":
            problems.add((*where, "numa"), f"NUMA node {w.numa} is not a kind: cxl node of this host")
        windows.append(CxlWindow(w.name, i, w.size, tuple(w.targets), w.interleave_granularity, w.ram, w.pmem,
                                 w.numa, w.qos_class, w.arithmetic))
    qos = {m.name: m.qos_class for m in c.memdevs}
    memdevs = [dataclasses.replace(m, qos_class=_memdev_qos(m, qos, windows)) for m in memdevs]
    by_window = {w.name: w for w in windows}
    by_dev = {m.name: m for m in memdevs}
    used: dict[tuple[str, str], str] = {}
    regions: list[CxlRegion] = []
    for i, r in enumerate(c.regions):
        where = (*cpath, "regions", i)
        region = _region(r, by_window, by_dev, used, numa_kind, problems, where)
        if region is not None:
            regions.append(region)
    windows, regions = _window_numa(windows, regions, problems, cpath)
    return Cxl(tuple(hbs), tuple(switches), tuple(memdevs), tuple(windows), tuple(regions), c.platform,
               c.hotplug_online)


def _window_numa(
    windows: list[CxlWindow], regions: list[CxlRegion], problems: Problems, cpath: Path
) -> tuple[list[CxlWindow], list[CxlRegion]]:
    """Give every window the NUMA node its RAM onlines into, and every RAM region its window's node.

    A window without ``numa`` takes the node of a RAM region committed on it at boot; a region without ``numa``
    takes its window's. Regions created at run time then know where their memory goes.
    """
    by_name = {w.name: w for w in windows}
    numa: dict[str, int | None] = {w.name: w.numa for w in windows}
    for i, r in enumerate(regions):
        if r.mode != "ram" or r.numa is None:
            continue
        have = numa.get(r.window)
        if have is None:
            numa[r.window] = r.numa
        elif have != r.numa:
            problems.add((*cpath, "regions", i, "numa"), f"region {r.name} onlines into NUMA node {r.numa} but "
                         f"window {r.window} maps its RAM to NUMA node {have}")
    out_windows = [dataclasses.replace(w, numa=numa[w.name]) if w.ram else w for w in windows]
    out_regions = [
        dataclasses.replace(r, numa=numa.get(r.window)) if r.mode == "ram" and r.numa is None
        and by_name.get(r.window) is not None else r
        for r in regions
    ]
    return out_windows, out_regions


def _region(
    r: s.CxlRegionSpec,
    windows: dict[str, CxlWindow],
    devs: dict[str, CxlMemdev],
    used: dict[tuple[str, str], str],
    numa_kind: dict[int, str],
    problems: Problems,
    where: Path,
) -> CxlRegion | None:
    window = windows.get(r.window)
    if window is None:
        problems.add((*where, "window"), f"CXL window {r.window!r} does not exist")
        return None
    if r.interleave_granularity not in s.CXL_GRANULARITIES:
        problems.add((*where, "interleaveGranularity"), "must be a power of two from 256 to 16384")
    if len(r.targets) not in s.CXL_INTERLEAVE_WAYS:
        problems.add((*where, "targets"), f"{len(r.targets)}-way interleave is not allowed")
    if len(set(r.targets)) != len(r.targets):
        problems.add((*where, "targets"), "a memory device is listed twice")
    if (r.mode == "ram" and not window.ram) or (r.mode == "pmem" and not window.pmem):
        problems.add((*where, "mode"), f"window {window.name} does not decode {r.mode} memory")
    members: list[CxlMemdev] = []
    for j, t in enumerate(r.targets):
        dev = devs.get(t)
        if dev is None:
            problems.add((*where, "targets", j), f"CXL memory device {t!r} does not exist")
            continue
        if dev.host_bridge not in window.targets:
            problems.add((*where, "targets", j), f"{t} sits under host bridge {dev.host_bridge}, which window "
                         f"{window.name} does not interleave ({', '.join(window.targets)})")
        if (t, r.mode) in used:
            problems.add((*where, "targets", j), f"{r.mode} capacity of {t} is already in region {used[(t, r.mode)]}")
        used[(t, r.mode)] = r.name
        capacity = dev.ram_size if r.mode == "ram" else dev.pmem_size
        if capacity == 0:
            problems.add((*where, "targets", j), f"{t} has no {r.mode} capacity")
        members.append(dev)
    if r.numa is not None and numa_kind.get(r.numa) != "cxl":
        problems.add((*where, "numa"), f"NUMA node {r.numa} is not a kind: cxl node of this host")
    if not members:
        return None
    per_hb = [sum(1 for m in members if m.host_bridge == hb) for hb in window.targets]
    if len(members) == len(r.targets) and len(set(per_hb)) > 1:
        spread = ", ".join(f"{n} under {hb}" for hb, n in zip(window.targets, per_hb, strict=True))
        problems.add((*where, "targets"), f"window {window.name} interleaves {len(window.targets)} host bridges; "
                     f"the region's targets must spread evenly over them (got {spread})")
    if len(window.targets) > 1 and r.interleave_granularity != window.interleave_granularity:
        problems.add((*where, "interleaveGranularity"), f"window {window.name} interleaves host bridges at "
                     f"{window.interleave_granularity} bytes; a region on it must use that granularity")
    size = len(r.targets) * min((m.ram_size if r.mode == "ram" else m.pmem_size) for m in members)
    if r.size is not None:
        unit = 256 * 2**20 * len(r.targets)
        if r.size <= 0 or r.size % unit or r.size > size:
            problems.add((*where, "size"), f"a {len(r.targets)}-way region is a multiple of {unit} bytes up to its "
                         f"targets' capacity ({size} bytes), not {r.size}")
        else:
            size = r.size
    if size > window.size:
        problems.add(where, f"region of {size} bytes does not fit window {window.name} ({window.size} bytes)")
    return CxlRegion(r.name, r.window, tuple(r.targets), r.interleave_granularity, r.mode, size, r.numa)


# --------------------------------------------------------------------------------------------------- system


@dataclass
class _PortBook:
    """Assigns NVLink port numbers in declaration order, for GPUs and switches alike."""

    ports: dict[str, list[NVLinkPort]] = field(default_factory=lambda: defaultdict(list))

    def connect(
        self,
        a: str,
        a_addr: PciAddress,
        b: str,
        b_kind: str,
        b_addr: PciAddress,
        count: int,
        up: bool,
        bandwidth: float,
    ) -> None:
        a_ports, b_ports = self.ports[a], self.ports[b]
        for _ in range(count):
            pa, pb = len(a_ports), len(b_ports)
            a_ports.append(NVLinkPort(pa, b_kind, b, pb, b_addr, up, bandwidth))  # type: ignore[arg-type]
            b_ports.append(NVLinkPort(pb, "gpu", a, pa, a_addr, up, bandwidth))


def _synthetic_address(index: int) -> PciAddress:
    """Where a switch chip that is not on the node's PCI bus is said to be (NVLink remote PCI info)."""
    return PciAddress(0x100 + index, 0, 0, 0)


def expand(spec: s.ProfileSpec, resolve_profile: ResolveProfile, digest: str = "") -> System:
    """Expand a profile into a :class:`System`; raise :class:`ProfileError` listing every problem found."""
    problems = Problems()
    groups = list(spec.groups)
    if spec.nodes is not None:
        if len(groups) != 1:
            problems.add(("nodes",), f"nodes applies to a profile with one group; this one has {len(groups)}")
        else:
            groups = [groups[0].model_copy(update={"count": spec.nodes})]
    if sum(g.count for g in groups) > s.MAX_NODES:
        problems.add(("groups",), f"more than {s.MAX_NODES} nodes in all")
    problems.raise_if_any()

    templates: list[_Template] = []
    group_names: dict[str, int] = {}
    for gi, group in enumerate(groups):
        gpath: Path = ("groups", gi)
        if group.name in group_names:
            problems.add((*gpath, "name"), f"duplicate group name {group.name!r}")
        group_names[group.name] = gi
        node_spec, npath = _group_node(group, gpath, resolve_profile, problems)
        if node_spec is None:
            continue
        templates.append(_template(gi, group.name, node_spec, npath, problems))
    problems.raise_if_any()
    _check_driver(spec.driver, templates, problems)
    problems.raise_if_any()

    book = _PortBook()
    addr: dict[str, PciAddress] = {}
    # (node name, template, group index, node index)
    members: list[tuple[str, _Template, int]] = []
    for tpl, group in zip(templates, groups, strict=True):
        for k in range(group.count):
            node_name = f"{group.name}-{k}"
            members.append((node_name, tpl, k))
            for g in tpl.gpu_specs:
                addr[f"{node_name}/{g.name}"] = g.bus
            for si, sw in enumerate(tpl.spec.nvswitches):
                addr[f"{node_name}/{sw.name}"] = sw.bus or _synthetic_address(si)
            _wire_local(book, node_name, tpl, addr)

    domains, node_domain, domain_switches = _domains(spec, templates, members, book, addr, problems)
    problems.raise_if_any()

    pools = _cxl_pools(spec, templates, members, problems)
    problems.raise_if_any()
    _check_cxl_numa(members, pools, problems)
    problems.raise_if_any()

    nodes: list[Node] = []
    for node_name, tpl, k in members:
        nodes.append(_node(spec, node_name, tpl, k, book, node_domain.get(node_name), pools, problems))
    _check_uuids(nodes, {t.group: t for t in templates}, problems)
    problems.raise_if_any()

    finished_domains = tuple(
        NVLinkDomain(
            d.name,
            d.spec_name,
            d.nodes,
            tuple(
                NVSwitch(sw_id, sw_id.split("/", 1)[1], sku, addr[sw_id], None, tuple(book.ports.get(sw_id, ())))
                for sw_id, sku in domain_switches[d.name]
            ),
            d.fabric,
        )
        for d in domains
    )
    return System(
        name=spec.name,
        description=spec.description,
        projection=spec.projection,
        driver=Driver(spec.driver.version, spec.driver.cuda),
        seed=spec.seed,
        nodes=tuple(nodes),
        nvlink_domains=finished_domains,
        cxl_pools=tuple(pools.values()),
        digest=digest,
    )


def _check_driver(driver: s.DriverSpec, templates: Sequence[_Template], problems: Problems) -> None:
    """Every GPU must be supported by the driver's branch (a B200 needs 570 or newer): one problem per SKU."""
    branch = branch_of(driver.version).number
    seen: set[str] = set()
    for tpl in templates:
        for g in tpl.gpu_specs:
            sku = tpl.gpu_skus.get(g.name)
            if sku is None or sku.id in seen or sku.min_driver_branch <= branch:
                continue
            seen.add(sku.id)
            problems.add(("driver", "version"), f"driver {driver.version} (branch {branch}) cannot run {sku.name} "
                                                f"({sku.id}, {g.name} of group {tpl.group}): it needs branch "
                                                f"{sku.min_driver_branch} or newer")


def _group_node(
    group: s.GroupSpec, gpath: Path, resolve_profile: ResolveProfile, problems: Problems
) -> tuple[s.NodeSpec | None, Path]:
    if group.node is not None:
        return group.node, (*gpath, "node")
    assert group.from_ is not None
    try:
        other = resolve_profile(group.from_)
    except Exception as exc:  # a ProfileError or an unknown name: both are this document's problem
        problems.add((*gpath, "from"), f"cannot use profile {group.from_!r}: {exc}")
        return None, gpath
    node = other.groups[0].node
    if node is None:
        problems.add((*gpath, "from"), f"profile {group.from_!r} borrows its node from another profile")
        return None, gpath
    if group.override is None:
        return node, (*gpath, "from")
    merged = merge_documents(node.model_dump(mode="json", by_alias=True, exclude_unset=True), group.override)
    try:
        return s.NodeSpec.model_validate(merged), (*gpath, "override")
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and "[" in x))
            problems.add((*gpath, "override", *loc), err["msg"].removeprefix("Value error, "))
        return None, gpath


def _wire_local(book: _PortBook, node: str, tpl: _Template, addr: dict[str, PciAddress]) -> None:
    for w in tpl.wires:
        a, b = f"{node}/{w.a}", f"{node}/{w.b}"
        bw = tpl.gpu_skus[w.a].nvlink.link_bandwidth_gbs if w.a in tpl.gpu_skus else 0.0
        book.connect(a, addr[a], b, "gpu" if w.b_is_gpu else "switch", addr[b], w.count, w.up, bw)


@dataclass(frozen=True)
class _DomainInstance:
    name: str
    spec_name: str
    nodes: tuple[str, ...]
    fabric: Fabric | None


def _domains(
    spec: s.ProfileSpec,
    templates: list[_Template],
    members: list[tuple[str, _Template, int]],
    book: _PortBook,
    addr: dict[str, PciAddress],
    problems: Problems,
) -> tuple[list[_DomainInstance], dict[str, str], dict[str, list[tuple[str, NVSwitchSku]]]]:
    cat = catalogue()
    by_group = {t.group: t for t in templates}
    claimed: dict[str, str] = {}
    instances: list[_DomainInstance] = []
    node_domain: dict[str, str] = {}
    switches: dict[str, list[tuple[str, NVSwitchSku]]] = {}
    for di, dom in enumerate(spec.nvlink_domains):
        dpath: Path = ("nvlinkDomains", di)
        tpls: list[_Template] = []
        for j, g in enumerate(dom.groups):
            if g not in by_group:
                problems.add((*dpath, "groups", j), f"group {g!r} does not exist")
            elif g in claimed:
                problems.add((*dpath, "groups", j), f"group {g!r} is already in NVLink domain {claimed[g]}")
            else:
                claimed[g] = dom.name
                tpls.append(by_group[g])
        sku = cat.nvswitches.get(dom.switches.sku)
        if sku is None:
            problems.add((*dpath, "switches", "sku"), f"unknown NVSwitch SKU {dom.switches.sku!r}")
        if not tpls or sku is None:
            continue
        sw_names = [f"{dom.switches.name_prefix}{k}" for k in range(dom.switches.count)]
        # Resolve link patterns once per template.
        plans: dict[int, list[tuple[str, str, int, bool]]] = {}
        for tpl in tpls:
            gpu_names = [g.name for g in tpl.spec.gpus]
            plan: list[tuple[str, str, int, bool]] = []
            for li, link in enumerate(dom.links):
                lpath = (*dpath, "links", li)
                for a in _match(link.from_, gpu_names, f"GPU of group {tpl.group}", problems, (*lpath, "from")):
                    _check_generation(tpl.gpu_skus.get(a), sku, problems, lpath)
                    for b in _match(link.to, sw_names, "domain switch", problems, (*lpath, "to")):
                        plan.append((a, b, link.count, link.state == "up"))
            plans[tpl.key] = plan
            per_gpu: dict[str, int] = defaultdict(int)
            for a, _, count, _ in plan:
                per_gpu[a] += count
            for gi, gspec in enumerate(tpl.spec.gpus):
                gsku = tpl.gpu_skus.get(gspec.name)
                if gsku is None:
                    continue
                total = tpl.local_links.get(gspec.name, 0) + per_gpu[gspec.name]
                if total > gsku.nvlink.links:
                    problems.add((*tpl.path, "gpus", gi), f"GPU {gspec.name} is wired with {total} NVLinks (local "
                                 f"and domain {dom.name}) but {gsku.id} has {gsku.nvlink.links}")
                elif dom.require_full_wiring and total < gsku.nvlink.links:
                    problems.add((*dpath, "links"), f"GPU {gspec.name} of group {tpl.group} is wired with {total} of "
                                 f"its {gsku.nvlink.links} NVLinks; domain {dom.name} requires full wiring")
        if problems:
            continue
        dom_nodes = [(n, t) for n, t, _ in members if t.group in {x.group for x in tpls}]
        size = dom.nodes_per_domain or len(dom_nodes)
        if len(dom_nodes) % size:
            problems.add((*dpath, "nodesPerDomain"), f"{len(dom_nodes)} nodes do not split into domains of {size}")
            continue
        count = len(dom_nodes) // size
        if dom.fabric and dom.fabric.cluster_uuid and count > 1:
            problems.add((*dpath, "fabric", "clusterUuid"), f"one clusterUuid given for {count} domains")
            continue
        for k in range(count):
            inst = f"{dom.name}-{k}" if count > 1 else dom.name
            chunk = dom_nodes[k * size : (k + 1) * size]
            fabric = None
            if dom.fabric is not None:
                cluster = dom.fabric.cluster_uuid or str(stable_uuid(spec.name, "fabric", inst))
                fabric = Fabric(cluster, dom.fabric.clique_id)
            sw_ids = []
            for m, name in enumerate(sw_names):
                sw_id = f"{inst}/{name}"
                addr[sw_id] = _synthetic_address(m)
                sw_ids.append((sw_id, sku))
            switches[inst] = sw_ids
            load: dict[str, int] = defaultdict(int)
            for node_name, tpl in chunk:
                node_domain[node_name] = inst
                for a, b, cnt, up in plans[tpl.key]:
                    gid, sid = f"{node_name}/{a}", f"{inst}/{b}"
                    book.connect(gid, addr[gid], sid, "switch", addr[sid], cnt, up,
                                 tpl.gpu_skus[a].nvlink.link_bandwidth_gbs)
                    load[b] += cnt
            for name, used in load.items():
                if used > sku.ports:
                    problems.add((*dpath, "links"), f"switch {name} of domain {inst} needs {used} ports; {sku.id} "
                                 f"has {sku.ports}")
            instances.append(_DomainInstance(inst, dom.name, tuple(n for n, _ in chunk), fabric))
    return instances, node_domain, switches


def _cxl_pools(
    spec: s.ProfileSpec,
    templates: list[_Template],
    members: list[tuple[str, _Template, int]],
    problems: Problems,
) -> dict[str, CxlPool]:
    by_group = {t.group: t for t in templates}
    pools: dict[str, CxlPool] = {}
    for pi, pool in enumerate(spec.cxl_pools):
        ppath: Path = ("cxlPools", pi)
        if pool.name in pools:
            problems.add((*ppath, "name"), f"duplicate CXL pool {pool.name!r}")
        nodes: list[str] = []
        for j, g in enumerate(pool.groups):
            tpl = by_group.get(g)
            if tpl is None:
                problems.add((*ppath, "groups", j), f"group {g!r} does not exist")
                continue
            ports = {p for hb in tpl.cxl.host_bridges for p in hb.root_ports}
            ports |= {p for sw in tpl.cxl.switches for p in sw.downstream_ports}
            taken = {m.parent for m in tpl.cxl.memdevs} | {sw.parent for sw in tpl.cxl.switches}
            restricted = {p for hb in tpl.cxl.host_bridges if hb.restricted for p in hb.root_ports}
            if pool.host_port not in ports:
                problems.add((*ppath, "hostPort"), f"group {g} has no CXL port {pool.host_port!r}")
            elif pool.host_port in restricted:
                problems.add((*ppath, "hostPort"), f"CXL port {pool.host_port} of group {g} is a restricted host "
                             "bridge's (RCH, CXL 1.1: one device of its own); a pooled device needs a CXL 2.0 port")
            elif pool.host_port in taken:
                problems.add((*ppath, "hostPort"), f"CXL port {pool.host_port} of group {g} is already in use")
            nodes.extend(n for n, t, _ in members if t.group == g)
        if pool.capacity % pool.logical_devices:
            problems.add((*ppath, "capacity"), f"capacity does not split into {pool.logical_devices} logical devices")
        assigned: list[tuple[int, str]] = []
        for ld, node in sorted(pool.assignments.items()):
            if not ld.isdigit() or int(ld) >= pool.logical_devices:
                problems.add((*ppath, "assignments", ld), f"logical device {ld!r} does not exist "
                             f"(0..{pool.logical_devices - 1})")
            elif node not in nodes:
                problems.add((*ppath, "assignments", ld), f"node {node!r} is not a member of pool {pool.name}")
            else:
                assigned.append((int(ld), node))
        window = _pool_window(pool, [by_group[g] for g in pool.groups if g in by_group], problems, ppath)
        pools[pool.name] = CxlPool(pool.name, tuple(nodes), pool.host_port, pool.capacity, pool.logical_devices,
                                   tuple(sorted(assigned)), window)
    return pools


def _pool_window(pool: s.CxlPoolSpec, tpls: list[_Template], problems: Problems, ppath: Path) -> str:
    """The window that decodes the pooled device on every member host (one name for all of them).

    Pooled memory reaches a host through its host port, so the window must interleave only that port's host
    bridge, decode RAM, hold the whole device and name the NUMA node the memory onlines into; no region may be
    committed on it at boot (the pool owns it).
    """
    chosen: str | None = None
    for tpl in tpls:
        cxl = tpl.cxl
        hb = next((h.name for h in cxl.host_bridges if pool.host_port in h.root_ports), None)
        if hb is None:
            sw = next((w for w in cxl.switches if pool.host_port in w.downstream_ports), None)
            hb = next((h.name for h in cxl.host_bridges if sw is not None and sw.parent in h.root_ports), None)
        if hb is None:
            return ""  # the host port problem is reported already
        boot = {r.window for r in cxl.regions}
        if pool.window is not None:
            window = next((w for w in cxl.windows if w.name == pool.window), None)
            if window is None:
                problems.add((*ppath, "window"), f"group {tpl.group} has no CXL window {pool.window!r}")
                continue
        else:
            fits = [w for w in cxl.windows if w.ram and w.targets == (hb,) and w.name not in boot]
            if len(fits) != 1:
                problems.add((*ppath, "window"), f"group {tpl.group} has {len(fits)} RAM windows whose only target "
                             f"is {hb} and that hold no boot region; name the pool's window with window: NAME")
                continue
            window = fits[0]
        if window.targets != (hb,) or not window.ram:
            problems.add((*ppath, "window"), f"window {window.name} of group {tpl.group} must decode RAM of host "
                         f"bridge {hb} alone to map the pooled device")
        elif window.name in boot:
            problems.add((*ppath, "window"), f"window {window.name} of group {tpl.group} holds a boot region; the "
                         "pooled device needs a window of its own")
        elif window.size < pool.capacity:
            problems.add((*ppath, "window"), f"window {window.name} ({window.size} bytes) cannot map the pool's "
                         f"{pool.capacity} bytes")
        elif window.numa is None:
            problems.add((*ppath, "window"), f"window {window.name} of group {tpl.group} has no NUMA node for "
                         "the pooled memory; give it numa: N (a kind: cxl node)")
        if chosen is not None and window.name != chosen:
            problems.add((*ppath, "window"), f"member groups decode the pool with different windows ({chosen}, "
                         f"{window.name}); name one with window: NAME")
        chosen = window.name
    return chosen or ""


def _check_cxl_numa(members: list[tuple[str, _Template, int]], pools: dict[str, CxlPool],
                    problems: Problems) -> None:
    """A kind: cxl NUMA node that CXL windows map must declare the memory its boot regions and LDs give it.

    The node's memory at run time is derived from the CXL state (regions, memdevs online, logical devices
    assigned); at boot that must be what the profile says, or the model would contradict itself. Nodes no
    window maps keep their declared memory (CXL memory without a modelled CXL topology).
    """
    checked: set[tuple[int, tuple[tuple[str, int], ...]]] = set()
    for node_name, tpl, _ in members:
        pool_bytes: dict[str, int] = {}
        for pool in pools.values():
            if node_name in pool.nodes and pool.window:
                held = sum(1 for _, owner in pool.assignments if owner == node_name)
                pool_bytes[pool.window] = pool_bytes.get(pool.window, 0) + held * pool.ld_size
        key = (tpl.key, tuple(sorted(pool_bytes.items())))
        if key in checked:
            continue
        checked.add(key)
        mapped: dict[int, int] = {}
        for w in tpl.cxl.windows:
            if w.numa is not None:
                mapped[w.numa] = mapped.get(w.numa, 0) + pool_bytes.get(w.name, 0)
        for r in tpl.cxl.regions:
            if r.mode == "ram" and r.numa is not None:
                mapped[r.numa] = mapped.get(r.numa, 0) + r.size
        for i, n in enumerate(tpl.spec.numa.nodes):
            if n.kind == "cxl" and n.id in mapped and mapped[n.id] != n.memory:
                problems.add((*tpl.path, "numa", "nodes", i, "memory"), f"NUMA node {n.id} declares {n.memory} "
                             f"bytes but its CXL regions and pooled logical devices give {mapped[n.id]} at boot "
                             f"on {node_name}")


def _node(
    spec: s.ProfileSpec,
    name: str,
    tpl: _Template,
    index: int,
    book: _PortBook,
    domain: str | None,
    pools: dict[str, CxlPool],
    problems: Problems,
) -> Node:
    nspec = tpl.spec
    c2c = {c.gpu: C2CLink(c.socket, c.bandwidth_gbs, c.links) for c in nspec.c2c}
    gpus = []
    uuids = [g.uuid or f"GPU-{stable_uuid(spec.name, name, g.name)}" for g in tpl.gpu_specs]
    serials = _board_serials(tpl.gpu_specs, uuids)
    for i, (g, uid, serial) in enumerate(zip(tpl.gpu_specs, uuids, serials, strict=True)):
        gid = f"{name}/{g.name}"
        mig = g.mig
        instances: list[MigInstance] = []
        sku = tpl.gpu_skus[g.name]
        if mig and mig.enabled and sku.mig:
            profiles = [p for p in (sku.mig.profile(n) for n in mig.instances) if p is not None]
            for k, (prof, (start, gi)) in enumerate(zip(profiles, place_in_order(sku.mig, profiles), strict=True)):
                instances.append(MigInstance(k, prof, f"MIG-{stable_uuid(uid, str(k))}", start, gi))
        gpus.append(
            Gpu(
                node=name,
                name=g.name,
                index=i,
                sku=sku,
                address=g.bus,
                parent=g.parent,
                numa=tpl.gpu_numa[g.name],
                uuid=uid,
                serial=serial,
                ports=tuple(book.ports.get(gid, ())),
                c2c=c2c.get(g.name),
                mig_enabled=bool(mig and mig.enabled),
                mig_instances=tuple(instances),
                hbm_numa=tpl.hbm_numa.get(g.name),
                module_id=g.module_id or 0,
            )
        )
    nvswitches = tuple(
        NVSwitch(
            f"{name}/{sw.name}",
            sw.name,
            tpl.nvswitch_skus[sw.name],
            sw.bus or _synthetic_address(i),
            sw.parent,
            tuple(book.ports.get(f"{name}/{sw.name}", ())),
        )
        for i, sw in enumerate(nspec.nvswitches)
    )
    # PCI bus order, as the kernel enumerates them and nvidia-smi's NIC columns list them (like GPUs).
    nics = tuple(sorted((_nic(name, n, tpl) for n in nspec.nics), key=lambda n: n.address))
    node_pools = _memory_pools(name, tpl, gpus, pools, problems)
    return Node(
        name=name,
        group=tpl.group,
        index=index,
        cpu=tpl.cpu,
        numa=tpl.numa,
        distances=tpl.distances,
        host_bridges=tpl.host_bridges,
        pcie_switches=tpl.switches,
        gpus=tuple(gpus),
        nvswitches=nvswitches,
        nics=nics,
        cxl=tpl.cxl,
        memory_pools=node_pools,
        labels=tuple(sorted(nspec.labels.items())),
        nvlink_domain=domain,
        template=tpl.key,
        hmat=nspec.numa.hmat,
        dmi_vendor=nspec.dmi.vendor if nspec.dmi else None,
        dmi_product=nspec.dmi.product if nspec.dmi else None,
    )


def _nic(node: str, n: s.NicSpec, tpl: _Template) -> Nic:
    h = hashlib.sha256(f"{node}/{n.name}".encode()).digest()
    mac = "02:" + ":".join(f"{b:02x}" for b in h[:5])
    guid = ":".join(f"{h[5 + 2 * i]:02x}{h[6 + 2 * i]:02x}" for i in range(4))
    r = n.roce
    return Nic(
        node=node,
        name=n.name,
        netdev=n.netdev,
        sku=catalogue().nics[n.sku],
        address=n.bus,
        parent=n.parent,
        numa=tpl.nic_numa[n.name],
        link_layer=n.link_layer,
        mtu=n.mtu,
        rail=n.rail,
        roce=Roce(r.trust, r.dscp, r.priority, tuple(r.pfc_priorities), r.ecn, r.cnp_dscp, r.cnp_priority),
        mac=mac,
        node_guid=guid,
    )


LATENCY_DOMAINS = {
    "hbm": LatencyDomain("hbm", 0, 400),
    "c2c": LatencyDomain("c2c", 1, 800),
    "nvlink": LatencyDomain("nvlink", 2, 1500),
    "cxl": LatencyDomain("cxl", 3, 2210),
    "cxl-switched": LatencyDomain("cxl-switched", 4, 2310),
    "rdma": LatencyDomain("rdma", 5, 3000),
}
"""Latency domains of memory pools as the GPU using them sees them, nearest first; rank and ns agree (schedulers
sort by either). Orders of magnitude from reference/hardware.md: HBM 0.3-0.5 us; host memory over NVLink-C2C
below 1 us; a peer's HBM over NVLink 1-2 us per transfer; CXL memory is reached over PCIe (2-5 us round trip)
plus the device's 170-250 ns, about 100 ns more behind a switch; RDMA (RoCE) about 3 us. (The CPU's view of CXL
memory, 210 ns and 310 ns, is what the HMAT attributes in sysfs say.)"""


def latency_domain(tier: str, behind_switch: bool = False) -> LatencyDomain:
    """The latency domain of a memory tier; CXL memory behind a switch is about 100 ns further."""
    name = {"hbm": "hbm", "nvlink-peer-hbm": "nvlink", "c2c-host": "c2c", "rdma": "rdma"}.get(tier)
    if name is None:
        name = "cxl-switched" if behind_switch else "cxl"
    return LATENCY_DOMAINS[name]


def _memory_pools(
    node: str, tpl: _Template, gpus: list[Gpu], pools: dict[str, CxlPool], problems: Problems
) -> tuple[MemoryPool, ...]:
    out: list[MemoryPool] = []
    names: set[str] = set()
    for i, p in enumerate(tpl.spec.memory_pools):
        where = (*tpl.path, "memoryPools", i)
        if p.name in names:
            problems.add((*where, "name"), f"duplicate memory pool {p.name!r}")
        names.add(p.name)
        src = p.source
        available: int | None = None
        bandwidth = 0.0
        behind = False
        source = ""
        expect: tuple[str, ...] = ()
        if src.gpus is not None:
            expect = ("hbm", "nvlink-peer-hbm")
            chosen = [g for g in gpus if any(fnmatchcase(g.name, pat) for pat in src.gpus)]
            if not chosen:
                problems.add((*where, "source", "gpus"), "matches no GPU of this node")
            available = sum(g.memory_bytes for g in chosen)
            if p.tier == "hbm":
                bandwidth = min((g.sku.hbm_bandwidth_gbs for g in chosen), default=0.0)
            else:
                bandwidth = min((g.sku.nvlink.links * g.sku.nvlink.link_bandwidth_gbs for g in chosen), default=0.0)
            source = "gpus:" + ",".join(g.name for g in chosen)
        elif src.numa is not None:
            expect = ("c2c-host",)
            numa_node = next((n for n in tpl.numa if n.id == src.numa), None)
            if numa_node is None:
                problems.add((*where, "source", "numa"), f"NUMA node {src.numa} does not exist")
            else:
                available = numa_node.memory
                bandwidth = min(450.0, numa_node.initiator.read_bandwidth_mbs / 1000)
            source = f"numa:{src.numa}"
        elif src.cxl_region is not None:
            expect = ("cxl",)
            region = next((r for r in tpl.cxl.regions if r.name == src.cxl_region), None)
            if region is None:
                problems.add((*where, "source", "cxlRegion"), f"CXL region {src.cxl_region!r} does not exist")
            else:
                available = region.size
                devs = [d for d in tpl.cxl.memdevs if d.name in region.targets]
                behind = any(d.behind_switch for d in devs)
                bandwidth = sum(d.sku.bandwidth_gbs for d in devs)
            source = f"cxlRegion:{src.cxl_region}"
        elif src.cxl_pool is not None:
            expect = ("cxl",)
            pool = pools.get(src.cxl_pool)
            if pool is None or node not in pool.nodes:
                problems.add((*where, "source", "cxlPool"), f"CXL pool {src.cxl_pool!r} does not exist or does "
                             "not reach this node")
            else:
                available = pool.capacity
                bandwidth, behind = 64.0, True
            source = f"cxlPool:{src.cxl_pool}"
        elif src.nic is not None:
            expect = ("rdma",)
            nic = next((n for n in tpl.spec.nics if n.name == src.nic), None)
            if nic is None:
                problems.add((*where, "source", "nic"), f"NIC {src.nic!r} does not exist")
            else:
                bandwidth = catalogue().nics[nic.sku].rate_gbps / 8 if nic.sku in catalogue().nics else 0.0
            source = f"nic:{src.nic}"
        if p.tier not in expect:
            problems.add((*where, "tier"), f"a {p.tier} pool cannot draw from {source.split(':')[0]}")
        if available is not None and p.capacity > available:
            problems.add((*where, "capacity"), f"capacity {p.capacity} exceeds the {available} bytes of {source}")
        out.append(MemoryPool(node, p.name, p.tier, p.capacity, p.policy, source,
                              latency_domain(p.tier, behind), bandwidth))
    return tuple(out)


def _check_uuids(nodes: Iterable[Node], templates: dict[str, _Template], problems: Problems) -> None:
    seen: dict[str, str] = {}
    for node in nodes:
        tpl = templates[node.group]
        for g in node.gpus:
            if g.uuid in seen:
                index = next(i for i, gs in enumerate(tpl.spec.gpus) if gs.name == g.name)
                problems.add((*tpl.path, "gpus", index, "uuid"), f"GPU UUID {g.uuid} is used by {seen[g.uuid]} "
                             f"and {g.id}")
                return
            seen[g.uuid] = g.id
