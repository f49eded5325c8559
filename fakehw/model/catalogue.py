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


class Clocks(_Data):
    sm_max_mhz: int = Field(alias="smMaxMHz")
    mem_max_mhz: int = Field(alias="memMaxMHz")
    graphics_max_mhz: int = Field(alias="graphicsMaxMHz")
    video_max_mhz: int = Field(alias="videoMaxMHz")


class Power(_Data):
    default_limit_w: int = Field(alias="defaultLimitW")
    min_limit_w: int = Field(alias="minLimitW")
    max_limit_w: int = Field(alias="maxLimitW")
    idle_w: int = Field(alias="idleW")


class Thermal(_Data):
    idle_c: int = Field(alias="idleC")
    slowdown_c: int = Field(alias="slowdownC")
    shutdown_c: int = Field(alias="shutdownC")
    max_operating_c: int = Field(alias="maxOperatingC")


class PcieLink(_Data):
    generation: int = Field(ge=1, le=6)
    width: int = Field(ge=1, le=32)


class NVLinkCapability(_Data):
    generation: int = Field(ge=0, le=6, description="NVLink generation (3 = A100, 4 = H100, 5 = B200); 0 = none")
    links: int = Field(ge=0, le=18)
    link_bandwidth_gbs: float = Field(alias="linkBandwidthGBs", ge=0, description="per link, per direction")

    @property
    def nvml_version(self) -> int:
        """The ``NVML_NVLINK_VERSION_*`` enum value: 3.0 -> 4, 4.0 -> 6, 5.0 -> 7."""
        return {0: 0, 1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8}[self.generation]


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
    architecture: Literal["ampere", "ada", "hopper", "blackwell"]
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
    vbios: str
    inforom: str
    mig: MigCapability | None = None
    p2p_pcie: bool = Field(default=True, alias="p2pPcie")

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
