"""Which NVML answers a board gives under a driver branch: the facts behind ``GpuRecord.answers``.

Each rule says what the real library returns for one topic and rests on a real reading: the ``nvidia-smi -q -x``
captures in ``../shared/reference/captures`` (A100 on 570, H100/B200/GB200/GB300 on 580, L40S/T4 on 595) or the
public header of the branch. A topic that answers normally is 0; otherwise the rule gives the ``nvmlReturn_t``
(``NOT_SUPPORTED`` where nvidia-smi prints N/A, ``DEPRECATED`` where it prints "Requested functionality has been
deprecated", ``NO_PERMISSION`` where it prints "Insufficient Permissions"). The shim returns these codes as they
are; it decides nothing itself.
"""

from __future__ import annotations

from fakehw.model.system import Gpu
from fakehw.nvml.layout import ANSWER_SLOTS, Answer

SUCCESS = 0
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DEPRECATED = 26

_HOPPER_OR_LATER = ("hopper", "blackwell")
_BLACKWELL_OR_LATER = ("blackwell",)


def _unless(supported: bool, code: int = NOT_SUPPORTED) -> int:
    return SUCCESS if supported else code


def answers(gpu: Gpu, branch: int, in_fabric: bool) -> tuple[int, ...]:
    """The ``answers`` array of ``gpu`` under driver ``branch``; ``in_fabric``: its NVLinks reach NVSwitches."""
    sku = gpu.sku
    arch = sku.architecture
    hbm = sku.memory_type.startswith("HBM")
    codes = {
        # 570 (A100 capture) answers "Enabled"; every 580 and 595 capture prints the deprecation.
        Answer.DISPLAY_MODE: _unless(branch < 580, DEPRECATED),
        # Deprecated in the 13.0 header; the 580 captures still answer, the 595 ones (L40S, T4) do not.
        Answer.APPLICATIONS_CLOCKS: _unless(branch < 595, DEPRECATED),
        Answer.POWER_STATE: _unless(branch < 595, DEPRECATED),
        # Page retirement is Turing's (T4 answers 0); Ampere and later remap rows instead (N/A in every capture).
        Answer.RETIRED_PAGES: _unless(arch == "turing"),
        Answer.REMAPPED_ROWS: _unless(sku.row_remap_banks is not None),
        # HBM boards have a memory sensor; the GDDR L40S and T4 print N/A.
        Answer.MEMORY_TEMPERATURE: _unless(hbm),
        Answer.MEMORY_MAX_THRESHOLD: _unless(sku.thermal.mem_max_c is not None),
        # A100 and T4 print N/A for the average draw, later boards both readings.
        Answer.POWER_AVERAGE: _unless(sku.power.average_readout),
        Answer.MODULE_POWER: _unless(sku.power.module is not None),
        Answer.MEMORY_POWER: _unless(sku.power.memory_idle_w is not None),
        # Blackwell has power smoothing; reading it needs root ("Insufficient Permissions" in the captures).
        Answer.POWER_SMOOTHING: NO_PERMISSION if sku.power.smoothing else NOT_SUPPORTED,
        # C2C mode: N/A before Hopper, Disabled on H100/B200, Enabled on GB200/GB300.
        Answer.C2C: _unless(arch in _HOPPER_OR_LATER),
        Answer.FABRIC: _unless(arch in _HOPPER_OR_LATER),
        # Blackwell reports the unrepairable-memory flag (GB200/GB300 "No"), the L40S prints N/A.
        Answer.UNREPAIRABLE_MEMORY: _unless(arch == "blackwell"),
        # SRAM ECC detail (parity/SEC-DED split, uncorrectable sources): Ampere and later; T4 has no split.
        Answer.SRAM_ECC_STATUS: _unless(arch != "turing"),
        Answer.REPAIR_STATUS: _unless(arch in ("hopper", "blackwell", "ada")),
        Answer.TLIMIT: _unless(sku.thermal.tlimit is not None),
        Answer.ABSOLUTE_THRESHOLDS: _unless(sku.thermal.tlimit is None),
        Answer.DRAM_ENCRYPTION: NOT_SUPPORTED,  # N/A on every captured board
        Answer.ADDRESSING_MODE: SUCCESS,
        Answer.PDI: SUCCESS,
        # GPM (DCGM profiling metrics) is Hopper and later.
        Answer.GPM: _unless(arch in _HOPPER_OR_LATER),
        # The infoROM black box flush: H100, GB200, GB300 report it; A100, B200, L40S, T4 print N/A.
        Answer.BBX: _unless(sku.inforom_bbx),
        # NVLink reduced bandwidth modes: nvml.h's nvmlDeviceGetNvlinkSupportedBwModes / GetNvlinkBwMode /
        # SetNvlinkBwMode are "For Blackwell or newer fully supported devices" (NVSwitch-connected ones).
        Answer.NVLINK_BW_MODE: _unless(in_fabric and arch in _BLACKWELL_OR_LATER),
        Answer.CLOCK_OFFSETS: NOT_SUPPORTED,  # datacenter boards do not offer clock offsets
        Answer.POWER_PROFILES: NOT_SUPPORTED,  # N/A in every capture
        Answer.PERFORMANCE_MODES: SUCCESS,
        Answer.AUTO_BOOST: NOT_SUPPORTED,  # auto boost N/A in every capture
        Answer.SPARSE_OPERATION: _unless(arch == "hopper"),
        # nvml.h: nvmlDeviceGetHostname_v1 / SetHostname_v1 are "For Blackwell or newer fully supported devices".
        Answer.HOSTNAME: _unless(arch in _BLACKWELL_OR_LATER),
        Answer.CONF_COMPUTE: SUCCESS,
        Answer.GPU_OPERATION_MODE: NOT_SUPPORTED,  # GOM N/A in every capture
        Answer.VGPU: NOT_SUPPORTED,  # bare metal / pass-through: no vGPU host
    }
    out = [SUCCESS] * ANSWER_SLOTS
    for topic, code in codes.items():
        out[topic] = code
    return tuple(out)


def addressing_mode(gpu: Gpu) -> int:
    """``nvmlDeviceAddressingModeType_t``: ATS (2) when the CPU reaches the GPU coherently over C2C (GB200,
    GB300, GH200: the captures say ATS), HMM (1) for a PCIe-attached GPU on a kernel with HMM (the A100, H100,
    L40S and T4 captures)."""
    return 2 if gpu.c2c is not None else 1
