"""What a container would get from an Allocate answer: which GPUs, through which channel, and which pool tokens.

A container runtime turns a ``ContainerAllocateResponse`` into a container: device nodes from the device specs,
environment variables (``NVIDIA_VISIBLE_DEVICES`` is read by the NVIDIA container runtime, which adds the GPUs it
names), CDI devices (directly or through ``cdi.k8s.io/*`` annotations; resolved through the CDI specs the
plugin wrote, or as the toolkit's ``nvidia.com/gpu=<index|uuid|all>``). :func:`exposure` reads each channel
separately so a check can say which one leaks, and :func:`container_dev_nodes` gives the device nodes the
container would end up with (what NVML inside it enumerates).

Identity of GPUs is the model's (:class:`GpuRef`): index, minor number and UUID, never the plugin's device ID.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from testbed.kubelet.api import pb
from testbed.kubelet.cdi import CdiRegistry

VISIBLE_ENV = "NVIDIA_VISIBLE_DEVICES"
GPU_NODE_RE = re.compile(r"^/dev/nvidia(\d+)$")
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
"""Device nodes every GPU container gets; they expose no particular GPU."""
CDI_GPU_KIND = "nvidia.com/gpu"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
DEVICE_LIST_MOUNT_DIR = "/var/run/nvidia-container-devices"
"""The NVIDIA container runtime reads the device list from mounts under this directory (``volume-mounts``
strategy, signalled by ``NVIDIA_VISIBLE_DEVICES`` set to the directory): each mount's last path element names a
GPU, by UUID or index."""
TOKEN_RE = re.compile(r"fhw1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
"""A fakehw memory-pool access token (``fhw1.<token id>.<secret>``), wherever a plugin puts it."""


@dataclass(frozen=True, slots=True)
class GpuRef:
    """A GPU, or a MIG device of one, as the model knows it."""

    name: str
    index: int
    """NVML index of the GPU (of the parent GPU for a MIG device)."""
    minor: int
    """Minor number of the GPU's ``/dev/nvidia<minor>`` (of the parent GPU for a MIG device)."""
    uuid: str
    parent: str | None = None
    """For a MIG device: the name of its GPU."""
    mig_index: int | None = None
    """For a MIG device: its position among its GPU's MIG devices (``NVIDIA_VISIBLE_DEVICES=<gpu>:<mig>``)."""
    profile: str | None = None
    """For a MIG device: its profile (``3g.40gb``)."""
    split: bool = False
    """A GPU served as MIG devices: its device node alone exposes none of them (the capability nodes under
    ``/dev/nvidia-caps`` decide which MIG device a container may use)."""

    @property
    def gpu(self) -> str:
        """The physical GPU: what NVML enumerates inside a container that has this device."""
        return self.parent or self.name


@dataclass(frozen=True)
class Exposure:
    """GPUs (model names) an allocation exposes, per channel, and the problems reading it."""

    env: frozenset[str] | None
    """GPUs named by NVIDIA_VISIBLE_DEVICES; None when the variable is not set."""
    specs: frozenset[str]
    """GPUs whose /dev/nvidiaN node is in the device specs."""
    cdi: frozenset[str]
    """GPUs named as CDI devices (field or annotations)."""
    mounts: frozenset[str] = frozenset()
    """GPUs named by device-list mounts under :data:`DEVICE_LIST_MOUNT_DIR`."""
    unknown: tuple[str, ...] = ()
    """Names of GPUs the node does not have (a stale or made-up ID in the answer)."""
    tokens: tuple[str, ...] = ()
    other_nodes: tuple[str, ...] = ()
    """Device specs that are neither a GPU nor a control device (shown in evidence)."""

    @property
    def all(self) -> frozenset[str]:
        """Every GPU the container would see through any channel."""
        return (self.env or frozenset()) | self.specs | self.cdi | self.mounts

    def channels(self) -> dict[str, frozenset[str]]:
        out = {"device specs": self.specs}
        if self.env is not None:
            out[VISIBLE_ENV] = self.env
        if self.cdi:
            out["CDI devices"] = self.cdi
        if self.mounts:
            out["device-list mounts"] = self.mounts
        return out


def _resolve(token: str, gpus: Sequence[GpuRef]) -> tuple[frozenset[str], str | None]:
    token = token.strip()
    if not token or token in ("none", "void"):
        return frozenset(), None
    if token == "all":
        return frozenset(g.name for g in gpus if g.parent is None), None
    gpu, colon, mig = token.partition(":")
    if token.isdigit():
        hit = [g.name for g in gpus if g.parent is None and g.index == int(token)]
    elif colon and gpu.isdigit() and mig.isdigit():
        hit = [g.name for g in gpus if g.parent is not None and g.index == int(gpu) and g.mig_index == int(mig)]
    else:
        hit = [g.name for g in gpus if g.uuid.lower() == token.lower()]
    return (frozenset(hit), None) if hit else (frozenset(), token)


def _names(values: Iterable[str], gpus: Sequence[GpuRef]) -> tuple[frozenset[str], list[str]]:
    found: set[str] = set()
    unknown: list[str] = []
    for v in values:
        names, bad = _resolve(v, gpus)
        found |= names
        if bad is not None:
            unknown.append(bad)
    return frozenset(found), unknown


def _cdi_gpus(full: str, gpus: Sequence[GpuRef], registry: CdiRegistry | None) -> tuple[frozenset[str], list[str]]:
    """GPUs a CDI device brings: by its spec's device nodes when a spec defines it; else, for the toolkit's
    ``nvidia.com/gpu`` kind, by index, UUID or ``all`` (the names ``nvidia-ctk cdi generate`` gives)."""
    kind, sep, dev = full.partition("=")
    nodes = registry.nodes(full) if registry is not None else None
    if nodes is not None:
        by_minor = {g.minor: g for g in gpus if g.parent is None}
        found: set[str] = set()
        bad: list[str] = []
        for path in nodes:
            m = GPU_NODE_RE.match(path)
            if m:
                ref = by_minor.get(int(m.group(1)))
                if ref is None:
                    bad.append(f"CDI device {full!r} brings {path} (no GPU has minor {m.group(1)})")
                elif not ref.split:
                    found.add(ref.name)
        # A MIG device's CDI entry brings its GPU's node and its capability nodes; which MIG device it is comes
        # from its name (UUID or <gpu>:<mig>, the plugin's device namer).
        migs, _ = _names([dev], [g for g in gpus if g.parent is not None])
        return frozenset(found) | migs, bad
    if sep and kind == CDI_GPU_KIND:
        names, unresolved = _names([dev], gpus)
        return names, [f"CDI device {full!r}" for _ in unresolved]
    if sep and registry is not None and kind in registry.kinds():
        return frozenset(), [f"CDI device {full!r} is not in the plugin's CDI spec for {kind}"]
    return frozenset(), []


def exposure(response: pb.ContainerAllocateResponse, gpus: Sequence[GpuRef],
             registry: CdiRegistry | None = None) -> Exposure:
    """What the container gets; CDI devices are resolved through ``registry`` (the node's CDI specs) when
    given."""
    unknown: list[str] = []
    env: frozenset[str] | None = None
    if VISIBLE_ENV in response.envs and response.envs[VISIBLE_ENV] != DEVICE_LIST_MOUNT_DIR:
        env, bad = _names(response.envs[VISIBLE_ENV].split(","), gpus)
        unknown += [f"{VISIBLE_ENV} names {b!r}" for b in bad]
    by_minor = {g.minor: g for g in gpus if g.parent is None}
    specs: set[str] = set()
    other: list[str] = []
    for spec in response.devices:
        m = GPU_NODE_RE.match(spec.container_path)
        if m:
            ref = by_minor.get(int(m.group(1)))
            if ref is None:
                unknown.append(f"device spec {spec.container_path} (no GPU has minor {m.group(1)})")
            elif not ref.split:
                specs.add(ref.name)
        elif spec.container_path not in CONTROL_NODES and not spec.container_path.startswith("/dev/nvidia-caps"):
            other.append(spec.container_path)
    cdi_names = [d.name for d in response.cdi_devices]
    for key, value in response.annotations.items():
        if key.startswith(CDI_ANNOTATION_PREFIX):
            cdi_names += [v.strip() for v in value.split(",") if v.strip()]
    cdi: set[str] = set()
    for full in cdi_names:
        names, bad = _cdi_gpus(full, gpus, registry)
        cdi |= names
        unknown += bad
    listed = [m.container_path.rstrip("/").rsplit("/", 1)[-1] for m in response.mounts
              if m.container_path.startswith(DEVICE_LIST_MOUNT_DIR + "/")]
    mounts, bad = _names(listed, gpus)
    unknown += [f"device-list mount names {b!r}" for b in bad]
    texts = [*response.envs.values(), *response.annotations.values(),
             *(m.host_path for m in response.mounts), *(m.container_path for m in response.mounts)]
    tokens = tuple(dict.fromkeys(t for text in texts for t in TOKEN_RE.findall(text)))
    return Exposure(env, frozenset(specs), frozenset(cdi), mounts=mounts, unknown=tuple(unknown), tokens=tokens,
                    other_nodes=tuple(other))


def container_dev_nodes(response: pb.ContainerAllocateResponse, gpus: Sequence[GpuRef],
                        registry: CdiRegistry | None = None) -> list[str]:
    """Device node names (``nvidiactl``, ``nvidia3``) a container gets: its device specs plus the GPUs its
    ``NVIDIA_VISIBLE_DEVICES`` and CDI devices name (the NVIDIA runtime adds those)."""
    ex = exposure(response, gpus, registry)
    by_name = {g.name: g for g in gpus}
    nodes = {"nvidiactl"}
    for spec in response.devices:
        if spec.container_path.startswith("/dev/"):
            nodes.add(spec.container_path.removeprefix("/dev/"))
    for name in (ex.env or frozenset()) | ex.cdi | ex.mounts:
        nodes.add(f"nvidia{by_name[name].minor}")
    return sorted(nodes)
