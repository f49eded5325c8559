"""hwloc (Debian's lstopo) reads every built-in profile's fake root and sees what the model says.

Every expected value comes from the model: packages, PUs, NUMA nodes with their CPUs and memory, HMAT figures,
GPUs/NVSwitches/NICs on the PCI bus with their ids and link speed, attached next to the right NUMA node, NICs'
network and RDMA devices, GPU-memory NUMA nodes (GH200, GB200) and CXL memory (cxl-pool).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.agent.cxl import CxlEngine
from fakehw.model import System, builtin_profiles
from fakehw.model.system import Node
from fakehw.sysfs.hwloc import HwlocTopology, lstopo, lstopo_path

pytestmark = pytest.mark.skipif(lstopo_path() is None, reason="hwloc is not installed (tools/install-system-deps.sh)")

Rendered = Callable[[str], list[tuple[System, Node, Path]]]
GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def link_gbs(gen: int, width: int) -> float:
    """Usable bandwidth hwloc computes from a link's speed and width: 8b/10b up to gen2, 128b/130b for gen3-5,
    242/256 for gen6's FLIT mode (hwloc 2.9 prints 121.0 GB/s for a 64 GT/s x16 GB300, = 128 x 242/256)."""
    encoding = 0.8 if gen <= 2 else 128 / 130 if gen <= 5 else 242 / 256
    return GTS[gen] * encoding * width / 8


def _local_memory(topo: HwlocTopology, numa: int) -> int:
    return int(topo.numa()[numa].attrs.get("local_memory", "0"))


@pytest.mark.parametrize("profile", sorted(builtin_profiles()))
def test_hwloc_sees_the_model(profile: str, rendered: Rendered) -> None:
    for _system, node, root in rendered(profile):
        topo = lstopo(root)
        cpu = node.cpu
        assert len(topo.objects("Package")) == cpu.sockets
        assert len(topo.objects("Core")) == cpu.cores
        assert len(topo.objects("PU")) == cpu.logical_cpus
        host = topo.root
        assert host.info("HostName") == node.hostname
        # NUMA nodes: ids, CPUs, memory.
        numa = topo.numa()
        assert set(numa) == {n.id for n in node.numa}
        for n in node.numa:
            assert _local_memory(topo, n.id) == n.memory, f"{profile} NUMA {n.id}"
            if n.cpus:
                assert numa[n.id].cpuset() == frozenset(n.cpus)
            perf = n.initiator
            # HMAT figures come with their initiator; a CXL node's figures (set by the CXL driver when a region
            # comes online) have none, and hwloc attributes only figures it can tie to an initiator.
            if perf.read_bandwidth_mbs and n.kind != "cxl" and n.kind != "reserved":
                assert topo.memattrs["Bandwidth"][n.id] == perf.read_bandwidth_mbs
                assert topo.memattrs["Latency"][n.id] == perf.read_latency_ns
        pci = topo.pci()
        # GPUs: on the bus with their ids and link, attached where their NUMA node's CPUs are.
        for g in node.gpus:
            dev = pci[str(g.address)]
            sub = g.sku.pci_subsystem_id
            assert dev.attrs["pci_type"] == f"0302 [10de:{g.sku.pci_device_id:04x}] [10de:{sub >> 16:04x}] a1"
            assert float(dev.attrs["pci_link_speed"]) == pytest.approx(link_gbs(g.sku.pcie.generation,
                                                                                 g.sku.pcie.width), rel=1e-4)
            home = node.numa_node(g.numa)
            assert home is not None
            anchor = dev.non_io_ancestor()
            assert anchor.cpuset() == frozenset(home.cpus), f"{g.name} attached away from NUMA node {g.numa}"
            if g.hbm_numa is not None:  # GPU memory as a CPU-less NUMA node (GH200, GB200, NVLink Fusion)
                hbm = numa[g.hbm_numa]
                assert hbm.subtype == "GPUMemory" and hbm.info("PCIBusID") == str(g.address)
                hbm_node = node.numa_node(g.hbm_numa)
                assert hbm_node is not None and not hbm_node.cpus
        for s in node.nvswitches:
            if s.on_pci:
                assert pci[str(s.address)].attrs["pci_type"].startswith(f"0680 [10de:{s.sku.pci_device_id:04x}]")
        # NICs: PCI function, network interface with its MAC, RDMA device with its GUID and port state.
        osdevs = topo.osdevs()
        for nic in node.nics:
            dev = pci[str(nic.address)]
            assert dev.attrs["pci_type"].startswith(f"{'0207' if nic.link_layer == 'infiniband' else '0200'} "
                                                    f"[{nic.sku.vendor_id:04x}:{nic.sku.device_id:04x}]")
            net, ib = osdevs[nic.netdev], osdevs[nic.name]
            assert net.parent is dev and ib.parent is dev
            if nic.link_layer == "ethernet":
                assert net.info("Address") == nic.mac
            else:  # IPoIB (RFC 4391): 4 bytes of flags and QPN, then the 16-byte port GID (fe80::/64 + GUID)
                guid = nic.node_guid.replace(":", "")
                gid = "fe:80:00:00:00:00:00:00:" + ":".join(guid[i:i + 2] for i in range(0, 16, 2))
                address = net.info("Address") or ""
                assert len(address.split(":")) == 20 and address.endswith(gid)
            assert ib.info("NodeGUID") == nic.node_guid and ib.info("Port1State") == "4"
            home = node.numa_node(nic.numa)
            assert home is not None and dev.non_io_ancestor().cpuset() == frozenset(home.cpus)
        assert sum(1 for d in pci.values() if d.attrs["pci_type"].startswith("0302 [10de:")) == len(node.gpus)


def test_dgx_h100_two_packages_two_numa_nodes_eight_gpus_on_their_sockets(
        rendered: Rendered) -> None:
    ((_, node, root),) = rendered("dgx-h100")
    topo = lstopo(root)
    packages = topo.objects("Package")
    assert len(packages) == node.cpu.sockets == 2
    assert len(topo.numa()) == len(node.numa) == 2
    gpus = [d for d in topo.pci().values() if d.attrs["pci_type"].startswith("0302 [10de:")]
    assert len(gpus) == len(node.gpus) == 8
    by_bus = {str(g.address): g for g in node.gpus}
    for dev in gpus:
        g = by_bus[dev.attrs["pci_busid"]]
        package = dev.non_io_ancestor()
        assert package.type == "Package" and package.nodeset() == frozenset({g.numa})
    nics = [o for o in topo.objects("OSDev") if o.name in {n.name for n in node.nics}]
    assert len(nics) == len(node.nics) == 12  # 8 compute ports + 2 dual-port storage cards (DGX H100 User Guide)


@pytest.mark.parametrize("profile", ["gh200", "gb200-nvl72"])
def test_hbm_numa_nodes_are_cpu_less_gpu_memory(
        profile: str, rendered: Rendered) -> None:
    ((_, node, root),) = rendered(profile)
    topo = lstopo(root)
    hbm = [n for n in node.numa if n.kind == "hbm"]
    assert hbm, "the profile has HBM NUMA nodes"
    numa = topo.numa()
    for n in hbm:
        gpu = node.gpu(n.gpu or "")
        assert gpu is not None
        obj = numa[n.id]
        assert obj.subtype == "GPUMemory" and int(obj.attrs["local_memory"]) == n.memory
        # CPU-less: hwloc places it with the CPUs of the GPU's own NUMA node (from the HMAT initiator links).
        home = node.numa_node(gpu.numa)
        assert home is not None and obj.cpuset() == frozenset(home.cpus) and not n.cpus
    # Without asking hwloc to keep them, it hides NVIDIA GPU memory nodes, as on a real GH200/GB200.
    hidden = lstopo(root, {"HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": "0"})
    assert set(hidden.numa()) == {n.id for n in node.numa} - {n.id for n in hbm}


def test_cxl_pool_cpu_less_cxl_nodes_with_their_memory(
        rendered: Rendered) -> None:
    ((system, node, root),) = rendered("cxl-pool")
    topo = lstopo(root)
    numa = topo.numa()
    cxl_nodes = [n for n in node.numa if n.kind == "cxl"]
    assert cxl_nodes and any(n.memory for n in cxl_nodes)
    engine = CxlEngine(system, [node.name])
    view = engine.view(engine.boot(), node.name)
    for n in cxl_nodes:
        obj = numa[n.id]
        assert int(obj.attrs.get("local_memory", "0")) == n.memory == view.numa_memory[n.id]
        # CPU-less. The kernel gives a CXL node access figures but no initiator (generic targets: attributes
        # only, drivers/acpi/numa/hmat.c), so hwloc cannot tie it to CPUs: it stays out of the package.
        assert not n.cpus and obj.parent is not None and obj.parent.type != "Package"
        daxes = sorted(f"dax{r.region.id}.0" for r in view.regions if r.region.numa == n.id)
        assert sorted(obj.infos.get("DAXDevice", [])) == daxes
    # Every memory device (local, pooled logical devices, the DCD interface) as hwloc's CXLMem device.
    osdevs = topo.osdevs()
    for m in view.memdevs:
        dev = osdevs[m.sysfs_name]
        assert dev.subtype == "CXLMem"
        if m.ram_size:
            assert dev.info("CXLRAMSize") == str(m.ram_size // 1024)
        if m.pmem_size:
            assert dev.info("CXLPMEMSize") == str(m.pmem_size // 1024)
