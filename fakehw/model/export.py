"""JSON views of the model (for ``node.json``, ``fakehw show --json`` and tools that do not speak Python)."""

from __future__ import annotations

from typing import Any

from fakehw.model.system import Gpu, Node, System
from fakehw.model.topology import NodeTopology
from fakehw.model.units import format_cpulist


def gpu_to_json(gpu: Gpu) -> dict[str, Any]:
    return {
        "name": gpu.name,
        "index": gpu.index,
        "minor": gpu.minor,
        "sku": gpu.sku.id,
        "product": gpu.sku.name,
        "uuid": gpu.uuid,
        "serial": gpu.serial,
        "bus_id": gpu.address.nvml_bus_id,
        "pci_device_id": f"0x{gpu.sku.pci_device_vendor_id:08X}",
        "memory_mib": gpu.sku.memory_mib,
        "numa": gpu.numa,
        "hbm_numa": gpu.hbm_numa,
        "compute_capability": gpu.sku.compute_capability,
        "nvlink": [
            {"link": p.port, "remote": p.remote_id, "remote_kind": p.remote_kind, "remote_port": p.remote_port,
             "up": p.up, "bandwidth_gbs": p.bandwidth_gbs}
            for p in gpu.ports
        ],
        "c2c": None if gpu.c2c is None else {"socket": gpu.c2c.socket, "bandwidth_gbs": gpu.c2c.bandwidth_gbs},
        "mig": {
            "enabled": gpu.mig_enabled,
            "instances": [{"index": m.index, "profile": m.profile.name, "uuid": m.uuid} for m in gpu.mig_instances],
        },
    }


def topology_to_json(topo: NodeTopology) -> dict[str, Any]:
    return {
        "gpus": list(topo.gpus),
        "nics": list(topo.nics),
        "levels": [[lv.short for lv in row] for row in topo.levels],
        "gpu_nic_levels": [[lv.short for lv in row] for row in topo.gpu_nic_levels],
        "nvlinks": [list(r) for r in topo.nvlinks],
        "p2p": {cap.name.lower(): [[s.name for s in row] for row in m] for cap, m in topo.p2p.items()},
        "cpu_affinity": [format_cpulist(c) for c in topo.cpu_affinity],
        "numa_affinity": list(topo.numa_affinity),
        "gpu_numa_id": list(topo.gpu_numa_id),
    }


def node_to_json(system: System, node: Node) -> dict[str, Any]:
    cpu = node.cpu
    return {
        "system": system.name,
        "profile_digest": system.digest,
        "name": node.name,
        "group": node.group,
        "nvlink_domain": node.nvlink_domain,
        "driver": {"version": system.driver.version, "cuda": system.driver.cuda_version},
        "cpu": {
            "arch": cpu.arch,
            "vendor": cpu.vendor,
            "model": cpu.model,
            "sockets": cpu.sockets,
            "cores_per_socket": cpu.cores_per_socket,
            "threads_per_core": cpu.threads_per_core,
            "logical_cpus": cpu.logical_cpus,
            "isa": list(cpu.isa),
        },
        "numa": [
            {"id": n.id, "kind": n.kind, "cpus": format_cpulist(n.cpus), "memory": n.memory, "gpu": n.gpu}
            for n in node.numa
        ],
        "numa_distances": [list(r) for r in node.distances],
        "gpus": [gpu_to_json(g) for g in node.gpus],
        "nvswitches": [
            {"name": s.name, "sku": s.sku.id, "bus_id": s.address.nvml_bus_id, "ports": len(s.ports)}
            for s in node.nvswitches
        ],
        "nics": [
            {"name": n.name, "netdev": n.netdev, "sku": n.sku.id, "bus_id": str(n.address), "numa": n.numa,
             "mtu": n.mtu, "rail": n.rail, "link_layer": n.link_layer, "mac": n.mac}
            for n in node.nics
        ],
        "cxl": {
            "host_bridges": [hb.name for hb in node.cxl.host_bridges],
            "memdevs": [
                {"name": m.name, "ram_size": m.ram_size, "pmem_size": m.pmem_size, "parent": m.parent,
                 "serial": m.serial}
                for m in node.cxl.memdevs
            ],
            "regions": [
                {"name": r.name, "size": r.size, "targets": list(r.targets), "numa": r.numa, "mode": r.mode}
                for r in node.cxl.regions
            ],
        },
        "memory_pools": [
            {"name": p.name, "tier": p.tier, "capacity": p.capacity, "policy": p.policy, "source": p.source,
             "latency_domain": p.latency.name, "latency_ns": p.latency.latency_ns,
             "bandwidth_gbs": p.bandwidth_gbs, "resource": p.resource_name}
            for p in node.memory_pools
        ],
        "labels": dict(node.labels),
        "topology": topology_to_json(system.topology.nodes[node.name]),
    }
