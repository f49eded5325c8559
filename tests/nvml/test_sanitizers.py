"""The shim's C tests (tests/nvml/c/shim_test.c) under AddressSanitizer + UndefinedBehaviorSanitizer.

They link the shim's sources directly, so a read past a buffer, a use after free of a replaced snapshot, or
undefined behaviour aborts the run. The fuzz run feeds thousands of mutated snapshots (most with the checksum
fixed up, so validation past it is exercised too) both to a fresh nvmlInit and under an initialised library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.nvml.build import CSRC, SANITIZER_CFLAGS, c_sources, generate, generated_sources
from tests.nvml.helpers import NodeSnap

HARNESS = Path(__file__).parent / "c" / "shim_test.c"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc)")
    out = tmp_path_factory.mktemp("harness")
    gen = generate(out)
    exe = out / "shim_test"
    cmd = [cc, *SANITIZER_CFLAGS, "-Werror", f"-I{gen}", f"-I{CSRC}", str(HARNESS), *map(str, c_sources()),
           *map(str, generated_sources(gen)), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 and "libasan" in proc.stderr + proc.stdout:
        pytest.skip(f"the compiler has no AddressSanitizer runtime: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr
    return exe


@pytest.fixture
def snapshots(node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two valid snapshots of the same node (GPU 0 hot in the second) and an empty work directory."""
    a = node_snapshot("dgx-a100")
    b = node_snapshot("dgx-a100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 95}])
    work = tmp_path / "work"
    work.mkdir()
    return a.path, b.path, work


@pytest.fixture
def same_size_snapshots(node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two valid snapshots of one size (GPU 0 at 85 C, then at 95 C: one thermal event each), and a work
    directory: what an update in place writes."""
    a = node_snapshot("dgx-a100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 85}])
    b = node_snapshot("dgx-a100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 95}])
    assert a.path.stat().st_size == b.path.stat().st_size
    work = tmp_path / "work"
    work.mkdir()
    return a.path, b.path, work


def run(harness: Path, command: str, snaps: tuple[Path, Path, Path], *extra: str, timeout: float = 600) -> str:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1", UBSAN_OPTIONS="print_stacktrace=1")
    proc = subprocess.run([str(harness), command, *map(str, snaps), *extra], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{command} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc.stderr


def test_every_call_under_sanitizers(harness: Path, snapshots: tuple[Path, Path, Path],
                                     node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """Every call on both snapshots, and the harness's own process name with a command line of more than 5000
    bytes: proc(5) puts no limit on /proc/PID/cmdline (it holds the whole argument list), so the shim's read of it
    into a fixed buffer must stop at the buffer's end (seed 10604's system.c:185 wrote one byte past it). Then the
    same on a DGX H100, whose GPUs have 18 NVLinks, nvml.h's NVML_NVLINK_MAX_LINKS: every table of links is full, so
    a loop over them that runs one too far reads past it (seed 10605's fields.c:122)."""
    run(harness, "calls", snapshots, "x" * 5000)
    work = tmp_path / "h100"
    work.mkdir()
    h100 = (node_snapshot("dgx-h100").path,
            node_snapshot("dgx-h100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 95}]).path, work)
    run(harness, "calls", h100, "x" * 5000)


def test_readers_never_see_a_half_written_snapshot(harness: Path, snapshots: tuple[Path, Path, Path]) -> None:
    assert "reads across 400 replacements" in run(harness, "threads", snapshots)


def test_readers_never_see_a_snapshot_half_updated_in_place(harness: Path,
                                                            same_size_snapshots: tuple[Path, Path, Path]) -> None:
    """The writer's update in place (fakehw/nvml/snapfile.py) against four reader threads: the header and the GPU
    records are written 100 us apart, so a reader that copied the file in between without honouring the superseded
    word would hold a checksum that does not match its records (NVML_ERROR_UNKNOWN) or a temperature of neither
    snapshot; every read must answer one snapshot or the other."""
    assert "reads across 400 updates in place" in run(harness, "inplace", same_size_snapshots)


def test_fuzzed_snapshots_never_crash_or_overread(harness: Path, snapshots: tuple[Path, Path, Path]) -> None:
    iterations = os.environ.get("FAKEHW_FUZZ_ITERATIONS", "1500")
    report = run(harness, "fuzz", snapshots, iterations, "0x5eed")
    assert f"fuzz: {iterations} iterations" in report


def test_events_under_sanitizers(harness: Path, snapshots: tuple[Path, Path, Path]) -> None:
    run(harness, "events", snapshots)
