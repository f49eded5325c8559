"""Kubernetes node views rendered from the model: labels, capacity, runtime state, and the pod vocabulary."""

from __future__ import annotations

import pytest

from fakehw.model import load_profile
from fakehw.model.topology import derive_node
from fakehw.views.k8s import (
    GPU_RESOURCE,
    LABEL_ARCH,
    LABEL_CLIQUE,
    LABEL_DOMAIN,
    LABEL_ISA_PREFIX,
    LABEL_PRODUCT,
    Holding,
    NodeInfo,
    PodRequest,
    PodSpecError,
    PoolPolicy,
    QuantityError,
    RuntimeHealth,
    average_latency,
    node_info,
    node_objects,
    parse_quantity,
    pod_object,
)


@pytest.mark.parametrize("profile", ["dgx-h100", "gb200-nvl72", "mixed-arch", "edge-pcie", "cxl-pool"])
def test_node_objects_follow_the_model_and_parse_back(profile: str) -> None:
    system = load_profile(profile)
    objs = node_objects(system)
    assert [o["metadata"]["name"] for o in objs] == [n.name for n in system.nodes]
    for node, obj in zip(system.nodes, objs, strict=True):
        labels = obj["metadata"]["labels"]
        assert labels[LABEL_ARCH] == node.cpu.arch
        assert int(obj["status"]["capacity"][GPU_RESOURCE]) == len(node.gpus)
        assert labels[LABEL_PRODUCT] == dict(node.labels)[LABEL_PRODUCT]
        assert {k[len(LABEL_ISA_PREFIX):] for k in labels if k.startswith(LABEL_ISA_PREFIX)} == set(node.cpu.isa)
        domain = system.domain_of(node)
        assert labels[LABEL_DOMAIN] == (domain.name if domain else node.name)
        if domain is not None and domain.fabric is not None:
            assert labels[LABEL_CLIQUE] == f"{domain.fabric.cluster_uuid}.{domain.fabric.clique_id}"
        for pool in node.memory_pools:
            assert obj["status"]["allocatable"][pool.resource_name] == str(pool.capacity)
        info = NodeInfo.from_object(obj)
        assert info == node_info(system, node)
        topo = system.topology.nodes[node.name]
        for i in range(len(node.gpus)):
            for j in range(len(node.gpus)):
                # NVLink-bonded pairs are always closer than pairs that only share PCIe.
                if topo.nvlinks[i][j] and i != j:
                    assert all(info.latency[i][j] < info.latency[a][b] for a in range(len(node.gpus))
                               for b in range(len(node.gpus)) if a != b and not topo.nvlinks[a][b])


def test_edge_pcie_latency_follows_pcie_levels() -> None:
    system = load_profile("edge-pcie")
    info = node_info(system, system.nodes[0])
    row = info.latency[0]
    # gpu0-gpu1 PIX < gpu2 PXB < gpu3 PHB < gpu4 NODE < gpu5 SYS (the profile's comment)
    assert row[1] < row[2] < row[3] < row[4] < row[5]
    assert average_latency(info.latency, (0, 1)) < average_latency(info.latency, (0, 5))


def test_runtime_state_changes_allocatable_and_pools() -> None:
    system = load_profile("gb200-nvl72")
    node = system.nodes[0]
    state = {"gpus": [{"name": g.name, "health": "lost" if g.index == 1 else "healthy"} for g in node.gpus],
             "platform": {"pools": {"grace-lpddr": {"available": 2**30}, "nvl72-peer-hbm": {"available": 0}}},
             "down_ports": []}
    (obj,) = node_objects(system, {node.name: state})[:1]
    assert obj["status"]["allocatable"][GPU_RESOURCE] == str(len(node.gpus) - 1)
    assert obj["status"]["capacity"][GPU_RESOURCE] == str(len(node.gpus))
    assert obj["status"]["allocatable"]["nvidia.com/gpu.memoryPool.grace-lpddr"] == str(2**30)
    info = NodeInfo.from_object(obj)
    assert info.healthy_gpus == (0, 2, 3)
    assert info.pool("nvl72-peer-hbm") is not None and info.pool("nvl72-peer-hbm").available == 0  # type: ignore


def test_nvlink_down_raises_pair_latency() -> None:
    system = load_profile("cxl-pool")
    node = system.nodes[0]
    gpu = node.gpus[0]
    down = frozenset((gpu.id, p.port) for p in gpu.ports) | frozenset((p.remote_id, p.remote_port) for p in gpu.ports)
    healthy = node_info(system, node)
    broken = node_info(system, node, RuntimeHealth(down_ports=down))
    assert derive_node(node, down).nvlinks[0][1] == 0
    assert broken.latency[0][1] > healthy.latency[0][1]


def test_pool_policy_caps() -> None:
    p = PoolPolicy(reserved_fraction=0.25, reserved_priority=1000, thrash_threshold=0.9)
    assert p.admission_cap(1000) == 900
    assert p.burst_cap(1000) == 650
    assert p.is_reservation(1000) and not p.is_reservation(999)
    assert PoolPolicy.from_json(p.to_json()) == p
    assert PoolPolicy.from_json("garbage") == PoolPolicy()


@pytest.mark.parametrize(("text", "value"), [("4", 4), (7, 7), ("1Ki", 1024), ("300Gi", 300 * 2**30), ("1.5Ki", 1536),
                                             ("2k", 2000), ("1.0001k", 1001), (" 3 ", 3)])
def test_quantities(text: object, value: int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Xi", "-1", -1, True, None, 1.5, "1e9", "4 Gi b"])
def test_bad_quantities_are_refused_with_the_value(text: object) -> None:
    with pytest.raises(QuantityError, match="quantit"):
        parse_quantity(text)


def test_pod_request_roundtrip_and_errors() -> None:
    pod = pod_object("t1", "job", "u1", gpus=4, memory=10 * 2**30, memory_bound=True, priority=1000,
                     platforms=["linux/riscv64"], isa=["zvfh"], gang="g", gang_size=3)
    req = PodRequest.from_pod(pod)
    assert (req.gpus, req.memory, req.memory_bound, req.priority, req.gang, req.gang_size) == (
        4, 10 * 2**30, True, 1000, "g", 3)
    assert req.allows_arch("riscv64") and not req.allows_arch("amd64")
    assert req.isa == {"zvfh"} and req.tenant == "t1"
    bad = pod_object("t1", "job", "u1", gpus=1)
    bad["metadata"]["annotations"]["fakehw.io/memory"] = "lots"
    with pytest.raises(PodSpecError, match=r"fakehw\.io/memory: not a quantity: 'lots'"):
        PodRequest.from_pod(bad)
    bad = pod_object("t1", "job", "u1", gang="g", gang_size=2)
    bad["metadata"]["annotations"]["fakehw.io/gang-size"] = "two"
    with pytest.raises(PodSpecError, match="gang-size: not a number"):
        PodRequest.from_pod(bad)
    bad["spec"]["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: "x"}}
    with pytest.raises(PodSpecError, match=r"nvidia\.com/gpu"):
        PodRequest.from_pod(bad)


def test_holding_annotations_roundtrip() -> None:
    h = Holding("n1", (0, 3), {"a": 5, "b": 0}, "reservation", "dom", "tok", ("n1", "n2"))
    pod = pod_object("t", "p", "u")
    pod["spec"]["nodeName"] = "n1"
    pod["metadata"]["annotations"].update(h.annotations())
    assert Holding.from_pod(pod) == h
    assert Holding.from_pod(pod_object("t", "p", "u")) is None  # pending
    pod["metadata"]["annotations"]["fakehw.io/gpus"] = "0,x"
    with pytest.raises(PodSpecError, match="holding annotations of p"):
        Holding.from_pod(pod)


def test_malformed_latency_annotation_is_refused() -> None:
    system = load_profile("dgx-h100")
    (obj,) = node_objects(system)
    obj["metadata"]["annotations"]["fakehw.io/gpu-latency-ns"] = "0,1;1,0"
    with pytest.raises(ValueError, match="not a 8x8 matrix"):
        NodeInfo.from_object(obj)
