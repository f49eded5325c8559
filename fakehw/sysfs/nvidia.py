"""The NVIDIA driver's view: ``/proc/driver/nvidia``, ``/dev/nvidia*`` and the GPUs' PCI functions.

``nvidia-smi`` and container toolkits read ``/proc/driver/nvidia/version`` (the driver version must match the
NVML library's), ``params``, ``gpus/<bdf>/information`` and open the ``/dev/nvidia*`` character devices (major
195: minor = GPU minor number, 255 ``nvidiactl``, 254 ``nvidia-modeset``; ``nvidia-uvm``, ``nvidia-caps``,
``nvidia-nvlink`` and ``nvidia-nvswitch`` get dynamic majors, listed in ``/proc/devices`` as the driver registers
them). On coherent
platforms (GH200, GB200) ``gpus/<bdf>/numa_status`` names the GPU memory's NUMA node, as the driver does.

A GPU that fell off the bus loses its ``gpus/<bdf>`` directory and PCI function; its ``/dev/nvidiaN`` node stays
(device nodes outlive the device on a real host too).

nvidia-capabilities (what NVIDIA's device plugin and container runtime read for MIG; formats from the open kernel
module's ``nv-caps.c`` and the MIG user guide, "Device Nodes and Capabilities"): the driver numbers every capability
it can ever offer at load, ``fabric-mgmt`` 0, ``mig/config`` 1, ``mig/monitor`` 2, then per GPU minor 0..31 and GPU
instance 0..14 one ``access`` for the GPU instance and eight for its compute instances, then ``fabric-imex-mgmt``;
``/proc/driver/nvidia-caps/mig-minors`` lists that whole table. A capability's proc file (``DeviceFileMinor``,
``DeviceFileMode``, ``DeviceFileModify``) exists while the instance does, and ``/dev/nvidia-caps/nvidia-cap<minor>``
is the node a process opens to prove it may use it.

IMEX (multi-node NVLink memory export, GB200/GB300): the driver registers ``nvidia-caps-imex-channels`` in
``/proc/devices`` (from 550) and, with ``NVreg_CreateImexChannel0=1`` as NVL72 racks are set up (an option from
555), creates ``/dev/nvidia-caps-imex-channels/channel0``; ``/proc/driver/nvidia/capabilities/fabric-imex-mgmt`` is
the IMEX daemon's capability (in ``sys-minors`` from 550; nv-caps.c's sys table is empty before).
"""

from __future__ import annotations

from dataclasses import dataclass

from fakehw.agent.mig import NodeMig
from fakehw.agent.state import NodeState
from fakehw.model.system import Node, System
from fakehw.sysfs.cpu import UNAME_MACHINE
from fakehw.sysfs.pci import function_files, interrupt
from fakehw.sysfs.pcilayout import PciLayout
from fakehw.sysfs.tree import Section

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
DYNAMIC_EXT_START = 511
"""fs/char_dev.c's CHRDEV_MAJOR_DYN_EXT_START: find_dynamic_major hands out a free major from 254 down to 234 first,
then, once every one of those is taken, from 511 down. The fake lists few of a real host's drivers in
``/proc/devices``, but a server's (drm, hidraw, watchdog, rtc, ptp, nvme, tpm, ipmi, ...) take the low range before
the NVIDIA driver loads, so its regions are given as such a host gets them: from 511 down, in the order it asks."""
IMEX = "nvidia-caps-imex-channels"


def dynamic_regions(system: System, node: Node) -> dict[str, int]:
    """The NVIDIA driver's dynamic majors in the order it registers them (NVIDIA/open-gpu-kernel-modules
    kernel-open/nvidia/nv.c, nvidia_init_module): nv_caps_imex_init's IMEX channels (550 on), then in nv_module_init
    nv_cap_drv_init's ``nvidia-caps``, and nvlink_drivers_init's ``nvidia-nvlink`` (nvlink_core_init) and
    ``nvidia-nvswitch`` (nvswitch_init, on every 64-bit build whether or not an NVSwitch is there); nvidia-uvm.ko,
    which needs nvidia.ko, registers ``nvidia-uvm`` after them. Each takes the next free major from 511 down."""
    names = [IMEX] if has_imex(system, node) else []
    names += ["nvidia-caps", "nvidia-nvlink", "nvidia-nvswitch", "nvidia-uvm"]
    return {name: DYNAMIC_EXT_START - i for i, name in enumerate(names)}


PROC = "proc/driver/nvidia"
CAPS = f"{PROC}/capabilities"
CAPS_PROC = "proc/driver/nvidia-caps"

# The driver's capability table (nv-caps.c): minors in this order.
CAP_FABRIC_MGMT, CAP_MIG_CONFIG, CAP_MIG_MONITOR = 0, 1, 2
CAP_MIG_GPUS, CAP_MIG_GIS, CAP_MIG_CIS = 32, 15, 8
CAP_FABRIC_IMEX_MGMT = 3 + CAP_MIG_GPUS * CAP_MIG_GIS * (1 + CAP_MIG_CIS)
MODE_CONFIG, MODE_READ = 0o400, 0o444
IMEX_CHANNEL_COUNT = 2048
"""``NVreg_ImexChannelCount``'s default: the minors the channel device region spans."""


def gi_cap_minor(gpu_minor: int, gi: int) -> int:
    return 3 + gpu_minor * CAP_MIG_GIS * (1 + CAP_MIG_CIS) + gi * (1 + CAP_MIG_CIS)


def ci_cap_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_cap_minor(gpu_minor, gi) + 1 + ci


def _cap_file(minor: int, mode: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def mig_minors() -> str:
    """``/proc/driver/nvidia-caps/mig-minors``: the whole table, whether or not an instance exists."""
    lines = [f"config {CAP_MIG_CONFIG}", f"monitor {CAP_MIG_MONITOR}"]
    for gpu in range(CAP_MIG_GPUS):
        for gi in range(CAP_MIG_GIS):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_cap_minor(gpu, gi)}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_cap_minor(gpu, gi, ci)}" for ci in range(CAP_MIG_CIS)]
    return "\n".join(lines) + "\n"


def has_imex(system: System, node: Node) -> bool:
    """IMEX channels: nv-caps-imex.c registers ``nvidia-caps-imex-channels`` for NVreg_ImexChannelCount minors, so
    every driver whose nv_parms has that option (550 on; 535.288.01's has none) has them, in an NVLink rack (NVL72
    uses them) or not, and an older one has no channel region even in a multi-node NVLink domain."""
    return bool(node.gpus) and has_nv_parm("ImexChannelCount", system.driver.branch)


OPENRM_OPT_IN_LAST_BRANCH = 535
"""The last branch whose ``OpenRmEnableUnsupportedGpus`` defaults to 0 (open-gpu-kernel-modules nv-reg.h: every 535
tag defines it as NV_REG_OPENRM_ENABLE_UNSUPPORTED_GPUS_DEFAULT, which is _DISABLE, 0; 545.23.06 deprecated the
opt-in, ignores it and defines it as 1, as every later tag does)."""


@dataclass(frozen=True, slots=True)
class NvParm:
    """A numeric entry of nv-reg.h's ``nv_parms`` (open-gpu-kernel-modules kernel-open/nvidia), which nv-procfs.c
    prints in order to /proc/driver/nvidia/params as ``Name: %u``; ``first`` is the first branch whose table has
    it and ``gone`` the first that no longer does (each checked against the newest tag of every branch)."""

    name: str
    default: int
    first: int = 0
    gone: int = 1 << 16


NV_PARMS = (
    NvParm("ResmanDebugLevel", 4294967295), NvParm("RmLogonRC", 1), NvParm("ModifyDeviceFiles", 1),
    NvParm("DeviceFileUID", 0), NvParm("DeviceFileGID", 0), NvParm("DeviceFileMode", 0o666),
    NvParm("InitializeSystemMemoryAllocations", 1), NvParm("UsePageAttributeTable", 4294967295),
    NvParm("EnableMSI", 1), NvParm("EnablePCIeGen3", 0), NvParm("MemoryPoolSize", 0), NvParm("KMallocHeapMaxSize", 0),
    NvParm("VMallocHeapMaxSize", 0), NvParm("IgnoreMMIOCheck", 0),
    NvParm("TCEBypassMode", 0, gone=570),  # NV_TCE_BYPASS_MODE_DEFAULT; in every tag to 565.77, none from 570.86.15
    NvParm("EnableStreamMemOPs", 0), NvParm("EnableUserNUMAManagement", 1), NvParm("NvLinkDisable", 0),
    NvParm("RmProfilingAdminOnly", 1), NvParm("PreserveVideoMemoryAllocations", 0),
    NvParm("UseKernelSuspendNotifiers", 0, first=595), NvParm("EnableS0ixPowerManagement", 0),
    NvParm("S0ixPowerManagementVideoMemoryThreshold", 256), NvParm("DynamicPowerManagement", 3),
    NvParm("DynamicPowerManagementVideoMemoryThreshold", 200),
    NvParm("TegraGpuPgMask", 0, first=590, gone=595), NvParm("TegraGpuPgMask", 4294967295, first=595),  # 0, then ~0
    NvParm("RegisterPCIDriver", 1), NvParm("EnablePCIERelaxedOrderingMode", 0), NvParm("EnableResizableBar", 0),
    NvParm("EnableGpuFirmware", 18), NvParm("EnableGpuFirmwareLogs", 2),
    NvParm("RmNvlinkBandwidthLinkCount", 0, first=565), NvParm("EnableDbgBreakpoint", 0),
    NvParm("OpenRmEnableUnsupportedGpus", 0, gone=OPENRM_OPT_IN_LAST_BRANCH + 1),  # the opt-in's _DISABLE
    NvParm("OpenRmEnableUnsupportedGpus", 1, first=OPENRM_OPT_IN_LAST_BRANCH + 1), NvParm("DmaRemapPeerMmio", 1),
    NvParm("ImexChannelCount", IMEX_CHANNEL_COUNT, first=550), NvParm("CreateImexChannel0", 0, first=555),
    NvParm("GrdmaPciTopoCheckOverride", 0, first=570),
    NvParm("EnableSystemMemoryPools", 0x211, first=590),  # NV_ENABLE_SYSTEM_MEMORY_POOLS_DEFAULT
)
"""Every numeric parameter of nv_parms from 535 to 595 with its NV_DEFINE_REG_ENTRY default in each branch. Where
the fake's node differs from the default (``CreateImexChannel0`` on NVL72 racks), the renderer overrides it."""


def has_nv_parm(name: str, branch: int) -> bool:
    """Whether ``branch``'s nv_parms has the option ``name`` (NVreg_<name> is a module parameter of that driver)."""
    return any(p.name == name and p.first <= branch < p.gone for p in NV_PARMS)


def nv_parms(branch: int, overrides: dict[str, int]) -> list[tuple[str, int]]:
    """The numeric lines of /proc/driver/nvidia/params for ``branch``: nv_parms' entries of that branch, in its
    order, at their defaults but for ``overrides``."""
    return [(p.name, overrides.get(p.name, p.default)) for p in NV_PARMS if p.first <= branch < p.gone]


def nvidia_static_section(system: System, node: Node) -> Section:
    """Driver files and device nodes that do not change at run time (empty on a node without GPUs)."""
    sec = Section("nvidia")
    if not node.gpus:
        return sec
    version = system.driver.version
    machine = UNAME_MACHINE[node.cpu.arch]
    # the proprietary module names itself "NVIDIA UNIX x86_64 Kernel Module", the open one (the only one for arm64 and
    # riscv64 here) "NVIDIA UNIX Open Kernel Module for aarch64": the machine comes after "for", not before
    module = f"{machine} Kernel Module" if node.cpu.arch == "amd64" else f"Open Kernel Module for {machine}"
    sec.file(f"{PROC}/version",
             f"NVRM version: NVIDIA UNIX {module}  {version}  Release Build  (fakehw)\n"
             f"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")
    imex = has_imex(system, node)
    branch = system.driver.branch
    # NVreg_CreateImexChannel0=1, as racks are set up, needs a driver that has the option (nv-reg.h: from 555; on 550
    # an administrator makes channel nodes by hand)
    channel0 = imex and system.domain_of(node) is not None and has_nv_parm("CreateImexChannel0", branch)
    overrides = {"CreateImexChannel0": 1} if channel0 else {}  # NVreg_CreateImexChannel0=1, as racks are set up
    params: list[tuple[str, int | str]] = [*nv_parms(branch, overrides)]
    params += [(name, '""') for name in ("RegistryDwords", "RegistryDwordsPerDevice", "RmMsg", "GpuBlacklist",
                                         "TemporaryFilePath", "ExcludedGpus")]
    sec.file(f"{PROC}/params", "".join(f"{k}: {v}\n" for k, v in params))
    sec.file(f"{PROC}/registry", "Binary: \"\"\n")
    sec.dir(f"{PROC}/warnings")
    sec.text("sys/module/nvidia/version", version)
    sec.text("sys/module/nvidia/initstate", "live")
    for g in node.gpus:
        sec.chardev(f"dev/nvidia{g.minor}", NVIDIA_MAJOR, g.minor)
    sec.chardev("dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR)
    sec.chardev("dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR)
    majors = dynamic_regions(system, node)
    sec.chardev("dev/nvidia-uvm", majors["nvidia-uvm"], 0)
    sec.chardev("dev/nvidia-uvm-tools", majors["nvidia-uvm"], 1)
    _caps_static(sec, node, majors, channel0)
    on_pci = [s for s in node.nvswitches if s.on_pci]
    for i, _ in enumerate(on_pci):
        sec.chardev(f"dev/nvidia-nvswitch{i}", majors["nvidia-nvswitch"], i)
    if on_pci:
        sec.chardev("dev/nvidia-nvswitchctl", majors["nvidia-nvswitch"], 255)
    return sec


FRONTEND_LAST_BRANCH = 535
"""The last driver branch with the ``nvidia-frontend`` module (open-gpu-kernel-modules 535: nv-frontend.c, gone in
545), which registers major 195 whole as one region of that name (register_chrdev: minors 0-255)."""


def nvidia_regions(branch: int) -> list[tuple[int, str]]:
    """The driver's regions of major 195 in ``/proc/devices`` order. fs/char_dev.c keeps one major's regions sorted
    by first minor, refuses overlapping ones and lists each by name (chrdev_show). Up to 535 the frontend holds all
    256 minors; from 545 nvidia.ko registers ``nvidia`` (minors 0-247, NV_MINOR_DEVICE_NUMBER_REGULAR_MAX) and
    ``nvidiactl`` (255), and ``nvidia-modeset`` (254) is registered by nv.c in 545 and by nvidia-modeset.ko itself
    from 550 (nv-chardev-numbers.h, nv.c nv_register_chrdev, nvidia-modeset-linux.c nvkms_register_chrdev)."""
    if branch <= FRONTEND_LAST_BRANCH:
        return [(NVIDIA_MAJOR, "nvidia-frontend")]
    return [(NVIDIA_MAJOR, "nvidia"), (NVIDIA_MAJOR, "nvidia-modeset"), (NVIDIA_MAJOR, "nvidiactl")]


def nvidia_majors(system: System, node: Node) -> list[tuple[int, str]]:
    """The character majors the driver registers, as ``/proc/devices`` names them (none without GPUs)."""
    if not node.gpus:
        return []
    return [*nvidia_regions(system.driver.branch), *((m, n) for n, m in dynamic_regions(system, node).items())]


def _caps_static(sec: Section, node: Node, majors: dict[str, int], channel0: bool) -> None:
    """Capabilities that exist from driver load: the minors tables, MIG config/monitor, IMEX (``majors``: the
    driver's dynamic majors, :func:`dynamic_regions`, which name IMEX's where the driver has it)."""
    imex, caps = IMEX in majors, majors["nvidia-caps"]
    sec.file(f"{CAPS_PROC}/mig-minors", mig_minors())
    sec.file(f"{CAPS_PROC}/nvlink-minors", f"fabric-mgmt {CAP_FABRIC_MGMT}\n")
    # g_nv_cap_sys_table is empty before 550 (nv-caps.c), so the file is too
    sec.file(f"{CAPS_PROC}/sys-minors", f"fabric-imex-mgmt {CAP_FABRIC_IMEX_MGMT}\n" if imex else "")
    sec.file(f"{CAPS}/mig/config", _cap_file(CAP_MIG_CONFIG, MODE_CONFIG))
    sec.file(f"{CAPS}/mig/monitor", _cap_file(CAP_MIG_MONITOR, MODE_READ))
    sec.chardev(f"dev/nvidia-caps/nvidia-cap{CAP_MIG_CONFIG}", caps, CAP_MIG_CONFIG, MODE_CONFIG)
    sec.chardev(f"dev/nvidia-caps/nvidia-cap{CAP_MIG_MONITOR}", caps, CAP_MIG_MONITOR, MODE_READ)
    for g in node.gpus:
        # osRmCapRegisterGpu (open-gpu-kernel-modules os.c) runs for every GPU the driver attaches and adds
        # ``gpu<minor>/mig`` whether or not the GPU has MIG ("For now, always add "mig" directory", Bug 2679591)
        sec.dir(f"{CAPS}/gpu{g.minor}/mig")
    if imex:
        sec.file(f"{CAPS}/fabric-imex-mgmt", _cap_file(CAP_FABRIC_IMEX_MGMT, MODE_CONFIG))
        sec.dir("dev/nvidia-caps-imex-channels")
    if channel0:
        sec.chardev("dev/nvidia-caps-imex-channels/channel0", majors[IMEX], 0)


def mig_section(system: System, node: Node, mig: NodeMig) -> Section:
    """The capabilities of the GPU and compute instances that exist now, and their ``/dev/nvidia-caps`` nodes."""
    sec = Section("mig")
    caps = dynamic_regions(system, node)["nvidia-caps"]
    for g in node.gpus:
        state = mig.gpu(g.name)
        if state is None or not state.current or g.minor >= CAP_MIG_GPUS:
            continue
        for gi in state.gis:
            base = f"{CAPS}/gpu{g.minor}/mig/gi{gi.id}"
            minors = [(f"{base}/access", gi_cap_minor(g.minor, gi.id))]
            minors += [(f"{base}/ci{c.id}/access", ci_cap_minor(g.minor, gi.id, c.id)) for c in gi.cis]
            for path, minor in minors:
                sec.file(path, _cap_file(minor, MODE_READ))
                sec.chardev(f"dev/nvidia-caps/nvidia-cap{minor}", caps, minor, MODE_READ)
    return sec


def gpu_section(system: System, node: Node, state: NodeState, lay: PciLayout) -> Section:
    """GPUs present on the bus now: PCI function and ``/proc/driver/nvidia/gpus/<bdf>``."""
    sec = Section("gpus")
    if not node.gpus:
        return sec
    sec.dir(f"{PROC}/gpus")
    sec.dir("sys/bus/pci/drivers/nvidia")
    lost = {g.name for g in state.gpus if g.lost}
    for g in node.gpus:
        if g.name in lost:
            continue
        fn = lay.function(g.name)
        assert fn is not None, g.name  # layout() puts every GPU below its parent, which the model checks exists
        irq = interrupt(lay, fn)  # the driver's IRQ is pdev->irq (nv-pci.c, nv-msi.c), what the attribute shows
        function_files(sec, fn, node, irq)
        d = f"{PROC}/gpus/{g.address}"
        sec.file(f"{d}/information", (
            f"Model: \t\t {g.sku.name}\n"
            f"IRQ:   \t\t {irq}\n"
            f"GPU UUID: \t {g.uuid}\n"
            f"Video BIOS: \t {g.sku.vbios.lower()}\n"
            f"Bus Type: \t PCIe\n"
            f"DMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {g.address}\n"
            f"Device Minor: \t {g.minor}\n"
            f"GPU Firmware: \t {system.driver.version}\n"
            f"GPU Excluded:\t No\n"))
        sec.file(f"{d}/registry", "Binary: \"\"\n")
        sec.file(f"{d}/power", "Runtime D3 status:          Not supported\nVideo Memory:               Active\n\n"
                 "GPU Hardware Support:\n Video Memory Self Refresh: Not Supported\n Video Memory Off:          "
                 "Supported\n")
        if g.hbm_numa is not None:
            sec.file(f"{d}/numa_status", f"Node: {g.hbm_numa}\nStatus: online\n")
    return sec
