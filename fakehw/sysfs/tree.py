"""Building a fake root tree in memory and writing it to disk atomically and incrementally.

A renderer describes the tree in *sections* (:class:`Section`): named groups of entries (files, relative
symlinks, directories, character devices), each path owned by exactly one section. A section is *static* when its
content depends only on the model (it carries a key such as the profile digest) or *dynamic* when runtime state
changes it (it is rebuilt on every render and compared entry by entry).

:class:`RootWriter` keeps a manifest next to the tree (``<node dir>/root.manifest.json``, outside the tree so a
container mounting the tree never sees it) with the key of every static section and a short digest of every
entry of every dynamic section. Then:

- the first render builds the whole tree in a temporary directory and renames it into place, so a reader never
  sees a half-built tree (where the caller made empty directories of it beforehand, to mount them, the new
  content is moved into those instead);
- later renders skip static sections whose key is unchanged and rewrite only the entries of dynamic sections
  whose digest changed, each with write-to-temp-and-rename (a reader sees the old file or the new one), and remove
  entries that are gone (links first, then files, then directories that became empty);
- the tree's directories are never replaced, so a bind mount of the root (or of ``sys``, ``proc``, ``dev``)
  keeps seeing every change. Single files bind-mounted on their own do not (a rename replaces the inode): mount
  directories.

Entries other renderers write under the same root are left alone: only paths in the manifest are ever removed.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import posixpath
import shutil
import stat
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakehw.render.atomic import Releaser

MANIFEST_VERSION = 1
SOURCE_SUFFIX = ".source"
"""A file in the store naming the root of the tree that holds one share key's files (others hard-link them)."""
MANIFEST_NAME = ".manifest"
WRITER_THREADS = 4
PARALLEL_THRESHOLD = 2000
_FRESH_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class File:
    data: bytes
    mode: int = 0o444


@dataclass(frozen=True, slots=True)
class Link:
    target: str
    """Relative to the link's directory, so it resolves inside the tree wherever the tree is mounted."""


@dataclass(frozen=True, slots=True)
class Dir:
    mode: int = 0o755


@dataclass(frozen=True, slots=True)
class CharDev:
    major: int
    minor: int
    mode: int = 0o666


@dataclass(frozen=True, slots=True)
class SparseFile:
    """A file of ``size`` bytes that reads as zeros and takes no space (a BAR's ``resourceN``: its size is the
    BAR's, 128 GiB for an H100's aperture)."""

    size: int
    mode: int = 0o600


Entry = File | Link | Dir | CharDev | SparseFile


def digest(entry: Entry) -> str:
    if isinstance(entry, File):
        return f"f{entry.mode:o}:" + hashlib.blake2b(entry.data, digest_size=8).hexdigest()
    if isinstance(entry, Link):
        return "l:" + entry.target
    if isinstance(entry, Dir):
        return f"d{entry.mode:o}"
    if isinstance(entry, SparseFile):
        return f"s{entry.mode:o}:{entry.size}"
    return f"c{entry.mode:o}:{entry.major}:{entry.minor}"


def relative(target: str, start: str) -> str:
    """``posixpath.relpath`` for two root-relative, normalized paths (no ``.``/``..``, no trailing ``/``), without
    its abspath calls: links are most of a tree's entries (a GB200 tray has tens of thousands). Anything else
    (a ``.``/``..`` part, a doubled slash) goes through ``posixpath.relpath``."""
    if _unnormalized(target) or _unnormalized(start):
        return posixpath.relpath(target or ".", start or ".")
    t = target.split("/") if target else []
    f = start.split("/") if start else []
    common = 0
    for a, b in zip(t, f, strict=False):
        if a != b:
            break
        common += 1
    parts = [".."] * (len(f) - common) + t[common:]
    return "/".join(parts) or "."


def _unnormalized(path: str) -> bool:
    """Whether ``path`` has a part the fast path of :func:`relative` would get wrong."""
    return "//" in path or path.startswith(".") or "/." in path or path.endswith("/")


class Section:
    """Entries of one part of the tree, by path relative to the root (``sys/devices/system/cpu/online``)."""

    __slots__ = ("entries", "name")

    def __init__(self, name: str):
        self.name = name
        self.entries: dict[str, Entry] = {}

    def file(self, path: str, data: str | bytes, mode: int = 0o444) -> None:
        self.entries[path] = File(data.encode() if isinstance(data, str) else data, mode)

    def text(self, path: str, value: object, mode: int = 0o444) -> None:
        """A one-value sysfs attribute: ``value`` and a newline."""
        self.entries[path] = File(f"{value}\n".encode(), mode)

    def link(self, path: str, target: str) -> None:
        """A symlink at ``path`` to the root-relative ``target``, stored relative to ``path``'s directory."""
        self.entries[path] = Link(relative(target, path.rpartition("/")[0]))

    def dir(self, path: str, mode: int = 0o755) -> None:
        self.entries[path] = Dir(mode)

    def chardev(self, path: str, major: int, minor: int, mode: int = 0o666) -> None:
        self.entries[path] = CharDev(major, minor, mode)

    def sparse(self, path: str, size: int, mode: int = 0o600) -> None:
        self.entries[path] = SparseFile(size, mode)

    def update(self, other: Section) -> None:
        self.entries.update(other.entries)


@dataclass(frozen=True)
class SectionSpec:
    """A section to render: ``key`` is None for a dynamic section, else a string that changes with its content.

    ``share`` (static sections only) names content that is the same on every node that has the same share key
    (the CPU tree of all nodes of one node template): a node rendered after another with the same share key
    hard-links the other's files instead of writing its own, which makes a fleet cheap to render and still gives
    every node a plain tree a container can mount (a hard link is the file itself, unlike a symlink out of the
    tree). Files are never modified in place, only replaced by rename, so linked trees never affect each other.
    """

    name: str
    key: str | None
    build: Callable[[], Section]
    share: str | None = None
    inputs: object = None
    """Dynamic sections: everything the section is built from besides the model (compared with ``==``). With a
    memo (:meth:`RootWriter.render`), a section whose inputs equal those of the last render is not even built: a
    fault on one GPU rebuilds no sysfs section that does not depend on it. None: rebuilt and compared every time."""


@dataclass
class WriteStats:
    written: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped_sections: int = 0
    mode: str = ""
    changed: list[str] = field(default_factory=list)
    """Paths an incremental render wrote or removed (what a live view of the tree must stop caching)."""


class RootWriter:
    """Writes sections under ``root`` and keeps ``manifest`` in step with what is on disk."""

    def __init__(self, root: Path, manifest: Path, make_devices: bool | None = None, store: Path | None = None,
                 release: Releaser | None = None):
        self.root = root
        self.release = release
        """Where replaced files are closed (:class:`~fakehw.render.atomic.Releaser`; None: inline)."""
        self.manifest_path = manifest
        self.make_devices = os.geteuid() == 0 if make_devices is None else make_devices
        self.store = store
        """Where shared sections are kept, one copy per share key, for trees to hard-link (None: no sharing)."""
        self.umask = _umask()
        self._made_dirs: set[str] = set()
        """Directories :meth:`_write_fresh` made under ``root`` (a fresh tree's, so never removed meanwhile)."""

    # ------------------------------------------------------------------------------------------ manifest

    def _load_manifest(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
            return None
        sections = data.get("sections")
        return data if isinstance(sections, dict) else None

    def _save_manifest(self, sections: dict[str, dict[str, Any]]) -> None:
        from fakehw.render.atomic import atomic_write

        data = json.dumps({"version": MANIFEST_VERSION, "sections": sections}, separators=(",", ":"),
                          sort_keys=True).encode()
        atomic_write(self.manifest_path, data, 0o644, release=self.release)

    # ------------------------------------------------------------------------------------------ render

    def render(self, specs: Iterable[SectionSpec], memo: dict[str, Any] | None = None) -> WriteStats:
        """Bring the tree in line with ``specs``. ``memo`` (kept by the caller between renders of one tree): the
        manifest and every dynamic section's inputs as last written, so an unchanged section costs a comparison."""
        specs = list(specs)
        memo = {} if memo is None else memo
        if _unchanged(specs, memo) and self.root.is_dir():
            return WriteStats(mode="unchanged")
        manifest = memo.get("manifest") if self.root.is_dir() else None
        if manifest is None:
            manifest = self._load_manifest()
            memo.pop("inputs", None)
        inputs: dict[str, object] = memo.setdefault("inputs", {})
        stats = WriteStats()
        if manifest is None or not self.root.is_dir():
            memo.clear()
            if self.root.exists() and manifest is None and not _holds_only_directories(self.root):
                stats.mode = "sync"
                return self._sync(specs, stats)
            stats.mode = "full"
            return self._full(specs, stats, memo)
        old: dict[str, dict[str, Any]] = manifest["sections"]
        if any(s.key is not None and old.get(s.name, {}).get("key") != s.key for s in specs) or \
                set(old) != {s.name for s in specs}:
            # The model changed under an existing tree: start over (rare; the agent's state dir was reused).
            stats.mode = "rebuild"
            self._clear()
            memo.clear()
            return self._full(specs, stats, memo)
        stats.mode = "incremental"
        new_manifest: dict[str, dict[str, Any]] = {}
        built: dict[str, object] = {}  # into the memo once written: a failed write leaves the memo as it was
        writes: dict[str, Entry] = {}
        removes: list[str] = []
        for spec in specs:
            if spec.key is not None or (spec.inputs is not None and spec.name in inputs and
                                        inputs[spec.name] == spec.inputs):
                new_manifest[spec.name] = old[spec.name]
                stats.skipped_sections += 1
                continue
            section = spec.build()
            built[spec.name] = spec.inputs
            before: dict[str, str] = old[spec.name].get("entries", {})
            after = {p: digest(e) for p, e in section.entries.items()}
            for path, d in after.items():
                if before.get(path) != d:
                    writes[path] = section.entries[path]
                else:
                    stats.unchanged += 1
            removes.extend(p for p in before if p not in after)
            new_manifest[spec.name] = {"key": None, "entries": after}
        if removes:  # the directories to keep walk every entry of the tree: only when something is removed
            keep_dirs = {p for spec in new_manifest.values() for p, d in (spec.get("entries") or {}).items()
                         if d.startswith("d")}
            self._remove(removes, stats, keep=writes, keep_dirs=keep_dirs)
        self._write_all(writes, stats)
        if writes or removes:
            self._save_manifest(new_manifest)
        memo["manifest"] = {"version": MANIFEST_VERSION, "sections": new_manifest}
        inputs.update(built)
        stats.changed = [*writes, *removes]
        return stats

    def _full(self, specs: list[SectionSpec], stats: WriteStats, memo: dict[str, Any] | None = None) -> WriteStats:
        """Build everything in a temporary directory next to the root and rename it into place."""
        tmp = self.root.with_name(f".{self.root.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        sources: dict[Path, dict[str, Any] | None] = {}
        try:
            manifest = self._build_in(tmp, specs, stats, sources)
        except BaseException:  # a full disk, say: leave no half-built tree behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self.root.exists():
            # A rebuild keeps the root directory itself (it may be bind-mounted): move the new content in.
            for child in tmp.iterdir():
                target = self.root / child.name
                if target.is_dir() and not target.is_symlink():
                    _merge_dir(child, target)
                else:
                    os.replace(child, target)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.rename(tmp, self.root)
        self._save_manifest(manifest)
        self._offer_shares(specs, sources)
        if memo is not None:
            memo["manifest"] = {"version": MANIFEST_VERSION, "sections": manifest}
            memo["inputs"] = {s.name: s.inputs for s in specs if s.key is None}
        return stats

    def _build_in(self, tmp: Path, specs: list[SectionSpec], stats: WriteStats,
                  sources: dict[Path, dict[str, Any] | None]) -> dict[str, dict[str, Any]]:
        """Write every section under ``tmp``; returns the manifest. ``sources``: the source trees' manifests
        read so far in this render (see :meth:`_shared_source`)."""
        manifest: dict[str, dict[str, Any]] = {}
        writer = RootWriter(tmp, self.manifest_path, self.make_devices)
        owner: dict[str, str] = {}
        for spec in specs:
            section = spec.build()
            for path in section.entries:
                if owner.setdefault(path, spec.name) != spec.name:
                    raise ValueError(f"{path} is rendered by sections {owner[path]} and {spec.name}")
            source = self._shared_source(spec, sources) if spec.share is not None and spec.key is not None \
                else None
            if source is None or not self._link_from(source, section, tmp, stats):
                writer._write_fresh(section.entries, stats)
            manifest[spec.name] = {"key": spec.key, "share": spec.share, "count": len(section.entries),
                                   "entries": None if spec.key is not None else
                                   {p: digest(e) for p, e in section.entries.items()}}
        return manifest

    def _share_pointer(self, spec: SectionSpec) -> Path | None:
        """Where the store names the tree that holds ``spec``'s shared files (None: no sharing)."""
        if self.store is None or spec.share is None:
            return None
        key = f"{spec.share}|devices={self.make_devices}"
        return self.store / (hashlib.sha256(key.encode()).hexdigest()[:24] + SOURCE_SUFFIX)

    def _shared_source(self, spec: SectionSpec, sources: dict[Path, dict[str, Any] | None]) -> Path | None:
        """The root of a tree that holds ``spec``'s files as this node needs them (None: write them).

        The first tree of a node template is the shared copy (the store only names it): a node rendered alone (a
        device plugin's node) writes each file once, where keeping a separate copy in the store wrote every file
        twice (the store's copy, then a link per file: 9 s + 11 s of a riscv-nvlink-fusion node's 21 s). The
        named tree is trusted only while its manifest still says it rendered this section as static content of
        this share key (which names the renderer's version, the model's digest and the template); a tree that is
        gone or was rebuilt from another model is ignored (this node writes its own files and is named instead).

        ``sources`` holds the manifests this render has read, by path: every shared section (four) names the same
        tree, before and after the build, so it is parsed once per render instead of eight times. The saving is
        small: a source's manifest records its shared sections by key and carries digests only for its dynamic
        sections' entries, 0.04 MB on dgx-h100 (0.07 ms a parse) and 0.3 MB on the CXL profiles (about 2 ms), so
        the seven parses saved are 0.5 ms of a linked dgx-h100 node's render of over a second (docs/testbed.md).
        The small pointer files are read each time (another node may name itself meanwhile)."""
        pointer = self._share_pointer(spec)
        if pointer is None:
            return None
        try:
            root, manifest = (Path(line) for line in pointer.read_text().splitlines())
        except (OSError, ValueError):
            return None
        if manifest not in sources:
            sources[manifest] = _read_sections(manifest)
        section = (sources[manifest] or {}).get(spec.name)
        if not isinstance(section, dict) or section.get("key") is None or section.get("share") != spec.share:
            return None
        return root if root != self.root and root.is_dir() else None

    def _offer_shares(self, specs: list[SectionSpec], sources: dict[Path, dict[str, Any] | None]) -> None:
        """Name this (complete) tree in the store as the source of its shared sections that have none."""
        for spec in specs:
            pointer = self._share_pointer(spec)
            if pointer is None or spec.key is None or self._shared_source(spec, sources) is not None:
                continue
            from fakehw.render.atomic import atomic_write

            with contextlib.suppress(OSError):  # no store (read-only, full): the next node writes its own files
                self.store.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
                atomic_write(pointer, f"{self.root}\n{self.manifest_path}\n".encode(), 0o644)

    def _link_from(self, source: Path, section: Section, dest: Path, stats: WriteStats) -> bool:
        """Hard-link ``section``'s files and symlinks from ``source`` into ``dest`` (directories are made anew).
        False when hard links are not possible here; then nothing but directories was made."""
        src, dst = str(source), str(dest)
        files = [p for p, e in section.entries.items() if isinstance(e, File | CharDev | SparseFile)]
        if files:  # probe once: another filesystem or a refusing kernel means no hard links here
            probe = os.path.join(dst, f".link-probe-{os.getpid()}")
            try:
                os.link(os.path.join(src, files[0]), probe)
                os.unlink(probe)
            except OSError:
                return False
        groups: dict[str, list[str]] = {}
        for rel in section.entries:
            groups.setdefault(posixpath.dirname(rel), []).append(rel)
        buckets: list[list[str]] = [[] for _ in range(WRITER_THREADS)]
        for i, (_, members) in enumerate(sorted(groups.items())):
            buckets[i % WRITER_THREADS].extend(members)
        entries = section.entries

        def link_bucket(paths: list[str]) -> None:
            made: set[str] = set()
            for rel in paths:
                entry = entries[rel]
                parent = posixpath.dirname(rel)
                if parent and parent not in made:
                    os.makedirs(os.path.join(dst, parent), exist_ok=True)
                    made.add(parent)
                if isinstance(entry, Dir):
                    os.makedirs(os.path.join(dst, rel), exist_ok=True)
                    made.add(rel)
                elif isinstance(entry, Link):
                    # A hard link to the sibling's symlink (same relative target: same share key) costs no new
                    # inode, which on ext4 is most of a symlink's price; a fresh symlink when that fails.
                    try:
                        os.link(os.path.join(src, rel), os.path.join(dst, rel), follow_symlinks=False)
                    except OSError as exc:
                        if exc.errno not in (errno.ENOENT, errno.EMLINK, errno.EXDEV, errno.EPERM):
                            raise
                        os.symlink(entry.target, os.path.join(dst, rel))
                else:
                    try:
                        os.link(os.path.join(src, rel), os.path.join(dst, rel))
                    except OSError as exc:  # the sibling lost the file, or it has too many links: write ours
                        if exc.errno not in (errno.ENOENT, errno.EMLINK, errno.EXDEV, errno.EPERM):
                            raise
                        self._direct(os.path.join(dst, rel), entry)

        with ThreadPoolExecutor(WRITER_THREADS) as pool:
            list(pool.map(link_bucket, buckets))
        stats.written += len(entries)
        return True

    def _sync(self, specs: list[SectionSpec], stats: WriteStats) -> WriteStats:
        """A tree exists but no manifest: write what differs, remove nothing (the tree may hold others' files)."""
        entries: dict[str, Entry] = {}
        manifest: dict[str, dict[str, Any]] = {}
        for spec in specs:
            section = spec.build()
            entries.update(section.entries)
            manifest[spec.name] = {"key": spec.key, "entries": None if spec.key is not None else
                                   {p: digest(e) for p, e in section.entries.items()}}
        changed = {p: e for p, e in entries.items() if not self._matches(p, e)}
        stats.unchanged += len(entries) - len(changed)
        self._write_all(changed, stats)
        self._save_manifest(manifest)
        return stats

    def _clear(self) -> None:
        """Remove the top-level trees earlier renders wrote (``sys``, ``proc``, ``dev``, ``run``)."""
        for name in ("sys", "proc", "dev", "run"):
            path = self.root / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ disk

    def _matches(self, rel: str, entry: Entry) -> bool:
        path = self.root / rel
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if isinstance(entry, Link):
            return stat.S_ISLNK(st.st_mode) and os.readlink(path) == entry.target
        if isinstance(entry, Dir):
            return stat.S_ISDIR(st.st_mode)
        if isinstance(entry, CharDev):
            if stat.S_ISCHR(st.st_mode):
                return os.major(st.st_rdev) == entry.major and os.minor(st.st_rdev) == entry.minor
            return stat.S_ISREG(st.st_mode) and path.read_bytes() == _device_placeholder(entry)
        if isinstance(entry, SparseFile):
            return stat.S_ISREG(st.st_mode) and st.st_size == entry.size and stat.S_IMODE(st.st_mode) == entry.mode
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(entry.data) or stat.S_IMODE(st.st_mode) != entry.mode:
            return False
        return path.read_bytes() == entry.data

    def _write_all(self, entries: dict[str, Entry], stats: WriteStats) -> None:
        """Write ``entries`` in place of what is there, each through a temporary name: directories and files first,
        links last (a link's target exists when it appears). A fresh tree is :meth:`_write_fresh`'s."""
        root = str(self.root)
        plain = [p for p, e in entries.items() if not isinstance(e, Link)]
        links = sorted(p for p, e in entries.items() if isinstance(e, Link))
        stats.written += self._write_list(root, sorted(plain), entries)
        stats.written += self._write_list(root, links, entries)

    def _write_fresh(self, entries: dict[str, Entry], stats: WriteStats) -> None:
        """Write ``entries`` into a tree this render is building (the first render's temporary directory, which
        nobody else reads or writes): the same entries :meth:`_write_all` would make, with less work.

        Nothing there needs replacing or comparing, so every directory is made once with one ``mkdir`` (parents
        before children), every file with one ``open(O_CREAT | O_EXCL | O_NOFOLLOW)`` (a name that exists, a
        symlink above all, is an error, never followed), ``write`` and ``close``, and every name is resolved
        from a descriptor of the tree's root rather than from ``/``. Directories, then files and devices, then
        links, as :meth:`_write_all` orders them. A big section is written by one thread per CPU (at most
        :data:`WRITER_THREADS`), each owning whole directories: the cost is the kernel's inode allocation (on
        the journal-less ext4 of these machines 30-400 us a file, docs/testbed.md), which threads overlap when
        CPUs are free."""
        made = self._made_dirs
        wanted: dict[str, int] = {}
        for rel, entry in entries.items():
            if isinstance(entry, Dir):
                wanted[rel] = entry.mode
            parent = rel.rpartition("/")[0]
            while parent and parent not in made and parent not in wanted:
                wanted[parent] = 0o777  # as os.makedirs makes a parent (the umask applies)
                parent = parent.rpartition("/")[0]
        threads = min(WRITER_THREADS, os.cpu_count() or 1) if len(entries) > PARALLEL_THRESHOLD else 1
        rootfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            by_depth: dict[int, list[str]] = {}
            for rel in wanted:
                by_depth.setdefault(rel.count("/"), []).append(rel)
            files: list[tuple[str, Entry]] = []
            links: list[tuple[str, Entry]] = []
            for rel, entry in entries.items():
                if isinstance(entry, Link):
                    links.append((rel, entry))
                elif not isinstance(entry, Dir):
                    files.append((rel, entry))
            with ThreadPoolExecutor(threads) if threads > 1 else contextlib.nullcontext() as pool:
                run = pool.map if pool is not None else map  # a small section: no thread to start
                for depth in sorted(by_depth):  # a level's parents exist before it is made
                    level = sorted(by_depth[depth])
                    list(run(lambda part: self._fresh_dirs(rootfd, part, wanted), _split(level, threads)))
                made.update(wanted)
                for batch in (files, sorted(links, key=_first)):
                    list(run(lambda part: self._fresh_entries(rootfd, part), _by_directory(batch, threads)))
        finally:
            os.close(rootfd)
        stats.written += len(entries)

    @staticmethod
    def _fresh_dirs(rootfd: int, paths: list[str], modes: dict[str, int]) -> None:
        for rel in paths:
            with contextlib.suppress(FileExistsError):  # made by an earlier section or a linked one
                os.mkdir(rel, modes[rel], dir_fd=rootfd)

    def _fresh_entries(self, rootfd: int, items: list[tuple[str, Entry]]) -> None:
        umask, root = self.umask, str(self.root)
        for rel, entry in items:
            if isinstance(entry, File):
                fd = os.open(rel, _FRESH_FLAGS, entry.mode, dir_fd=rootfd)
                try:
                    if entry.data:
                        os.write(fd, entry.data)
                    if entry.mode & umask:  # the umask took bits this file needs
                        os.fchmod(fd, entry.mode)
                finally:
                    os.close(fd)
            elif isinstance(entry, Link):
                os.symlink(entry.target, rel, dir_fd=rootfd)
            else:
                self._direct(os.path.join(root, rel), entry)  # devices and sparse files: a few per tree

    def _write_list(self, root: str, paths: list[str], entries: dict[str, Entry]) -> int:
        made: set[str] = set()
        for rel in paths:
            entry = entries[rel]
            full = os.path.join(root, rel)
            if isinstance(entry, Dir):
                if rel not in made:
                    os.makedirs(full, mode=entry.mode, exist_ok=True)
                    made.add(rel)
                continue
            parent = posixpath.dirname(rel)
            if parent and parent not in made:
                os.makedirs(os.path.join(root, parent), exist_ok=True)
                while parent and parent not in made:
                    made.add(parent)
                    parent = posixpath.dirname(parent)
            self._atomic(full, entry)
        return len(paths)

    def _direct(self, full: str, entry: Entry) -> None:
        if isinstance(entry, File):
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, entry.mode)
            try:
                os.write(fd, entry.data)
                if entry.mode & self.umask:  # the umask took bits this file needs
                    os.fchmod(fd, entry.mode)
            finally:
                os.close(fd)
        elif isinstance(entry, Link):
            os.symlink(entry.target, full)
        elif isinstance(entry, CharDev):
            self._device(full, entry)
        elif isinstance(entry, SparseFile):
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, entry.mode)
            try:
                os.ftruncate(fd, entry.size)
                if entry.mode & self.umask:
                    os.fchmod(fd, entry.mode)
            finally:
                os.close(fd)

    def _atomic(self, full: str, entry: Entry) -> None:
        directory, name = os.path.split(full)
        tmp = os.path.join(directory, f".{name}.fakehw-{os.getpid()}-{threading.get_ident()}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        try:
            self._direct(tmp, entry)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            held = self.release.hold(full) if self.release is not None else None
            try:
                os.replace(tmp, full)
            finally:
                if held is not None:
                    self.release.later(held)  # type: ignore[union-attr]
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _device(self, full: str, entry: CharDev) -> None:
        """A character device with the real major/minor when we may create one, else a plain file saying it."""
        if self.make_devices:
            try:
                os.mknod(full, stat.S_IFCHR | entry.mode, os.makedev(entry.major, entry.minor))
                os.chmod(full, entry.mode)
                return
            except PermissionError:
                self.make_devices = False
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, _device_placeholder(entry))
        finally:
            os.close(fd)

    def _remove(self, paths: list[str], stats: WriteStats, keep: dict[str, Entry], keep_dirs: set[str]) -> None:
        """Remove ``paths`` and the directories they leave empty, except directories a section declares."""
        root = str(self.root)
        entries = [p for p in paths if p not in keep]
        # Deepest first so a directory is empty when its turn comes.
        for rel in sorted(entries, key=lambda p: (-p.count("/"), p)):
            full = os.path.join(root, rel)
            try:
                if os.path.isdir(full) and not os.path.islink(full):
                    os.rmdir(full)
                else:
                    os.unlink(full)
                stats.removed += 1
            except FileNotFoundError:
                continue
            except OSError:
                continue  # a directory someone else still uses
            parent = posixpath.dirname(rel)
            while parent and parent not in keep_dirs:
                try:
                    os.rmdir(os.path.join(root, parent))
                except OSError:
                    break
                parent = posixpath.dirname(parent)


def _first(item: tuple[str, Entry]) -> str:
    return item[0]


def _split(paths: list[str], parts: int) -> list[list[str]]:
    """``paths`` in ``parts`` interleaved slices (directories of one level: any split works)."""
    return [paths[i::parts] for i in range(parts)] if parts > 1 else [paths]


def _by_directory(items: list[tuple[str, Entry]], parts: int) -> list[list[tuple[str, Entry]]]:
    """``items`` in ``parts`` lists, each directory's entries in one list and in their order (threads never make
    entries in the same directory, whose lock they would contend for)."""
    if parts <= 1:
        return [items]
    groups: dict[str, list[tuple[str, Entry]]] = {}
    for item in items:
        groups.setdefault(item[0].rpartition("/")[0], []).append(item)
    buckets: list[list[tuple[str, Entry]]] = [[] for _ in range(parts)]
    for i, members in enumerate(groups.values()):
        buckets[i % parts].extend(members)
    return buckets


def _unchanged(specs: list[SectionSpec], memo: dict[str, Any]) -> bool:
    """Whether the last render written whole (``memo``) had the same sections, every static one with the same
    key and every dynamic one with equal inputs: then nothing needs building or comparing. A dynamic section
    without inputs is built every time, so its presence means "maybe changed"."""
    manifest, inputs = memo.get("manifest"), memo.get("inputs")
    if manifest is None or inputs is None:
        return False
    old: dict[str, dict[str, Any]] = manifest["sections"]
    if len(old) != len(specs):
        return False
    for spec in specs:
        last = old.get(spec.name)
        if last is None:
            return False
        if spec.key is not None:
            if last.get("key") != spec.key:
                return False
        elif spec.inputs is None or spec.name not in inputs or inputs[spec.name] != spec.inputs:
            return False
    return True


def _read_sections(manifest: Path) -> dict[str, Any] | None:
    """The ``sections`` of a manifest on disk (None: unreadable, not JSON or not a manifest)."""
    try:
        sections = json.loads(manifest.read_text())["sections"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sections if isinstance(sections, dict) else None


@functools.cache
def _umask() -> int:
    """The process umask, read once per process without changing it (``os.umask`` would race with other
    threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o777  # unknown: always chmod


def _device_placeholder(entry: CharDev) -> bytes:
    return f"character device {entry.major}:{entry.minor} (fakehw: not created, needs root)\n".encode()


def _holds_only_directories(root: Path) -> bool:
    """Whether ``root`` holds nothing but directories (none of them a link): the skeleton a caller makes before the
    first render to mount parts of the tree (the Docker backend's ``sys/bus``, ``sys/devices``, ``sys/class``,
    ``dev`` and ``proc/driver``). Such a tree has no one else's files to keep, so it is written the fresh way and
    moved in (:meth:`RootWriter._full` keeps the existing directories, so the mounts keep seeing it) rather than
    entry by entry (:meth:`RootWriter._sync`: a compare, a temporary name and a rename per entry, 3-4x the CPU of
    a first render, and more under QEMU). A directory that cannot be read counts as holding something."""
    def unreadable(exc: OSError) -> None:
        raise exc

    try:
        for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
            if filenames or any(os.path.islink(os.path.join(dirpath, d)) for d in dirnames):
                return False
    except OSError:
        return False
    return True


def _merge_dir(src: Path, dst: Path) -> None:
    for child in src.iterdir():
        target = dst / child.name
        if child.is_dir() and not child.is_symlink() and target.is_dir() and not target.is_symlink():
            _merge_dir(child, target)
        else:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(child, target)
