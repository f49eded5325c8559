"""Run hwloc (a real consumer) against a fake root and read its XML: what hwloc believes the machine is.

Used by the tests to check the tree against the model, and usable by conformance suites that want hwloc's view of
a node. ``lstopo-no-graphics`` comes from Debian's ``hwloc``/``hwloc-nox`` packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

LSTOPO_CANDIDATES = ("lstopo-no-graphics", "hwloc-ls", "lstopo")
IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev"})


class HwlocError(Exception):
    """hwloc is missing, failed, or printed something that is not its XML."""


def lstopo_path() -> str | None:
    return next((p for name in LSTOPO_CANDIDATES if (p := shutil.which(name))), None)


HWLOC_CACHE_ENV = "FAKEHW_HWLOC_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Lstopo:
    """An lstopo to run: its path and the library path it needs (a cached newer hwloc, or the system's)."""

    path: str
    library_path: str | None = None
    version: str = ""


def newer_lstopo() -> Lstopo | None:
    """hwloc 2.12+ as tools/fetch-real-hwloc.sh caches it (``$FAKEHW_HWLOC_DIR`` or ``.cache/hwloc-2.12``)."""
    base = Path(os.environ.get(HWLOC_CACHE_ENV) or REPO_ROOT / ".cache" / "hwloc-2.12")
    exe = base / "usr" / "bin" / "lstopo-no-graphics"
    try:
        version = (base / "VERSION").read_text().strip()
    except OSError:
        return None
    if not os.access(exe, os.X_OK):
        return None
    return Lstopo(str(exe), str(base / "usr" / "lib" / "x86_64-linux-gnu"), version)


@dataclass
class HwlocObject:
    type: str
    attrs: dict[str, str]
    infos: dict[str, list[str]] = field(default_factory=dict)
    children: list[HwlocObject] = field(default_factory=list)
    parent: HwlocObject | None = None

    @property
    def os_index(self) -> int | None:
        value = self.attrs.get("os_index")
        return None if value is None else int(value)

    @property
    def name(self) -> str | None:
        return self.attrs.get("name")

    @property
    def subtype(self) -> str | None:
        return self.attrs.get("subtype")

    def info(self, name: str) -> str | None:
        values = self.infos.get(name)
        return values[0] if values else None

    def cpuset(self) -> frozenset[int]:
        return parse_bitmap(self.attrs.get("cpuset", ""))

    def nodeset(self) -> frozenset[int]:
        return parse_bitmap(self.attrs.get("nodeset", ""))

    def walk(self) -> Iterator[HwlocObject]:
        yield self
        for c in self.children:
            yield from c.walk()

    def non_io_ancestor(self) -> HwlocObject:
        """The first ancestor that is not an I/O object: where hwloc attached this device's host bridge."""
        obj = self.parent
        while obj is not None and obj.type in IO_TYPES:
            obj = obj.parent
        if obj is None:
            raise HwlocError(f"{self.type} {self.attrs} has no non-I/O ancestor")
        return obj


def parse_bitmap(text: str) -> frozenset[int]:
    """hwloc's bitmap string (``0x000000ff,0xffffffff,,0x0000000f``; empty words are zero) to bit indexes."""
    text = text.strip()
    if not text or text == "0x0":
        return frozenset()
    words = text.split(",")
    out: set[int] = set()
    for i, word in enumerate(reversed(words)):
        value = int(word, 16) if word else 0
        bit = 0
        while value:
            if value & 1:
                out.add(32 * i + bit)
            value >>= 1
            bit += 1
    return frozenset(out)


@dataclass
class HwlocTopology:
    root: HwlocObject
    memattrs: dict[str, dict[int, int]]
    """memattr name -> {NUMA node os_index: value} (HMAT figures hwloc read)."""

    def objects(self, type_: str) -> list[HwlocObject]:
        return [o for o in self.root.walk() if o.type == type_]

    def numa(self) -> dict[int, HwlocObject]:
        return {o.os_index: o for o in self.objects("NUMANode") if o.os_index is not None}

    def pci(self) -> dict[str, HwlocObject]:
        return {o.attrs["pci_busid"]: o for o in self.root.walk() if o.type in ("PCIDev", "Bridge")
                and "pci_busid" in o.attrs}

    def osdevs(self) -> dict[str, HwlocObject]:
        return {o.name: o for o in self.objects("OSDev") if o.name}


def parse_xml(text: str) -> HwlocTopology:
    try:
        doc = ET.fromstring(text)
    except ET.ParseError as exc:
        raise HwlocError(f"hwloc did not print XML: {exc}") from None
    top = doc.find("object")
    if top is None:
        raise HwlocError("hwloc XML has no top object")
    gp: dict[str, HwlocObject] = {}

    def build(el: ET.Element, parent: HwlocObject | None) -> HwlocObject:
        obj = HwlocObject(el.get("type", ""), dict(el.attrib), parent=parent)
        if "gp_index" in obj.attrs:
            gp[obj.attrs["gp_index"]] = obj
        for child in el:
            if child.tag == "info":
                obj.infos.setdefault(child.get("name", ""), []).append(child.get("value", ""))
            elif child.tag == "object":
                obj.children.append(build(child, obj))
        return obj

    root = build(top, None)
    memattrs: dict[str, dict[int, int]] = {}
    for attr in doc.findall("memattr"):
        values = memattrs.setdefault(attr.get("name", ""), {})
        for v in attr.findall("memattr_value"):
            target = gp.get(v.get("target_obj_gp_index", ""))
            if target is not None and target.os_index is not None:
                values[target.os_index] = int(v.get("value", "0"))
    return HwlocTopology(root, memattrs)


def lstopo(root: Path, extra_env: Mapping[str, str] | None = None, timeout: float = 120.0,
           which: Lstopo | None = None) -> HwlocTopology:
    """hwloc's view of the tree at ``root`` (all I/O objects kept, GPU memory NUMA nodes kept); ``which`` picks
    an lstopo other than the system's (:func:`newer_lstopo`)."""
    exe = which.path if which is not None else lstopo_path()
    if exe is None:
        raise HwlocError("hwloc is not installed (Debian: hwloc or hwloc-nox; tools/install-system-deps.sh)")
    env = {**os.environ, "HWLOC_FSROOT": str(root), "HWLOC_COMPONENTS": "linux,stop",
           "HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": "1", **(extra_env or {})}
    if which is not None and which.library_path:
        env["LD_LIBRARY_PATH"] = which.library_path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH")
                                                       else "")
    try:
        proc = subprocess.run([exe, "--of", "xml", "--whole-io", "-"], capture_output=True, text=True, env=env,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise HwlocError(f"{exe} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise HwlocError(f"{exe} failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    return parse_xml(proc.stdout)
