"""Where a GPU sits in its rack (``nvmlDeviceGetPlatformInfo``): chassis serial, slot, tray, host, peer type, module
id and fabric GUID, consistent across every tray of an NVLink rack.

Facts from the real GB200 and GB300 captures (``../shared/reference/captures/qx-gb200.xml``, ``qx-gb300.xml``,
``<platformInfo>``): the four GPUs of a tray share the chassis serial (13 characters), slot, tray index and host id
1 and are "Switch Connected"; their module ids in minor order are 2, 1, 4, 3; the slot number runs 10 ahead of the
tray index in both captures (tray 4 in slot 14, tray 15 in slot 25); every GPU has its own fabric GUID (ibGuid: 8
bytes on Blackwell). The API is for Blackwell and newer (nvml.h): the H100 capture reads N/A. An HGX B200 board
(``qx-b200.xml``) answers with host id 1, Switch Connected, its module id and fabric GUID, but no chassis serial,
slot or tray (this model answers 0xFF for those: "not in a rack").

The rack is the node's NVLink domain: its chassis serial comes from the domain's name, a tray's index is its node's
position in the domain. ``peerType`` is not published in nvml.h; 1 = switch connected (0 = direct) as another
implementation pinned it from nvidia-smi's rendering (NVIDIA/k8s-test-infra, pkg/gpu/mocknvml/engine/platform.go).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fakehw.model.system import Gpu, Node, System

SLOT_OFFSET = 10
"""Slot number minus tray index in both real captures."""
TRAY_MODULE_IDS = (2, 1, 4, 3)
"""Module ids of a 4-GPU Grace-Blackwell tray's GPUs in minor order (GB200 and GB300 captures)."""
PEER_DIRECT, PEER_SWITCH = 0, 1
NOT_SET = 0xFF
HOST_ID = 1


@dataclass(frozen=True)
class PlatformInfo:
    supported: bool
    chassis_serial: str = ""
    slot: int = NOT_SET
    tray: int = NOT_SET
    host_id: int = 0
    peer_type: int = PEER_DIRECT
    module_id: int = 0
    fabric_guid: int = 0
    """8 bytes, most significant first in ``ibGuid`` (how nvidia-smi prints it: 0x...)."""


def _stable(*parts: str, digits: int) -> int:
    modulus: int = 10**digits
    return int(hashlib.sha256("/".join(parts).encode()).hexdigest(), 16) % modulus


def module_id(node: Node, gpu: Gpu) -> int:
    """``nvmlDeviceGetModuleId``: the profile's ``moduleId`` (DGX H100/B200 boards number their GPUs out of bus
    order, as their captures show), else the tray pattern on 4-GPU NVLink-domain trays, else position + 1."""
    if gpu.module_id:
        return gpu.module_id
    if node.nvlink_domain is not None and len(node.gpus) == len(TRAY_MODULE_IDS):
        return TRAY_MODULE_IDS[gpu.index]
    return gpu.index + 1


def platform_info(system: System, node: Node, gpu: Gpu) -> PlatformInfo:
    if gpu.sku.architecture != "blackwell":
        return PlatformInfo(False)
    domain = system.domain_of(node)
    guid = int.from_bytes(hashlib.sha256(f"fabric-guid/{gpu.uuid}".encode()).digest()[:8], "big") or 1
    peer = PEER_SWITCH if (domain is not None and domain.switches) or node.nvswitches else PEER_DIRECT
    if domain is None:
        return PlatformInfo(True, host_id=HOST_ID, peer_type=peer, module_id=module_id(node, gpu), fabric_guid=guid)
    tray = domain.nodes.index(node.name)
    serial = f"18{_stable(system.name, domain.name, 'chassis', digits=11):011d}"
    return PlatformInfo(True, serial, tray + SLOT_OFFSET, tray, HOST_ID, peer, module_id(node, gpu), guid)
