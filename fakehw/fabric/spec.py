"""The fabric config document: switches, their ports, what each port is cabled to, and the QoS a RoCE fabric needs.

This is the *authoring* format (YAML, camelCase keys, unknown keys rejected) in the style of the hardware
profiles (:mod:`fakehw.model.spec`). Hosts and their NICs are not described here: they come from a hardware
profile (``profile: dgx-h100``), so the NIC names, MTUs, rails and RoCE settings the fabric is checked against are
the ones the rest of fakehw renders. ``hosts`` overrides those per NIC (pattern ``node/nic``) where a fabric
config wants to state or change them.

Settings resolve from the most specific place: port > switch > ``defaults``. A QoS block only replaces the
keys it gives (``qos: {pfcPriorities: [3, 4]}`` on a port keeps the switch's DSCP map), and ``cnpPriority: null``
states explicitly that a switch has no CNP priority.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from fakehw.model.spec import Name, Spec

MAX_PORTS_PER_SWITCH = 4096
MAX_SWITCHES = 4096

Priority = Annotated[int, Field(ge=0, le=7, description="802.1p priority (0-7)")]
Dscp = Annotated[int, Field(ge=0, le=63, description="DSCP (0-63)")]
VlanId = Annotated[int, Field(ge=1, le=4094, description="802.1Q VLAN ID (1-4094)")]
Mtu = Annotated[int, Field(ge=576, le=9216, description="Ethernet MTU: the largest IP packet, in bytes")]
Endpoint = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}/[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
        description="what a port is cabled to: node/nic (dgx-h100-0/mlx5_3) or switch/port (spine0/p7)",
    ),
]
HostPattern = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9_.*?\[\]-]{1,63}/[A-Za-z0-9_.*?\[\]-]{1,63}$",
        description="node/nic, shell-style patterns allowed (dgx-h100-*/mlx5_0)",
    ),
]


def _unique(values: list[int], what: str) -> list[int]:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} lists a value twice")
    return values


class EcnSpec(Spec):
    """RED-style ECN marking on the egress queues of the listed priorities (DCQCN's congestion point)."""

    enabled: bool = True
    priorities: list[Priority] = Field(default_factory=list, max_length=8, description="queues that mark CE")
    min_kb: float = Field(150, ge=0, le=2**20, alias="minKB", description="queue depth where marking starts, KiB")
    max_kb: float = Field(1500, ge=0, le=2**20, alias="maxKB", description="queue depth of full marking, KiB")
    probability: int = Field(10, ge=1, le=100, description="marking probability at maxKB, percent")

    @field_validator("priorities")
    @classmethod
    def _prios(cls, v: list[int]) -> list[int]:
        return _unique(v, "priorities")


class PfcWatchdogSpec(Spec):
    """The PFC watchdog of a port: whether it runs, what it does to a queue paused for ``detectionMs`` (drop or
    forward mitigate, alert only logs) and when it gives the queue back to PFC."""

    enabled: bool = True
    action: Literal["drop", "forward", "alert"] = "drop"
    detection_ms: int = Field(200, ge=1, le=60_000, alias="detectionMs",
                              description="how long a queue stays paused before the watchdog acts, ms")
    restoration_ms: int | None = Field(200, ge=1, le=600_000, alias="restorationMs",
                                       description="how long after the storm PFC is restored, ms (null: never)")


class QosSpec(Spec):
    """A switch's (or port's) classification and lossless settings. Keys left out are inherited."""

    trust: Literal["dscp", "pcp"] | None = Field(None, description="classify by IP DSCP or by 802.1Q PCP")
    dscp_to_priority: dict[Dscp, Priority] | None = Field(
        None, description="DSCP -> priority for trust dscp; DSCPs not listed get defaultPriority"
    )
    pcp_to_priority: dict[Priority, Priority] | None = Field(
        None, description="802.1p PCP -> priority for trust pcp; PCPs not listed keep their value"
    )
    default_priority: Priority | None = Field(None, description="priority of unmapped DSCPs and untagged frames")
    pfc_priorities: list[Priority] | None = Field(None, max_length=8, description="PFC-enabled (lossless) priorities")
    headroom: list[Priority] | None = Field(
        None, max_length=8,
        description="priorities with a lossless ingress buffer (PFC headroom) reserved; unset: the config does not say",
    )
    ecn: EcnSpec | None = None
    cnp_priority: Priority | None = Field(None, description="priority (strict queue) for CNPs; null: none")
    pfc_watchdog: PfcWatchdogSpec | None = Field(
        None, description="the port's PFC watchdog ({enabled: false}: none runs); unset: the config does not say")

    @field_validator("pfc_priorities")
    @classmethod
    def _pfc(cls, v: list[int] | None) -> list[int] | None:
        return None if v is None else _unique(v, "pfcPriorities")

    @field_validator("headroom")
    @classmethod
    def _headroom(cls, v: list[int] | None) -> list[int] | None:
        return None if v is None else _unique(v, "headroom")


class PortVlanSpec(Spec):
    """VLAN membership of a port: ``untagged`` is the access (or native) VLAN, ``tagged`` the trunked ones."""

    untagged: VlanId | None = None
    tagged: list[VlanId] = Field(default_factory=list, max_length=4094)

    @model_validator(mode="after")
    def _check(self) -> PortVlanSpec:
        _unique(self.tagged, "tagged")
        if self.untagged is not None and self.untagged in self.tagged:
            raise ValueError(f"VLAN {self.untagged} is both untagged and tagged")
        return self


class PortSpec(Spec):
    name: Name
    connect: Endpoint | None = Field(None, description="node/nic or switch/port at the other end of the cable")
    mtu: Mtu | None = None
    vlan: PortVlanSpec | None = None
    qos: QosSpec | None = None
    shutdown: bool = Field(False, description="administratively down")


class SwitchSpec(Spec):
    name: Name
    role: Literal["leaf", "spine", "switch"] = "switch"
    rail: int | None = Field(None, ge=0, le=63, description="the rail a rail-optimised leaf serves")
    mtu: Mtu | None = Field(None, description="default MTU of this switch's ports")
    vlan: PortVlanSpec | None = Field(None, description="default VLAN membership of this switch's ports")
    qos: QosSpec | None = None
    ports: list[PortSpec] = Field(min_length=1, max_length=MAX_PORTS_PER_SWITCH)

    @field_validator("ports")
    @classmethod
    def _unique_ports(cls, v: list[PortSpec]) -> list[PortSpec]:
        seen: set[str] = set()
        for p in v:
            if p.name in seen:
                raise ValueError(f"port {p.name!r} is listed twice")
            seen.add(p.name)
        return v


class VlanSpec(Spec):
    id: VlanId
    name: Name | None = None
    rail: int | None = Field(None, ge=0, le=63, description="the rail this VLAN carries (spine-leaf fabrics)")
    subnet: IPv4Network | None = Field(None, description="addresses for the NICs in this VLAN (default 10.x.y.0/24)")


class TrafficSpec(Spec):
    """Other traffic that shares the fabric (storage, management...), so PFC on its priority can be flagged."""

    name: Name
    dscp: Dscp
    pcp: Priority | None = Field(None, description="its 802.1Q priority when tagged")


class RoceOverrideSpec(Spec):
    """Changes to a NIC's RoCE settings from the hardware profile."""

    trust: Literal["dscp", "pcp"] | None = None
    dscp: Dscp | None = None
    priority: Priority | None = None
    pfc_priorities: list[Priority] | None = Field(None, max_length=8)
    ecn: bool | None = None
    cnp_dscp: Dscp | None = None
    cnp_priority: Priority | None = None


class HostSpec(Spec):
    """Per-NIC host settings. ``vlan``: the VLAN the NIC tags its RoCE traffic with, or ``untagged``; by default
    the NIC follows its switch port (its only tagged VLAN, else untagged)."""

    mtu: Mtu | None = None
    vlan: VlanId | Literal["untagged"] | None = None
    roce: RoceOverrideSpec | None = None


class DefaultsSpec(Spec):
    mtu: Mtu = Field(1500, description="switch port MTU when neither the port nor its switch gives one")
    vlan: PortVlanSpec | None = Field(None, description="port VLAN membership default (else untagged VLAN 1)")
    qos: QosSpec | None = None


class FabricConfigSpec(Spec):
    """A RoCE fabric: switches and cabling for the nodes of a hardware profile."""

    name: Name
    description: str = Field("", max_length=500)
    profile: str = Field(min_length=1, max_length=4096, description="hardware profile: built-in name or YAML file")
    nodes: int | None = Field(None, ge=1, le=10_000, description="override the profile's node count")
    defaults: DefaultsSpec = DefaultsSpec()
    vlans: list[VlanSpec] = Field(default_factory=list, max_length=4094)
    traffic: list[TrafficSpec] = Field(default_factory=list, max_length=64)
    switches: list[SwitchSpec] = Field(min_length=1, max_length=MAX_SWITCHES)
    hosts: dict[HostPattern, HostSpec] = Field(default_factory=dict)

    @field_validator("switches")
    @classmethod
    def _unique_switches(cls, v: list[SwitchSpec]) -> list[SwitchSpec]:
        seen: set[str] = set()
        for s in v:
            if s.name in seen:
                raise ValueError(f"switch {s.name!r} is listed twice")
            seen.add(s.name)
        return v

    @field_validator("vlans")
    @classmethod
    def _unique_vlans(cls, v: list[VlanSpec]) -> list[VlanSpec]:
        _unique([x.id for x in v], "vlans")
        return v
