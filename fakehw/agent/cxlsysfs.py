"""Writes to a node's sysfs attributes, answered with the kernel's checks and errno values.

The live filesystem (:mod:`fakehw.livefs`) sends every ``write(2)`` to a writable attribute of a node's ``/sys`` here
(``POST /v1/nodes/{node}/sysfs``), with the path the kernel resolved (``/sys/bus/cxl/devices/region3/size`` arrives
as ``sys/devices/.../decoder0.2/region3/size``). What the kernel acts on becomes a store of
:class:`fakehw.agent.cxlcore.CxlCore` run by the platform (journaled, applied and re-rendered before the write
returns, so the next read shows it); what the kernel refuses fails with the errno the kernel returns and changes
nothing.

==========================================================  ===============================================
``decoder0.N/create_ram_region``, ``create_pmem_region``     start a region (the name read from the file)
``decoder0.N/delete_region``                                 delete a region of that root decoder
``decoderE.N/mode``, ``decoderE.N/dpa_size``                 an endpoint decoder's partition and DPA
``regionN/{uuid,interleave_ways,interleave_granularity,      the region's configuration, targets and commit
size,targetM,commit}``
``bus/cxl/drivers/<drv>/{bind,unbind}``                      memdevs (``cxl_mem``), ports (``cxl_port``),
                                                             regions (``cxl_region``)
``bus/platform/drivers/cxl_acpi/{bind,unbind}``              the CXL root (``cxl disable-bus``)
``bus/dax/drivers/{kmem,device_dax}/{bind,unbind,new_id,     a RAM region's DAX device (``daxctl
remove_id}``                                                 reconfigure-device``)
``devices/system/memory/memoryN/state``                      online/offline hot-added CXL memory blocks
``bus/cxl/flush``                                            waits for probing to finish: nothing to wait for
==========================================================  ===============================================

Any other writable attribute is refused with EOPNOTSUPP and a message naming it (a write fakehw does not emulate
must not look as if it worked). Input is parsed as sysfs stores see it: the written bytes up to the first NUL, one
trailing newline ignored; more than a page (4096 bytes) is cut to a page as sysfs does.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakehw.agent.cxlcore import CxlCore, KernelError
from fakehw.agent.cxlstate import CxlState

if TYPE_CHECKING:
    from fakehw.agent.platform import Platform

PAGE = 4096
CXL_DRIVERS = frozenset({"cxl_port", "cxl_mem", "cxl_region", "cxl_pmem_region", "cxl_dax_region",
                         "cxl_nvdimm_bridge", "cxl_nvdimm"})
DAX_DRIVERS = frozenset({"kmem", "device_dax"})
ROOT_DEVICES = frozenset({"ACPI0017:00", "cxl_acpi.0"})

Store = Callable[[CxlCore, CxlState], CxlState]

_REGION = re.compile(r"(?:^|/)region(\d+)/(uuid|interleave_ways|interleave_granularity|size|commit|target(\d+))$")
_DECODER = re.compile(r"(?:^|/)decoder(\d+)\.(\d+)/(create_ram_region|create_pmem_region|delete_region|mode|dpa_size)$")
_CXL_DRIVER = re.compile(r"^sys/bus/cxl/drivers/(?P<driver>[a-z_]+)/(?P<op>bind|unbind)$")
_DAX_DRIVER = re.compile(r"^sys/bus/dax/drivers/(?P<driver>[a-z_]+)/(?P<op>bind|unbind|new_id|remove_id)$")
_ACPI_DRIVER = re.compile(r"^sys/bus/platform/drivers/cxl_acpi/(?P<op>bind|unbind)$")
_MEMORY = re.compile(r"^sys/devices/system/memory/memory(\d+)/state$")


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
    """The CXL, DAX and memory-block attribute writes of the nodes a platform serves."""

    def __init__(self, platform: Platform):
        self.platform = platform

    def write(self, node: str, path: str, data: bytes) -> Written:
        """Apply a write of ``data`` to ``path`` (root-relative, ``sys/...``) on ``node`` or raise SysfsError."""
        path = path.strip("/")
        value = store_text(data)
        count = min(len(data), PAGE)
        if path == "sys/bus/cxl/flush":
            return Written(count, False)
        store = self._store(node, path, value, count)
        if store is None:
            raise SysfsError(errno.EOPNOTSUPP, f"writing /{path} is not emulated by fakehw")
        return Written(count, self._run(node, path, store))

    def _run(self, node: str, path: str, store: Store) -> bool:
        from fakehw.agent.platform import PlatformError

        try:
            return self.platform.kernel_store(node, store, f"writing /{path}")
        except KernelError as exc:
            raise SysfsError(exc.errno, exc.message) from None
        except PlatformError as exc:
            raise SysfsError(errno.EBUSY if exc.status == 409 else errno.EINVAL, exc.message) from None

    def _store(self, node: str, path: str, value: str, count: int) -> Store | None:
        """The store a write to ``path`` makes (None: not one fakehw emulates)."""
        m = _REGION.search(path)
        if m is not None:
            return _region_store(f"region{m.group(1)}", m.group(2), value, count)
        m = _DECODER.search(path)
        if m is not None:
            return self._decoder_store(node, int(m.group(1)), int(m.group(2)), m.group(3), value)
        m = _CXL_DRIVER.match(path)
        if m is not None:
            if m["driver"] not in CXL_DRIVERS:
                raise SysfsError(errno.ENOENT, f"/{path}: no such driver")
            return _cxl_bind_store(m["driver"], m["op"] == "bind", value)
        m = _DAX_DRIVER.match(path)
        if m is not None:
            if m["driver"] not in DAX_DRIVERS:
                raise SysfsError(errno.ENOENT, f"/{path}: no such driver")
            return _dax_store(m["driver"], m["op"], value)
        m = _ACPI_DRIVER.match(path)
        if m is not None:
            return _bus_store(m["op"] == "bind", value)
        m = _MEMORY.match(path)
        if m is not None:
            block = int(m.group(1))
            return lambda core, s: core.set_block_state(s, block, value)
        return None

    def _decoder_store(self, node: str, port: int, index: int, attr: str, value: str) -> Store:
        topo = self.platform.engine.topo(node)
        if attr in ("create_ram_region", "create_pmem_region", "delete_region"):
            window = next((w.name for w in topo.cxl.windows if w.index == index), None)
            if port != 0 or window is None:
                raise SysfsError(errno.ENOENT, f"decoder{port}.{index} is not a root decoder")
            if attr == "delete_region":
                return lambda core, s: core.delete_region(s, window, value)
            mode = "ram" if attr == "create_ram_region" else "pmem"
            return lambda core, s: core.create_region(s, window, mode, value)
        memdev = topo.memdev_of_endpoint(port)
        if memdev is None or memdev not in topo.memdevs:
            raise SysfsError(errno.ENOENT, f"decoder{port}.{index} is not an endpoint decoder fakehw emulates")
        if attr == "mode":
            return lambda core, s: core.set_mode(s, memdev, index, value)
        return lambda core, s: core.set_dpa_size(s, memdev, index, value)


def _region_store(name: str, attr: str, value: str, count: int) -> Store:
    if attr == "uuid":
        return lambda core, s: core.set_uuid(s, name, count, value)
    if attr == "interleave_ways":
        return lambda core, s: core.set_ways(s, name, value)
    if attr == "interleave_granularity":
        return lambda core, s: core.set_granularity(s, name, value)
    if attr == "size":
        return lambda core, s: core.set_size(s, name, value)
    if attr == "commit":
        return lambda core, s: core.set_commit(s, name, value)
    position = int(attr.removeprefix("target"))
    return lambda core, s: core.set_target(s, name, position, value)


def _cxl_bind_store(driver: str, bind: bool, name: str) -> Store:
    """``bind``/``unbind`` of a cxl bus driver: the device by name (bus_find_device_by_name), then the driver's
    match (ENODEV when it does not match the device or, to unbind, is not the one bound)."""

    def store(core: CxlCore, s: CxlState) -> CxlState:
        kind = _device_kind(core, name)
        wanted = {"memdev": "cxl_mem", "port": "cxl_port", "region": "cxl_region"}.get(kind, "")
        if kind == "":
            raise KernelError(errno.ENODEV, f"no device {name!r} on the cxl bus")
        if driver != wanted:
            raise KernelError(errno.ENODEV, f"driver {driver} does not match {name}")
        if kind == "memdev":
            return _memdev_bind(core, s, name, bind)
        if kind == "port":
            port = _port_named(core, name)
            if port is None and name.startswith("port"):
                raise KernelError(errno.ENODEV, f"no device {name!r} on the cxl bus")
            if port is None:
                raise KernelError(errno.EOPNOTSUPP, f"binding and unbinding {name} is not emulated by fakehw")
            return core.bind_port(s, port) if bind else core.unbind_port(s, port)
        return core.bind_region(s, name) if bind else core.unbind_region(s, name)

    return store


def _device_kind(core: CxlCore, name: str) -> str:
    topo = core.topo
    if re.fullmatch(r"mem\d+", name) and int(name[3:]) in topo.memdev_by_id:
        return "memdev"
    if name == "root0" or (re.fullmatch(r"(port|endpoint)\d+", name) is not None):
        return "port"
    if re.fullmatch(r"region\d+", name):
        return "region"
    return ""


def _port_named(core: CxlCore, name: str) -> str | None:
    m = re.fullmatch(r"port(\d+)", name)
    if m is None:
        return None
    port = core.topo.port_by_id.get(int(m.group(1)))
    return port if port is not None and (port in core.topo.hbs or port in core.topo.switches) else None


def _memdev_bind(core: CxlCore, s: CxlState, name: str, bind: bool) -> CxlState:
    memdev = core.topo.memdev_by_id[int(name[3:])]
    dev = core.topo.memdevs.get(memdev)
    bound = (core.node, memdev) in s.endpoints or dev is None  # pooled devices are always bound
    if dev is None:
        raise KernelError(errno.EBUSY if bind else errno.EPERM,
                          f"{name} is a pooled logical device: the fabric manager assigns and releases it")
    if not bind:
        if not bound:
            raise KernelError(errno.ENODEV, f"{name} is not bound to cxl_mem")
        return core.set_memdev_admin(s, memdev, False)
    if bound:
        raise KernelError(errno.EBUSY, f"{name} is already bound to cxl_mem")
    why = core.can_bind(s, dev)
    if why is not None:
        raise KernelError(errno.ENXIO, f"probing {name} failed: {why}")
    return core.set_memdev_admin(s, memdev, True)


def _dax_store(driver: str, op: str, name: str) -> Store:
    def store(core: CxlCore, s: CxlState) -> CxlState:
        if op in ("new_id", "remove_id"):
            if re.fullmatch(r"dax\d+\.\d+", name) is None:
                raise KernelError(errno.EINVAL, f"{op}: write a device name (daxX.Y), not {name!r}")
            return s
        if op == "bind":
            return core.dax_bind(s, driver, name)
        return core.dax_unbind(s, driver, name)

    return store


def _bus_store(bind: bool, name: str) -> Store:
    def store(core: CxlCore, s: CxlState) -> CxlState:
        expected = "cxl_acpi.0" if core.topo.cxl.platform == "cxl_test" else "ACPI0017:00"
        if name != expected:
            raise KernelError(errno.ENODEV, f"no device {name!r} bound to or matching driver cxl_acpi")
        return core.set_bus(s, bind)

    return store
