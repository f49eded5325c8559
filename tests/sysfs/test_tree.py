"""The tree writer: complete first render, incremental re-render of only what changed, device nodes, sharing,
bind-mount safety (relative links, kept directories) and atomic files under concurrent readers."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from fakehw.agent.faults import FallenOffBus
from fakehw.agent.state import ActiveFault, NodeState, derive_state
from fakehw.model import System, load_profile
from fakehw.model.system import Node
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir
from fakehw.sysfs import MANIFEST, ROOT_DIR, node_layout, render_tree
from fakehw.sysfs.hwloc import lstopo, lstopo_path
from fakehw.sysfs.nvidia import gpu_section
from fakehw.sysfs.tree import RootWriter, Section, SectionSpec, WriteStats, _umask


def _render(system_name: str, out: Path, lost: tuple[str, ...] = ()) -> tuple[WriteStats, System, Node, NodeState]:
    system = load_profile(system_name)
    node = system.nodes[0]
    faults = [ActiveFault(f"f-{i}", node.name, FallenOffBus(device=g), 0.0) for i, g in enumerate(lost)]
    state = derive_state(node, faults)
    stats = render_tree(RenderContext(system, node, state, True), OutputDir(out / node.name))
    return stats, system, node, state


def test_first_render_is_complete_contained_and_keeps_its_manifest_outside(fast_tmp: Path) -> None:
    stats, *_ = _render("cxl-pool", fast_tmp)
    node_dir = fast_tmp / "cxl-host-0"
    root = node_dir / ROOT_DIR
    assert stats.mode == "full" and stats.written > 1000
    assert (node_dir / MANIFEST).is_file() and not (root / MANIFEST).exists()
    links = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                links += 1
                target = os.readlink(path)
                if path.parent == root / "dev" and (target.startswith("/proc/self/fd") or target == "pts/ptmx"):
                    continue  # devtmpfs's own links: they resolve in whatever process opens them, as on a host
                assert not target.startswith("/"), f"{path} -> {target} is absolute"
                resolved = (path.parent / target).resolve()
                assert resolved.is_relative_to(root.resolve()), f"{path} -> {target} leaves the tree"
                assert resolved.exists(), f"{path} -> {target} dangles"
    assert links > 100


def test_a_lost_gpu_rewrites_only_its_files_and_disappears_from_pci(fast_tmp: Path) -> None:
    _render("dgx-h100", fast_tmp)
    root = fast_tmp / "dgx-h100-0" / ROOT_DIR
    unrelated = root / "sys/devices/system/cpu/cpu0/topology/core_id"
    before = unrelated.stat().st_mtime_ns
    stats, system, node, state = _render("dgx-h100", fast_tmp, lost=("gpu3",))
    lay = node_layout(system, node)
    with_gpu = set(gpu_section(system, node, derive_state(node, []), lay).entries)
    without = set(gpu_section(system, node, state, lay).entries)
    gone = with_gpu - without
    assert stats.mode == "incremental"
    assert stats.written == 0 and stats.removed == len(gone) > 20
    gpu = node.gpu("gpu3")
    assert gpu is not None
    assert not (root / "sys/bus/pci/devices" / str(gpu.address)).exists()
    assert not (root / "proc/driver/nvidia/gpus" / str(gpu.address)).exists()
    assert (root / f"dev/nvidia{gpu.minor}").exists(), "device nodes outlive the device"
    assert unrelated.stat().st_mtime_ns == before
    if lstopo_path() is not None:
        assert str(gpu.address) not in lstopo(root).pci()
    healed, *_ = _render("dgx-h100", fast_tmp)
    assert healed.written == len(gone) and healed.removed == 0
    assert (root / "sys/bus/pci/devices" / str(gpu.address) / "config").is_file()


def test_nothing_changed_writes_nothing(fast_tmp: Path) -> None:
    _render("gh200", fast_tmp)
    again, *_ = _render("gh200", fast_tmp)
    assert again.written == 0 and again.removed == 0 and again.skipped_sections >= 4


def _writer(fast_tmp: Path, make_devices: bool) -> RootWriter:
    return RootWriter(fast_tmp / "root", fast_tmp / "manifest", make_devices=make_devices)


def _dev_section() -> Section:
    sec = Section("dev")
    sec.chardev("dev/nvidia0", 195, 0)
    sec.chardev("dev/nvidiactl", 195, 255)
    return sec


@pytest.mark.skipif(os.geteuid() != 0, reason="creating character devices needs root")
def test_device_nodes_have_the_real_major_and_minor_as_root(fast_tmp: Path) -> None:
    _writer(fast_tmp, True).render([SectionSpec("dev", "k", _dev_section)])
    st = os.lstat(fast_tmp / "root/dev/nvidiactl")
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, 255)
    assert stat.S_IMODE(st.st_mode) == 0o666


def test_device_nodes_are_plain_files_without_root(fast_tmp: Path) -> None:
    _writer(fast_tmp, False).render([SectionSpec("dev", "k", _dev_section)])
    path = fast_tmp / "root/dev/nvidia0"
    assert stat.S_ISREG(os.lstat(path).st_mode) and "195:0" in path.read_text()


def test_an_existing_tree_without_manifest_keeps_other_files(fast_tmp: Path) -> None:
    foreign = fast_tmp / "root/proc/driver/nvidia/someone-elses"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("kept\n")

    def build() -> Section:
        sec = Section("s")
        sec.text("proc/driver/nvidia/version", "v1")
        return sec

    stats = _writer(fast_tmp, False).render([SectionSpec("s", None, build)])
    assert stats.mode == "sync" and foreign.read_text() == "kept\n"
    assert (fast_tmp / "root/proc/driver/nvidia/version").read_text() == "v1\n"


def test_a_changed_model_rebuilds_in_place_keeping_the_root_directory(fast_tmp: Path) -> None:
    def section(name: str) -> SectionSpec:
        def build() -> Section:
            sec = Section("s")
            sec.text(f"sys/{name}/value", name)
            return sec
        return SectionSpec("s", name, build)

    _writer(fast_tmp, False).render([section("old")])
    inode = (fast_tmp / "root").stat().st_ino
    stats = _writer(fast_tmp, False).render([section("new")])
    assert stats.mode == "rebuild"
    assert not (fast_tmp / "root/sys/old").exists() and (fast_tmp / "root/sys/new/value").read_text() == "new\n"
    assert (fast_tmp / "root").stat().st_ino == inode, "a bind mount of the root keeps working"


def test_nodes_of_one_template_share_static_files_by_hard_link(fast_tmp: Path) -> None:
    system = load_profile("gb200-nvl72")
    roots = []
    for node in system.nodes[:2]:
        render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(fast_tmp / node.name))
        roots.append(fast_tmp / node.name / ROOT_DIR)
    rel = "sys/devices/system/cpu/cpu71/cache/index3/shared_cpu_list"
    a, b = (r / rel for r in roots)
    assert a.stat().st_ino == b.stat().st_ino and a.read_text() == b.read_text()
    # Per-node content is never shared.
    nic = "sys/class/net/ibp3s0/address"
    assert (roots[0] / nic).read_text() != (roots[1] / nic).read_text()


def _listing(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``root``: its kind, permission bits and content (link target, file bytes, device
    numbers); what a reader of the tree can tell apart."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            full = Path(dirpath) / name
            st = full.lstat()
            rel = str(full.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", 0, os.readlink(full).encode())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode), b"")
            elif stat.S_ISCHR(st.st_mode):
                out[rel] = ("c", stat.S_IMODE(st.st_mode), f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}".encode())
            elif st.st_size > 1 << 20:  # a BAR's resourceN: sparse, as big as the BAR (128 GiB)
                out[rel] = ("s", stat.S_IMODE(st.st_mode), str(st.st_size).encode())
            else:
                out[rel] = ("f", stat.S_IMODE(st.st_mode), full.read_bytes())
    return out


def test_a_node_linked_from_its_template_sibling_is_the_tree_it_would_write_alone(fast_tmp: Path) -> None:
    """The first tree of a template is the others' source: the second node's tree, made mostly of hard links to
    the first's files and symlinks, must be entry for entry what rendering it alone writes."""
    system = load_profile("cxl-pool")
    first, second = system.nodes[:2]
    assert first.template == second.template
    for node in (first, second):
        render_tree(RenderContext(system, node, derive_state(node, []), True),
                    OutputDir(fast_tmp / "fleet" / node.name))
    render_tree(RenderContext(system, second, derive_state(second, []), True),
                OutputDir(fast_tmp / "alone" / second.name))
    linked, alone = (fast_tmp / d / second.name / ROOT_DIR for d in ("fleet", "alone"))
    rel = "sys/devices/system/cpu/cpu0/topology/physical_package_id"
    assert (linked / rel).stat().st_ino == (fast_tmp / "fleet" / first.name / ROOT_DIR / rel).stat().st_ino
    a, b = _listing(linked), _listing(alone)
    assert len(a) > 1000 and sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p)) == []


@pytest.mark.parametrize(("profile", "umask"), [("riscv-nvlink-fusion", 0o022), ("dgx-h100", 0o077)])
def test_a_first_render_writes_what_the_entry_by_entry_writer_writes(fast_tmp: Path, profile: str,
                                                                    umask: int) -> None:
    """A first render writes its fresh tree the short way (one mkdir per directory, files created exclusively
    from a descriptor of the root, links last; RootWriter._write_fresh). Whatever it saves, the tree must be
    entry for entry (names, kinds, permission bits, contents, link targets, device numbers) what the writer of
    incremental renders and of trees without a manifest makes of the same sections, one compared, temporary and
    renamed entry at a time. riscv-nvlink-fusion is the tree that made the short way worth it: its memory blocks
    are most of it (512 GiB of DRAM and 4 x 179 GiB of coherent GPU memory in 128 MiB blocks, riscv64's
    SECTION_SIZE_BITS of 27 in arch/riscv/include/asm/sparsemem.h: some 9,800 memoryN directories); dgx-h100 is
    the x86 tree with the 2 GiB blocks, written under a umask that takes bits the files need (0444 attributes),
    which both writers must give back."""
    system = load_profile(profile)
    node = system.nodes[0]
    fresh, generic = fast_tmp / "fresh" / node.name, fast_tmp / "generic" / node.name
    # A tree without a manifest holding someone else's file: every entry written on its own.
    (generic / ROOT_DIR).mkdir(parents=True)
    (generic / ROOT_DIR / "someone-elses").write_text("kept\n")
    modes = []
    old_umask = os.umask(umask)
    _umask.cache_clear()  # the writer reads the umask once per process
    try:
        for out in (fresh, generic):
            modes.append(render_tree(RenderContext(system, node, derive_state(node, []), True),
                                     OutputDir(out)).mode)
    finally:
        os.umask(old_umask)
        _umask.cache_clear()
    assert modes == ["full", "sync"]
    a, b = _listing(fresh / ROOT_DIR), _listing(generic / ROOT_DIR)
    assert b.pop("someone-elses")[::2] == ("f", b"kept\n")
    blocks = [p for p in a if p.startswith("sys/devices/system/memory/memory") and p.count("/") == 4]
    assert len(blocks) > (9000 if profile.startswith("riscv") else 500)
    assert sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p)) == []


def test_a_skeleton_of_empty_directories_made_to_mount_them_is_filled_the_fresh_way(fast_tmp: Path) -> None:
    """The Docker backend makes ``root/sys/{bus,devices,class}``, ``root/dev`` and ``root/proc/driver`` before a
    node's container starts (it bind-mounts them, and serves the live /sys by path), so the agent's first render
    finds a tree without a manifest. Holding no file, it has nobody's files to keep: it is written the fresh way
    (mode "full") into those same directories (their inodes kept, so the mounts see the tree), the tree it would
    be without them. Written entry by entry (mode "sync") it cost 3-4x the CPU (5.2 s against 1.4 s for
    riscv-nvlink-fusion here, more under QEMU in a riscv64 container)."""
    system = load_profile("dgx-h100")
    node = system.nodes[0]
    plain, mounted = fast_tmp / "plain" / node.name, fast_tmp / "mounted" / node.name
    skeleton = ("sys/bus", "sys/devices", "sys/class", "dev", "proc/driver")
    for sub in skeleton:
        (mounted / ROOT_DIR / sub).mkdir(parents=True)
    inodes = {sub: (mounted / ROOT_DIR / sub).stat().st_ino for sub in skeleton}
    modes = [render_tree(RenderContext(system, node, derive_state(node, []), True), OutputDir(out)).mode
             for out in (plain, mounted)]
    assert modes == ["full", "full"]
    assert {sub: (mounted / ROOT_DIR / sub).stat().st_ino for sub in skeleton} == inodes
    a, b = _listing(plain / ROOT_DIR), _listing(mounted / ROOT_DIR)
    assert len(a) > 10000
    assert sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p) and p not in skeleton) == []


def test_a_template_source_that_is_gone_is_not_used(fast_tmp: Path) -> None:
    """The store names the first tree of a template; once that tree is removed the next node writes its own files
    (complete, not a tree of dangling names) and becomes the template's source."""
    import shutil

    system = load_profile("cxl-pool")
    first, second = system.nodes[:2]
    render_tree(RenderContext(system, first, derive_state(first, []), True), OutputDir(fast_tmp / first.name))
    shutil.rmtree(fast_tmp / first.name)
    render_tree(RenderContext(system, second, derive_state(second, []), True), OutputDir(fast_tmp / second.name))
    rel = "sys/devices/system/cpu/cpu0/topology/physical_package_id"
    assert (fast_tmp / second.name / ROOT_DIR / rel).read_text().strip()
    render_tree(RenderContext(system, first, derive_state(first, []), True), OutputDir(fast_tmp / first.name))
    again, source = (fast_tmp / n.name / ROOT_DIR / rel for n in (first, second))
    assert again.stat().st_ino == source.stat().st_ino


def test_readers_never_see_a_half_written_file(fast_tmp: Path) -> None:
    sizes = ["x" * 10, "y" * 100_000]
    toggle = {"i": 0}

    def build() -> Section:
        sec = Section("s")
        sec.file("proc/meminfo", sizes[toggle["i"] % 2])
        return sec

    writer = _writer(fast_tmp, False)
    writer.render([SectionSpec("s", None, build)])
    path = fast_tmp / "root/proc/meminfo"
    seen: set[str] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(200):
        toggle["i"] = i
        writer.render([SectionSpec("s", None, build)])
    stop.set()
    reader.join()
    assert seen <= set(sizes) and seen
