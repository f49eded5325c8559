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

import functools
import hashlib
from dataclasses import dataclass

from fakehw.agent.state import GpuState
from fakehw.model.catalogue import GpuSku
from fakehw.model.system import Gpu

# nvmlClocksThrottleReasons bits that lower the clocks (power cap, thermal, power brake).
_CLOCK_LOWERING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def unit(seed: int, *parts: object) -> float:
    """A deterministic number in [0, 1) for (seed, parts)."""
    return units(1, seed, *parts)[0]


def units(count: int, seed: int, *parts: object) -> tuple[float, ...]:
    """``count`` (at most 8) deterministic numbers in [0, 1) for (seed, parts), from one hash: the readings a GPU's
    record takes per generation (one hash each cost 2-5 us, six of them per injection for the changed GPU)."""
    digest = hashlib.blake2b("|".join([str(seed), *map(str, parts)]).encode(), digest_size=8 * count).digest()
    return tuple(int.from_bytes(digest[8 * i:8 * i + 8], "little") / 2**64 for i in range(count))


def stable_int(seed: int, *parts: object, bits: int = 32) -> int:
    return int(unit(seed, *parts) * 2**bits)


@functools.lru_cache(maxsize=4096)
def _fixed(seed: int, node: str, gpu: str, ports: tuple[int, ...]) -> tuple[tuple[int, ...], int, float]:
    """What :func:`gpu_readings` takes from :func:`unit` without the generation, which never changes for a GPU:
    each port's NVLink rate, the energy counter's base and the HBM's temperature offset. A fault re-renders its
    GPU's record and so these readings (20 hashes on a GB200 board with 18 ports, for the same answers every time);
    kept once per GPU instead (issue 19). Keyed by strings and numbers only, so a hit costs a tuple's hash."""
    rates = tuple(int(unit(seed, node, gpu, "nvlink", port) * 4096) + 1 for port in ports)
    return rates, stable_int(seed, node, gpu, "energy", bits=30), unit(seed, node, gpu, "hbm-temp")


@dataclass(frozen=True, slots=True)
class Engines:
    """Copy engines, video decoders/encoders, JPEG decoders and optical-flow accelerators of a board."""

    copy: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int


def engines(sku: GpuSku) -> Engines:
    """Engine counts per architecture (public spec sheets, approx.; the GDDR boards have video encoders)."""
    if sku.architecture == "turing":
        return Engines(copy=3, decoders=2, encoders=1, jpegs=0, ofas=0)
    if sku.memory_type.startswith("GDDR"):
        return Engines(copy=2, decoders=4, encoders=2, jpegs=4, ofas=1)
    return {
        "ampere": Engines(copy=8, decoders=5, encoders=0, jpegs=1, ofas=1),
        "hopper": Engines(copy=8, decoders=7, encoders=0, jpegs=7, ofas=1),
        "blackwell": Engines(copy=8, decoders=7, encoders=0, jpegs=7, ofas=1),
        "ada": Engines(copy=2, decoders=4, encoders=2, jpegs=4, ofas=1),
    }[sku.architecture]


def memory_bus_width(sku: GpuSku) -> int:
    """Bits: 5120 for HBM2e/HBM3 boards, 8192 for Blackwell HBM3e; GDDR6: 256 (T4), 384 (L40S), 192 (L4)
    (public spec sheets, approx.)."""
    if sku.memory_type.startswith("GDDR"):
        return {"turing": 256}.get(sku.architecture, 384 if sku.memory_mib > 32768 else 192)
    return 8192 if sku.architecture == "blackwell" else 5120


def reserved_mib(sku: GpuSku) -> int:
    """Framebuffer the driver keeps for itself (``nvmlMemory_v2_t.reserved``): the board's, from the catalogue."""
    return sku.memory_reserved_mib


PCIE_SPEED_MBPS = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}


@dataclass(frozen=True, slots=True)
class GpuReadings:
    util_gpu: int
    util_memory: int
    power_mw: int
    power_average_mw: int
    memory_power_mw: int
    module_power_mw: int
    energy_mj: int
    clocks_current: tuple[int, int, int, int]
    """graphics, SM, memory, video (MHz)."""
    idle: bool
    """No work on the GPU: the "GPU idle" clock event reason is active and the clocks are the idle ones."""
    mem_temperature: int
    pcie_tx_kbs: int
    pcie_rx_kbs: int
    bar1_used: int
    nvlink_rx: tuple[tuple[int, int], ...]
    """Per port: utilization counters 0 and 1 (received)."""
    nvlink_tx: tuple[tuple[int, int], ...]
    gpm: GpmMetrics


@dataclass(frozen=True, slots=True)
class GpmMetrics:
    """GPM (DCGM profiling) metrics in hundredths of a percent, derived from the utilization: an SM busy for
    ``util`` percent of the time is active that much, keeps about 60 % of its warp slots occupied and spends a
    share of its cycles in each pipe (stand-in ratios, so DCGM-style consumers see coherent numbers)."""

    sm_activity: int
    sm_occupancy: int
    tensor_activity: int
    dram_bw_util: int
    fp64_activity: int
    fp32_activity: int
    fp16_activity: int
    graphics_activity: int


def gpm_metrics(util_gpu: int, util_memory: int) -> GpmMetrics:
    u = util_gpu * 100
    return GpmMetrics(
        sm_activity=u,
        sm_occupancy=u * 6 // 10,
        tensor_activity=u * 4 // 10,
        dram_bw_util=util_memory * 100,
        fp64_activity=u // 10,
        fp32_activity=u * 3 // 10,
        fp16_activity=u * 2 // 10,
        graphics_activity=u,
    )


def gpu_readings(seed: int, gpu: Gpu, state: GpuState, generation: int, load: int = 0) -> GpuReadings:
    """The readings of ``gpu`` at ``generation`` with ``load`` percent of work on it (0: idle; see the module
    docstring for what they depend on)."""
    sku = gpu.sku
    key = (gpu.node, gpu.name)
    util_gpu = max(0, min(100, load))
    util_mem = util_gpu * 2 // 5
    idle = util_gpu == 0
    power = sku.power
    u_power, u_average, u_memory, u_module, u_tx, u_rx = units(6, seed, *key, "readings", generation)
    draw_w = power.idle_w + u_power + util_gpu * (power.default_limit_w - power.idle_w) / 100
    power_mw = min(int(draw_w * 1000), state.power_limit_w * 1000)
    average_mw = min(int((draw_w - 0.2 + u_average * 0.4) * 1000), state.power_limit_w * 1000)
    memory_mw = int(((power.memory_idle_w or 0) + u_memory) * 1000)
    module_mw = 0
    if power.module is not None:
        module_mw = int((power.module.idle_w + (draw_w - power.idle_w) + u_module) * 1000)
    # One generation counts as one second at the current draw: monotonic and reproducible.
    rates, energy_base, hbm_temp = _fixed(seed, gpu.node, gpu.name, tuple(p.port for p in gpu.ports))
    energy = energy_base + generation * int(draw_w) * 1000
    clocks = sku.clocks
    if idle:
        rest = clocks.idle_clocks
        graphics, sm, mem, video = rest.graphics_mhz, rest.graphics_mhz, rest.mem_mhz, rest.video_mhz
    else:
        graphics, sm, mem, video = (clocks.graphics_max_mhz, clocks.sm_max_mhz, clocks.mem_max_mhz,
                                    clocks.video_max_mhz)
    if state.throttle_reasons & _CLOCK_LOWERING:
        graphics = min(graphics, clocks.graphics_max_mhz * 3 // 5 // 15 * 15)
        sm = min(sm, clocks.sm_max_mhz * 3 // 5 // 15 * 15)
    rx = []
    tx = []
    for rate in rates:
        rx.append((generation * rate * 1024, generation * rate * 16))
        tx.append((generation * (rate + 7) * 1024, generation * (rate + 7) * 16))
    return GpuReadings(
        util_gpu=util_gpu,
        util_memory=util_mem,
        power_mw=power_mw,
        power_average_mw=average_mw,
        memory_power_mw=memory_mw,
        module_power_mw=module_mw,
        energy_mj=energy,
        clocks_current=(graphics, sm, mem, video),
        idle=idle,
        mem_temperature=state.temperature_c + int(hbm_temp * 4) - 1,
        pcie_tx_kbs=300 + int(u_tx * 600),
        pcie_rx_kbs=250 + int(u_rx * 650),
        bar1_used=2**20,
        nvlink_rx=tuple(rx),
        nvlink_tx=tuple(tx),
        gpm=gpm_metrics(util_gpu, util_mem),
    )
