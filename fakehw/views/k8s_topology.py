"""Kubernetes topology objects rendered from the model: NodeResourceTopology and DRA ResourceSlices.

- ``NodeResourceTopology`` (``topology.node.k8s.io/v1alpha2``, what the NFD topology updater publishes for the
  topology-aware scheduler plugin): one zone per NUMA node with its CPUs, memory and GPUs, and the NUMA distances
  as zone costs.
- ``ResourceSlice`` (``resource.k8s.io/v1``, dynamic resource allocation, GA since Kubernetes 1.34): one slice per
  node for the ``gpu.nvidia.com`` driver, one device per GPU named and attributed as NVIDIA's DRA driver
  (k8s-dra-driver-gpu, ``GpuInfo.GetDevice``) publishes it: ``type``, ``uuid``, ``productName``, ``brand``,
  ``architecture``, ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``, the standard
  ``resource.kubernetes.io/pciBusID`` and ``pcieRoot``, and ``memory`` as capacity; what only fakehw knows (GPU
  index, NUMA node, NVLink links and clique) under ``fakehw.io/``.

Both are pure functions of the model, so a scheduler tested against them sees exactly the fake hardware.
"""

from __future__ import annotations

from typing import Any

from fakehw.model.system import Gpu, Node, System
from fakehw.model.units import format_size

DRA_DRIVER = "gpu.nvidia.com"
RESOURCE_API = "resource.k8s.io/v1"
"""DRA went GA in Kubernetes 1.34 (resource.k8s.io/v1); 1.35-1.37 serve v1 by default, v1beta1/2 only if enabled."""
FAKEHW_DOMAIN = "fakehw.io"
"""Attributes NVIDIA's driver does not publish are namespaced, as DRA requires of non-driver attributes."""


def _quantity(size: int) -> str:
    """A Kubernetes quantity in binary units (``81559Mi``): the model's size spelling without the ``B``."""
    return format_size(size).removesuffix("B")


def node_resource_topology(system: System, node: Node) -> dict[str, Any]:
    distances = {n.id: row for n, row in zip(node.numa, node.distances, strict=True)}
    index = {n.id: i for i, n in enumerate(node.numa)}
    zones = []
    for numa in node.numa:
        gpus = [g for g in node.gpus if g.numa == numa.id]
        resources = []
        if numa.cpus:
            resources.append({"name": "cpu", "capacity": str(len(numa.cpus)), "allocatable": str(len(numa.cpus)),
                              "available": str(len(numa.cpus))})
        if numa.memory:
            mem = _quantity(numa.memory)
            resources.append({"name": "memory", "capacity": mem, "allocatable": mem, "available": mem})
        if gpus:
            resources.append({"name": "nvidia.com/gpu", "capacity": str(len(gpus)), "allocatable": str(len(gpus)),
                              "available": str(len(gpus))})
        zones.append({
            "name": f"node-{numa.id}",
            "type": "Node",
            "costs": [{"name": f"node-{other.id}", "value": distances[numa.id][index[other.id]]}
                      for other in node.numa],
            "resources": resources,
            "attributes": [{"name": "fakehw.io/numa-kind", "value": numa.kind}],
        })
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node.name, "labels": {"fakehw.io/profile": system.name}},
        "topologyPolicies": ["SingleNUMANodeContainerLevel"],
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                       {"name": "topologyManagerScope", "value": "container"}],
        "zones": zones,
    }


_ARCHITECTURE = {"turing": "Turing", "ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper",
                 "blackwell": "Blackwell"}
"""go-nvlib's ``GetArchitectureAsString`` spelling, which NVIDIA's DRA driver publishes as ``architecture``."""


def semver(version: str) -> str:
    """A DRA ``version`` attribute: strict semver 2.0 (``580.105.08`` -> ``580.105.8``, ``9.0`` -> ``9.0.0``).

    NVIDIA's driver parses versions leniently and prints them back in canonical form; Kubernetes refuses a
    version attribute with leading zeros or fewer than three parts."""
    parts = [str(int(p)) for p in version.split(".")[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def gpu_device(system: System, node: Node, gpu: Gpu) -> dict[str, Any]:
    """One GPU as NVIDIA's DRA driver (gpu.nvidia.com) publishes it, plus namespaced fakehw attributes."""
    bridge = node.host_bridge_of(gpu.parent)
    attributes: dict[str, dict[str, Any]] = {
        "type": {"string": "gpu"},
        "uuid": {"string": gpu.uuid},
        "productName": {"string": gpu.sku.name},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": _ARCHITECTURE.get(gpu.sku.architecture, gpu.sku.architecture.capitalize())},
        "cudaComputeCapability": {"version": semver(gpu.sku.compute_capability)},
        "driverVersion": {"version": semver(system.driver.version)},
        "cudaDriverVersion": {"version": semver(system.driver.cuda_version)},
        "resource.kubernetes.io/pciBusID": {"string": str(gpu.address)},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci{bridge.domain:04x}:{bridge.bus:02x}"},
        f"{FAKEHW_DOMAIN}/index": {"int": gpu.index},
        f"{FAKEHW_DOMAIN}/numaNode": {"int": gpu.numa},
        f"{FAKEHW_DOMAIN}/nvlinkLinks": {"int": sum(1 for p in gpu.ports if p.up)},
    }
    domain = system.domain_of(node)
    if domain is not None and domain.fabric is not None:
        attributes[f"{FAKEHW_DOMAIN}/cliqueID"] = {"string": f"{domain.fabric.cluster_uuid}.{domain.fabric.clique_id}"}
    return {"name": f"gpu-{gpu.index}", "attributes": attributes,
            "capacity": {"memory": {"value": _quantity(gpu.memory_bytes)}}}


def resource_slice(system: System, node: Node) -> dict[str, Any]:
    """The node's one ResourceSlice of the ``gpu.nvidia.com`` driver (pool = node name, as the kubelet plugin
    helper names it). A slice holds at most 128 devices (resource.k8s.io/v1); no node of ours has more GPUs."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node.name}-{DRA_DRIVER}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu_device(system, node, g) for g in node.gpus],
        },
    }
