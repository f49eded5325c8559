"""Importers: fabric configs as operators write them (SONiC ``config_db.json``, Cumulus NVUE ``startup.yaml``),
turned into the project's fabric config with every value pointing back at the operator's file and key.

An import is a directory (or single files on the command line):

```
my-fabric/
  fabric.yaml          optional manifest: profile, nodes, name, traffic, vlans, topology, hosts, extends
  leaf-rail0/config_db.json   (SONiC: one per switch; or leaf-rail0.json)
  leaf0/startup.yaml          (NVUE: one per switch; or leaf0.yaml)
  links.csv            cabling (sonic-mgmt lab links: StartDevice,StartPort,EndDevice,EndPort); NVUE needs it,
                       SONiC's DEVICE_NEIGHBOR can replace it
  hosts/<node>/...     the hosts' netplan, mlnx_qos, cma_roce_tos and sysfs values (see importers.hosts)
```

Wherever a fabric config is accepted (``fakehw fabric lint/up/probe``, ``conformance run --target fabric=...``),
``sonic:DIR`` and ``nvue:DIR`` (or a single file) name an import. A manifest's ``extends: ../base`` takes every
file of the base directory that the directory itself does not have (how the broken examples stay small).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fakehw.fabric.importers import hosts as host_files
from fakehw.fabric.importers import nvue, sonic
from fakehw.fabric.importers.assemble import (
    DEFAULT_HOSTS,
    DEFAULT_TOPOLOGY,
    MANIFEST,
    Cable,
    HostSettings,
    ImportedSwitch,
    Manifest,
    assemble,
    read_links,
    read_manifest,
)
from fakehw.fabric.importers.source import fail
from fakehw.fabric.loader import LoadedFabric

FORMATS = {"sonic": (sonic.read_switch, "config_db.json", ".json"),
           "nvue": (nvue.read_switch, "startup.yaml", ".yaml")}
MAX_EXTENDS = 4


def parse_ref(ref: str) -> tuple[str, Path] | None:
    """``sonic:DIR`` / ``nvue:FILE`` -> (format, path); None for anything else."""
    kind, sep, rest = ref.partition(":")
    if sep and kind in FORMATS and rest:
        return kind, Path(rest)
    return None


def is_import_ref(ref: object) -> bool:
    return isinstance(ref, str) and parse_ref(ref) is not None


def load_ref(ref: str) -> LoadedFabric:
    """Load ``sonic:PATH`` or ``nvue:PATH`` (a directory of switch configs or one file)."""
    parsed = parse_ref(ref)
    if parsed is None:
        fail(ref, "", f"not an import reference: expected {' or '.join(f'{k}:DIR' for k in FORMATS)}")
    kind, path = parsed
    return load_import(kind, [path], ref=f"{kind}:{path.resolve()}")


def _layers(root: Path) -> list[tuple[Path, Manifest]]:
    """The directory and the ones it extends, nearest first."""
    out: list[tuple[Path, Manifest]] = []
    here: Path | None = root
    while here is not None:
        if len(out) > MAX_EXTENDS:
            fail(str(root / MANIFEST), "extends", f"extends chain longer than {MAX_EXTENDS}")
        manifest = read_manifest(here / MANIFEST, str(here / MANIFEST))
        if any(here.resolve() == p.resolve() for p, _ in out):
            fail(str(here / MANIFEST), "extends", "extends loops back to a directory already read")
        out.append((here, manifest))
        ext = manifest.spec.extends
        if ext is not None:
            here = (here / ext)
            if not here.is_dir():
                fail(str(out[-1][0] / MANIFEST), "extends", f"{ext} is not a directory",
                     manifest.source.line(("extends",)) if manifest.source else None)
        else:
            here = None
    return out


def _switch_files(kind: str, layers: list[tuple[Path, Manifest]]) -> list[tuple[Path, str]]:
    """(path, name shown) of every switch file, the nearest layer winning per switch (relative path)."""
    _, filename, suffix = FORMATS[kind]
    chosen: dict[str, tuple[Path, str]] = {}
    for root, _ in layers:
        candidates = [p for p in root.glob(f"*/{filename}")] + [
            p for p in root.glob(f"*{suffix}") if p.name not in (MANIFEST,)]
        for p in sorted(candidates):
            rel = str(p.relative_to(root))
            chosen.setdefault(rel, (p, str(p)))
    return [chosen[k] for k in sorted(chosen)]


def _merged_manifest(layers: list[tuple[Path, Manifest]]) -> tuple[Manifest, Path | None, Path | None]:
    """The nearest layer's settings over the base's; the topology file and hosts directory found."""
    spec = None
    source = None
    topology = hosts = None
    key_sources = {}
    for _root, manifest in reversed(layers):
        data = manifest.spec.model_dump(exclude_unset=True, by_alias=True)
        spec = data if spec is None else {**spec, **data}
        source = manifest.source or source
        if manifest.source is not None:
            key_sources.update({key: manifest.source for key in data})
    for root, manifest in layers:
        if topology is None:
            name = manifest.spec.topology or DEFAULT_TOPOLOGY
            if (root / name).is_file():
                topology = root / name
            elif manifest.spec.topology is not None:
                fail(str(root / MANIFEST), "topology", f"{name} does not exist in {root}",
                     manifest.source.line(("topology",)) if manifest.source else None)
        if hosts is None:
            name = manifest.spec.hosts or DEFAULT_HOSTS
            if (root / name).is_dir():
                hosts = root / name
    from fakehw.fabric.importers.assemble import ManifestSpec

    return Manifest(ManifestSpec.model_validate(spec or {}), source, key_sources), topology, hosts


def load_import(kind: str, paths: Sequence[Path], *, ref: str | None = None, profile: str | None = None,
                nodes: int | None = None, topology: Path | None = None, hosts: Path | None = None,
                name: str | None = None) -> LoadedFabric:
    """Import switch configs of format ``kind`` ("sonic" or "nvue"): one directory, or one or more files."""
    if kind not in FORMATS:
        fail(kind, "", f"unknown format {kind!r}: {', '.join(FORMATS)}")
    reader = FORMATS[kind][0]
    if not paths:
        fail(kind, "", "no switch config given")
    for p in paths:
        if not p.exists():
            fail(str(p), "", "no such file or directory")
    if len(paths) == 1 and paths[0].is_dir():
        root = paths[0]
        layers = _layers(root)
        manifest, found_topology, found_hosts = _merged_manifest(layers)
        files = _switch_files(kind, layers)
        if not files:
            fail(str(root), "", f"no {kind} switch configs here (expected */{FORMATS[kind][1]} or "
                                f"*{FORMATS[kind][2]})")
        topology = topology or found_topology
        hosts = hosts or found_hosts
        default_name = root.resolve().name
        base = root
    else:
        if any(p.is_dir() for p in paths):
            fail(str(paths[0]), "", "give one directory, or switch config files")
        files = [(p, str(p)) for p in paths]
        manifest = read_manifest(paths[0].parent / MANIFEST, str(paths[0].parent / MANIFEST))
        default_name = paths[0].parent.resolve().name or "imported"
        base = paths[0].parent
    switches: list[ImportedSwitch] = [reader(path, shown) for path, shown in files]
    cables: list[Cable] = read_links(topology, str(topology)) if topology is not None else []
    settings = host_files.read_hosts(hosts, str(hosts)) if hosts is not None else HostSettings()
    if kind == "nvue" and topology is None and not any(p.peer for sw in switches for p in sw.ports.values()):
        fail(str(paths[0]), "", f"NVUE configs carry no cabling: add {DEFAULT_TOPOLOGY} (StartDevice,StartPort,"
                                "EndDevice,EndPort) or give --topology")
    label = ref or f"{kind}:{paths[0]}"
    return assemble(label, name or default_name, manifest, switches, cables, settings, profile=profile,
                    nodes=nodes, base=base)
