"""Kubernetes topology objects rendered from the model: NodeResourceTopology and DRA ResourceSlices.

- ``NodeResourceTopology`` (``topology.node.k8s.io/v1alpha2``, what the NFD topology updater publishes for the
  topology-aware scheduler plugin): one zone per NUMA node with its CPUs, memory and GPUs, and the NUMA distances
  as zone costs.
- ``ResourceSlice`` (``resource.k8s.io/v1beta1``, dynamic resource allocation): one slice per node for the
  ``gpu.nvidia.com`` driver, one device per GPU with the attributes a DRA driver publishes (UUID, product,
  architecture, compute capability, driver version, PCI bus, NUMA node, NVLink clique) and memory as capacity.

Both are pure functions of the model, so a scheduler tested against them sees exactly the fake hardware.
"""

from __future__ import annotations

from typing import Any

from fakehw.model.system import Node, System
from fakehw.model.units import format_size

DRA_DRIVER = "gpu.nvidia.com"


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


def resource_slice(system: System, node: Node) -> dict[str, Any]:
    domain = system.domain_of(node)
    devices = []
    for gpu in node.gpus:
        attributes: dict[str, dict[str, Any]] = {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu.uuid},
            "index": {"int": gpu.index},
            "minor": {"int": gpu.minor},
            "productName": {"string": gpu.sku.name},
            "architecture": {"string": gpu.sku.architecture.capitalize()},
            "cudaComputeCapability": {"version": f"{gpu.sku.compute_capability}.0"},
            "driverVersion": {"version": system.driver.version if system.driver.version.count(".") == 2
                              else f"{system.driver.version}.0"},
            "pciBusID": {"string": gpu.address.nvml_bus_id.lower()},
            "numaNode": {"int": gpu.numa},
            "nvlinkLinks": {"int": sum(1 for p in gpu.ports if p.up)},
            "migCapable": {"bool": gpu.sku.mig is not None},
        }
        if domain is not None and domain.fabric is not None:
            attributes["cliqueID"] = {"string": f"{domain.fabric.cluster_uuid}.{domain.fabric.clique_id}"}
        devices.append({
            "name": f"gpu-{gpu.index}",
            "basic": {"attributes": attributes, "capacity": {"memory": {"value": _quantity(gpu.memory_bytes)}}},
        })
    return {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node.name}-{DRA_DRIVER}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
