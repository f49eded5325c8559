"""Building the shim: lazily when missing or stale, for another architecture with a cross compiler, into the
wheel on install, and with a clear error when it cannot be built."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fakehw.nvml import build
from fakehw.nvml.build import BuildError, build_library, ensure_library

EM_RISCV = 243
EM_X86_64 = 62


def elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return int.from_bytes(head[18:20], "little")


@pytest.fixture
def private_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of fakehw/nvml's build inputs, so a test can change a source and see the library rebuilt."""
    here = tmp_path / "nvml"
    shutil.copytree(build.CSRC, here / "csrc")
    for name in ("layout.py", "build.py", "nvml_symbols.txt"):
        shutil.copy(build.HERE / name, here / name)
    monkeypatch.setattr(build, "HERE", here)
    monkeypatch.setattr(build, "CSRC", here / "csrc")
    monkeypatch.setattr(build, "SYMBOLS_FILE", here / "nvml_symbols.txt")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return here


def test_built_on_first_use_and_again_when_stale(private_tree: Path) -> None:
    lib = ensure_library()
    assert lib.parent.parent == private_tree / "_lib" and lib.is_file()
    first = (lib.parent / "BUILD-ID").read_text()
    mtime = lib.stat().st_mtime_ns
    assert ensure_library() == lib and lib.stat().st_mtime_ns == mtime  # up to date: not rebuilt
    with open(private_tree / "csrc" / "core.c", "a") as fh:
        fh.write("\n/* changed */\n")
    assert ensure_library() == lib
    assert (lib.parent / "BUILD-ID").read_text() != first
    assert elf_machine(lib) in (EM_X86_64, elf_machine(Path(sys.executable).resolve()))


def test_missing_compiler_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="compiler '/nonexistent/cc' not found"):
        build_library(tmp_path / "out", cc="/nonexistent/cc")
    assert not (tmp_path / "out").exists()


def test_compile_errors_are_reported(tmp_path: Path, private_tree: Path) -> None:
    (private_tree / "csrc" / "broken.c").write_text("this is not C\n")
    with pytest.raises(BuildError, match=r"broken\.c"):
        build_library(tmp_path / "out")


def test_cross_build_for_riscv64(tmp_path: Path) -> None:
    cc = "riscv64-linux-gnu-gcc"
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed (tools/install-system-deps.sh installs gcc-riscv64-linux-gnu)")
    out = subprocess.run([sys.executable, "-m", "fakehw.nvml", "build", "--cc", cc, "--out", str(tmp_path / "rv")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    lib = Path(out.stdout.strip())
    assert lib == tmp_path / "rv" / "libnvidia-ml.so.1"
    assert elf_machine(lib) == EM_RISCV
    # The layout's static asserts held for riscv64 too, or it would not have compiled.
    assert (tmp_path / "rv" / "BUILD-ID").is_file()


def test_wheel_carries_the_library(tmp_path: Path) -> None:
    """The build hook (setup.py) compiles the shim into the wheel when the package is built or installed."""
    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(root / name, src / name)
    ignore = shutil.ignore_patterns("_lib", "__pycache__", "*.pyc", ".build-*")
    for pkg in ("fakehw", "testbed", "conformance"):
        shutil.copytree(root / pkg, src / pkg, ignore=ignore)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("fakehw-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    import platform

    assert f"fakehw/nvml/_lib/{platform.machine()}/libnvidia-ml.so.1" in names
    assert f"fakehw/nvml/_lib/{platform.machine()}/BUILD-ID" in names
    assert "fakehw/nvml/csrc/core.c" in names and "fakehw/nvml/nvml_symbols.txt" in names


def test_riscv64_shim_reads_the_same_snapshots(tmp_path: Path, node_snapshot: Any) -> None:
    """The riscv64 build, run under QEMU user mode, answers from snapshots written here (layout, byte order)."""
    cc, qemu = "riscv64-linux-gnu-gcc", shutil.which("qemu-riscv64-static")
    sysroot = Path("/usr/riscv64-linux-gnu")
    if shutil.which(cc) is None or qemu is None or not sysroot.is_dir():
        pytest.skip("needs riscv64-linux-gnu-gcc, its libc (libc6-dev-riscv64-cross) and qemu-riscv64-static "
                    "(qemu-user-static, installed by 'testbed host setup')")
    gen = build.generate(tmp_path)
    exe = tmp_path / "shim_test"
    harness = Path(__file__).parent / "c" / "shim_test.c"
    subprocess.run([cc, "-std=gnu11", "-O1", "-pthread", f"-I{gen}", f"-I{build.CSRC}", str(harness),
                    *map(str, build.c_sources()), *map(str, build.generated_sources(gen)), "-o", str(exe)], check=True)
    assert elf_machine(exe) == EM_RISCV
    a = node_snapshot("dgx-a100")
    b = node_snapshot("dgx-a100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 95}])
    work = tmp_path / "work"
    work.mkdir()
    for command in ("calls", "threads", "events"):
        proc = subprocess.run([qemu, "-L", str(sysroot), str(exe), command, str(a.path), str(b.path), str(work)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
