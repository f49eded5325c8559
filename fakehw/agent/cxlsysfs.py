"""Writes to a node's CXL sysfs attributes, answered with the kernel's checks and errno values.

The live filesystem (:mod:`fakehw.livefs`) sends every ``write(2)`` to a writable attribute of a node's ``/sys`` here
(``POST /v1/nodes/{node}/sysfs``); what the kernel acts on becomes a platform request (journaled, applied and
re-rendered before the write returns, so the next read shows it), what the kernel refuses fails with the errno the
kernel returns and changes nothing.

What is emulated, with the kernel's rules (drivers/base/bus.c bind_store/unbind_store, drivers/cxl/core/port.c):

================================================  ==========================================================
``sys/bus/cxl/drivers/cxl_mem/unbind`` ``memN``   ``cxl disable-memdev``: the memdev goes offline (the agent's
                                                  ``memdev-admin`` fact); a name that is no device of the bus or
                                                  not bound to that driver: ENODEV; a memdev whose memory is
                                                  reserved in a pool: EBUSY
``sys/bus/cxl/drivers/<drv>/bind`` ``name``       ``cxl enable-memdev`` (``cxl_mem`` with ``memN``): online again;
                                                  unknown device or a driver that does not match it: ENODEV;
                                                  already bound: EBUSY; a device a fault holds down fails its
                                                  probe: ENXIO
``sys/bus/cxl/flush``                             waits for probing to finish: nothing to wait for here
================================================  ==========================================================

Any other writable attribute is refused with EOPNOTSUPP and a message naming it (a write fakehw does not emulate
yet must not look as if it worked). Input is parsed as sysfs stores see it: the written bytes up to the first NUL,
one trailing newline ignored; more than a page (4096 bytes) is cut to a page as sysfs does.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakehw.agent.cxl import MemdevView

if TYPE_CHECKING:
    from fakehw.agent.platform import Platform

PAGE = 4096
CXL_DRIVERS = frozenset({"cxl_port", "cxl_mem", "cxl_region", "cxl_pmem_region", "cxl_dax_region",
                         "cxl_nvdimm_bridge", "cxl_nvdimm"})
_DRIVER_FILE = re.compile(r"^sys/bus/cxl/drivers/(?P<driver>[a-z_]+)/(?P<op>bind|unbind)$")


class SysfsError(Exception):
    """A write the kernel would refuse: ``errno`` is what ``write(2)`` returns (positive)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.errno = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Written:
    """A write that took effect: ``count`` bytes consumed (what ``write(2)`` returns)."""

    count: int
    changed: bool


def store_text(data: bytes) -> str:
    """The value a sysfs store sees: up to the first NUL, one trailing newline dropped (``sysfs_streq``)."""
    text = data[:PAGE].split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return text[:-1] if text.endswith("\n") else text


class CxlSysfs:
    """The CXL attribute writes of the nodes a platform serves."""

    def __init__(self, platform: Platform):
        self.platform = platform
        self._handlers: dict[str, Callable[[str, str], bool]] = {"sys/bus/cxl/flush": lambda node, value: False}

    def write(self, node: str, path: str, data: bytes) -> Written:
        """Apply a write of ``data`` to ``path`` (root-relative, ``sys/...``) on ``node`` or raise SysfsError."""
        path = path.strip("/")
        value = store_text(data)
        count = min(len(data), PAGE)
        handler = self._handlers.get(path)
        if handler is not None:
            return Written(count, handler(node, value))
        m = _DRIVER_FILE.match(path)
        if m is not None:
            if m["driver"] not in CXL_DRIVERS:
                raise SysfsError(errno.ENOENT, f"/{path}: no such driver")
            bind = m["op"] == "bind"
            return Written(count, self._bind(node, m["driver"], value, bind))
        raise SysfsError(errno.EOPNOTSUPP, f"writing /{path} is not emulated by fakehw")

    # ------------------------------------------------------------------------------------------ drivers

    def _memdev(self, node: str, name: str) -> MemdevView | None:
        return next((m for m in self.platform.view(node).cxl.memdevs if m.sysfs_name == name), None)

    def _bind(self, node: str, driver: str, name: str, bind: bool) -> bool:
        """``bind``/``unbind`` of a driver: the device by name (bus_find_device_by_name), then the driver rules."""
        memdev = self._memdev(node, name)
        if memdev is None:
            raise SysfsError(errno.ENODEV, f"no device {name!r} bound to or matching driver {driver} on the cxl bus")
        if driver != "cxl_mem":
            raise SysfsError(errno.ENODEV, f"driver {driver} does not match memdev {name}")
        if not bind:
            if not memdev.admin_online or not memdev.fault_online:
                raise SysfsError(errno.ENODEV, f"{name} is not bound to {driver}")
            return self._set_memdev(node, memdev, False)
        if memdev.admin_online and memdev.fault_online:
            raise SysfsError(errno.EBUSY, f"{name} is already bound to {driver}")
        if not memdev.fault_online:
            raise SysfsError(errno.ENXIO, f"probing {name} failed: the device does not respond (cxl-offline fault)")
        return self._set_memdev(node, memdev, True)

    def _set_memdev(self, node: str, memdev: MemdevView, online: bool) -> bool:
        from fakehw.agent.platform import PlatformError

        try:
            return bool(self.platform.set_memdev(node, memdev.name, online)["changed"])
        except PlatformError as exc:
            raise SysfsError(errno.EBUSY if exc.status == 409 else errno.EINVAL, exc.message) from None
