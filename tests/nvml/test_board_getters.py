"""Board getters no other test named (issue 16): memory bus width, PCIe max speed, power management and source,
GSP firmware mode, IRQ, driver model, adaptive clocking, supported clock reasons, infoROM checksum.

Expected values come from the real ``nvidia-smi -q -x`` captures (../shared/reference/captures/qx-*.xml), the
return codes, constants and units nvml.h (13.4.92) documents for each getter, and NVIDIA's published board
specifications, never from the snapshot code under test.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import partial
from types import ModuleType

import pytest

from tests.nvml.captures import board_capture, number
from tests.nvml.helpers import NodeSnap, snapshot_env
from tests.nvml.test_pynvml import error_of, handles

Nvml = Callable[..., NodeSnap]

PCIE_GEN_TO_MAX_SPEED = {1: 0x1, 2: 0x2, 3: 0x3, 4: 0x4, 5: 0x5, 6: 0x6}
"""nvml.h: NVML_PCIE_LINK_MAX_SPEED_2500MBPS 0x1 ... _64000MBPS 0x6; PCIe gen 1..6 signal at 2.5, 5, 8, 16, 32 and
64 GT/s (PCI-SIG base specifications), so generation n is constant n."""

CLOCK_REASON_BITS = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100,
}
"""nvml.h's nvmlClocksEventReason* masks (GpuIdle 0x1 ... DisplayClockSetting 0x100), keyed by the element names
nvidia-smi prints under <clocks_event_reasons>."""


def library() -> ctypes.CDLL:
    """The fake library pynvml is bound to, for calls with NULL pointers pynvml never makes."""
    return ctypes.CDLL("libnvidia-ml.so.1")


@pytest.mark.parametrize(("profile", "bits"), [("dgx-h100", 5120), ("dgx-a100", 5120), ("t4-cloud", 256)])
def test_memory_bus_width_is_the_published_interface_width(nvml: Nvml, pynvml_module: ModuleType, profile: str,
                                                           bits: int) -> None:
    """nvml.h: nvmlDeviceGetMemoryBusWidth returns the memory bus width (bits), INVALID_ARGUMENT for a NULL busWidth.
    NVIDIA's H100 and A100 whitepapers: five HBM stacks behind ten 512-bit memory controllers, a 5120-bit
    interface; the Tesla T4 datasheet (TU104): a 256-bit GDDR6 interface."""
    n = pynvml_module
    nvml(profile)
    for h in handles(n):
        assert n.nvmlDeviceGetMemoryBusWidth(h) == bits
    assert library().nvmlDeviceGetMemoryBusWidth(handles(n)[0], None) == n.NVML_ERROR_INVALID_ARGUMENT


@pytest.mark.parametrize(("profile", "board"), [("dgx-h100", "h100"), ("dgx-a100", "a100"), ("t4-cloud", "t4")])
def test_pcie_max_speed_is_the_constant_of_the_captured_max_link_gen(nvml: Nvml, pynvml_module: ModuleType,
                                                                       profile: str, board: str) -> None:
    """The captures' <max_link_gen>: 5 on the H100 (qx-h100.xml), 4 on the A100 (qx-a100.xml), 3 on the T4
    (qx-t4.xml). nvml.h defines nvmlDeviceGetPcieLinkMaxSpeed's answer through NVML_PCIE_LINK_MAX_SPEED_*: gen 5
    (32 GT/s) is _32000MBPS = 0x5, gen 4 _16000MBPS = 0x4, gen 3 _8000MBPS = 0x3 (its prose says "in MBPS", but a
    real consumer reads the constant: nvml-wrapper's max_pcie_link_speed converts the answer with TryFrom<u32> into
    its PcieLinkMaxSpeed enum of exactly these values). NULL maxSpeed: INVALID_ARGUMENT."""
    n = pynvml_module
    gen = int(board_capture(board)["/pci/pci_gpu_link_info/pcie_gen/max_link_gen"])
    nvml(profile)
    for h in handles(n):
        assert n.nvmlDeviceGetPcieLinkMaxSpeed(h) == PCIE_GEN_TO_MAX_SPEED[gen]
    assert library().nvmlDeviceGetPcieLinkMaxSpeed(handles(n)[0], None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_power_management_is_enabled_on_a_board_with_an_enforced_power_cap(nvml: Nvml, pynvml_module: ModuleType,
                                                                           h100: dict[str, str]) -> None:
    """nvml.h: the power management mode says whether a power management algorithm is active (the driver would
    slow the clocks when the conditions are met). The real H100 has one: it enforces a 700 W limit
    (<current_power_limit>) and its SW power cap has held its clocks for a non-zero time
    (<clocks_event_reasons_counters_sw_power_cap>). So NVML_FEATURE_ENABLED; NULL mode: INVALID_ARGUMENT."""
    n = pynvml_module
    nvml("dgx-h100")
    assert number(h100["/gpu_power_readings/current_power_limit"]) == 700
    assert number(h100["/clocks_event_reasons_counters/clocks_event_reasons_counters_sw_power_cap"]) > 0
    for h in handles(n):
        assert n.nvmlDeviceGetPowerManagementMode(h) == n.NVML_FEATURE_ENABLED
    assert library().nvmlDeviceGetPowerManagementMode(handles(n)[0], None) == n.NVML_ERROR_INVALID_ARGUMENT


@pytest.mark.parametrize("profile", ["dgx-h100", "t4-cloud"])
def test_a_data_center_board_runs_on_ac_power(nvml: Nvml, pynvml_module: ModuleType, profile: str) -> None:
    """nvml.h: NVML_POWER_SOURCE_AC 0x0, _BATTERY 0x1, _UNDERSIZED 0x2; a server's SXM or PCIe board is fed by the
    chassis supplies (AC), never a battery, and the captures report no power-supply fault (no HW power brake
    active). NULL powerSource: INVALID_ARGUMENT."""
    n = pynvml_module
    nvml(profile)
    for h in handles(n):
        assert n.nvmlDeviceGetPowerSource(h) == 0x0
    assert library().nvmlDeviceGetPowerSource(handles(n)[0], None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_gsp_firmware_is_enabled_where_the_capture_prints_its_version(nvml: Nvml, pynvml_module: ModuleType,
                                                                     h100: dict[str, str]) -> None:
    """qx-h100.xml prints <gsp_firmware_version> 580.105.08 (not N/A): the GSP firmware runs, so
    nvmlDeviceGetGspFirmwareMode's isEnabled is true, and it runs by default (nobody switched it on: nvml.h's
    defaultMode, "GSP firmware is supported by default"). nvml.h: INVALID_ARGUMENT if any of isEnabled or
    defaultMode is NULL."""
    n = pynvml_module
    nvml("dgx-h100")
    assert h100["/gsp_firmware_version"] != "N/A"
    lib = library()
    for h in handles(n):
        enabled, default = ctypes.c_uint(7), ctypes.c_uint(7)
        n.nvmlDeviceGetGspFirmwareMode(h, ctypes.byref(enabled), ctypes.byref(default))
        assert (enabled.value, default.value) == (1, 1)
    h = handles(n)[0]
    one = ctypes.c_uint()
    for args in ((ctypes.byref(one), None), (None, ctypes.byref(one)), (None, None)):
        assert lib.nvmlDeviceGetGspFirmwareMode(h, *args) == n.NVML_ERROR_INVALID_ARGUMENT, args


def test_each_gpu_interrupts_on_its_own_irq(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetIrqNum is "the interrupt number associated with the specified device"; Linux gives
    each PCI function's MSI/MSI-X vector its own IRQ number (kernel Documentation/PCI/msi-howto.rst,
    pci_irq_vector), so the eight GPUs of a DGX H100 have eight different ones, none of them the legacy 0. NULL
    irqNum: INVALID_ARGUMENT."""
    n = pynvml_module
    nvml("dgx-h100")
    irqs = [n.nvmlDeviceGetIrqNum(h) for h in handles(n)]
    assert len(irqs) == 8 and len(set(irqs)) == 8 and 0 not in irqs
    assert library().nvmlDeviceGetIrqNum(handles(n)[0], None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_driver_model_is_not_supported_on_linux(nvml: Nvml, pynvml_module: ModuleType,
                                                h100: dict[str, str]) -> None:
    """nvml.h, nvmlDeviceGetDriverModel(_v2): "For windows only", NVML_ERROR_NOT_SUPPORTED "if the platform is not
    windows", INVALID_ARGUMENT if both current and pending are NULL. The Linux capture prints <current_dm> and
    <pending_dm> as N/A."""
    n = pynvml_module
    nvml("dgx-h100")
    assert (h100["/driver_model/current_dm"], h100["/driver_model/pending_dm"]) == ("N/A", "N/A")
    lib = library()
    one = ctypes.c_uint()
    for h in handles(n):
        assert error_of(partial(n.nvmlDeviceGetDriverModel, h)) == n.NVML_ERROR_NOT_SUPPORTED
        # One output is enough for NVML to answer ("either current and/or pending have been set").
        assert lib.nvmlDeviceGetDriverModel(h, ctypes.byref(one), None) == n.NVML_ERROR_NOT_SUPPORTED
        assert lib.nvmlDeviceGetDriverModel(h, None, None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_adaptive_clock_status_is_one_of_the_two_documented_states(nvml: Nvml, pynvml_module: ModuleType) -> None:
    """nvml.h: nvmlDeviceGetAdaptiveClockInfoStatus answers NVML_ADAPTIVE_CLOCKING_INFO_STATUS_DISABLED (0x0) or
    _ENABLED (0x1), the same on every GPU of one board model, and INVALID_ARGUMENT for a NULL
    adaptiveClockStatus. (No capture prints the status, so the test holds the shim to the documented range.)"""
    n = pynvml_module
    nvml("dgx-h100")
    states = {n.nvmlDeviceGetAdaptiveClockInfoStatus(h) for h in handles(n)}
    assert len(states) == 1 and states <= {0x0, 0x1}
    assert library().nvmlDeviceGetAdaptiveClockInfoStatus(handles(n)[0], None) == n.NVML_ERROR_INVALID_ARGUMENT


def test_supported_throttle_reasons_are_the_reasons_the_capture_lists(nvml: Nvml, pynvml_module: ModuleType,
                                                                    h100: dict[str, str]) -> None:
    """The real H100 lists nine clock event reasons under <clocks_event_reasons>, each Active or Not Active
    (nvidia-smi prints N/A for a reason the board cannot report); their nvml.h masks OR to 0x1ff. The deprecated
    nvmlDeviceGetSupportedClocksThrottleReasons is nvmlDeviceGetSupportedClocksEventReasons under its old name
    (nvml.h), so it answers that mask too; NULL: INVALID_ARGUMENT."""
    n = pynvml_module
    nvml("dgx-h100")
    mask = 0
    for reason, bit in CLOCK_REASON_BITS.items():
        if h100[f"/clocks_event_reasons/clocks_event_reason_{reason}"] in ("Active", "Not Active"):
            mask |= bit
    assert mask == 0x1FF
    for h in handles(n):
        assert n.nvmlDeviceGetSupportedClocksThrottleReasons(h) == mask
    lib = library()
    assert lib.nvmlDeviceGetSupportedClocksThrottleReasons(handles(n)[0], None) == n.NVML_ERROR_INVALID_ARGUMENT


def checksums(n: ModuleType, snap: NodeSnap) -> set[int]:
    """The infoROM configuration checksums of every GPU of the snapshot's node (init, read, shut down)."""
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            assert library().nvmlDeviceGetInforomConfigurationChecksum(handles(n)[0], None) == \
                n.NVML_ERROR_INVALID_ARGUMENT
            return {n.nvmlDeviceGetInforomConfigurationChecksum(h) for h in handles(n)}
        finally:
            n.nvmlShutdown()


def test_gpus_of_the_same_configuration_have_the_same_inforom_checksum(pynvml_module: ModuleType,
                                                                       node_snapshot: Callable[..., NodeSnap],
                                                                       h100: dict[str, str]) -> None:
    """nvml.h: the infoROM configuration checksum "can be used to make sure that two GPUs have the exact same
    configuration"; it covers the PWR and ECC objects. The eight real H100s carry the same infoROM image
    (G520.0200.00.05) and ECC object (7.16) in every <gpu> of qx-h100.xml, so their checksums agree; the A100 of
    qx-a100.xml carries another image (G506.0200.00.04) and ECC object (6.16), so its checksum differs. NULL
    checksum: INVALID_ARGUMENT."""
    n = pynvml_module
    a100 = board_capture("a100")
    for leaf in ("/inforom_version/img_version", "/inforom_version/ecc_object"):
        assert h100[leaf] != a100[leaf]
    h100_sums = checksums(n, node_snapshot("dgx-h100"))
    assert len(h100_sums) == 1
    assert checksums(n, node_snapshot("dgx-a100")).isdisjoint(h100_sums)
