"""The hardware catalogue: GPU, NVSwitch, NIC and CXL device SKUs that profiles refer to by name.

The catalogue is data (``catalogue.yaml``) checked by these models on load. It is immutable and loaded once;
everything a SKU implies (NVML name, PCI ids, NVLink link count, MIG profiles) is read from here so a profile
only says ``sku: h100-sxm5-80gb``.
"""

from __future__ import annotations

from enum import IntEnum
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class NvmlArchitecture(IntEnum):
    """``nvmlDeviceArchitecture_t`` values."""

    KEPLER = 2
    MAXWELL = 3
    PASCAL = 4
    VOLTA = 5
    TURING = 6
    AMPERE = 7
    ADA = 8
    HOPPER = 9
    BLACKWELL = 10


class MemClock(_Data):
    """A supported memory clock and the highest graphics clock allowed with it (nvidia-smi's supported clocks)."""

    mem_mhz: int = Field(alias="memMHz")
    graphics_max_mhz: int = Field(alias="graphicsMaxMHz")


class IdleClocks(_Data):
    """Clocks an idle board reports (P0, clock event reason "GPU idle" active); SM runs at the graphics clock."""

    graphics_mhz: int = Field(alias="graphicsMHz")
    mem_mhz: int = Field(alias="memMHz")
    video_mhz: int = Field(alias="videoMHz")


class Clocks(_Data):
    sm_max_mhz: int = Field(alias="smMaxMHz")
    mem_max_mhz: int = Field(alias="memMaxMHz")
    graphics_max_mhz: int = Field(alias="graphicsMaxMHz")
    video_max_mhz: int = Field(alias="videoMaxMHz")
    graphics_min_mhz: int = Field(210, alias="graphicsMinMHz", description="lowest supported graphics clock")
    graphics_step_mhz: float = Field(15, alias="graphicsStepMHz", description="spacing of supported graphics clocks")
    app_graphics_mhz: int | None = Field(None, alias="appGraphicsMHz",
                                         description="default applications clock (default: graphics max)")
    mem_clocks: tuple[MemClock, ...] = Field((), alias="memClocks",
                                             description="supported memory clocks, highest first (default: max only)")
    idle: IdleClocks | None = None

    @property
    def supported_mem(self) -> tuple[MemClock, ...]:
        if self.mem_clocks:
            return self.mem_clocks
        return (MemClock(mem_mhz=self.mem_max_mhz, graphics_max_mhz=self.graphics_max_mhz),)

    @property
    def app_graphics(self) -> int:
        return self.app_graphics_mhz or self.graphics_max_mhz

    @property
    def idle_clocks(self) -> IdleClocks:
        return self.idle or IdleClocks(graphics_mhz=self.graphics_min_mhz, mem_mhz=self.mem_max_mhz,
                                       video_mhz=self.video_max_mhz)

    def graphics_top_x2(self, mem_mhz: int) -> int:
        """The highest graphics clock with ``mem_mhz`` in half MHz: the cap, or half a MHz above it when the
        steps from the minimum do not land on it (the driver's 2062.5 MHz top is listed as 2062); 0 if the
        memory clock is not supported."""
        cap = next((m.graphics_max_mhz for m in self.supported_mem if m.mem_mhz == mem_mhz), None)
        if cap is None:
            return 0
        step_x2 = round(self.graphics_step_mhz * 2)
        return cap * 2 + (1 if (cap - self.graphics_min_mhz) * 2 % step_x2 else 0)

    def supported_graphics(self, mem_mhz: int) -> tuple[int, ...]:
        """Graphics clocks supported with ``mem_mhz``, highest first: from the top down to the minimum in steps,
        each rounded down to whole MHz (7.5 MHz steps give 2062, 2055, 2047, ...)."""
        top_x2 = self.graphics_top_x2(mem_mhz)
        if top_x2 == 0:
            return ()
        step_x2 = round(self.graphics_step_mhz * 2)
        count = (top_x2 - self.graphics_min_mhz * 2) // step_x2 + 1
        return tuple((top_x2 - k * step_x2) // 2 for k in range(count))


class ModulePower(_Data):
    """Power of the whole module (a Grace-Blackwell superchip) as the GPU's driver reports it."""

    default_limit_w: int = Field(alias="defaultLimitW")
    min_limit_w: int = Field(alias="minLimitW")
    max_limit_w: int = Field(alias="maxLimitW")
    idle_w: int = Field(alias="idleW")


class Power(_Data):
    default_limit_w: int = Field(alias="defaultLimitW")
    min_limit_w: int = Field(alias="minLimitW")
    max_limit_w: int = Field(alias="maxLimitW")
    idle_w: int = Field(alias="idleW")
    average_readout: bool = Field(True, alias="averageReadout",
                                  description="the board reports an average power draw besides the instant one")
    memory_idle_w: float | None = Field(None, alias="memoryIdleW",
                                        description="memory power draw at idle (boards that report it)")
    module: ModulePower | None = None
    smoothing: bool = Field(False, description="power smoothing (Blackwell); reading it needs root")


class TLimit(_Data):
    """Thresholds relative to T.Limit (the slowdown reference) that Hopper, Ada and Blackwell report."""

    shutdown_c: int = Field(alias="shutdownC")
    slowdown_c: int = Field(alias="slowdownC")
    max_gpu_c: int = Field(0, alias="maxGpuC")
    max_mem_c: int | None = Field(0, alias="maxMemC")


class Thermal(_Data):
    idle_c: int = Field(alias="idleC")
    slowdown_c: int = Field(alias="slowdownC")
    shutdown_c: int = Field(alias="shutdownC")
    max_operating_c: int = Field(alias="maxOperatingC")
    mem_max_c: int | None = Field(None, alias="memMaxC", description="HBM shutdown threshold (absolute)")
    tlimit: TLimit | None = None


class PcieLink(_Data):
    generation: int = Field(ge=1, le=6)
    width: int = Field(ge=1, le=32)
    device_generation: int | None = Field(None, alias="deviceGeneration", ge=1, le=6,
                                          description="the GPU's own maximum, when above the link's")
    idle_width: int | None = Field(None, alias="idleWidth", ge=1, le=32,
                                   description="link width an idle board trains down to")
    atomics_outbound: bool = Field(False, alias="atomicsOutbound",
                                   description="PCIe atomics the GPU issues (B200 reports them)")
    atomics_inbound: bool = Field(False, alias="atomicsInbound",
                                  description="PCIe atomics the GPU completes (B200, GB200, GB300 report them)")

    @property
    def gpu_max_generation(self) -> int:
        return self.device_generation or self.generation

    @property
    def current_width(self) -> int:
        return self.idle_width or self.width


class NVLinkCapability(_Data):
    generation: int = Field(ge=0, le=6, description="NVLink generation (3 = A100, 4 = H100, 5 = B200); 0 = none")
    links: int = Field(ge=0, le=18)
    link_bandwidth_gbs: float = Field(alias="linkBandwidthGBs", ge=0, description="per link, per direction")

    @property
    def nvml_version(self) -> int:
        """The ``NVML_NVLINK_VERSION_*`` enum value: 3.0 -> 4, 4.0 -> 6, 5.0 -> 7."""
        return {0: 0, 1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8}[self.generation]

    @property
    def nvml_speed_mbps(self) -> int:
        """Per-link speed NVML reports (``nvidia-smi nvlink -s``): the signalling rate, a little above the marketed
        data rate on NVLink 4 and 5 (26.562 and 53.125 GB/s on real H100 and B200)."""
        return {0: 0, 1: 20000, 2: 25000, 3: 25000, 4: 26562, 5: 53125, 6: 106250}[self.generation]


class MigProfile(_Data):
    """A GPU instance profile as ``nvidia-smi mig -lgip`` lists it (engine counts per instance)."""

    name: str
    index: int = Field(ge=0, lt=0x12, description="NVML_GPU_INSTANCE_PROFILE_* (what GetGpuInstanceProfileInfo takes)")
    id: int = Field(ge=0, description="the profile ID nvidia-smi shows and GPU instances report")
    slices: int = Field(ge=1, le=8, description="compute slices (the 'Ng' of the name)")
    memory_slices: int = Field(alias="memorySlices", ge=1, le=8, description="placement size")
    memory_mib: int = Field(alias="memoryMiB")
    max_instances: int = Field(alias="maxInstances")
    multiprocessors: int
    copy_engines: int = Field(alias="copyEngines")
    decoders: int
    encoders: int = 0
    jpegs: int
    ofas: int


class MigCapability(_Data):
    max_instances: int = Field(alias="maxInstances", description="compute slices of the GPU")
    memory_slices: int = Field(8, alias="memorySlices")
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def by_index(self, index: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.index == index), None)

    def by_id(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.id == profile_id), None)


class GpuSku(_Data):
    id: str = ""
    name: str
    architecture: Literal["turing", "ampere", "ada", "hopper", "blackwell"]
    pci_device_id: int = Field(alias="pciDeviceId")
    pci_subsystem_id: int = Field(alias="pciSubsystemId")
    compute_capability: str = Field(alias="computeCapability")
    memory_mib: int = Field(alias="memoryMiB")
    memory_type: str
    hbm_bandwidth_gbs: float = Field(alias="hbmBandwidthGBs")
    bar1_mib: int = Field(alias="bar1MiB")
    multiprocessors: int
    clocks: Clocks
    power: Power
    thermal: Thermal
    pcie: PcieLink
    nvlink: NVLinkCapability
    board_part_number: str
    gpu_part_number: str = Field("", description="the GPU chip's part number (nvidia-smi gpu_part_number)")
    vbios: str
    inforom: str
    inforom_oem: str = Field("2.1", alias="inforomOem")
    inforom_ecc: str = Field("7.16", alias="inforomEcc")
    inforom_bbx: bool = Field(False, alias="inforomBbx",
                              description="the infoROM black box reports its last flush (H100, GB200, GB300 do)")
    memory_reserved_mib: int = Field(alias="memoryReservedMiB", description="framebuffer the driver keeps")
    fabric_health: tuple[Literal["degraded-bandwidth", "route-recovery", "route-unhealthy",
                                 "access-timeout-recovery", "incorrect-configuration"], ...] = Field(
        (), alias="fabricHealth", description="GPU fabric health fields the board reports (the rest read N/A)")
    row_remap_banks: int | None = Field(None, alias="rowRemapBanks",
                                        description="banks of the row remapper (histogram max); none: the board "
                                                    "retires pages instead (before Ampere)")
    mig: MigCapability | None = None
    p2p_pcie: bool = Field(default=True, alias="p2pPcie")
    min_driver_branch: int = Field(default=535, alias="minDriverBranch",
                                   description="oldest driver branch that supports the board")

    @property
    def nvml_architecture(self) -> NvmlArchitecture:
        return NvmlArchitecture[self.architecture.upper()]

    @property
    def cuda_major_minor(self) -> tuple[int, int]:
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def pci_device_vendor_id(self) -> int:
        """NVML's ``pciDeviceId``: device id in the upper 16 bits, vendor 0x10de in the lower."""
        return (self.pci_device_id << 16) | 0x10DE


class NVSwitchSku(_Data):
    id: str = ""
    name: str
    pci_device_id: int = Field(alias="pciDeviceId")
    nvlink_generation: int = Field(alias="nvlinkGeneration")
    ports: int


class NicSku(_Data):
    id: str = ""
    name: str
    vendor_id: int = Field(alias="vendorId")
    device_id: int = Field(alias="deviceId")
    rate_gbps: int = Field(alias="rateGbps")


class CxlMemdevSku(_Data):
    id: str = ""
    name: str
    vendor_id: int = Field(alias="vendorId")
    device_id: int = Field(alias="deviceId")
    latency_ns: int = Field(alias="latencyNs")
    bandwidth_gbs: float = Field(alias="bandwidthGBs")
    firmware_version: str = Field("", alias="firmwareVersion")
    """The Identify Memory Device "FW Revision" (memN/firmware_version)."""
    label_storage_size: int = Field(0, alias="labelStorageSize")
    """Label storage area bytes (memN/label_storage_size)."""
    payload_max: int = Field(2048, alias="payloadMax")
    """Mailbox payload size (memN/payload_max)."""


class Catalogue(_Data):
    gpus: dict[str, GpuSku]
    nvswitches: dict[str, NVSwitchSku]
    nics: dict[str, NicSku]
    cxl_memdevs: dict[str, CxlMemdevSku]


@cache
def catalogue() -> Catalogue:
    """The built-in catalogue (loaded once; immutable)."""
    text = resources.files("fakehw.model").joinpath("catalogue.yaml").read_text()
    raw = yaml.safe_load(text)
    for section in raw.values():
        for sku_id, sku in section.items():
            sku["id"] = sku_id
    return Catalogue.model_validate(raw)
