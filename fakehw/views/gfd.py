"""The labels NVIDIA's GPU feature discovery (GFD) writes for a node, rendered from the model without running it.

Where a node only exists as an API object (KWOK nodes: no NVML, no /sys for GFD to read) the scheduler still
has to see what GFD would have labelled the real machine with. The rules are GFD's, as its source states them
(k8s-device-plugin ``internal/lm``): the product name with characters outside ``[A-Za-z0-9-_. ]`` dropped and
spaces made dashes, the GPU family from the compute capability, memory in MiB, ``gpu.machine`` from the DMI
product name, the driver version split into major/minor/revision and the CUDA version into major/minor (both the
deprecated ``cuda.driver.*`` labels and their ``cuda.driver-version.*`` successors), ``gpu.mode`` ``compute``
for 3D-controller GPUs, ``mig.capable``, ``mps.capable=false`` and ``replicas=1``/``sharing-strategy=none``
without a sharing config, and ``gpu.clique`` on nodes of a multi-node NVLink fabric. What GFD v0.20.0 really
prints on the fake nodes is checked by tests/conformance/test_nvidia_gfd.py; tests/kubernetes/test_kwok.py
holds these labels to the same expected values.
"""

from __future__ import annotations

import re

from fakehw.model.system import Node, System

_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")


def _sanitise(text: str) -> str:
    return _UNSAFE.sub("", text).strip().replace(" ", "-")


def arch_family(major: int, minor: int) -> str:
    """GFD's ``nvidia.com/gpu.family`` for compute capability ``major.minor``."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell",
            12: "blackwell", 13: "rubin"}.get(major, "undefined")


def gpu_family(node: Node) -> str:
    """GFD's family of the node's GPUs (``ada-lovelace`` for an L4, not the model's ``ada``); empty without GPUs."""
    if not node.gpus:
        return ""
    major, _, minor = node.gpus[0].sku.compute_capability.partition(".")
    return arch_family(int(major), int(minor or 0))


def gfd_labels(system: System, node: Node) -> dict[str, str]:
    """What GFD (no MIG strategy, no sharing config) labels ``node`` with; empty for a node without GPUs."""
    if not node.gpus:
        return {}
    gpu = node.gpus[0]
    major, _, minor = gpu.sku.compute_capability.partition(".")
    driver = system.driver.version.split(".")
    cuda_major, _, cuda_minor = system.driver.cuda_version.partition(".")
    labels = {
        "nvidia.com/gpu.product": _sanitise(gpu.sku.name),
        "nvidia.com/gpu.count": str(len(node.gpus)),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(gpu.sku.memory_mib),
        "nvidia.com/gpu.family": gpu_family(node),
        "nvidia.com/gpu.compute.major": str(int(major)),
        "nvidia.com/gpu.compute.minor": str(int(minor or 0)),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true" if any(g.sku.mig is not None for g in node.gpus) else "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1] if len(driver) > 1 else "",
        "nvidia.com/cuda.driver.rev": driver[2] if len(driver) > 2 else "",
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1] if len(driver) > 1 else "",
        "nvidia.com/cuda.driver-version.revision": driver[2] if len(driver) > 2 else "",
        "nvidia.com/cuda.driver-version.full": system.driver.version,
        "nvidia.com/cuda.runtime.major": cuda_major,
        "nvidia.com/cuda.runtime.minor": cuda_minor or "0",
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor or "0",
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor or '0'}",
    }
    if node.dmi_product:
        labels["nvidia.com/gpu.machine"] = _sanitise(node.dmi_product)
    domain = system.domain_of(node)
    if domain is not None and domain.fabric is not None:
        labels["nvidia.com/gpu.clique"] = f"{domain.fabric.cluster_uuid}.{domain.fabric.clique_id}"
    return labels
