"""The NVIDIA driver's view: ``/proc/driver/nvidia``, ``/dev/nvidia*`` and the GPUs' PCI functions.

``nvidia-smi`` and container toolkits read ``/proc/driver/nvidia/version`` (the driver version must match the
NVML library's), ``params``, ``gpus/<bdf>/information`` and open the ``/dev/nvidia*`` character devices (major
195: minor = GPU minor number, 255 ``nvidiactl``, 254 ``nvidia-modeset``; ``nvidia-uvm``, ``nvidia-caps`` and
``nvidia-nvswitch`` get dynamic majors, listed in ``/proc/devices`` as the driver registers them). On coherent
platforms (GH200, GB200) ``gpus/<bdf>/numa_status`` names the GPU memory's NUMA node, as the driver does.

A GPU that fell off the bus loses its ``gpus/<bdf>`` directory and PCI function; its ``/dev/nvidiaN`` node stays
(device nodes outlive the device on a real host too).
"""

from __future__ import annotations

from fakehw.agent.state import NodeState
from fakehw.model.system import Node, System
from fakehw.sysfs.cpu import UNAME_MACHINE
from fakehw.sysfs.pci import function_files
from fakehw.sysfs.pcilayout import PciLayout
from fakehw.sysfs.tree import Section

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
UVM_MAJOR = 508          # dynamic on a real host; this is a typical value
NVSWITCH_MAJOR = 509     # dynamic
CAPS_MAJOR = 510         # dynamic
PROC = "proc/driver/nvidia"


def nvidia_static_section(system: System, node: Node) -> Section:
    """Driver files and device nodes that do not change at run time (empty on a node without GPUs)."""
    sec = Section("nvidia")
    if not node.gpus:
        return sec
    version = system.driver.version
    machine = UNAME_MACHINE[node.cpu.arch]
    kind = "Kernel Module" if node.cpu.arch == "amd64" else f"Open Kernel Module for {machine}"
    sec.file(f"{PROC}/version",
             f"NVRM version: NVIDIA UNIX {machine} {kind}  {version}  Release Build  (fakehw)\n"
             f"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")
    params = [("ResmanDebugLevel", 4294967295), ("RmLogonRC", 1), ("ModifyDeviceFiles", 1),
              ("DeviceFileUID", 0), ("DeviceFileGID", 0), ("DeviceFileMode", 438),
              ("InitializeSystemMemoryAllocations", 1),
              ("UsePageAttributeTable", 4294967295), ("EnableMSI", 1), ("EnablePCIeGen3", 0), ("MemoryPoolSize", 0),
              ("KMallocHeapMaxSize", 0), ("VMallocHeapMaxSize", 0), ("IgnoreMMIOCheck", 0),
              ("TCEBypassMode", 0), ("EnableStreamMemOPs", 0), ("EnableUserNUMAManagement", 1),
              ("NvLinkDisable", 0), ("RmProfilingAdminOnly", 1), ("PreserveVideoMemoryAllocations", 0),
              ("EnableS0ixPowerManagement", 0), ("S0ixPowerManagementVideoMemoryThreshold", 256),
              ("DynamicPowerManagement", 3), ("DynamicPowerManagementVideoMemoryThreshold", 200),
              ("RegisterPCIDriver", 1), ("EnablePCIERelaxedOrderingMode", 0), ("EnableResizableBar", 0),
              ("EnableGpuFirmware", 18), ("EnableGpuFirmwareLogs", 2), ("EnableDbgBreakpoint", 0),
              ("OpenRmEnableUnsupportedGpus", 0), ("DmaRemapPeerMmio", 1), ("RegistryDwords", '""'),
              ("RegistryDwordsPerDevice", '""'), ("RmMsg", '""'), ("GpuBlacklist", '""'),
              ("TemporaryFilePath", '""'), ("ExcludedGpus", '""')]
    sec.file(f"{PROC}/params", "".join(f"{k}: {v}\n" for k, v in params))
    sec.file(f"{PROC}/registry", "Binary: \"\"\n")
    sec.dir(f"{PROC}/warnings")
    sec.text("sys/module/nvidia/version", version)
    sec.text("sys/module/nvidia/initstate", "live")
    for g in node.gpus:
        sec.chardev(f"dev/nvidia{g.minor}", NVIDIA_MAJOR, g.minor)
    sec.chardev("dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR)
    sec.chardev("dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR)
    sec.chardev("dev/nvidia-uvm", UVM_MAJOR, 0)
    sec.chardev("dev/nvidia-uvm-tools", UVM_MAJOR, 1)
    sec.chardev("dev/nvidia-caps/nvidia-cap1", CAPS_MAJOR, 1, 0o400)
    sec.chardev("dev/nvidia-caps/nvidia-cap2", CAPS_MAJOR, 2, 0o444)
    on_pci = [s for s in node.nvswitches if s.on_pci]
    for i, _ in enumerate(on_pci):
        sec.chardev(f"dev/nvidia-nvswitch{i}", NVSWITCH_MAJOR, i)
    if on_pci:
        sec.chardev("dev/nvidia-nvswitchctl", NVSWITCH_MAJOR, 255)
    chars = [(1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (5, "/dev/tty"), (5, "/dev/console"), (5, "/dev/ptmx"),
             (10, "misc"), (NVIDIA_MAJOR, "nvidia-frontend"), (NVIDIA_MAJOR, "nvidia"), (NVIDIA_MAJOR, "nvidiactl"),
             (NVIDIA_MAJOR, "nvidia-modeset"), (UVM_MAJOR, "nvidia-uvm")]
    if on_pci:
        chars.append((NVSWITCH_MAJOR, "nvidia-nvswitch"))
    chars.append((CAPS_MAJOR, "nvidia-caps"))
    sec.file("proc/devices", "Character devices:\n" + "".join(f"{m:3d} {n}\n" for m, n in chars)
             + "\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n")
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
        if fn is None:
            continue
        function_files(sec, fn, node)
        d = f"{PROC}/gpus/{g.address}"
        sec.file(f"{d}/information", (
            f"Model: \t\t {g.sku.name}\n"
            f"IRQ:   \t\t {200 + g.index}\n"
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
