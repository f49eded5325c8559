"""Switch configs, cabling and host settings, as the importers read them, assembled into one fabric config.

Every importer turns its files into :class:`ImportedSwitch` objects (ports with MTU, VLANs, QoS in the terms of
:mod:`fakehw.fabric.spec`, each value with the operator's file and key it came from). :func:`assemble` adds the
cabling (from the switches' own neighbour tables and the ``--topology`` links file), the hosts' settings and the
import manifest, and validates the result like any fabric config - every problem reported at the operator's key.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from fakehw.fabric.importers.source import SourceFile, fail, read_yaml
from fakehw.fabric.loader import FabricError, ImportNote, LoadedFabric, SourceKey
from fakehw.fabric.spec import FabricConfigSpec, TrafficSpec, VlanSpec
from fakehw.model.errors import PathItem, Problem
from fakehw.model.loader import Document, validation_problems
from fakehw.model.spec import Name, Spec

MANIFEST = "fabric.yaml"
DEFAULT_TOPOLOGY = "links.csv"
DEFAULT_HOSTS = "hosts"


@dataclass
class ImportedPort:
    """One switch port: its values and where each came from."""

    name: str
    at: SourceKey
    mtu: int
    mtu_at: SourceKey
    shutdown: bool = False
    shutdown_at: SourceKey | None = None
    untagged: int | None = None
    tagged: list[int] = field(default_factory=list)
    vlan_at: SourceKey | None = None
    qos: dict[str, Any] = field(default_factory=dict)
    """camelCase QoS keys of :class:`~fakehw.fabric.spec.QosSpec`."""
    qos_at: dict[str, SourceKey] = field(default_factory=dict)
    """Where each QoS key came from; ``pfcWatchdog.action`` names a key inside one."""
    peer: tuple[str, str] | None = None
    """(device, port) from the switch's own neighbour table."""
    peer_at: SourceKey | None = None


@dataclass
class ImportedSwitch:
    name: str
    at: SourceKey
    source: SourceFile
    ports: dict[str, ImportedPort] = field(default_factory=dict)
    notes: list[ImportNote] = field(default_factory=list)
    unsupported: dict[str, tuple[SourceKey, str]] = field(default_factory=dict)
    """Ports configured with something the model cannot represent: an error once they turn out to be cabled."""

    def port(self, name: str, key: str, at: SourceKey) -> ImportedPort:
        """The port ``name``, or a located error naming the ports this switch has."""
        found = self.ports.get(name)
        if found is None:
            known = ", ".join(list(self.ports)[:8]) + (" ..." if len(self.ports) > 8 else "")
            fail(at.source, key, f"names port {name!r}, which {self.name} ({self.source.name}) does not define "
                                 f"(ports: {known or 'none'})", at.line)
        return found


class ManifestSpec(Spec):
    """``fabric.yaml`` next to the switch configs: what the switch files cannot say."""

    name: Name | None = None
    description: str = Field("", max_length=500)
    profile: str | None = Field(None, min_length=1, max_length=4096,
                                description="hardware profile of the hosts: built-in name or YAML file")
    nodes: int | None = Field(None, ge=1, le=10_000)
    topology: str | None = Field(None, description=f"links file (CSV, default {DEFAULT_TOPOLOGY} if present)")
    hosts: str | None = Field(None, description=f"directory of host settings (default {DEFAULT_HOSTS}/ if present)")
    extends: str | None = Field(None, description="another import directory whose files this one overrides")
    traffic: list[TrafficSpec] = Field(default_factory=list, max_length=64)
    vlans: list[VlanSpec] = Field(default_factory=list, max_length=4094)


@dataclass
class Manifest:
    spec: ManifestSpec
    source: SourceFile | None
    key_sources: dict[str, SourceFile] = field(default_factory=dict)
    """Which file of an ``extends`` chain set each key (default: ``source``)."""


def read_manifest(path: Path, display: str) -> Manifest:
    if not path.is_file():
        return Manifest(ManifestSpec(), None)
    src = read_yaml(path, display)
    try:
        spec = ManifestSpec.model_validate(src.data if src.data is not None else {})
    except ValidationError as exc:
        raise FabricError([Problem(p.path, p.message, display, src.line(p.path))
                           for p in validation_problems(exc, display, ManifestSpec)]) from None
    return Manifest(spec, src)


@dataclass(frozen=True)
class Cable:
    switch: str
    port: str
    device: str
    device_port: str
    at: SourceKey


_LINK_COLUMNS = ("StartDevice", "StartPort", "EndDevice", "EndPort")


def read_links(path: Path, display: str) -> list[Cable]:
    """A links file in the sonic-mgmt lab-links layout: CSV with a header naming StartDevice, StartPort,
    EndDevice, EndPort (other columns, such as BandWidth or VlanMode, are allowed and not read). Which end is
    the switch is decided when the switches are known; here ``switch`` is the start."""
    src_text = _text(path, display)
    rows = list(csv.reader(io.StringIO(src_text)))
    header_at = next((i for i, r in enumerate(rows) if r and not r[0].lstrip().startswith("#")), None)
    if header_at is None:
        fail(display, "", "empty links file: expected a CSV header StartDevice,StartPort,EndDevice,EndPort")
    header = [c.strip() for c in rows[header_at]]
    missing = [c for c in _LINK_COLUMNS if c not in header]
    if missing:
        fail(display, "", f"the header lacks {', '.join(missing)} (got {','.join(header)})", header_at + 1)
    cols = [header.index(c) for c in _LINK_COLUMNS]
    out = []
    for n, row in enumerate(rows[header_at + 1:], header_at + 2):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        if len(row) < len(header):
            fail(display, f"line {n}", f"{len(row)} columns where the header has {len(header)}", n)
        a, ap, b, bp = (row[i].strip() for i in cols)
        if not all((a, ap, b, bp)):
            fail(display, f"line {n}", "every link needs StartDevice, StartPort, EndDevice and EndPort", n)
        out.append(Cable(a, ap, b, bp, SourceKey(display, f"{a}:{ap} - {b}:{bp}", n)))
    return out


def _text(path: Path, display: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail(display, "", f"cannot read: {exc}")


@dataclass
class HostSettings:
    """Per-NIC host settings (``node/netdev`` -> HostSpec keys) and where each came from."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    at: dict[tuple[str, ...], SourceKey] = field(default_factory=dict)
    """(pattern, key[, roce key]) -> source."""
    notes: list[ImportNote] = field(default_factory=list)


def assemble(ref: str, name: str, manifest: Manifest, switches: list[ImportedSwitch], cables: list[Cable],
             hosts: HostSettings, *, profile: str | None, nodes: int | None, base: Path) -> LoadedFabric:
    """The fabric config of the imported switches, validated; problems point at the operator's files."""
    spec_m = manifest.spec
    profile = profile or spec_m.profile
    if profile is None:
        fail(manifest.source.name if manifest.source else ref, "profile",
             f"no hardware profile for the hosts: add 'profile: NAME' to {MANIFEST} or give --profile")
    if profile.endswith((".yaml", ".yml")) and not Path(profile).is_absolute():
        profile = str((base / profile).resolve())
    by_name: dict[str, ImportedSwitch] = {}
    for sw in switches:
        if sw.name in by_name:
            other = by_name[sw.name]
            fail(sw.at.source, sw.at.key, f"switch name {sw.name!r} is also the name of {other.source.name}",
                 sw.at.line)
        by_name[sw.name] = sw
    _cable(by_name, cables)
    for sw in switches:
        for name, (at, message) in sw.unsupported.items():
            if sw.ports.get(name) is not None and sw.ports[name].peer is not None:
                fail(at.source, at.key, message, at.line)
    hostnames = {p.peer[0] for sw in switches for p in sw.ports.values()
                 if p.peer is not None and p.peer[0] not in by_name}
    nodes = nodes or spec_m.nodes or (len(hostnames) or None)
    prov: dict[tuple[PathItem, ...], SourceKey] = {}
    doc: dict[str, Any] = {"name": spec_m.name or name, "description": spec_m.description or
                           f"imported from {ref}", "profile": profile}
    for key in ("name", "description", "profile", "nodes", "traffic", "vlans"):
        src = manifest.key_sources.get(key, manifest.source)
        if src is None:
            continue
        prov[(key,)] = src.at(key, (key,))
        if key in ("traffic", "vlans") and isinstance(src.data, dict) and isinstance(src.data.get(key), list):
            for i in range(len(src.data[key])):
                prov[(key, i)] = src.at(f"{key}[{i}]", (key, i))
    if nodes is not None:
        doc["nodes"] = nodes
    if spec_m.vlans:
        doc["vlans"] = [v.model_dump(mode="json", by_alias=True, exclude_none=True) for v in spec_m.vlans]
    if spec_m.traffic:
        doc["traffic"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in spec_m.traffic]
    doc["switches"] = [_switch_doc(si, sw, prov) for si, sw in enumerate(switches)]
    if hosts.entries:
        doc["hosts"] = hosts.entries
        for hkey, hat in hosts.at.items():
            prov[("hosts", *hkey)] = hat
    notes = tuple(n for sw in switches for n in sw.notes) + tuple(hosts.notes)
    return validate(ref, doc, prov, notes)


def _cable(by_name: dict[str, ImportedSwitch], cables: list[Cable]) -> None:
    """Add the links file's cables to the switches' own neighbour tables (they must agree)."""
    for cable in cables:
        if cable.switch in by_name:
            ends = [(cable.switch, cable.port, cable.device, cable.device_port)]
            if cable.device in by_name:
                ends.append((cable.device, cable.device_port, cable.switch, cable.port))
        elif cable.device in by_name:
            ends = [(cable.device, cable.device_port, cable.switch, cable.port)]
        else:
            fail(cable.at.source, cable.at.key, f"neither {cable.switch} nor {cable.device} is one of the imported "
                                                f"switches ({', '.join(by_name)})", cable.at.line)
        for sw_name, port_name, device, device_port in ends:
            port = by_name[sw_name].port(port_name, cable.at.key, cable.at)
            if port.peer is not None and port.peer != (device, device_port):
                said = port.peer_at or port.at
                fail(cable.at.source, cable.at.key, f"cables {sw_name}:{port_name} to {device}:{device_port}, but "
                                                    f"{said} says {port.peer[0]}:{port.peer[1]}", cable.at.line)
            port.peer, port.peer_at = (device, device_port), port.peer_at or cable.at


def _switch_doc(si: int, sw: ImportedSwitch, prov: dict[tuple[PathItem, ...], SourceKey]) -> dict[str, Any]:
    prov[("switches", si)] = sw.at
    prov[("switches", si, "name")] = sw.at
    ports = []
    for pi, port in enumerate(sw.ports.values()):
        where: tuple[PathItem, ...] = ("switches", si, "ports", pi)
        doc: dict[str, Any] = {"name": port.name, "mtu": port.mtu}
        prov[where] = port.at
        prov[(*where, "name")] = port.at
        prov[(*where, "mtu")] = port.mtu_at
        if port.peer is not None:
            doc["connect"] = f"{port.peer[0]}/{port.peer[1]}"
            prov[(*where, "connect")] = port.peer_at or port.at
        vlan: dict[str, Any] = {"tagged": sorted(port.tagged)}
        if port.untagged is not None:
            vlan["untagged"] = port.untagged
        doc["vlan"] = vlan
        prov[(*where, "vlan")] = port.vlan_at or port.at
        if port.qos:
            doc["qos"] = port.qos
            prov[(*where, "qos")] = port.at
            for key, at in port.qos_at.items():
                prov[(*where, "qos", *key.split("."))] = at
        if port.shutdown:
            doc["shutdown"] = True
        prov[(*where, "shutdown")] = port.shutdown_at or port.at
        ports.append(doc)
    if not ports:
        fail(sw.at.source, sw.at.key, f"switch {sw.name} defines no ports", sw.at.line)
    return {"name": sw.name, "ports": ports}


def validate(ref: str, doc: dict[str, Any], prov: dict[tuple[PathItem, ...], SourceKey],
             notes: tuple[ImportNote, ...]) -> LoadedFabric:
    """Validate the generated document like a fabric config; problems are reported at the operator's keys."""
    from types import MappingProxyType

    documents = (Document(ref, doc, None),)
    try:
        spec = FabricConfigSpec.model_validate(doc)
    except ValidationError as exc:
        draft = LoadedFabric(FabricConfigSpec.model_construct(),  # type: ignore[call-arg]
                             documents, "", doc, MappingProxyType(prov), notes)
        raise FabricError([draft.problem(p.path, p.message)
                           for p in validation_problems(exc, ref, FabricConfigSpec)]) from None
    canonical = json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return LoadedFabric(spec, documents, digest, doc, MappingProxyType(prov), notes)
