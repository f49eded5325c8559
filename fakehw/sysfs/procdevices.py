"""``/proc/devices``: the device majors the node's kernel has registered.

fs/char_dev.c (chrdev_show) lists every registered character device region by major, and a device node opens only
if its major is registered there, so the list follows what the node's drivers and modules are: the core's (mem,
tty, misc), RDMA's (ib_umad ``infiniband_mad`` and ib_uverbs ``infiniband_verbs``, fixed major 231) where RDMA
devices are, NVIDIA's (:func:`fakehw.sysfs.nvidia.nvidia_majors`) where GPUs are, and on a CXL host the CXL core's
``cxl`` (memdevs, drivers/cxl/core/memdev.c) and the DAX core's ``dax`` (drivers/dax/super.c), which the modules
register when they load, whatever is bound. The block majors are those of a disk and loop devices
(block/genhd.c, blkdev_show).
"""

from __future__ import annotations

from fakehw.model.system import Node, System
from fakehw.sysfs.cxl import DAX_MAJOR, MEMDEV_MAJOR
from fakehw.sysfs.nvidia import nvidia_majors
from fakehw.sysfs.pcilayout import PciLayout
from fakehw.sysfs.rdma import UMAD_MAJOR, UVERBS_MAJOR

CORE_MAJORS = ((1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (5, "/dev/tty"), (5, "/dev/console"), (5, "/dev/ptmx"),
               (10, "misc"))
"""Documentation/admin-guide/devices.txt: what every kernel registers."""
BLOCK_MAJORS = ((7, "loop"), (8, "sd"), (259, "blkext"))


def proc_devices(system: System, node: Node, lay: PciLayout) -> str:
    chars = list(CORE_MAJORS)
    if any(lay.function(n.name) is not None for n in node.nics):
        chars += [(UMAD_MAJOR, "infiniband_mad"), (UVERBS_MAJOR, "infiniband_verbs")]
    if node.cxl.host_bridges:
        chars += [(MEMDEV_MAJOR, "cxl"), (DAX_MAJOR, "dax")]
    chars += nvidia_majors(system, node)
    chars.sort(key=lambda c: c[0])  # by major; one major's regions in registration order (stable)
    return ("Character devices:\n" + "".join(f"{m:3d} {n}\n" for m, n in chars)
            + "\nBlock devices:\n" + "".join(f"{m:3d} {n}\n" for m, n in BLOCK_MAJORS))
