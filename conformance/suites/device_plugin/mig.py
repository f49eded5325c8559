"""MIG in the device plugin suite: which resources and devices a node should be served as, per MIG strategy.

A GPU in MIG mode is split into MIG devices (one per GPU instance with its compute instance). NVIDIA's plugin
(and the GPU Operator's documentation of ``--mig-strategy``) serves a node in one of three ways:

- ``none``: MIG is ignored; every GPU, in MIG mode or not, is one ``nvidia.com/gpu`` device;
- ``single``: every GPU is in MIG mode with MIG devices of one profile; the MIG devices are served as
  ``nvidia.com/gpu`` (a node where some GPUs are not in MIG mode, or with two profiles, cannot be served so:
  NVIDIA's plugin refuses to start, internal/rm/device_map.go);
- ``mixed``: GPUs not in MIG mode are ``nvidia.com/gpu``; MIG devices are ``nvidia.com/mig-<profile>``
  (e.g. ``nvidia.com/mig-3g.40gb``), one resource per profile.

Expected values come from the model's MIG configuration (the GPU instances of each GPU), never from the plugin.
A MIG device is named ``<gpu>/mig<index>`` in the suite's messages and identified by its MIG UUID.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from fakehw.model.system import Node
from testbed.kubelet.exposure import GpuRef

Strategy = Literal["none", "single", "mixed"]
STRATEGIES: tuple[str, ...] = ("auto", "none", "single", "mixed")
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def strategy(name: str) -> Strategy:
    """A strategy name (not ``auto``) as the type; a clear error for anything else."""
    for known in ("none", "single", "mixed"):
        if name == known:
            return known
    raise MigConfigError(f"unknown MIG strategy {name!r} (none, single, mixed)")


class MigConfigError(ValueError):
    """The node's MIG configuration cannot be served with the strategy asked for."""


def has_mig(node: Node) -> bool:
    return any(g.mig_enabled and g.mig_instances for g in node.gpus)


def refs(node: Node, strategy: Strategy) -> list[GpuRef]:
    """Every GPU of the node and, unless the strategy is ``none``, every MIG device (a GPU split into MIG
    devices is marked ``split``: its device node alone exposes none of them)."""
    out = []
    for g in node.gpus:
        migs = g.mig_instances if g.mig_enabled and strategy != "none" else ()
        out.append(GpuRef(g.name, g.index, g.minor, g.uuid, split=bool(migs)))
        for position, m in enumerate(migs):
            out.append(GpuRef(f"{g.name}/mig{m.index}", g.index, g.minor, m.uuid, parent=g.name,
                              mig_index=position, profile=m.profile.name))
    return out


def expected_resources(node: Node, strategy: Strategy, gpu_resource: str) -> dict[str, tuple[str, ...]]:
    """Resource name -> the devices (suite names) it must list, in the model's order."""
    if strategy == "none" or not has_mig(node):
        return {gpu_resource: tuple(g.name for g in node.gpus)}
    whole = [g.name for g in node.gpus if not (g.mig_enabled and g.mig_instances)]
    migs = [r for r in refs(node, strategy) if r.parent is not None]
    if strategy == "single":
        profiles = sorted({r.profile or "" for r in migs})
        if whole:
            raise MigConfigError(f"the single MIG strategy needs every GPU in MIG mode; {', '.join(whole)} of "
                                 f"{node.name} are not (use --dp-mig-strategy mixed)")
        if len(profiles) > 1:
            raise MigConfigError(f"the single MIG strategy needs MIG devices of one profile; {node.name} has "
                                 f"{', '.join(profiles)} (use --dp-mig-strategy mixed)")
        return {gpu_resource: tuple(r.name for r in migs)}
    out: dict[str, tuple[str, ...]] = {}
    if whole:
        out[gpu_resource] = tuple(whole)
    for r in migs:
        key = f"{MIG_RESOURCE_PREFIX}{r.profile}"
        out[key] = (*out.get(key, ()), r.name)
    return out


def detect(node: Node, registered: Iterable[str], gpu_uuids: Iterable[str]) -> Strategy:
    """The strategy a plugin serves the node with, from what it registered: ``nvidia.com/mig-*`` resources
    mean mixed, MIG devices under the GPU resource mean single, otherwise none."""
    if not has_mig(node):
        return "none"
    if any(r.startswith(MIG_RESOURCE_PREFIX) for r in registered):
        return "mixed"
    mig_uuids = {m.uuid.lower() for g in node.gpus for m in g.mig_instances}
    if any(any(u in d.lower() for u in mig_uuids) for d in gpu_uuids):
        return "single"
    return "none"
