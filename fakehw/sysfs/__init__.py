"""The fake root tree of a node: ``/sys``, ``/proc`` and ``/dev`` as real tools read them.

:func:`render_root` is a renderer (see :mod:`fakehw.render`): it writes ``<node dir>/root/`` from the model and the
node's runtime state, in sections (:mod:`fakehw.sysfs.tree`):

============  =======  ========================================================================================
section       kind     content
============  =======  ========================================================================================
cpu           static   ``sys/devices/system/cpu`` (topology, caches), ``sys/bus/cpu``, ``proc/cpuinfo``
node-static   static   ``sys/devices/system/node``: masks, cpulist/cpumap, distance, HMAT access initiators
node-memory   dynamic  per-node ``meminfo``, ``numastat``, ``has_memory``, ``proc/meminfo``, CXL nodes' access figures
memory-static static   ``sys/devices/system/memory``: block size, onlining policy, blocks of boot RAM and GPU memory
memory        dynamic  blocks of CXL RAM (online/offline), ``sys/devices/virtual/memory_tiering`` tiers
pci           static   ``sys/devices/pci*`` bridges, NVSwitches, NICs; ``sys/bus/pci``; ``sys/kernel/iommu_groups``
rdma          static   ``sys/class/{net,infiniband,infiniband_verbs,infiniband_mad}``, ``dev/infiniband``,
                       nvidia-peermem (``sys/kernel/mm/memory_peers``, ``sys/module``)
gpus          dynamic  GPU PCI functions and ``proc/driver/nvidia/gpus/<bdf>`` (a lost GPU disappears)
nvidia        static   ``proc/driver/nvidia/{version,params}``, ``dev/nvidia*``, capability tables
mig           dynamic  ``proc/driver/nvidia/capabilities/gpuN/mig/giX[/ciY]/access``, ``dev/nvidia-caps/nvidia-capN``
cxl           dynamic  CXL PCI functions, ``sys/bus/cxl/devices``, ``sys/bus/dax/devices``
pools         dynamic  ``run/fakehw/memory-pools.json``: the node's memory pools for device plugins
system        static   ``proc/hwloc-nofile-info``, ``proc/devices``, ``sys/class/dmi/id``
============  =======  ========================================================================================

Readers point at the tree with ``HWLOC_FSROOT=<root>`` (hwloc), by bind-mounting its directories over the real
ones in a mount namespace or container (``numactl``, ``lspci``), or through ``FAKEHW_ROOT``. Every symlink in it is
relative, so it resolves wherever the tree is mounted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fakehw.livefs.notify import notify as notify_live
from fakehw.model.system import CxlPool, Node, System
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir
from fakehw.sysfs.cpu import cpu_section, hwloc_info
from fakehw.sysfs.cxl import cxl_section
from fakehw.sysfs.memory import memory_dynamic_section, memory_static_section
from fakehw.sysfs.node import node_dynamic_section, node_static_section
from fakehw.sysfs.nvidia import gpu_section, mig_section, nvidia_static_section
from fakehw.sysfs.pci import pci_static_section
from fakehw.sysfs.pcilayout import PciLayout, layout
from fakehw.sysfs.procdevices import proc_devices
from fakehw.sysfs.rdma import rdma_section
from fakehw.sysfs.tree import Link, RootWriter, Section, SectionSpec, WriteStats

SYSFS_VERSION = "7"
"""Bump when the renderer's output changes, so existing trees are rebuilt."""
ROOT_DIR = "root"
MANIFEST = ".root-manifest"
"""Next to the tree, hidden: what the last render wrote (not part of the tree a container mounts)."""
POOLS_FILE = "run/fakehw/memory-pools.json"
SHARED_DIR = ".shared-sysfs"
"""Next to the node directories: for each static section that nodes of a template share, the tree that holds it (the
template's first node; the others hard-link its files)."""

__all__ = ["MANIFEST", "POOLS_FILE", "ROOT_DIR", "render_root", "render_tree"]


def node_pools(system: System, node: Node) -> tuple[CxlPool, ...]:
    return tuple(p for p in system.cxl_pools if node.name in p.nodes and p.window)


def node_layout(system: System, node: Node) -> PciLayout:
    """The node's PCI tree (cheap: tens of functions), computed per render rather than cached globally."""
    return layout(node, node_pools(system, node))


def system_section(system: System, node: Node, lay: PciLayout) -> Section:
    sec = Section("system")
    sec.file("proc/hwloc-nofile-info", hwloc_info(node))
    sec.file("proc/devices", proc_devices(system, node, lay))
    dmi = "sys/class/dmi/id"
    vendor = node.dmi_vendor or ("NVIDIA" if node.gpus else "fakehw")
    sec.text(f"{dmi}/sys_vendor", vendor)
    sec.text(f"{dmi}/product_name", node.dmi_product or system.name)
    sec.text(f"{dmi}/product_family", node.group)
    sec.text(f"{dmi}/board_vendor", vendor)
    sec.text(f"{dmi}/board_name", node.group)
    sec.text(f"{dmi}/bios_vendor", "fakehw")
    sec.text(f"{dmi}/bios_version", SYSFS_VERSION)
    sec.text("proc/sys/kernel/hostname", node.hostname)
    standard_devices(sec)
    return sec


STANDARD_DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9),
                    ("tty", 5, 0))
"""(name, major, minor) of the devices every Linux /dev has (Documentation/admin-guide/devices.txt)."""


def standard_devices(sec: Section) -> None:
    """What every /dev has besides the hardware's nodes, so the node's ``dev/`` can stand in for ``/dev`` whole
    (testbed.nodeview mounts it there): the memory and tty devices, ``pts``/``shm`` mount points, and the
    ``fd``/``stdin``/``stdout``/``stderr`` and ``ptmx`` links udev and devtmpfs make."""
    for name, major, minor in STANDARD_DEVICES:
        sec.chardev(f"dev/{name}", major, minor, 0o666)
    sec.dir("dev/pts")
    sec.dir("dev/shm", 0o1777)
    sec.entries["dev/ptmx"] = Link("pts/ptmx")
    sec.entries["dev/fd"] = Link("/proc/self/fd")
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        sec.entries[f"dev/{name}"] = Link(f"/proc/self/fd/{fd}")


def pools_section(node: Node, pools_json: list[dict[str, object]]) -> Section:
    sec = Section("pools")
    doc = {"node": node.name, "pools": pools_json}
    sec.file(POOLS_FILE, json.dumps(doc, indent=2, sort_keys=True) + "\n", 0o444)
    return sec


def render_tree(ctx: RenderContext, root_parent: OutputDir) -> WriteStats:
    """Render the node's tree under ``root_parent.root / "root"``; returns what was written."""
    from fakehw.agent.mig import boot_mig
    from fakehw.agent.platform import PlatformView, boot_view

    system, node, state = ctx.system, ctx.node, ctx.state
    view = getattr(state, "platform", None)
    if not isinstance(view, PlatformView):
        view = boot_view(system, node, state)
    lay = _Lazy(lambda: node_layout(system, node))  # only sections that are built need it
    key = f"{SYSFS_VERSION}/{system.digest}/{len(system.nodes)}/{node.name}"
    # Nodes of one template share their static CPU/NUMA/driver trees: hard links to one shared copy.
    share = f"{SYSFS_VERSION}/{system.digest}/{len(system.nodes)}/template{node.template}"
    platform = view
    mig = state.mig if state.mig is not None else boot_mig(node)
    lost = frozenset(g.name for g in state.gpus if g.lost)
    memo: dict[str, Any] | None = ctx.memo.get("root", dict) if ctx.memo is not None else None
    # What the tree depends on beyond the node's static content: one tuple, compared before anything is built. A
    # fault that touches none of it (an Xid, a thermal or ECC fault) costs this comparison and one stat (issue 19:
    # building the specs below and the writer cost more than the rest of such a render of the tree).
    depends = (key, lost, mig, platform.cxl, platform.numa_memory, platform.pools)
    if memo is not None and memo.get("depends") == depends and root_parent.path(ROOT_DIR).is_dir():
        return WriteStats(mode="unchanged")
    pools_json = [p.to_json() for p in platform.pools]
    specs = [
        SectionSpec("cpu", key, lambda: cpu_section(node), share=f"{share}/cpu"),
        SectionSpec("node-static", key, lambda: node_static_section(node), share=f"{share}/node"),
        SectionSpec("node-memory", None, lambda: node_dynamic_section(node, platform.numa_memory),
                    inputs=dict(platform.numa_memory)),
        SectionSpec("memory-static", key, lambda: memory_static_section(node), share=f"{share}/memory"),
        SectionSpec("memory", None, lambda: memory_dynamic_section(node, platform.cxl, platform.numa_memory),
                    inputs=(platform.cxl, dict(platform.numa_memory))),
        SectionSpec("pci", key, lambda: pci_static_section(node, lay())),
        SectionSpec("rdma", key, lambda: rdma_section(system, node, lay())),
        SectionSpec("gpus", None, lambda: gpu_section(system, node, state, lay()),
                    inputs=lost),
        SectionSpec("mig", None, lambda: mig_section(system, node, mig), inputs=mig),
        SectionSpec("nvidia", key, lambda: nvidia_static_section(system, node), share=f"{share}/nvidia"),
        SectionSpec("cxl", None, lambda: cxl_section(system, node, lay(), platform.cxl), inputs=platform.cxl),
        SectionSpec("pools", None, lambda: pools_section(node, pools_json), inputs=pools_json),
        SectionSpec("system", key, lambda: system_section(system, node, lay())),
    ]

    writer = RootWriter(root_parent.root / ROOT_DIR, root_parent.root / MANIFEST, release=root_parent.release,
                        store=root_parent.root.parent / SHARED_DIR)
    # With a memo, a render whose sections' keys and inputs all equal the last written render's (an Xid, a thermal
    # or ECC fault touches none of them) returns at once: the specs are the one list of what the tree depends on.
    if memo is not None:
        memo.pop("depends", None)  # a render that fails part-way must not leave an earlier match behind
    stats = writer.render(specs, memo)
    if memo is not None:
        memo["depends"] = depends
    if stats.changed:
        notify_live(root_parent.root, stats.changed)  # a live /sys must stop serving what changed first
    return stats


class _Lazy:
    """A value computed on first use."""

    def __init__(self, make: Callable[[], PciLayout]):
        self._make = make
        self._value: PciLayout | None = None

    def __call__(self) -> PciLayout:
        if self._value is None:
            self._value = self._make()
        return self._value


def render_root(ctx: RenderContext, out: OutputDir) -> None:
    """The renderer registered in :func:`fakehw.render._renderers`."""
    stats = render_tree(ctx, out)
    out.written += stats.written
    out.unchanged += stats.unchanged
