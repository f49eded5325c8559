"""Finding 7: a snapshot rewritten, truncated or replaced by a FIFO under a running consumer gives NVML errors,
never a SIGBUS or a hang.

Before: ``cp backup nvml.snapshot`` (a rewrite in place, which truncates first) killed the reading process with
SIGBUS in 3 of 3 trials, and a FIFO at the snapshot path hung ``nvmlInit``. The readers here are child processes
calling the fake libnvidia-ml.so.1 through ctypes, so a SIGBUS shows up as their exit status.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.nvml.helpers import lib_path, write_node

NVML_SUCCESS = 0
NVML_ERROR_UNKNOWN = 999
HANG_GUARD_S = 60

READER = textwrap.dedent("""
    import ctypes, json, os, sys, time
    lib = ctypes.CDLL(os.environ["LIB"])
    assert lib.nvmlInit_v2() == 0
    handle = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
    value = ctypes.c_uint()
    codes = {}
    print("ready", flush=True)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        code = lib.nvmlDeviceGetTemperature(handle, 0, ctypes.byref(value))
        codes[code] = codes.get(code, 0) + 1
    sys.stdin.readline()  # the file is whole again: one more call must succeed
    time.sleep(0.05)
    final = lib.nvmlDeviceGetTemperature(handle, 0, ctypes.byref(value))
    print(json.dumps({"codes": codes, "final": final}), flush=True)
""")


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return write_node(tmp_path / "nvml.snapshot", "dgx-h100").path


def reader(path: Path, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, "FAKEHW_NVML_SNAPSHOT": str(path), "LIB": str(lib_path())}
    proc = subprocess.Popen([sys.executable, "-c", READER, str(seconds)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    return proc


def finish(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate("go\n", timeout=HANG_GUARD_S)
    assert proc.returncode != -signal.SIGBUS, "the reader died of SIGBUS"
    assert proc.returncode == 0, err[-2000:]
    result: dict[str, object] = json.loads(out.splitlines()[-1])
    return result


@pytest.mark.parametrize("trial", range(3))
def test_a_rewrite_in_place_under_a_reader_is_answered_not_fatal(snapshot: Path, tmp_path: Path,
                                                                 trial: int) -> None:
    backup = tmp_path / "backup"
    shutil.copy(snapshot, backup)
    proc = reader(snapshot, 3.0)
    rewrites = 0
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        subprocess.run(["cp", str(backup), str(snapshot)], check=True)  # truncates, then writes
        rewrites += 1
    result = finish(proc)
    codes = {int(k) for k in result["codes"]}  # type: ignore[attr-defined]
    assert codes <= {NVML_SUCCESS, NVML_ERROR_UNKNOWN}, result
    assert result["final"] == NVML_SUCCESS and rewrites > 10


def test_a_truncated_snapshot_answers_unknown_until_it_is_whole(snapshot: Path, tmp_path: Path) -> None:
    data = snapshot.read_bytes()
    proc = reader(snapshot, 1.0)
    with open(snapshot, "r+b") as fh:
        fh.truncate(0)  # in place: the reader's mapped first page is gone
    time.sleep(1.2)
    snapshot.write_bytes(data)
    result = finish(proc)
    assert result["codes"].get(str(NVML_ERROR_UNKNOWN)), result  # type: ignore[attr-defined]
    assert result["final"] == NVML_SUCCESS


def test_a_fifo_at_the_snapshot_path_is_an_error_not_a_hang(tmp_path: Path, snapshot: Path) -> None:
    fifo = tmp_path / "fifo.snapshot"
    os.mkfifo(fifo)
    env = {**os.environ, "FAKEHW_NVML_SNAPSHOT": str(fifo), "LIB": str(lib_path())}
    code = "import ctypes, os; print(ctypes.CDLL(os.environ['LIB']).nvmlInit_v2())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert int(proc.stdout) == NVML_ERROR_UNKNOWN
    running = reader(snapshot, 0.5)  # a running reader whose snapshot is replaced by a FIFO
    os.replace(fifo, snapshot)
    time.sleep(0.6)
    os.unlink(snapshot)
    write_node(snapshot, "dgx-h100")
    assert finish(running)["final"] == NVML_SUCCESS


def test_a_sigbus_that_is_not_ours_still_kills(tmp_path: Path, snapshot: Path) -> None:
    """The guard takes faults on its own page only: the reader's own truncated mapping still raises SIGBUS."""
    victim = tmp_path / "other.bin"
    victim.write_bytes(b"x" * 8192)
    code = textwrap.dedent(f"""
        import ctypes, mmap, os
        lib = ctypes.CDLL(os.environ["LIB"])
        assert lib.nvmlInit_v2() == 0
        with open({str(victim)!r}, "r+b") as fh:
            m = mmap.mmap(fh.fileno(), 8192)
            fh.truncate(0)
            print(m[4096])  # past the end of the file now: SIGBUS
    """)
    env = {**os.environ, "FAKEHW_NVML_SNAPSHOT": str(snapshot), "LIB": str(lib_path())}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stderr[-500:])
