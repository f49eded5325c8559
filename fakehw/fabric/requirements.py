"""The fabric requirements: every check this package makes, with a stable ID, a severity and the reason it exists.

This table is the single source the linter, the emulated-fabric checks and (later) the conformance suite's
catalogue read. An ID never changes meaning once published; a retired check keeps its ID reserved.

Static requirements are decided from the config alone (``fakehw fabric lint``). Dynamic ones are measured on
the emulated fabric (real veths, real bridges, scapy-crafted frames) and carry the same IDs in the probe report.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Literal


class Severity(StrEnum):
    """How bad a finding is. ``error`` breaks RoCE (drops, retries, no path); ``warning`` costs performance or
    invites trouble; ``info`` only reports."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True, slots=True)
class Requirement:
    id: str
    title: str
    severity: Severity
    rationale: str
    kind: Literal["static", "dynamic"] = "static"


def _table(*items: Requirement) -> MappingProxyType[str, Requirement]:
    table = {r.id: r for r in items}
    if len(table) != len(items):
        raise AssertionError("duplicate requirement ID")
    return MappingProxyType(table)


REQUIREMENTS: MappingProxyType[str, Requirement] = _table(
    Requirement(
        "FAB-MTU-001", "No hop of a RoCE path has a smaller MTU than the path's endpoints", Severity.ERROR,
        "NICs derive their RoCE MTU from their own netdev MTU and never see the switches. A smaller MTU anywhere "
        "along the path drops the oversized frames silently; RDMA shows it as transport retry exhaustion "
        "(IBV_WC_RETRY_EXC_ERR) or collapsing throughput. When the RoCE MTU still fits and only larger "
        "non-RoCE frames are lost, the finding is a warning.",
    ),
    Requirement(
        "FAB-MTU-002", "Both endpoints of a RoCE path use the same MTU", Severity.ERROR,
        "Endpoints with different netdev MTUs get different active RoCE MTUs; a queue pair cannot reach RTR with "
        "a path MTU above the peer's active MTU, and the larger side's frames are dropped by the smaller.",
    ),
    Requirement(
        "FAB-MTU-003", "RoCE paths carry the 4096-byte RoCE MTU", Severity.WARNING,
        "With an Ethernet MTU of 1500 RoCE runs at 1024-byte packets: four times the per-packet work and a "
        "visible bandwidth loss on 400G links. Jumbo frames (about 4200 or more, usually 9000) give 4096.",
    ),
    Requirement(
        "FAB-PFC-001", "The RoCE priority is lossless on every hop", Severity.ERROR,
        "RoCE v2 with go-back-N recovery collapses under loss. Priority flow control must be enabled for the "
        "priority RoCE is classified into on every NIC and switch port along the path, in both directions.",
    ),
    Requirement(
        "FAB-PFC-002", "PFC is not enabled on a priority that carries non-RoCE traffic", Severity.WARNING,
        "Lossless priorities back-pressure the whole link. Best-effort or storage traffic on a PFC priority "
        "spreads head-of-line blocking and pause storms to RoCE and beyond.",
    ),
    Requirement(
        "FAB-PFC-003", "Every lossless switch port runs a PFC watchdog that mitigates a pause storm within 100-1000 ms",
        Severity.ERROR,
        "A peer that keeps sending pause frames (a stuck NIC receive pipeline) stops its lossless queue for good, "
        "and the pause spreads upstream until every RoCE flow crossing those switches stalls - the PFC storm and "
        "deadlock Microsoft reported running RoCE at scale (Guo et al., 'RDMA over Commodity Ethernet at Scale', "
        "SIGCOMM 2016), answered there by watchdogs. The switch watchdog sees a queue that stays paused and drops "
        "(or forwards regardless of pause) what is queued for it until the storm ends. It must run on every port "
        "with PFC enabled (SONiC: a PFC_WD entry with detection_time, without which orchagent starts none; "
        "Cumulus Linux 5.6+: 'qos pfc-watchdog' on the interface, off by default), act rather than only alert "
        "(SONiC action alert logs the storm and leaves the queue paused; drop and forward both mitigate; Cumulus "
        "always drops), and act in time: the shipped defaults are 200 ms (SONiC pfcwd, Junos) and 300 ms "
        "(Cumulus: 100 ms polling x robustness 3), nothing configurable lies below 100 ms (SONiC's YANG model "
        "and Cumulus' minimum polling interval), and a storm lasting beyond about a second outlasts the RDMA "
        "local ACK timeout RoCE jobs commonly run with (4.096 us x 2^18 = 1.07 s for NCCL_IB_TIMEOUT=18), so the "
        "senders behind the paused queue retransmit. Applies where the config states its watchdogs (SONiC and "
        "Cumulus imports, qos pfcWatchdog); a config that does not is reported as not applicable.",
    ),
    Requirement(
        "FAB-BUF-001", "Every PFC priority of a switch port has lossless buffer headroom", Severity.ERROR,
        "PFC is only lossless if the ingress buffer can absorb what is still on the wire after the pause is sent "
        "(cable length x speed, plus the MTU-sized frames in flight on both ends). A priority with PFC enabled but "
        "no lossless priority group (SONiC BUFFER_PG without a lossless profile, a Cumulus switch priority outside "
        "the RoCE lossless pool) sends pause frames yet still drops on bursts, which RDMA sees as retries. Applies "
        "where the config states its buffers (SONiC and Cumulus imports, a qos headroom list); a config that does "
        "not is reported as not applicable.",
    ),
    Requirement(
        "FAB-HOST-001", "A NIC's trust mode sees the RoCE class of the frames it receives", Severity.ERROR,
        "A ConnectX NIC classifies received frames by its trust state (mlnx_qos --trust): with trust pcp an "
        "untagged frame lands in priority 0, so RoCE arriving from an access port is neither lossless nor "
        "protected by the NIC's own PFC, and the NIC pauses the wrong priority. Trust dscp (the NVIDIA RoCE "
        "default) needs no tag; trust pcp needs the switch port to send the NIC's VLAN tagged.",
    ),
    Requirement(
        "FAB-ECN-001", "ECN marking is on wherever RoCE runs", Severity.ERROR,
        "DCQCN congestion control needs switches to mark CE on the RoCE queue and NICs to react. Without it the "
        "only brake is PFC, and congestion spreads as pause frames.",
    ),
    Requirement(
        "FAB-ECN-002", "ECN marking thresholds are ordered (minimum below maximum)", Severity.ERROR,
        "A RED-style marker with min >= max marks either everything or nothing; neither gives DCQCN a signal.",
    ),
    Requirement(
        "FAB-CNP-001", "CNPs have a priority and are classified into it on every switch", Severity.ERROR,
        "Congestion notification packets must reach the sender quickly. A switch without a CNP priority, or "
        "whose DSCP map sends the NIC's CNP DSCP to another queue, delays or drops them and DCQCN reacts late.",
    ),
    Requirement(
        "FAB-QOS-001", "DSCP/priority maps agree between the ends of every RoCE hop", Severity.ERROR,
        "If a switch classifies the RoCE DSCP into another priority than the NICs use, PFC pauses the wrong "
        "queue and RoCE is not lossless even though each device looks correct on its own.",
    ),
    Requirement(
        "FAB-QOS-002", "The RoCE priority is carried on every hop (PCP trust only on tagged hops)", Severity.ERROR,
        "A port that trusts PCP gives untagged frames its default priority, so RoCE loses its class on that hop.",
    ),
    Requirement(
        "FAB-VLAN-001", "Both ends of every link agree on the VLANs and their tagging", Severity.ERROR,
        "A VLAN that one end tags and the other does not carry (or expects untagged) is dropped at that link.",
    ),
    Requirement(
        "FAB-VLAN-002", "No VLAN forms a layer-2 loop", Severity.ERROR,
        "Fabric configs here carry no spanning tree; a loop in a VLAN floods broadcasts forever.",
    ),
    Requirement(
        "FAB-PATH-001", "All NICs of one rail can reach each other", Severity.ERROR,
        "Collective libraries connect NICs of the same rail across nodes; a rail split into separate layer-2 "
        "segments (a VLAN missing on an uplink) fails connection setup between its halves.",
    ),
    Requirement(
        "FAB-RAIL-001", "A host's NICs sit on distinct rails, each on the rail the profile gives it", Severity.ERROR,
        "Rail-optimised fabrics and NCCL's rail-aware ring/tree building assume NIC i of every node shares a "
        "leaf (or VLAN) with NIC i of the others. Two NICs of one host on one rail halve that rail's bandwidth "
        "and leave another rail unreachable.",
    ),
    Requirement(
        "FAB-LINK-001", "Every NIC of the hardware profile is cabled", Severity.WARNING,
        "An uncabled NIC is a GPU without its scale-out bandwidth; usually a forgotten line in the config.",
    ),
    Requirement(
        "FAB-DYN-REACH-001", "A RoCE probe (SEND with ACK request) is answered between every pair of NICs of a rail",
        Severity.ERROR, "Reachability measured with real frames on the emulated fabric.", "dynamic",
    ),
    Requirement(
        "FAB-DYN-MTU-001", "The largest RoCE payload that crosses a path equals the linter's prediction",
        Severity.ERROR, "The kernel drops oversized frames on the emulated ports exactly as a switch would; the "
        "measurement proves the static MTU analysis right.", "dynamic",
    ),
    Requirement(
        "FAB-DYN-PRIO-001", "Priority tags (802.1Q PCP, DSCP, ECN) arrive as sent", Severity.ERROR,
        "Measured on the emulated fabric: the path must not strip or rewrite the RoCE class.", "dynamic",
    ),
    Requirement(
        "FAB-DYN-CNP-001", "A CE-marked RoCE packet is answered with a CNP in the configured CNP class",
        Severity.ERROR, "End-to-end DCQCN signalling: the notification point sends a CNP (opcode 0x81) with the "
        "NIC's CNP DSCP and priority, and it reaches the sender.", "dynamic",
    ),
    Requirement(
        "FAB-DYN-PFC-001", "PFC frames stay on their link", Severity.ERROR,
        "802.1Qbb pause frames are link-local (01:80:C2:00:00:01): the link partner receives them and no "
        "switch forwards them further.", "dynamic",
    ),
)


def requirement(req_id: str) -> Requirement:
    """The requirement with this ID (KeyError names the ID)."""
    try:
        return REQUIREMENTS[req_id]
    except KeyError:
        raise KeyError(f"no fabric requirement {req_id!r}") from None
