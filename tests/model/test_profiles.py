"""Every built-in profile validates, and its derived topology obeys invariants checked independently here."""

from __future__ import annotations

from collections import defaultdict

import pytest

from fakehw.model import P2PCapability, P2PStatus, System, TopologyLevel, builtin_profiles, load_profile
from fakehw.model.system import Node

PROFILES = sorted(builtin_profiles())


@pytest.fixture(params=PROFILES)
def system(request: pytest.FixtureRequest) -> System:
    return load_profile(request.param)


def test_the_issue_list_of_profiles_is_built_in() -> None:
    required = {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72", "gh200", "riscv-nvlink-fusion",
                "cxl-pool", "edge-pcie"}
    assert required <= set(PROFILES)


def _nvlink_path(node: Node, a: int, b: int) -> bool:
    """Independent of fakehw.model.topology: a direct up link, or an up link from both to one switch."""
    ga, gb = node.gpus[a], node.gpus[b]
    direct = any(p.up and p.remote_id == gb.id for p in ga.ports)
    switches_a = {p.remote_id for p in ga.ports if p.up and p.remote_kind == "switch"}
    switches_b = {p.remote_id for p in gb.ports if p.up and p.remote_kind == "switch"}
    return direct or bool(switches_a & switches_b)


def test_topology_invariants(system: System) -> None:
    for node in system.nodes:
        topo = system.topology.nodes[node.name]
        n = len(node.gpus)
        assert topo.gpus == tuple(g.name for g in node.gpus)
        for a in range(n):
            assert topo.levels[a][a] == TopologyLevel.INTERNAL
            assert topo.nvlinks[a][a] == 0
            for b in range(n):
                assert topo.levels[a][b] == topo.levels[b][a]
                assert topo.nvlinks[a][b] == topo.nvlinks[b][a]
                for cap in P2PCapability:
                    assert topo.p2p[cap][a][b] == topo.p2p[cap][b][a]
                if a != b:
                    assert topo.levels[a][b] != TopologyLevel.INTERNAL
                    has_path = _nvlink_path(node, a, b)
                    assert (topo.p2p[P2PCapability.NVLINK][a][b] == P2PStatus.OK) == has_path, (node.name, a, b)
                    assert (topo.nvlinks[a][b] > 0) == has_path


def test_links_fit_skus_and_point_back(system: System) -> None:
    ports_of = {g.id: g.ports for g in system.gpus()}
    for node in system.nodes:
        for sw in node.nvswitches:
            ports_of[sw.id] = sw.ports
            assert len(sw.ports) <= sw.sku.ports
    for domain in system.nvlink_domains:
        for sw in domain.switches:
            ports_of[sw.id] = sw.ports
            assert len(sw.ports) <= sw.sku.ports
    for gpu in system.gpus():
        assert len(gpu.ports) <= gpu.sku.nvlink.links
        assert [p.port for p in gpu.ports] == list(range(len(gpu.ports)))
        for p in gpu.ports:
            back = ports_of[p.remote_id][p.remote_port]
            assert (back.remote_id, back.remote_port) == (gpu.id, p.port)


def test_every_cpu_in_exactly_one_numa_node_and_affinity_matches(system: System) -> None:
    for node in system.nodes:
        seen: dict[int, int] = {}
        for numa in node.numa:
            for cpu in numa.cpus:
                assert cpu not in seen, f"cpu {cpu} in NUMA {seen.get(cpu)} and {numa.id}"
                seen[cpu] = numa.id
        assert sorted(seen) == list(range(node.cpu.logical_cpus))
        topo = system.topology.nodes[node.name]
        for i, gpu in enumerate(node.gpus):
            gpu_node = node.numa_node(gpu.numa)
            assert gpu_node is not None and gpu_node.has_cpu
            assert topo.cpu_affinity[i] == gpu_node.cpus
            assert topo.numa_affinity[i] == gpu.numa
            assert topo.gpu_numa_id[i] == gpu.hbm_numa


def test_distance_matrix_is_well_formed(system: System) -> None:
    for node in system.nodes:
        d = node.distances
        assert len(d) == len(node.numa)
        for i, row in enumerate(d):
            assert len(row) == len(node.numa)
            assert row[i] == 10
            assert all(v > 10 for j, v in enumerate(row) if j != i)


def test_identities_are_unique_and_stable(system: System) -> None:
    uuids = [g.uuid for g in system.gpus()]
    assert len(set(uuids)) == len(uuids)
    for node in system.nodes:
        buses = [str(g.address) for g in node.gpus] + [str(n.address) for n in node.nics]
        assert len(set(buses)) == len(buses)
        assert [g.index for g in node.gpus] == sorted(range(len(node.gpus)))
        assert [g.address for g in node.gpus] == sorted(g.address for g in node.gpus)
    again = load_profile(system.name)
    assert [g.uuid for g in again.gpus()] == uuids
    assert again.digest == system.digest


def test_dgx_h100_matches_reference() -> None:
    system = load_profile("dgx-h100")
    (node,) = system.nodes
    topo = system.topology.nodes[node.name]
    assert [g.sku.name for g in node.gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    assert all(topo.nvlinks[a][b] == 18 for a in range(8) for b in range(8) if a != b)
    assert topo.numa_affinity == (0, 0, 0, 0, 1, 1, 1, 1)
    per_switch: defaultdict[str, int] = defaultdict(int)
    for p in node.gpus[0].ports:
        per_switch[p.remote_id.split("/")[1]] += 1
    assert dict(per_switch) == {"nvsw0": 5, "nvsw1": 4, "nvsw2": 4, "nvsw3": 5}
    assert all(p.remote_kind == "switch" and p.bandwidth_gbs == 25 for p in node.gpus[0].ports)
    assert node.nvlink_domain is None
    # NICs in bus order: mlx5_0 (GPU0's), the slot-2 card (mlx5_1/2) and mlx5_3-5 on socket 0, the rest on 1.
    assert [lv.short for lv in topo.gpu_nic_levels[0]] == ["PIX", "NODE", "NODE", "NODE", "NODE", "NODE", "SYS", "SYS",
                                                           "SYS", "SYS", "SYS", "SYS"]


def test_dgx_a100_is_nv12_on_paired_numa_nodes() -> None:
    system = load_profile("dgx-a100")
    topo = system.topology.nodes["dgx-a100-0"]
    assert all(topo.nvlinks[a][b] == 12 for a in range(8) for b in range(8) if a != b)
    assert topo.numa_affinity == (3, 3, 1, 1, 7, 7, 5, 5)
    gpu7 = system.nodes[0].gpus[7]
    assert gpu7.mig_enabled and [m.profile.name for m in gpu7.mig_instances] == ["3g.40gb", "3g.40gb"]
    # Real A100: two 3g instances land at placements 0:4 and 4:4 (memory slices) and get GPU instance ids 2, then 1
    # (NVIDIA MIG user guide, "nvidia-smi mig -cgi 9,3g.20gb" and "-lgi").
    assert [(m.start_slice, m.gpu_instance_id) for m in gpu7.mig_instances] == [(0, 2), (4, 1)]


def test_edge_pcie_levels_follow_its_tree() -> None:
    """The levels the profile's comment promises: every PCIe level appears, and nothing is NVLink."""
    system = load_profile("edge-pcie")
    topo = system.topology.nodes["edge-0"]
    row0 = [lv.short for lv in topo.levels[0]]
    assert row0 == ["X", "PIX", "PXB", "PHB", "NODE", "SYS", "SYS", "SYS"]
    assert topo.levels[5][6] == TopologyLevel.SINGLE
    assert topo.levels[5][7] == TopologyLevel.NODE
    assert all(v == 0 for row in topo.nvlinks for v in row)
    nvlink = topo.p2p[P2PCapability.NVLINK]
    assert all(nvlink[a][b] == P2PStatus.NOT_SUPPORTED for a in range(8) for b in range(8) if a != b)
    read = topo.p2p[P2PCapability.READ]
    assert read[0][4] == P2PStatus.OK and read[0][5] == P2PStatus.CHIPSET_NOT_SUPPORTED


def test_gb200_nvl72_is_one_domain_of_72_gpus() -> None:
    from fakehw.model.topology import domain_bond

    system = load_profile("gb200-nvl72")
    assert len(system.nodes) == 18 and system.gpu_count == 72
    (domain,) = system.nvlink_domains
    assert len(domain.switches) == 18 and domain.fabric is not None
    assert all(len(sw.ports) == 72 for sw in domain.switches)
    assert all(n.nvlink_domain == domain.name for n in system.nodes)
    (dtopo,) = system.topology.domains
    assert len(dtopo.gpus) == 72 and dtopo.cluster_uuid == domain.fabric.cluster_uuid
    tray3 = system.nodes[3]
    assert tray3.name == "gb200-tray-3"
    topo = system.topology.nodes[tray3.name]
    assert all(topo.nvlinks[a][b] == 18 for a in range(4) for b in range(4) if a != b)
    # GPUs of different trays reach each other through the same 18 switch chips.
    assert domain_bond(system.nodes[0].gpus[0], system.nodes[17].gpus[3]) == 18
    # A real tray's numactl -H (NVIDIA TensorRT-LLM tech blog 8): 34 nodes, GPU memory on 2, 10, 18 and 26.
    assert len(tray3.numa) == 34 and [n.id for n in tray3.numa if n.kind == "hbm"] == [2, 10, 18, 26]
    assert [g.hbm_numa for g in tray3.gpus] == [2, 10, 18, 26]
    assert topo.cpu_affinity[0] == tuple(range(72)) and topo.cpu_affinity[3] == tuple(range(72, 144))


@pytest.mark.parametrize(("profile", "board"), [("gb200-nvl72", "gb200"), ("gb300-nvl72", "gb300")])
def test_a_compute_board_s_two_gpus_share_its_serial(profile: str, board: str) -> None:
    """The real GB200 and GB300 captures (qx-gb200.xml, qx-gb300.xml): of a tray's four GPUs, those with module ids 1
    and 2 print one board serial and those with 3 and 4 another (a compute board carries two GPUs; nvml.h: the
    serial "corresponds to the value printed directly on the board"). Every tray of the rack has its own two
    boards, so no serial is shared across trays: a rack of N trays prints N x (the capture's serial count)."""
    from tests.nvml.captures import capture_dir, capture_module_ids, capture_serials, sharing

    if capture_dir() is None:
        pytest.skip("the captures (../shared/reference/captures) are not here")
    captured = sharing(capture_serials(board), capture_module_ids(board))
    system = load_profile(profile)
    for node in system.nodes:
        serials = [g.serial for g in node.gpus]
        assert sharing(serials, [g.module_id for g in node.gpus]) == captured, (node.name, serials)
    assert len({g.serial for g in system.gpus()}) == len(system.nodes) * len(set(capture_serials(board)))


def test_two_racks_make_two_domains() -> None:
    from pathlib import Path

    from fakehw.model.loader import builtin_dir

    system = load_profile(Path(builtin_dir() / "gb200-nvl72.yaml"), nodes=36)
    assert [d.name for d in system.nvlink_domains] == ["nvl72-0", "nvl72-1"]
    a, b = system.nvlink_domains
    assert a.fabric and b.fabric and a.fabric.cluster_uuid != b.fabric.cluster_uuid
    assert system.nodes[18].nvlink_domain == "nvl72-1"


def test_link_down_lowers_the_bond_for_both_ends() -> None:
    from fakehw.model.topology import derive_node

    system = load_profile("dgx-h100")
    node = system.nodes[0]
    port = node.gpus[2].ports[0]
    down = frozenset({(node.gpus[2].id, 0), (port.remote_id, port.remote_port)})
    topo = derive_node(node, down)
    assert topo.nvlinks[2][5] == 17 and topo.nvlinks[5][2] == 17 and topo.nvlinks[0][1] == 18


def test_pool_latency_domains_are_ordered_by_distance() -> None:
    system = load_profile("cxl-pool")
    domains = system.topology.latency_domains["cxl-host-0"]
    # cxl_test's shape puts every memdev behind a switch, so both CXL pools are one latency domain.
    assert [d.name for d, _ in domains] == ["hbm", "cxl-switched"]
    assert [[p.name for p in pools] for _, pools in domains] == [["hbm"], ["cxl-local", "cxl-pooled"]]
    gh = load_profile("gh200").topology.latency_domains["gh200-0"]
    assert [d.name for d, _ in gh] == ["hbm", "c2c"]


def test_riscv_profile_says_it_is_a_projection() -> None:
    system = load_profile("riscv-nvlink-fusion")
    assert system.projection and "projection" in system.projection
    node = system.nodes[0]
    assert node.cpu.arch == "riscv64" and node.cpu.isa[0].startswith("rv64")
    assert all(g.c2c is not None for g in node.gpus)


def test_mixed_arch_borrows_nodes() -> None:
    system = load_profile("mixed-arch")
    assert [(n.name, n.cpu.arch) for n in system.nodes] == [("rv-fusion-0", "riscv64"), ("dgx-h100-0", "amd64")]


def test_hgx_h200_overrides_the_dgx_h100_board() -> None:
    system = load_profile("hgx-h200")
    node = system.nodes[0]
    assert node.name == "hgx-h200-0"
    assert {g.sku.id for g in node.gpus} == {"h200-sxm5-141gb"}
    assert [str(g.address) for g in node.gpus] == [str(g.address) for g in load_profile("dgx-h100").nodes[0].gpus]
