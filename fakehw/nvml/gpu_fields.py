"""GPU record fields that come from the board, the driver branch and where the GPU sits (not from faults).

The values follow the real boards (``../shared/reference/captures``, read through the catalogue): clocks a
board idles at and supports, T.Limit thresholds and margin, module and memory power, addressing mode, C2C,
fabric state and health fields, board id. :func:`board_static_fields` (built once per GPU) and
:func:`board_state_fields` (on every change) return them as keyword arguments of
:class:`fakehw.nvml.layout.GpuRecord`; :mod:`fakehw.nvml.snapshot` adds the rest.
"""

from __future__ import annotations

import uuid
from typing import Any

from fakehw.agent.state import GpuState
from fakehw.model.catalogue import GpuSku
from fakehw.model.system import Gpu, Node, System
from fakehw.nvml import layout, support
from fakehw.nvml.readings import GpuReadings, stable_int

FABRIC_NOT_SUPPORTED, FABRIC_COMPLETED = 0, 3
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED = 0, 3
# Fabric health mask: 2-bit fields (1 = true, 2 = false, 0 = not reported) at these bit positions; incorrect
# configuration is a 4-bit field at 8 (1 = none).
HEALTH_BITS = {"degraded-bandwidth": 0, "route-recovery": 2, "route-unhealthy": 4, "access-timeout-recovery": 6}
INCORRECT_CONFIGURATION_SHIFT, INCORRECT_CONFIGURATION_NONE = 8, 1
HEALTH_SUMMARY_NA, HEALTH_SUMMARY_HEALTHY, HEALTH_SUMMARY_UNHEALTHY, HEALTH_SUMMARY_LIMITED = 0, 1, 2, 3
CORES_PER_SM = {"turing": 64, "ampere": 64, "ada": 128, "hopper": 128, "blackwell": 128}
"""FP32 CUDA cores per SM (public architecture whitepapers; GA100 has 64, e.g. 108 SMs -> 6912 on A100)."""
FIRST_GPU_IRQ = 142
"""Interrupt line of GPU 0 (assumed: MSI-X vectors are host-specific; consecutive per GPU here)."""
PCIE_ATOMICS_REPORTED = 0x3F
"""FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64: what the B200/GB200/GB300 captures list."""
BBX_EPOCH = 1_767_225_600
"""2026-01-01 UTC: the infoROM black box was last flushed some weeks after it (a fixed date keeps renders equal)."""


def board_id(gpu: Gpu) -> int:
    """``nvmlDeviceGetBoardId``: every capture's board id is the GPU's PCI domain, bus and device
    (0x5300 for 0000:53:00.0, 0x80600 for 0008:06:00.0, 0x1e for 0000:00:1e.0)."""
    a = gpu.address
    return (a.domain << 16) | (a.bus << 8) | a.device


def _clocks(sku: GpuSku) -> dict[str, Any]:
    clocks = sku.clocks
    mem = clocks.supported_mem[: layout.MEM_CLOCKS]
    tops = [clocks.graphics_top_x2(m.mem_mhz) for m in mem]
    pad = layout.MEM_CLOCKS - len(mem)
    return {
        "graphics_clock_min": clocks.graphics_min_mhz,
        "graphics_step_x2": round(clocks.graphics_step_mhz * 2),
        "mem_clock_count": len(mem),
        "mem_clocks": tuple(m.mem_mhz for m in mem) + (0,) * pad,
        "graphics_top_x2": tuple(tops) + (0,) * pad,
    }


def _thermal(sku: GpuSku, state: GpuState) -> dict[str, Any]:
    tl = sku.thermal.tlimit
    return {
        "temp_margin": sku.thermal.max_operating_c - state.temperature_c,
        "tlimit_shutdown": tl.shutdown_c if tl else 0,
        "tlimit_slowdown": tl.slowdown_c if tl else 0,
        "tlimit_gpu_max": tl.max_gpu_c if tl else 0,
        "tlimit_mem_max": tl.max_mem_c if tl and tl.max_mem_c is not None else 0,
    }


def _power(r: GpuReadings) -> dict[str, Any]:
    return {
        "power_average_mw": r.power_average_mw,
        "memory_power_mw": r.memory_power_mw,
        "module_power_mw": r.module_power_mw,
    }


def _module_limits(sku: GpuSku) -> dict[str, Any]:
    module = sku.power.module
    return {
        "module_limit_mw": module.default_limit_w * 1000 if module else 0,
        "module_default_limit_mw": module.default_limit_w * 1000 if module else 0,
        "module_min_limit_mw": module.min_limit_w * 1000 if module else 0,
        "module_max_limit_mw": module.max_limit_w * 1000 if module else 0,
    }


def _pdi(system: System, gpu: Gpu) -> dict[str, Any]:
    """The GPU's per-device identifier (``nvmlDeviceGetPdi``): a stable 64-bit number per GPU."""
    return {"pdi": stable_int(system.seed, gpu.uuid, "pdi", bits=63)}


def fabric(system: System, node: Node, gpu: Gpu, state: GpuState) -> dict[str, Any]:
    """GPU fabric info. Hopper and later behind NVSwitches are registered with the fabric manager: inside a
    multi-node NVLink domain with its cluster UUID and clique, on an HGX board with the all-zero UUID and clique 0
    (the H100 and B200 captures). The health fields a board reports come from the catalogue; faults set them."""
    sku = gpu.sku
    if sku.architecture not in ("hopper", "blackwell"):
        return {"fabric_supported": 0, "fabric_state": FABRIC_NOT_SUPPORTED, "fabric_status": NVML_ERROR_NOT_SUPPORTED}
    domain = system.domain_of(node)
    fab = domain.fabric if domain is not None else None
    switched = any(p.remote_kind == "switch" for p in gpu.ports)
    if fab is None and not switched:
        return {"fabric_supported": 1, "fabric_state": FABRIC_NOT_SUPPORTED, "fabric_status": NVML_ERROR_NOT_SUPPORTED}
    mask = 0
    for name, bit in HEALTH_BITS.items():
        if name in sku.fabric_health:
            mask |= (1 if name in state.fabric_health else 2) << bit
    if "incorrect-configuration" in sku.fabric_health:
        mask |= INCORRECT_CONFIGURATION_NONE << INCORRECT_CONFIGURATION_SHIFT
    if not sku.fabric_health:
        summary = HEALTH_SUMMARY_NA
    elif "route-unhealthy" in state.fabric_health:
        summary = HEALTH_SUMMARY_UNHEALTHY
    elif set(state.fabric_health) & set(sku.fabric_health):
        summary = HEALTH_SUMMARY_LIMITED
    else:
        summary = HEALTH_SUMMARY_HEALTHY
    return {
        "fabric_supported": 1,
        "fabric_cluster_uuid": tuple(uuid.UUID(fab.cluster_uuid).bytes) if fab else (0,) * 16,
        "fabric_state": FABRIC_COMPLETED,
        "fabric_status": NVML_SUCCESS,
        "fabric_clique_id": fab.clique_id if fab else 0,
        "fabric_health_mask": mask,
        "fabric_health_summary": summary,
    }


def gpm(r: GpuReadings) -> dict[str, Any]:
    g = r.gpm
    return {
        "gpm_sm_activity": g.sm_activity,
        "gpm_sm_occupancy": g.sm_occupancy,
        "gpm_tensor_activity": g.tensor_activity,
        "gpm_dram_bw_util": g.dram_bw_util,
        "gpm_fp64_activity": g.fp64_activity,
        "gpm_fp32_activity": g.fp32_activity,
        "gpm_fp16_activity": g.fp16_activity,
        "gpm_graphics_activity": g.graphics_activity,
    }


def board_static_fields(system: System, node: Node, gpu: Gpu) -> dict[str, Any]:
    """The fields that depend only on the model (the board, the driver branch, where the GPU sits): the agent
    computes them once per GPU, not on every change (``fakehw.nvml.snapshot``)."""
    sku = gpu.sku
    switched = any(p.remote_kind == "switch" for p in gpu.ports)
    c2c = gpu.c2c
    fields: dict[str, Any] = {
        "answers": support.answers(gpu, system.driver.branch, switched),
        "gpu_part_number": sku.gpu_part_number,
        "cuda_cores": sku.multiprocessors * CORES_PER_SM[sku.architecture],
        "irq": FIRST_GPU_IRQ + gpu.index,
        "addressing_mode": support.addressing_mode(gpu),
        "pcie_atomics_outbound": PCIE_ATOMICS_REPORTED if sku.pcie.atomics_outbound else 0,
        "pcie_atomics_inbound": PCIE_ATOMICS_REPORTED if sku.pcie.atomics_inbound else 0,
        "c2c_enabled": int(c2c is not None),
        "c2c_link_count": c2c.links if c2c else 0,
        "c2c_link_bandwidth_mbps": int(c2c.bandwidth_gbs * 1000 / 2 / c2c.links) if c2c else 0,
        "bbx_flush_time_us": (BBX_EPOCH + stable_int(system.seed, gpu.uuid, "bbx", bits=22)) * 1_000_000,
        "bbx_flush_duration_us": 60000 + stable_int(system.seed, gpu.uuid, "bbx-duration", bits=15),
    }
    fields.update(_clocks(sku))
    fields.update(_module_limits(sku))
    fields.update(_pdi(system, gpu))
    return fields


def board_state_fields(system: System, node: Node, gpu: Gpu, state: GpuState, r: GpuReadings) -> dict[str, Any]:
    """The fields that follow the GPU's runtime state and readings (temperature, power, fabric health, GPM)."""
    fields: dict[str, Any] = {}
    fields.update(_thermal(gpu.sku, state))
    fields.update(_power(r))
    fields.update(fabric(system, node, gpu, state))
    fields.update(gpm(r))
    return fields
