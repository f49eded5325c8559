"""The shim's C tests (tests/nvml/c/shim_test.c) under AddressSanitizer + UndefinedBehaviorSanitizer.

They link the shim's sources directly, so a read past a buffer, a use after free of a replaced snapshot, or
undefined behaviour aborts the run. The fuzz run feeds thousands of mutated snapshots (most with the checksum
fixed up, so validation past it is exercised too) both to a fresh nvmlInit and under an initialised library.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakehw.model.loader import builtin_dir
from fakehw.nvml import layout
from fakehw.nvml.build import CSRC, SANITIZER_CFLAGS, c_sources, generate, generated_sources
from fakehw.nvml.snapfile import write_snapshot
from tests.nvml.helpers import NodeSnap, dgx_h100_with_mig_gpu7
from tests.nvml.test_mig_agent_client import StandInAgent, http

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


def run(harness: Path, command: str, snaps: tuple[Path, Path, Path], *extra: str, timeout: float = 600,
        env_extra: dict[str, str] | None = None) -> str:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1", UBSAN_OPTIONS="print_stacktrace=1",
               **(env_extra or {}))
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


def test_every_call_on_a_node_of_the_most_gpus_under_sanitizers(harness: Path, node_snapshot: Callable[..., NodeSnap],
                                                                tmp_path: Path) -> None:
    """Every call (as above, with the system-wide walks over every visible GPU: GPU sets per CPU, the NVLink
    bandwidth mode, handles by a serial, UUID and bus id no GPU has, an event set holding every GPU) on a node of
    NV_MAX_DEVICES GPUs, the most NVIDIA's driver presents in one system (nv-reg.h; layout.MAX_GPUS, the format's
    bound, is that number): 32 Hopper PCIe cards (H200 NVL) over four host bridges. Every per-GPU table of the
    shim is full, so a walk over the visible GPUs that runs one too far (`d < count` as `<=`, which on a smaller
    node reads the -1 of an unused slot and skips it) reads past its array, which only UBSan's bounds check sees
    (fresh seed 10712's system.c:395, the GPU set's walk)."""
    doc: dict[str, Any] = yaml.safe_load((builtin_dir() / "edge-pcie.yaml").read_text())
    doc["name"] = "pcie-most-gpus"
    node = doc["groups"][0]["node"]
    buses = (0x10, 0x50, 0x90, 0xD0)
    node["pcie"] = {"hostBridges": [{"name": f"hb{i}", "numa": i // 2, "bus": b} for i, b in enumerate(buses)],
                    "switches": []}
    node["gpus"] = [{"name": f"gpu{k}", "sku": "h200-nvl-141gb", "bus": f"0000:{buses[k % 4] + 1 + k // 4:02x}:00.0",
                     "parent": f"hb{k % 4}"} for k in range(layout.MAX_GPUS)]
    node["nics"] = []
    profile = tmp_path / "pcie-most-gpus.yaml"
    profile.write_text(yaml.safe_dump(doc, sort_keys=False))
    work = tmp_path / "most"
    work.mkdir()
    a = node_snapshot(profile)
    assert len(a.snapshot.gpus) == layout.MAX_GPUS == 32
    b = node_snapshot(profile, faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 95}])
    run(harness, "calls", (a.path, b.path, work), "x")


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
    """The event calls and the export table's refusal of an unknown GUID under the sanitizers, with
    FAKEHW_NVML_TRACE set (docs/nvml.md) so that the paths which only format a trace line run too: the refusal
    prints the GUID's 32 hex digits, and a buffer one byte short for them and their NUL is a write past it (seed
    10613's export.c:354, `char hex[33]` made 32)."""
    assert "export table with unknown GUID 01000000" in run(harness, "events", snapshots,
                                                             env_extra={"FAKEHW_NVML_TRACE": "1"})


def without_platform_records(snap: NodeSnap) -> Path:
    """``snap``'s file rewritten with no platform records (a header ``platform_count`` of 0, which docs/nvml.md's
    format and core.c's loader allow: "one per GPU slot, or none"), so its last section is the compute instance
    profiles and the file's last byte is their last record's."""
    write_snapshot(snap.path, dataclasses.replace(snap.snapshot, platform=()).to_bytes())
    return snap.path


def test_every_mig_call_under_sanitizers(harness: Path, node_snapshot: Callable[..., NodeSnap],
                                         tmp_path: Path) -> None:
    """Every GPU instance and compute instance call (nvml.h's MIG functions: profiles, placements, capacities, the
    instances and their info, each compute instance profile index NVML_COMPUTE_INSTANCE_PROFILE_COUNT defines and
    one past it) on dgx-a100's MIG gpu7 and on an H100 with two 3g.40gb instances, from snapshots whose compute
    instance profiles are the file's last bytes: a lookup of a profile the instance does not have reads every
    record, and one more would read past the snapshot's bytes (fresh seed 10620's open mig.c:183, `<` to `<=`,
    which on an ordinary snapshot read the first platform record's bytes as a profile and found no match)."""
    work = tmp_path / "mig"
    work.mkdir()
    a100 = without_platform_records(node_snapshot("dgx-a100"))
    h100 = without_platform_records(node_snapshot(dgx_h100_with_mig_gpu7(tmp_path)))
    run(harness, "mig", (a100, h100, work))


def test_an_agent_answer_longer_than_the_client_reads_under_sanitizers(harness: Path,
                                                                       node_snapshot: Callable[..., NodeSnap],
                                                                       tmp_path: Path) -> None:
    """Two MIG mode changes asked of a stand-in agent (test_mig_agent_client.py's): an answer of 100 KB that is not
    the API's, longer than the shim's 16 KiB buffer for it, then generation 1 (the snapshot's own). The first is
    UNKNOWN (docs/nvml.md: an answer that is not the API's; nvml.h: "any unexpected error") and the second SUCCESS,
    activation status alike; and the client writes nothing past its buffer while cutting the long answer (its
    terminating NUL one past the last byte it may read: fresh seed 10625's open agentc.c:113, `sizeof raw - 1` to
    `- 0`, which only a sanitizer sees)."""
    work = tmp_path / "agent"
    work.mkdir()
    snap = node_snapshot("dgx-a100").path
    sock = tmp_path / "agent.sock"
    agent = StandInAgent(sock, [b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 100_000, http(200, {"generation": 1})])
    try:
        report = run(harness, "agent", (snap, snap, work), "2", env_extra={"FAKEHW_AGENT_SOCKET": str(sock)})
    finally:
        agent.close()
    unknown, success = 999, 0  # nvmlReturn_t (nvml.h)
    assert [line for line in report.splitlines() if line.startswith("agent: ")] == [
        f"agent: {unknown} {unknown}", f"agent: {success} {success}"], report


def with_a_full_gpu_instance_table(snap: NodeSnap) -> Path:
    """``snap``'s file rewritten with as many GPU instance records as the format holds (layout.py: MAX_GPUS x
    MAX_GI_PER_GPU), its own first and the rest copies of them spread over its GPUs, each with its own creation
    serial (the registry's key) and no compute instances."""
    gis = snap.snapshot.gis
    assert gis
    full = layout.MAX_GPUS * layout.MAX_GI_PER_GPU
    extra = tuple(dataclasses.replace(gis[k % len(gis)], parent=k % len(snap.snapshot.gpus), serial=1_000 + k,
                                      mig_first=0, mig_count=0) for k in range(full - len(gis)))
    write_snapshot(snap.path, dataclasses.replace(snap.snapshot, gis=gis + extra).to_bytes())
    return snap.path


def test_a_full_gpu_instance_table_under_sanitizers(harness: Path, node_snapshot: Callable[..., NodeSnap],
                                                    tmp_path: Path) -> None:
    """A snapshot with every GPU instance record the format allows (dgx-a100, 256 over its 8 GPUs), loaded and every
    MIG call made on it (as above): each record gets a handle from the registry, whose tables hold exactly that many,
    and nothing is written past them (fresh seed 10624's open mig.c:71, `i < count` to `<=`: one entry past the
    records set to -1, which with a full table is the next field of the snapshot's struct)."""
    work = tmp_path / "full"
    work.mkdir()
    full = with_a_full_gpu_instance_table(node_snapshot("dgx-a100"))
    run(harness, "mig", (full, full, work))
