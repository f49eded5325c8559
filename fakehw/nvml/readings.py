"""Readings that a real GPU reports but the model does not fix: utilization, power draw, counters.

They must look alive and still be reproducible, so each is a pure function of (profile seed, node, GPU,
generation): the same seed and the same sequence of injected faults give the same answers in every run, and a
new generation (every fault, heal or agent restart) moves the monotonic counters on. Values the model does fix
(temperatures, power limits, ECC counts, link state) come from the runtime state, never from here.

Also here: per-architecture facts the catalogue does not carry (engine counts, memory bus width, SMs per MIG
slice). They are public figures or plausible stand-ins, marked as such, and no test depends on them being true
of real silicon beyond what the model itself says.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fakehw.agent.state import GpuState
from fakehw.model.catalogue import GpuSku
from fakehw.model.system import Gpu

# nvmlClocksThrottleReasons bits that lower the clocks (power cap, thermal, power brake).
_CLOCK_LOWERING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def unit(seed: int, *parts: object) -> float:
    """A deterministic number in [0, 1) for (seed, parts)."""
    digest = hashlib.blake2b("|".join([str(seed), *map(str, parts)]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def stable_int(seed: int, *parts: object, bits: int = 32) -> int:
    return int(unit(seed, *parts) * 2**bits)


@dataclass(frozen=True, slots=True)
class Engines:
    """Copy engines, video decoders/encoders, JPEG decoders and optical-flow accelerators of a board."""

    copy: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int


def engines(sku: GpuSku) -> Engines:
    """Engine counts per architecture (public spec sheets, approx.; the L4 is the one with encoders)."""
    if sku.memory_type.startswith("GDDR"):
        return Engines(copy=2, decoders=4, encoders=2, jpegs=4, ofas=1)
    return {
        "ampere": Engines(copy=8, decoders=5, encoders=0, jpegs=1, ofas=1),
        "hopper": Engines(copy=8, decoders=7, encoders=0, jpegs=7, ofas=1),
        "blackwell": Engines(copy=8, decoders=7, encoders=0, jpegs=7, ofas=1),
        "ada": Engines(copy=2, decoders=4, encoders=2, jpegs=4, ofas=1),
    }[sku.architecture]


def memory_bus_width(sku: GpuSku) -> int:
    """Bits: 5120 for HBM2e/HBM3 boards, 8192 for Blackwell HBM3e, 192 for the GDDR6 L4 (approx.)."""
    if sku.memory_type.startswith("GDDR"):
        return 192
    return 8192 if sku.architecture == "blackwell" else 5120


def reserved_mib(sku: GpuSku) -> int:
    """Framebuffer the driver keeps for itself (what ``nvmlMemory_v2_t.reserved`` reports; approx.)."""
    return max(256, sku.memory_mib // 160)


PCIE_SPEED_MBPS = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}


@dataclass(frozen=True, slots=True)
class GpuReadings:
    util_gpu: int
    util_memory: int
    power_mw: int
    energy_mj: int
    clocks_current: tuple[int, int, int, int]
    """graphics, SM, memory, video (MHz)."""
    mem_temperature: int
    pcie_tx_kbs: int
    pcie_rx_kbs: int
    bar1_used: int
    nvlink_rx: tuple[tuple[int, int], ...]
    """Per port: utilization counters 0 and 1 (received)."""
    nvlink_tx: tuple[tuple[int, int], ...]


def gpu_readings(seed: int, gpu: Gpu, state: GpuState, generation: int) -> GpuReadings:
    """The readings of ``gpu`` at ``generation`` (see the module docstring for what they depend on)."""
    sku = gpu.sku
    key = (gpu.node, gpu.name)
    util_gpu = int(unit(seed, *key, "util", generation) * 3)
    util_mem = int(unit(seed, *key, "mem-util", generation) * 2)
    draw_w = sku.power.idle_w + unit(seed, *key, "power", generation) * 12 + util_gpu * 4
    power_mw = min(int(draw_w * 1000), state.power_limit_w * 1000)
    # One generation counts as one second at idle draw: monotonic and reproducible.
    energy = stable_int(seed, *key, "energy", bits=30) + generation * sku.power.idle_w * 1000
    clocks = sku.clocks
    graphics, sm = clocks.graphics_max_mhz, clocks.sm_max_mhz
    if state.throttle_reasons & _CLOCK_LOWERING:
        graphics = graphics * 3 // 5 // 15 * 15
        sm = sm * 3 // 5 // 15 * 15
    rx = []
    tx = []
    for p in gpu.ports:
        rate = int(unit(seed, *key, "nvlink", p.port) * 4096) + 1
        rx.append((generation * rate * 1024, generation * rate * 16))
        tx.append((generation * (rate + 7) * 1024, generation * (rate + 7) * 16))
    return GpuReadings(
        util_gpu=util_gpu,
        util_memory=util_mem,
        power_mw=power_mw,
        energy_mj=energy,
        clocks_current=(graphics, sm, clocks.mem_max_mhz, clocks.video_max_mhz),
        mem_temperature=state.temperature_c + 2 + int(unit(seed, *key, "hbm-temp") * 3),
        pcie_tx_kbs=100 + int(unit(seed, *key, "pcie-tx", generation) * 900),
        pcie_rx_kbs=100 + int(unit(seed, *key, "pcie-rx", generation) * 900),
        bar1_used=2 * 2**20,
        nvlink_rx=tuple(rx),
        nvlink_tx=tuple(tx),
    )
