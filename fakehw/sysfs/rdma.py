"""RDMA: the NICs' network and InfiniBand class devices, the verbs and MAD character devices, and GPUDirect RDMA.

Every ConnectX function gets what the mlx5 drivers register:

- ``/sys/class/net/<netdev>``: an Ethernet port (MAC, MTU, type 1) or an IPoIB one (``ibpXsY``: type 32, a 20-byte
  hardware address of QPN and port GID, MTU 4092 of IPoIB datagram mode on a 4096-byte IB MTU).
- ``/sys/class/infiniband/<mlx5_N>``: GUIDs, port state, rate, link layer, LID/SM LID on InfiniBand, GIDs (from the
  port GUID on InfiniBand, from the MAC on RoCE) and ``active_mtu`` (which the kernel exposes only through verbs;
  fakehw adds the file for readers that cannot use verbs).
- ``/sys/class/infiniband_verbs/uverbsN`` with ``/dev/infiniband/uverbsN`` (major 231, minors from 192: the
  kernel's IB_UVERBS_MAJOR/IB_UVERBS_BASE_MINOR), ``/sys/class/infiniband_mad/umadN`` and ``issmN`` with their
  device files (minors N and 64+N), and ``/dev/infiniband/rdma_cm``: what libibverbs' sysfs scan, RDMA device
  plugins and container runtimes look for.

On a node with GPUs and ConnectX NICs the NVIDIA driver's ``nvidia-peermem`` is loaded, as DGX OS does it: it
registers the peer-memory clients ``nv_mem`` and ``nv_mem_nc`` with MOFED's ib_core, whose
``/sys/kernel/mm/memory_peers/<client>/version`` (the driver version, nvidia-peermem.c's DRV_VERSION) NCCL, UCX,
NVSHMEM and GDS probe, and ``/sys/module/nvidia_peermem``, which newer probes check instead.
"""

from __future__ import annotations

from fakehw.model.system import Nic, Node, System
from fakehw.sysfs.pcilayout import PciFunction, PciLayout
from fakehw.sysfs.tree import Section

UVERBS_MAJOR = 231
UVERBS_BASE_MINOR = 192
UMAD_MAJOR = 231
ISSM_MINOR_BASE = 64
RDMA_CM = (10, 58)
"""misc device, dynamic minor: a typical value."""
IPOIB_MTU = 4092
IB_PKEYS = 128
"""P_Key table length of an mlx5 InfiniBand port."""
PEER_CLIENTS = ("nv_mem", "nv_mem_nc")
PEER_COUNTERS = ("num_alloc_mrs", "num_dealloc_mrs", "num_reg_pages", "num_dereg_pages", "num_reg_bytes",
                 "num_dereg_bytes", "num_free_callbacks")


def rdma_section(system: System, node: Node, lay: PciLayout) -> Section:
    sec = Section("rdma")
    rdma_nics = sorted((n for n in node.nics if lay.function(n.name) is not None), key=_rdma_index)
    for index, nic in enumerate(rdma_nics):
        fn = lay.function(nic.name)
        assert fn is not None
        netdev_files(sec, fn, nic, index)
        ib_files(sec, fn, nic, index)
        char_devices(sec, fn, nic, index)
    if rdma_nics:
        sec.text("sys/class/infiniband_verbs/abi_version", 6)
        sec.text("sys/class/infiniband_mad/abi_version", 5)
        sec.chardev("dev/infiniband/rdma_cm", *RDMA_CM)
        for mod in ("ib_core", "ib_uverbs", "ib_umad", "rdma_cm", "mlx5_core", "mlx5_ib"):
            module_files(sec, mod, None)
    if rdma_nics and node.gpus:
        peer_memory_files(sec, system.driver.version)
    return sec


def _rdma_index(nic: Nic) -> tuple[int, str]:
    """RDMA devices register in name order (mlx5_0, mlx5_1, ... mlx5_10): uverbs and umad numbers follow it."""
    suffix = nic.name.rsplit("_", 1)[-1]
    return (int(suffix) if suffix.isdigit() else 1 << 20, nic.name)


def active_mtu(mtu: int) -> int:
    """RoCE path MTU for an Ethernet MTU: the largest of 256..4096 that fits with the RoCE headers."""
    for size in (4096, 2048, 1024, 512, 256):
        if mtu >= size + 100:
            return size
    return 256


def gid_from_mac(mac: str) -> str:
    """The link-local RoCE GID (fe80::/64 with the MAC's EUI-64), written as sysfs does: eight 4-digit groups."""
    b = [int(x, 16) for x in mac.split(":")]
    eui = [b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
    groups = ["fe80", "0000", "0000", "0000"] + [f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2)]
    return ":".join(groups)


def ipoib_address(nic: Nic) -> str:
    """An IPoIB interface's 20-byte hardware address: flags and QPN (00:00:10:29 on mlx5), then the port GID."""
    gid = bytes.fromhex("fe80000000000000" + nic.node_guid.replace(":", ""))
    return ":".join(f"{b:02x}" for b in (bytes([0x00, 0x00, 0x10, 0x29]) + gid))


def netdev_files(sec: Section, fn: PciFunction, nic: Nic, index: int) -> None:
    net = f"{fn.path}/net/{nic.netdev}"
    ether = nic.link_layer == "ethernet"
    sec.text(f"{net}/address", nic.mac if ether else ipoib_address(nic))
    sec.text(f"{net}/broadcast", "ff:ff:ff:ff:ff:ff" if ether else
             "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff")
    sec.text(f"{net}/addr_len", 6 if ether else 20)
    sec.text(f"{net}/mtu", nic.mtu if ether else IPOIB_MTU, 0o644)
    sec.text(f"{net}/type", 1 if ether else 32)
    sec.text(f"{net}/operstate", "up")
    sec.text(f"{net}/carrier", 1)
    sec.text(f"{net}/speed", nic.sku.rate_gbps * 1000)
    sec.text(f"{net}/duplex", "full")
    sec.text(f"{net}/dev_port", 0)
    sec.text(f"{net}/dev_id", "0x0")
    sec.text(f"{net}/ifindex", 10 + index)
    sec.text(f"{net}/iflink", 10 + index)
    sec.link(f"{net}/device", fn.path)
    sec.link(f"sys/class/net/{nic.netdev}", net)


def ib_files(sec: Section, fn: PciFunction, nic: Nic, index: int) -> None:
    ether = nic.link_layer == "ethernet"
    ib = f"{fn.path}/infiniband/{nic.name}"
    guid = nic.node_guid
    sec.text(f"{ib}/node_guid", guid)
    sec.text(f"{ib}/sys_image_guid", guid)
    sec.text(f"{ib}/node_type", "1: CA")
    sec.text(f"{ib}/node_desc", f"{nic.node} {nic.name}")
    sec.text(f"{ib}/fw_ver", "28.39.1002")
    sec.text(f"{ib}/hca_type", f"MT{nic.sku.device_id}")  # the device id in decimal: MT4129 is ConnectX-7
    sec.text(f"{ib}/board_id", f"MT_{nic.sku.device_id:04X}")
    sec.text(f"{ib}/hw_rev", "0x0")
    sec.link(f"{ib}/device", fn.path)
    port = f"{ib}/ports/1"
    sec.text(f"{port}/state", "4: ACTIVE")
    sec.text(f"{port}/phys_state", "5: LinkUp")
    sec.text(f"{port}/rate", f"{nic.sku.rate_gbps} Gb/sec (4X {'NDR' if nic.sku.rate_gbps >= 400 else 'HDR'})")
    sec.text(f"{port}/link_layer", "Ethernet" if ether else "InfiniBand")
    sec.text(f"{port}/lid", "0x0" if ether else f"0x{index + 1:x}")
    sec.text(f"{port}/sm_lid", "0x0" if ether else "0x1")
    sec.text(f"{port}/lid_mask_count", 0)
    sec.text(f"{port}/sm_sl", 0)
    sec.text(f"{port}/cap_mask", "0x00010000" if ether else "0x2259e848")
    sec.text(f"{port}/active_mtu", active_mtu(nic.mtu) if ether else 4096)
    for i in range(1 if ether else IB_PKEYS):  # the default partition, then the table's empty slots
        sec.text(f"{port}/pkeys/{i}", "0xffff" if i == 0 else "0x0000")
    gid = gid_from_mac(nic.mac) if ether else f"fe80:0000:0000:0000:{guid}"
    zero = "0000:0000:0000:0000:0000:0000:0000:0000"
    for i in range(8):
        value = gid if i < (2 if ether else 1) else zero
        sec.text(f"{port}/gids/{i}", value)
        if ether:
            sec.text(f"{port}/gid_attrs/types/{i}", ("IB/RoCE v1" if i == 0 else "RoCE v2") if i < 2 else "")
            sec.text(f"{port}/gid_attrs/ndevs/{i}", nic.netdev if i < 2 else "")
    sec.link(f"sys/class/infiniband/{nic.name}", ib)


def _class_device(sec: Section, fn: PciFunction, cls: str, name: str, major: int, minor: int,
                  attrs: dict[str, object]) -> None:
    """A character-device class device below the PCI function, its class link, /sys/dev/char and /dev node."""
    d = f"{fn.path}/{cls}/{name}"
    for attr, value in attrs.items():
        sec.text(f"{d}/{attr}", value)
    sec.text(f"{d}/dev", f"{major}:{minor}")
    sec.file(f"{d}/uevent", f"MAJOR={major}\nMINOR={minor}\nDEVNAME=infiniband/{name}\n", 0o644)
    sec.link(f"{d}/device", fn.path)
    sec.link(f"{d}/subsystem", f"sys/class/{cls}")
    sec.link(f"sys/class/{cls}/{name}", d)
    sec.link(f"sys/dev/char/{major}:{minor}", d)
    sec.chardev(f"dev/infiniband/{name}", major, minor)


def char_devices(sec: Section, fn: PciFunction, nic: Nic, index: int) -> None:
    _class_device(sec, fn, "infiniband_verbs", f"uverbs{index}", UVERBS_MAJOR, UVERBS_BASE_MINOR + index,
                  {"ibdev": nic.name, "abi_version": 1})
    _class_device(sec, fn, "infiniband_mad", f"umad{index}", UMAD_MAJOR, index, {"ibdev": nic.name, "port": 1})
    _class_device(sec, fn, "infiniband_mad", f"issm{index}", UMAD_MAJOR, ISSM_MINOR_BASE + index,
                  {"ibdev": nic.name, "port": 1})


def module_files(sec: Section, name: str, version: str | None) -> None:
    """``/sys/module/<name>``: a loaded module (``initstate`` live) and its version when it declares one."""
    d = f"sys/module/{name}"
    sec.text(f"{d}/initstate", "live")
    sec.text(f"{d}/refcnt", 0)
    if version is not None:
        sec.text(f"{d}/version", version)


def peer_memory_files(sec: Section, driver_version: str) -> None:
    module_files(sec, "nvidia_peermem", driver_version)
    sec.text("sys/module/nvidia_peermem/parameters/peerdirect_support", 0)
    for client in PEER_CLIENTS:
        d = f"sys/kernel/mm/memory_peers/{client}"
        sec.text(f"{d}/version", driver_version)
        for counter in PEER_COUNTERS:
            sec.text(f"{d}/{counter}", 0)
