"""Derived topology against sources outside the model: NVIDIA's enum values (nvidia-ml-py and reference/nvml.md),
the NV# that ``nvidia-smi topo -m`` shows on real systems (reference/hardware.md), and the NVML rules for P2P
(both ends must support it; a single NVLink is still NVLink). Written to kill the mutants ``make mutate`` found
surviving in fakehw/model/topology.py."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pynvml
import pytest

from fakehw.model import load_profile
from fakehw.model.system import TopologyLevel
from fakehw.model.topology import (
    LinkCounts,
    P2PCapability,
    P2PStatus,
    _p2p,
    bond,
    derive_node,
    derive_system,
    pcie_level,
)

NEWER_THAN_THE_BINDING = {"NVML_P2P_CAPS_INDEX_PCI": 4}
"""nvml.h gained the PCI index after nvidia-ml-py 12.535 (reference/nvml.md, "Enums": ... ATOMICS 3, PCI 4)."""


def _nvml(name: str) -> int:
    if not hasattr(pynvml, name):
        return NEWER_THAN_THE_BINDING[name]
    value = getattr(pynvml, name)
    # nvidia-ml-py 12.535 writes some of these with a trailing comma (NVML_P2P_CAPS_INDEX_READ = 0,): a tuple
    return int(value[0] if isinstance(value, tuple) else value)


def test_enum_values_are_nvmls() -> None:
    # __members__ (not iteration): a value changed into another's would make an alias iteration skips
    for enum, prefix in ((P2PCapability, "NVML_P2P_CAPS_INDEX_"), (P2PStatus, "NVML_P2P_STATUS_"),
                         (TopologyLevel, "NVML_TOPOLOGY_")):
        for name, member in enum.__members__.items():
            assert member.value == _nvml(prefix + name), (enum, name)
        assert len(set(enum.__members__.values())) == len(enum.__members__), f"{enum.__name__} has aliases"


@pytest.mark.parametrize(("profile", "nv"), [("dgx-a100", 12), ("dgx-h100", 18), ("dgx-b200", 18)])
def test_switched_systems_show_their_nv_number(profile: str, nv: int) -> None:
    """reference/hardware.md: DGX A100 shows NV12 (12 NVLink3 links per GPU, 2 to each of 6 switches), DGX H100
    and DGX B200 NV18 (18 links split over the switch chips): every GPU pair reaches every switch."""
    topo = derive_node(load_profile(profile).nodes[0])
    n = len(topo.gpus)
    assert {topo.nvlinks[a][b] for a in range(n) for b in range(n) if a != b} == {nv}
    assert all(topo.nvlinks[a][a] == 0 for a in range(n))


def test_a_switch_only_one_gpu_reaches_joins_nothing() -> None:
    """A path through an NVSwitch needs both GPUs on that switch; per shared switch the pair gets the smaller of
    their link counts; direct links add up."""
    counts = {
        "a": LinkCounts(gpus={"c": 2}, switches={"sw1": 3, "sw2": 2}),
        "b": LinkCounts(gpus={}, switches={"sw3": 4}),
        "c": LinkCounts(gpus={"a": 2}, switches={"sw1": 1, "sw2": 5}),
    }
    assert bond("a", "b", counts) == 0
    assert bond("b", "a", counts) == 0
    assert bond("a", "c", counts) == 2 + 1 + 2
    assert bond("c", "a", counts) == 2 + 1 + 2
    assert bond("a", "a", counts) == 0


def _pair(p2p_pcie: tuple[bool, bool], level: TopologyLevel, links: int) -> dict[P2PCapability, P2PStatus]:
    gpus = load_profile("dgx-h100").nodes[0].gpus[:2]
    gpus = tuple(replace(g, sku=g.sku.model_copy(update={"p2p_pcie": ok})) for g, ok in zip(gpus, p2p_pcie,
                                                                                                strict=True))
    levels = ((TopologyLevel.INTERNAL, level), (level, TopologyLevel.INTERNAL))
    out = _p2p(levels, ((0, links), (links, 0)), gpus)
    assert all(out[c][0][0] == P2PStatus.OK for c in P2PCapability)
    return {c: out[c][0][1] for c in P2PCapability}


def test_one_nvlink_is_nvlink() -> None:
    got = _pair((True, True), TopologyLevel.SYSTEM, links=1)
    assert got[P2PCapability.NVLINK] == got[P2PCapability.ATOMICS] == P2PStatus.OK
    assert got[P2PCapability.READ] == got[P2PCapability.WRITE] == P2PStatus.OK  # over NVLink, whatever PCIe says
    assert got[P2PCapability.PCI] == P2PStatus.CHIPSET_NOT_SUPPORTED


def test_pcie_p2p_needs_both_ends() -> None:
    for ends in ((True, False), (False, True), (False, False)):
        got = _pair(ends, TopologyLevel.SINGLE, links=0)
        assert got[P2PCapability.PCI] == got[P2PCapability.READ] == P2PStatus.GPU_NOT_SUPPORTED, ends
        assert got[P2PCapability.NVLINK] == P2PStatus.NOT_SUPPORTED
    got = _pair((True, True), TopologyLevel.NODE, links=0)
    assert got[P2PCapability.PCI] == got[P2PCapability.READ] == got[P2PCapability.WRITE] == P2PStatus.OK
    assert got[P2PCapability.ATOMICS] == P2PStatus.NOT_SUPPORTED


def test_derived_topology_is_immutable() -> None:
    """Nodes of one template share one derived topology (derive_system derives it once): none may change it."""
    import dataclasses

    system = load_profile("gb200-nvl72")
    topo = derive_system(system)
    node = next(iter(topo.nodes.values()))
    assert len({id(t) for t in topo.nodes.values()}) < len(topo.nodes)  # really shared
    for value, field in ((node, "gpus"), (topo.domains[0], "nodes"), (topo, "domains"),
                         (LinkCounts({}, {}), "gpus")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, ())


def _bridges(switches: dict[str, str], host_bridges: dict[str, int]) -> SimpleNamespace:
    """A node reduced to its PCIe tree: switch -> parent, host bridge -> NUMA node."""
    return SimpleNamespace(pcie_switches=[SimpleNamespace(name=n, parent=p) for n, p in switches.items()],
                           host_bridges=[SimpleNamespace(name=n, numa=numa) for n, numa in host_bridges.items()])


def test_pcie_levels_through_every_switch_of_the_node() -> None:
    """NVML's levels (reference/nvml.md): a device behind two switches in series and one on their host bridge
    meet at the host bridge (PHB), however few switches the node has; two behind the same switch are PIX, one
    behind two switches and one behind the second only cross both (PXB)."""
    node = _bridges({"sw1": "sw0", "sw0": "hb0"}, {"hb0": 0, "hb1": 0, "hb2": 1})
    assert pcie_level(node, "sw1", "hb0") == TopologyLevel.HOSTBRIDGE  # type: ignore[arg-type]
    assert pcie_level(node, "sw1", "sw1") == TopologyLevel.SINGLE  # type: ignore[arg-type]
    assert pcie_level(node, "sw1", "sw0") == TopologyLevel.MULTIPLE  # type: ignore[arg-type]  # sw1 and sw0
    assert pcie_level(node, "sw1", "hb1") == TopologyLevel.NODE  # type: ignore[arg-type]
    assert pcie_level(node, "sw1", "hb2") == TopologyLevel.SYSTEM  # type: ignore[arg-type]
    assert pcie_level(node, "sw1", "sw1", same_device=True) == TopologyLevel.INTERNAL  # type: ignore[arg-type]
    deeper = _bridges({"sw2": "sw1", "sw1": "sw0", "sw0": "hb0", "sw3": "sw0"}, {"hb0": 0})
    assert pcie_level(deeper, "sw2", "sw3") == TopologyLevel.MULTIPLE  # type: ignore[arg-type]
    looped = _bridges({"a": "b", "b": "a"}, {"hb0": 0})  # a malformed tree must not hang the derivation
    assert pcie_level(looped, "a", "hb0") in (TopologyLevel.NODE, TopologyLevel.SYSTEM)  # type: ignore[arg-type]


def test_nearest_gpus_on_a_dgx_h100() -> None:
    """nvmlDeviceGetTopologyNearestGpus: the other GPUs at exactly that level, never the GPU itself. DGX H100
    (reference/hardware.md): GPU0-3 on NUMA node 0 behind their own switches and host bridges, GPU4-7 on node 1."""
    topo = derive_node(load_profile("dgx-h100").nodes[0])
    assert topo.nearest(0, TopologyLevel.NODE) == (1, 2, 3)
    assert topo.nearest(0, TopologyLevel.SYSTEM) == (4, 5, 6, 7)
    assert topo.nearest(5, TopologyLevel.NODE) == (4, 6, 7)
    for level in (TopologyLevel.INTERNAL, TopologyLevel.SINGLE, TopologyLevel.MULTIPLE, TopologyLevel.HOSTBRIDGE):
        assert topo.nearest(0, level) == ()


def test_an_nvlink_domain_reports_the_clique_and_cluster_of_its_fabric() -> None:
    """Every GPU of an NVL72 rack reports its fabric's clique id and cluster UUID (``nvidia-smi -q``'s ``fabric``
    block: the real GB200 capture shows ``cliqueId`` and ``clusterUuid`` on each GPU; GFD labels a node
    ``nvidia.com/gpu.clique=<clusterUUID>.<cliqueId>`` from them). The domain's topology carries what the rack's
    fabric declares: gb200-nvl72.yaml says ``fabric: {cliqueId: 32766}``, and the two racks of a 36-tray system
    keep that clique with a cluster UUID each."""
    from pathlib import Path

    from fakehw.model.loader import builtin_dir

    system = load_profile(Path(builtin_dir() / "gb200-nvl72.yaml"), nodes=36)
    domains = derive_system(system).domains
    assert [d.clique_id for d in domains] == [32766, 32766]
    assert [d.cluster_uuid for d in domains] == [d.fabric.cluster_uuid for d in system.nvlink_domains if d.fabric]
    assert len({d.cluster_uuid for d in domains}) == 2


def test_nic_to_nic_levels_on_a_dgx_h100() -> None:
    """``nvidia-smi topo -m``'s NIC rows (legend: X = self, NODE = host bridges of one NUMA node, SYS = across the
    SMP interconnect between NUMA nodes). DGX H100 (reference/hardware.md, DGX H100 User Guide): the compute NICs
    mlx5_0 and mlx5_3-5 and the slot-2 card (mlx5_1/2) hang off socket 0, mlx5_6, mlx5_9-11 and the slot-1 card
    (mlx5_7/8) off socket 1, each compute NIC behind its own GPU's PCIe switch on its own host bridge. (The two
    ports of one dual-port card are left out: they are functions of one device.)"""
    topo = derive_node(load_profile("dgx-h100").nodes[0])
    socket0 = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"}
    cards = [{"mlx5_1", "mlx5_2"}, {"mlx5_7", "mlx5_8"}]
    assert len(topo.nics) == 12
    for i, a in enumerate(topo.nics):
        for j, b in enumerate(topo.nics):
            level = topo.nic_levels[i][j]
            if a == b:
                assert level == TopologyLevel.INTERNAL, a
            elif {a, b} not in cards:
                assert level == (TopologyLevel.NODE if (a in socket0) == (b in socket0) else TopologyLevel.SYSTEM), \
                    (a, b, level.short)
    gpu4 = [topo.gpu_nic_levels[4][topo.nics.index(n)].short for n in ("mlx5_6", "mlx5_9", "mlx5_0")]
    assert gpu4 == ["PIX", "NODE", "SYS"]  # GPU4's own NIC shares its switch (PIX in topo -m's legend)
