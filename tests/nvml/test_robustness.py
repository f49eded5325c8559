"""Bad snapshots and bad arguments give NVML errors, never a crash, hang or read past a buffer.

(The sanitizer and fuzz runs in test_sanitizers.py cover the same ground from C, with mutated snapshots.)
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fakehw.nvml import layout
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import FakeProcess
from tests.nvml import references
from tests.nvml.helpers import (
    NodeSnap,
    build_preload,
    lib_path,
    run_python,
    snapshot_env,
    subprocess_env,
    with_driver,
    write_node,
)

INIT = ("import json, pynvml\ntry:\n    pynvml.nvmlInit()\n"
        "    print(json.dumps({'ok': pynvml.nvmlDeviceGetCount()}))\n"
        "except pynvml.NVMLError as e:\n    print(json.dumps({'err': e.value, 'text': str(e)}))\n")


def init_result(path: Path, code: str = INIT) -> dict[str, object]:
    result: dict[str, object] = run_python(code, path)
    return result


def test_missing_snapshot_is_driver_not_loaded(tmp_path: Path) -> None:
    assert init_result(tmp_path / "nowhere" / "nvml.snapshot") == {"err": 9, "text": "Driver Not Loaded"}


def test_a_snapshot_under_a_file_is_missing_and_one_behind_a_symlink_loop_is_unusable(tmp_path: Path) -> None:
    """docs/nvml.md: a missing snapshot makes nvmlInit answer DRIVER_NOT_LOADED, a snapshot that cannot be used
    UNKNOWN. A path through a regular file (open(2): ENOTDIR, "a component used as a directory in pathname is not,
    in fact, a directory") names no file: missing. A symbolic link that points at itself (ELOOP, "too many symbolic
    links were encountered") names something that is there and cannot be opened: UNKNOWN, not "not loaded" nor
    NO_PERMISSION (which is for EACCES/EPERM)."""
    (tmp_path / "plain").write_bytes(b"")
    assert init_result(tmp_path / "plain" / "nvml.snapshot") == {"err": 9, "text": "Driver Not Loaded"}
    loop = tmp_path / "loop.snapshot"
    loop.symlink_to(loop)
    assert init_result(loop)["err"] == 999


PATH_MAX = 4096
"""Linux's <linux/limits.h> PATH_MAX, "chars in a path name including nul" (``getconf PATH_MAX /``): open(2) takes a
pathname of at most PATH_MAX - 1 characters and answers ENAMETOOLONG ("pathname was too long") for a longer one."""


def test_a_snapshot_path_of_path_max_characters_is_unusable_and_one_shorter_is_used(tmp_path: Path) -> None:
    """The snapshot is the fake's driver, named by FAKEHW_NVML_SNAPSHOT (docs/nvml.md). The same snapshot named by
    a path of PATH_MAX - 1 characters (its directory, then slashes, which POSIX reads as one, then the file name) is
    read: nvmlInit SUCCESS with the node's GPUs. A path of PATH_MAX characters names no file open(2) can open
    (ENAMETOOLONG); nvml.h's nvmlInit_v2 lists SUCCESS, DRIVER_NOT_LOADED, NO_PERMISSION and UNKNOWN ("an unexpected
    error") only, and takes no argument that could be INVALID_ARGUMENT: a snapshot that cannot be opened and is not
    missing is UNKNOWN (docs/nvml.md; ELOOP above). The longer path is the shorter one and an "X": a library that
    kept only its first PATH_MAX - 1 characters would open the snapshot and answer SUCCESS."""
    snap = write_node(tmp_path / "nvml.snapshot", "edge-pcie")
    fits = str(tmp_path) + "/" * (PATH_MAX - 1 - len(str(tmp_path)) - len("nvml.snapshot")) + "nvml.snapshot"
    assert len(fits) == PATH_MAX - 1
    # as text: pathlib would fold the slashes
    assert run_python(INIT, snap.path, FAKEHW_NVML_SNAPSHOT=fits) == {"ok": len(snap.node.gpus)}
    result = run_python(INIT, snap.path, FAKEHW_NVML_SNAPSHOT=fits + "X")
    assert result.get("err") == 999, result  # NVML_ERROR_UNKNOWN


NO_MEMORY = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* posix_memalign of 8-byte alignment (the shim's snapshot copy) failing with ENOMEM, as POSIX allows, on the calls
   whose numbers FHW_TEST_NOMEM lists ("1", "2"); every other call as libc makes it. */
static int calls;

int posix_memalign(void **p, size_t align, size_t size) {
    static int (*real)(void **, size_t, size_t);
    if (real == NULL) real = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    const char *fail = getenv("FHW_TEST_NOMEM");
    if (align == 8 && fail != NULL) {
        char n[16];
        snprintf(n, sizeof n, "%d", ++calls);
        if (strstr(fail, n) != NULL) return ENOMEM;
    }
    return real(p, align, size);
}
"""
OUT_OF_MEMORY_CALLER = r"""
import ctypes, json, os
from pathlib import Path
from fakehw.nvml.snapfile import write_snapshot
lib = ctypes.CDLL("libnvidia-ml.so.1")
out = {"init": lib.nvmlInit_v2()}
if out["init"] != 0:
    out["shutdown"] = lib.nvmlShutdown()
    out["init"] = [out["init"], lib.nvmlInit_v2()]
device = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
count = ctypes.c_uint(0)
out["before"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(count), None), count.value]
path = os.environ["FAKEHW_NVML_SNAPSHOT"]
with open(path + ".next", "rb") as f:
    write_snapshot(Path(path), f.read())
count = ctypes.c_uint(0)
out["after"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(count), None), count.value]
print(json.dumps(out))
"""


@pytest.mark.parametrize("failing", ["init", "reload"])
def test_a_snapshot_copy_that_cannot_be_allocated_once_is_not_the_answer(tmp_path: Path, failing: str) -> None:
    """posix_memalign may fail with ENOMEM (POSIX); the shim copies each snapshot into such a buffer (docs/nvml.md:
    it "reads each snapshot into its own memory"). NO_MEMORY makes one such allocation fail.
    - init: nvmlInit_v2 lists SUCCESS, DRIVER_NOT_LOADED, NO_PERMISSION and UNKNOWN ("an unexpected error") in
      nvml.h, so the failed first one is UNKNOWN; nothing was initialised (nvmlShutdown: UNINITIALIZED, "if the
      NVML Library was not previously initialized"), and the next nvmlInit_v2 is SUCCESS.
    - reload: the process reads dgx-h100 with no process, then the project's writer replaces the file with one
      listing a compute process on gpu0 and flags the old one (docs/nvml.md: a reader notices at once), and the
      copy of the new file fails once: the next call still answers the new file (one process, nvml.h's
      INSUFFICIENT_SIZE for the NULL array of count 0, with the count needed), not the file replaced.
    (c-coverage.py: the allocation failure's lines never ran.)"""
    snap = write_node(tmp_path / "nvml.snapshot", "dgx-h100")
    write_node(tmp_path / "nvml.snapshot.next", "dgx-h100", processes=[FakeProcess("gpu0", 4242, 1 << 30)])
    preload = build_preload(tmp_path, "no_memory", NO_MEMORY)
    got = run_python(OUT_OF_MEMORY_CALLER, snap.path, timeout=30, LD_PRELOAD=str(preload),
                     FHW_TEST_NOMEM="1" if failing == "init" else "2")
    insufficient_size, uninitialized, unknown = 7, 1, 999  # nvml.h
    if failing == "init":
        assert (got["init"], got["shutdown"]) == ([unknown, 0], uninitialized)
    else:
        assert got["init"] == 0
    assert (got["before"], got["after"]) == ([0, 0], [insufficient_size, 1])


UNPRIVILEGED = 65534
"""The uid and gid a root test drops to (``nobody`` on Debian): a user the snapshot's mode 0600 shuts out."""

INIT_WITHOUT_PERMISSION = (
    "import json, os, pynvml\npynvml._LoadNvmlLibrary()\n"  # loaded first: the library is root's to read
    f"if os.getuid() == 0:\n    os.setgroups([])\n    os.setgid({UNPRIVILEGED})\n    os.setuid({UNPRIVILEGED})\n"
    + INIT.removeprefix("import json, pynvml\n"))


def test_a_snapshot_the_user_may_not_read_is_no_permission(node_snapshot: Callable[..., NodeSnap]) -> None:
    """nvml.h's nvmlInit_v2: NVML_ERROR_NO_PERMISSION "if NVML does not have permission to talk to the driver" (on a
    real machine, /dev/nvidiactl closed to the user; nvidia-smi then prints "Failed to initialize NVML: Insufficient
    Permissions"). The fake's driver is its snapshot: one the user may not open (open(2): EACCES) is that case, not
    a missing driver (9) nor an unusable one (999). As root (which reads any file) the process drops to an
    unprivileged user after loading the library; otherwise the file's mode shuts out its own owner."""
    snap = node_snapshot("edge-pcie")
    snap.path.chmod(0o600 if os.getuid() == 0 else 0o000)
    assert init_result(snap.path, INIT_WITHOUT_PERMISSION) == {"err": 4, "text": "Insufficient Permissions"}


def test_default_path_without_the_variable(tmp_path: Path) -> None:
    code = INIT.replace("import json, pynvml", "import json, os, pynvml\nos.environ.pop('FAKEHW_NVML_SNAPSHOT')")
    expected = 9 if not Path("/var/lib/fakehw/nvml.snapshot").exists() else None
    result = run_python(code, tmp_path / "unused")
    if expected is not None:
        assert result["err"] == expected


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "checksum", "directory", "too-big-count"])
def test_bad_snapshots_are_refused(node_snapshot: Callable[..., NodeSnap], damage: str) -> None:
    snap = node_snapshot("dgx-h100")
    data = bytearray(snap.path.read_bytes())
    if damage == "empty":
        data = bytearray()
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    elif damage == "checksum":
        data[-100] ^= 0xFF
    elif damage == "too-big-count":
        count = layout.layout_of(layout.HeaderRecord).field("gpu_count").offset
        data[count:count + 4] = (10_000).to_bytes(4, "little")
        data[20:24] = bytes(4)
        data[24:28] = layout.checksum(data).to_bytes(4, "little")
    if damage == "directory":
        snap.path.unlink()
        snap.path.mkdir()
    else:
        snap.path.write_bytes(bytes(data))
    assert init_result(snap.path)["err"] == 999  # NVML_ERROR_UNKNOWN


def test_other_format_version_is_a_version_mismatch(node_snapshot: Callable[..., NodeSnap]) -> None:
    snap = node_snapshot("edge-pcie")
    data = bytearray(snap.path.read_bytes())
    at = layout.layout_of(layout.HeaderRecord).field("format_version").offset
    data[at:at + 4] = (layout.FORMAT_VERSION + 1).to_bytes(4, "little")
    data[24:28] = layout.checksum(data).to_bytes(4, "little")
    snap.path.write_bytes(bytes(data))
    assert init_result(snap.path)["err"] == 18  # LIB_RM_VERSION_MISMATCH


def test_snapshot_going_bad_and_coming_back_under_a_running_process(
        pynvml_module: ModuleType, node_snapshot: Callable[..., NodeSnap]) -> None:
    n = pynvml_module
    snap = node_snapshot("dgx-h100")
    good = snap.path.read_bytes()
    with snapshot_env(snap.path):
        n.nvmlInit()
        try:
            h = n.nvmlDeviceGetHandleByIndex(0)
            assert n.nvmlDeviceGetUUID(h) == snap.node.gpus[0].uuid
            write_snapshot(snap.path, b"not a snapshot at all" * 40)
            with pytest.raises(n.NVMLError_Unknown):
                n.nvmlDeviceGetUUID(h)
            with pytest.raises(n.NVMLError_Unknown):
                n.nvmlSystemGetDriverVersion()
            snap.path.unlink()
            import time

            time.sleep(0.05)  # a removed file is noticed by stat(), at most every 10 ms
            with pytest.raises(n.NVMLError_GpuIsLost):
                n.nvmlDeviceGetUUID(h)
            write_snapshot(snap.path, good)
            time.sleep(0.05)  # so is one that appears again (no old file to flag)
            assert n.nvmlDeviceGetUUID(h) == snap.node.gpus[0].uuid
        finally:
            n.nvmlShutdown()


@pytest.mark.parametrize("change", ["renamed, same size and mtime", "rewritten, mtime a second later",
                                    "rewritten, mtime 1 ns later", "rewritten, other size, same mtime"])
def test_a_writer_that_does_not_use_the_word_is_noticed_by_stat(
        pynvml_module: ModuleType, node_snapshot: Callable[..., NodeSnap], change: str) -> None:
    """docs/nvml.md ("Writing and noticing a new generation"): besides the ``superseded`` word, the shim "at most
    every 10 ms, stat()s the path as well, which catches writers that do not use the word". Such a writer leaves the
    old file's word as it was, so only stat(2)'s answer tells: each change here differs from the file the process
    read in one thing stat reports (POSIX <sys/stat.h>: st_ino, st_size, st_mtim) and nothing else stat compares: a
    file renamed over it with the old size and modification time (``cp -p`` then ``mv``), the file rewritten in
    place (``cp backup nvml.snapshot``) with its time a second later, or 1 ns later, or with another size and the old
    time. gpu0 reads 85 C in the old snapshot and 95 C (or, with another size, a process) in the new one; 50 ms on,
    the process reads the new one."""
    import time

    n = pynvml_module
    old = node_snapshot("dgx-a100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 85}])
    other_size = change == "rewritten, other size, same mtime"
    new = node_snapshot("dgx-a100", faults=[{"kind": "thermal", "device": "gpu0", "temperature_c": 95}],
                        processes=[FakeProcess("gpu0", 4242, 2**30)] if other_size else [])
    data = new.path.read_bytes()
    assert (len(data) == old.path.stat().st_size) is not other_size
    with snapshot_env(old.path):
        n.nvmlInit()
        try:
            h = n.nvmlDeviceGetHandleByIndex(0)
            assert n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU) == 85
            before = os.stat(old.path)
            if change.startswith("renamed"):
                os.utime(new.path, ns=(before.st_atime_ns, before.st_mtime_ns))
                os.rename(new.path, old.path)
                assert os.stat(old.path).st_ino != before.st_ino
            else:
                with open(old.path, "r+b") as fh:  # the same inode, its word left as the new bytes have it (0)
                    fh.truncate(0)
                    fh.write(data)
                later = {"rewritten, mtime a second later": 10**9, "rewritten, mtime 1 ns later": 1}.get(change, 0)
                os.utime(old.path, ns=(before.st_atime_ns, before.st_mtime_ns + later))
            after = os.stat(old.path)
            assert after.st_dev == before.st_dev
            time.sleep(0.05)
            if other_size:
                assert [p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h)] == [4242]
            else:
                assert n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU) == 95
        finally:
            n.nvmlShutdown()


def test_null_pointers_small_buffers_and_bad_handles(nvml: Callable[..., NodeSnap],
                                                     pynvml_module: ModuleType) -> None:
    n = pynvml_module
    snap = nvml("dgx-a100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    h = n.nvmlDeviceGetHandleByIndex(0)
    invalid, small = n.NVML_ERROR_INVALID_ARGUMENT, n.NVML_ERROR_INSUFFICIENT_SIZE
    for fn in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPowerUsage",
               "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetBAR1MemoryInfo", "nvmlDeviceGetIndex",
               "nvmlDeviceGetMinorNumber", "nvmlDeviceGetGpuFabricInfo"):
        assert getattr(lib, fn)(h, None) == invalid, fn
    assert lib.nvmlDeviceGetTemperatureThreshold(h, 0, None) == invalid
    assert lib.nvmlDeviceGetCount_v2(None) == invalid
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, None) == invalid
    assert lib.nvmlDeviceGetHandleByUUID(None, None) == invalid
    buf = ctypes.create_string_buffer(200)
    uuid = snap.node.gpus[0].uuid
    assert lib.nvmlDeviceGetUUID(h, buf, len(uuid)) == small  # no room for the NUL
    assert lib.nvmlDeviceGetUUID(h, buf, len(uuid) + 1) == 0 and buf.value.decode() == uuid
    assert lib.nvmlDeviceGetName(h, buf, 4) == small
    assert lib.nvmlSystemGetDriverVersion(buf, 3) == small
    for bogus in (0x1, 0xDEADBEEF, ctypes.addressof(buf)):
        assert lib.nvmlDeviceGetUUID(ctypes.c_void_p(bogus), buf, 200) == invalid
    assert lib.nvmlEventSetFree(ctypes.c_void_p(0xDEADBEEF)) == invalid
    assert lib.nvmlDeviceGetNvLinkState(h, 10_000, ctypes.byref(ctypes.c_uint())) == invalid
    assert lib.nvmlDeviceGetTemperature(h, 7, ctypes.byref(ctypes.c_uint())) == invalid


def _defined(lib: Path) -> dict[str, str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return {parts[2]: parts[1] for parts in (line.split() for line in out.splitlines()) if len(parts) == 3}


@pytest.mark.parametrize("driver", ["535.261.03", "615.00.00"])
def test_every_unimplemented_symbol_answers_like_its_branch(driver: str, nvml: Callable[..., NodeSnap],
                                                            tmp_path: Path) -> None:
    """An unimplemented function the branch's real library exports answers NOT_SUPPORTED with its arguments
    untouched; one the real 535 library does not export (nm -D of Debian's libnvidia-ml1) answers
    FUNCTION_NOT_FOUND on a 535 node, as a binding resolving it against that library reports."""
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    real_535 = {s for s in _defined(references.real_nvidia(535).library) if s.startswith("nvml")}
    nvml(with_driver(tmp_path, "edge-pcie", driver))
    weak = [name for name, kind in _defined(lib_path()).items() if kind == "W"]
    assert len(weak) > 50
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    zeros = [ctypes.c_void_p(0)] * 6
    for name in weak:
        absent = driver.startswith("535") and name not in real_535
        expected = 13 if absent else 3  # NVML_ERROR_FUNCTION_NOT_FOUND / NVML_ERROR_NOT_SUPPORTED
        assert getattr(lib, name)(*zeros) == expected, name


PREAD_INTERPOSER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* pread as POSIX allows it to behave on a regular file: every other call interrupted by a signal before any data
   (-1, EINTR), the others returning at most 997 bytes; with FHW_TEST_PREAD=eof the file also seems to end at half
   its fstat size (a file cut short between the reader's fstat and its read); with FHW_TEST_PREAD=count every call
   reads as asked; with FHW_TEST_PREAD=cut the file seems to end at byte FHW_TEST_PREAD_CUT until a read finds that
   end, and is whole again after it (a file a writer refills in place); with FHW_TEST_PREAD=update the first call
   reads half of what it was asked and then, before returning, updates the file in place as docs/nvml.md's writer
   does (the word at FHW_TEST_PREAD_WORD odd, every byte of the file FHW_TEST_PREAD_NEXT, its even word last).
   Counts what the reader asked. */
static ssize_t (*real_pread)(int, void *, size_t, off_t);
long fhw_test_calls, fhw_test_interrupted, fhw_test_past_end;

static ssize_t interposed(int fd, void *buf, size_t n, off_t off) {
    if (real_pread == NULL) real_pread = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    const char *mode = getenv("FHW_TEST_PREAD");
    struct stat st;
    if (mode == NULL || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return real_pread(fd, buf, n, off);
    fhw_test_calls++;
    if (off + (off_t)n > st.st_size) fhw_test_past_end++;
    if (strcmp(mode, "count") == 0) return real_pread(fd, buf, n, off);
    if (strcmp(mode, "update") == 0) {
        static int updated;
        if (updated) return real_pread(fd, buf, n, off);
        updated = 1;
        ssize_t got = real_pread(fd, buf, n / 2, off);
        off_t at = (off_t)atol(getenv("FHW_TEST_PREAD_WORD"));
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        int in = open(getenv("FHW_TEST_PREAD_NEXT"), O_RDONLY), out = open(self, O_WRONLY);
        struct stat next;
        if (in < 0 || out < 0 || fstat(in, &next) != 0) abort();
        char *data = malloc((size_t)next.st_size);
        uint32_t odd = 1, even;
        if (data == NULL || read(in, data, (size_t)next.st_size) != next.st_size) abort();
        memcpy(&even, data + at, 4);
        memcpy(data + at, &odd, 4);
        if (pwrite(out, &odd, 4, at) != 4 || pwrite(out, data, (size_t)next.st_size, 0) != next.st_size ||
            pwrite(out, &even, 4, at) != 4)
            abort();
        free(data);
        close(in);
        close(out);
        return got;
    }
    if (strcmp(mode, "cut") == 0) {
        static int cut_seen;
        const char *at = getenv("FHW_TEST_PREAD_CUT");
        off_t cut = at != NULL ? (off_t)atol(at) : 0;
        if (!cut_seen && off >= cut) {
            cut_seen = 1;
            return 0;
        }
        if (!cut_seen && off + (off_t)n > cut) n = (size_t)(cut - off);
        return real_pread(fd, buf, n, off);
    }
    if (fhw_test_calls % 2 == 1) {
        fhw_test_interrupted++;
        errno = EINTR;
        return -1;
    }
    if (strcmp(mode, "eof") == 0 && off >= st.st_size / 2) return 0;
    return real_pread(fd, buf, n < 997 ? n : 997, off);
}
ssize_t pread(int fd, void *buf, size_t n, off_t off) { return interposed(fd, buf, n, off); }
ssize_t pread64(int fd, void *buf, size_t n, off_t off) { return interposed(fd, buf, n, off); }
"""

READ_THROUGH_INTERPOSER = (
    "import ctypes, json, pynvml\nme = ctypes.CDLL(None)\n"
    "seen = lambda name: ctypes.c_long.in_dll(me, name).value\n"
    "try:\n    pynvml.nvmlInit()\n"
    "    out = {'uuids': [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))\n"
    "                     for i in range(pynvml.nvmlDeviceGetCount())]}\n"
    "except pynvml.NVMLError as e:\n    out = {'err': e.value}\n"
    "out.update({k: seen('fhw_test_' + k) for k in ('calls', 'interrupted', 'past_end')})\n"
    "print(json.dumps(out))\n")


UPDATE_WORD = layout.layout_of(layout.HeaderRecord).field("superseded").offset
"""Where the header's update word starts (the format's one declaration, fakehw/nvml/layout.py): 4 bytes."""


@pytest.fixture(scope="module")
def pread_interposer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_preload(tmp_path_factory.mktemp("interposer"), "pread", PREAD_INTERPOSER)


def test_a_snapshot_read_in_short_and_interrupted_preads_is_read_whole(
        node_snapshot: Callable[..., NodeSnap], pread_interposer: Path) -> None:
    """POSIX pread(2): it may read fewer bytes than asked ("the number of bytes actually read"), and a signal before
    any data makes it fail with EINTR; a reader retries the one and asks for the rest after the other. Through an
    interposed pread that does both (every other call EINTR, at most 997 bytes a call) the shim reads the same
    snapshot as it would whole: every GPU the node has, by UUID. It never asks for bytes past the size fstat gave it,
    which is all its buffer holds (pread writes up to nbyte bytes at buf)."""
    snap = node_snapshot("dgx-h100")
    result = run_python(READ_THROUGH_INTERPOSER, snap.path, timeout=30, LD_PRELOAD=str(pread_interposer),
                        FHW_TEST_PREAD="short")
    assert result["uuids"] == [g.uuid for g in snap.node.gpus]
    assert result["interrupted"] >= 1 and result["calls"] > snap.path.stat().st_size // 997
    assert result["past_end"] == 0


@pytest.mark.parametrize("word", [0, 2])
def test_a_snapshot_no_writer_is_updating_is_read_in_one_pread(
        node_snapshot: Callable[..., NodeSnap], pread_interposer: Path, word: int) -> None:
    """docs/nvml.md's update protocol: a reader copies the file and keeps the copy when the update word was even
    and the same before and after the copy (no writer was in the middle of an update). A snapshot nobody writes is
    therefore read once: one pread of the whole file, which a regular file answers in full (POSIX pread(2)), not
    read again and again until a retry bound gives up on a word that never moved. So for a file written whole
    (word 0) and one whose last update in place is done (2, the next even value after the writer's odd 1)."""
    snap = node_snapshot("dgx-h100")
    with snap.path.open("r+b") as f:  # the word is outside the checksum (docs/nvml.md)
        os.pwrite(f.fileno(), word.to_bytes(4, "little"), UPDATE_WORD)
    result = run_python(READ_THROUGH_INTERPOSER, snap.path, timeout=30, LD_PRELOAD=str(pread_interposer),
                        FHW_TEST_PREAD="count")
    assert result["uuids"] == [g.uuid for g in snap.node.gpus]
    assert (result["calls"], result["interrupted"], result["past_end"]) == (1, 0, 0)


def test_a_snapshot_cut_short_between_fstat_and_read_is_refused_not_waited_on(
        node_snapshot: Callable[..., NodeSnap], pread_interposer: Path) -> None:
    """A file that ends before the size fstat gave (pread answers 0, end of file, POSIX) while reads are also
    interrupted (EINTR, errno left set by the failed call before): the shim stops reading and refuses the copy as
    it refuses a truncated file (NVML_ERROR_UNKNOWN, as `test_bad_snapshots_are_refused`), within the timeout,
    instead of retrying the end of file forever."""
    snap = node_snapshot("dgx-h100")
    result = run_python(READ_THROUGH_INTERPOSER, snap.path, timeout=30, LD_PRELOAD=str(pread_interposer),
                        FHW_TEST_PREAD="eof")
    assert result["err"] == 999
    assert result["interrupted"] >= 1


@pytest.mark.parametrize(("word", "cut"), [(0, 2), (2, 2), (2, 0), (2, 4)])
def test_a_copy_that_ends_inside_the_update_word_is_read_again(
        node_snapshot: Callable[..., NodeSnap], pread_interposer: Path, word: int, cut: int) -> None:
    """docs/nvml.md's update protocol: a reader that "copied the file while the word held one even value before and
    after its copy, and finds that value in its copy, has a whole file; otherwise it copies again". A first read
    that ends ``cut`` bytes into the 4-byte word (pread answers 0, end of file, POSIX: a file cut there and being
    refilled in place) holds no word, so it is not kept, nor one that ends just after the word (no copy of the
    file fstat measured); the next read finds the file whole and the node's GPUs, for a word of 0 (a file written
    whole) and of 2 (one update in place done), with no writer odd in between (the word is even)."""
    snap = node_snapshot("dgx-h100")
    with snap.path.open("r+b") as f:  # the word is outside the checksum (docs/nvml.md), so the file stays good
        os.pwrite(f.fileno(), word.to_bytes(4, "little"), UPDATE_WORD)
    result = run_python(READ_THROUGH_INTERPOSER, snap.path, timeout=30, LD_PRELOAD=str(pread_interposer),
                        FHW_TEST_PREAD="cut", FHW_TEST_PREAD_CUT=str(UPDATE_WORD + cut))
    assert result.get("uuids") == [g.uuid for g in snap.node.gpus], result
    assert result["calls"] >= 3 and result["past_end"] == 0  # the cut copy, its end of file, the whole copy


def test_a_file_updated_in_place_during_the_copy_is_copied_again(
        node_snapshot: Callable[..., NodeSnap], pread_interposer: Path) -> None:
    """docs/nvml.md's update protocol from the reader's side: the writer sets the word odd, writes the bytes that
    differ, then sets the next even value; a reader keeps its copy only if the word held one even value before and
    after the copy and the copy holds it, "otherwise it copies again". Here the whole update happens while the
    reader's first pread is half done (0 before, 2 after; the second half of the copy is the new file's, the first
    half, word included, the old one's: a torn copy whose own word still reads 0). The reader copies again and
    answers the node (a torn copy fails the checksum: UNKNOWN)."""
    old = node_snapshot("dgx-h100")
    new = node_snapshot("dgx-h100", faults=[{"kind": "thermal", "device": "gpu7", "temperature_c": 95}],
                        generation=2)
    data = bytearray(new.path.read_bytes())
    data[UPDATE_WORD:UPDATE_WORD + 4] = (2).to_bytes(4, "little")  # one update done: the next even value
    new.path.write_bytes(data)
    half = old.path.stat().st_size // 2
    assert old.path.read_bytes()[half:] != bytes(data[half:])  # the copy's halves come from different files
    result = run_python(READ_THROUGH_INTERPOSER, old.path, timeout=30, LD_PRELOAD=str(pread_interposer),
                        FHW_TEST_PREAD="update", FHW_TEST_PREAD_NEXT=str(new.path),
                        FHW_TEST_PREAD_WORD=str(UPDATE_WORD))
    assert result.get("uuids") == [g.uuid for g in old.node.gpus], result
    assert result["calls"] >= 3 and result["past_end"] == 0  # the torn copy (two calls), the whole one
    assert old.path.read_bytes() == bytes(data)


SMI_TABLE_GUID = bytes([0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e, 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4])
"""The export table nvidia-smi asks for (tests/nvml/c/shim_test.c asks for it by the same id)."""
SMI_PROCESS_ENTRY = 4128
"""The size of one process entry nvidia-smi passes to slots 213-215 (csrc/export.c)."""


def test_the_export_table_s_process_slot_writes_no_entry_past_the_capacity_it_is_given(
        nvml: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """The export table's compute-process slot (213) takes the caller's capacity in `*count`, as
    nvmlDeviceGetComputeRunningProcesses takes `infoCount` (nvml.h: INSUFFICIENT_SIZE "if infoCount is too small",
    "infoCount will contain minimal amount of space necessary for the call to complete"). With two compute
    processes on gpu0 and room for one, it answers INSUFFICIENT_SIZE with a count of 2 and writes nothing past the
    one entry: the bytes after it, the caller's, keep their fill. (A program without a driver release string, like
    this interpreter, gets the table: csrc/export.c.)"""
    n = pynvml_module
    nvml("dgx-h100", processes=[FakeProcess("gpu0", 4242, 1 << 30, kinds=1),
                                FakeProcess("gpu0", 4343, 2 << 30, kinds=1)])
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    table = ctypes.c_void_p()
    guid = (ctypes.c_ubyte * 16)(*SMI_TABLE_GUID)
    assert lib.nvmlInternalGetExportTable(ctypes.byref(table), guid) == n.NVML_SUCCESS
    slots = ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p))
    slot = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p)(slots[213])
    device = n.nvmlDeviceGetHandleByIndex(0)
    entries = (ctypes.c_ubyte * (2 * SMI_PROCESS_ENTRY))(*([0xAB] * (2 * SMI_PROCESS_ENTRY)))
    count = ctypes.c_uint(1)
    rc = slot(ctypes.cast(device, ctypes.c_void_p), ctypes.addressof(count), ctypes.addressof(entries), None)
    assert (rc, count.value) == (n.NVML_ERROR_INSUFFICIENT_SIZE, 2)
    assert int.from_bytes(bytes(entries[:4]), "little") in (4242, 4343)
    assert set(entries[SMI_PROCESS_ENTRY:]) == {0xAB}


def test_the_export_table_asked_for_without_a_table_or_a_guid_is_an_invalid_argument(
        nvml: Callable[..., NodeSnap], pynvml_module: ModuleType) -> None:
    """nvmlInternalGetExportTable with no place for the table, or no GUID, is refused as NVML_ERROR_INVALID_ARGUMENT.
    nvml.h does not declare the call, so the refusal is the code nvml.h defines for it: INVALID_ARGUMENT "A
    supplied argument is invalid", not UNKNOWN "An internal driver error occurred" (the rule of
    test_getter_branches.py's docstring, as for every call whose documented failures are only "nonzero"); a GUID the
    table does not answer to is INVALID_ARGUMENT too (its test below). The same call with both answers SUCCESS."""
    n = pynvml_module
    nvml("dgx-h100")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    table = ctypes.c_void_p()
    guid = (ctypes.c_ubyte * 16)(*SMI_TABLE_GUID)
    assert lib.nvmlInternalGetExportTable(None, guid) == n.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlInternalGetExportTable(ctypes.byref(table), None) == n.NVML_ERROR_INVALID_ARGUMENT
    assert table.value is None
    assert lib.nvmlInternalGetExportTable(ctypes.byref(table), guid) == n.NVML_SUCCESS and table.value


TRUNCATED_UNDER_A_READER = r"""
import json, os, sys, time, pynvml
path = os.environ["FAKEHW_NVML_SNAPSHOT"]
good = open(path, "rb").read()
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
out = {"before": pynvml.nvmlDeviceGetUUID(h)}
if os.environ.get("FHW_TEST_REPLACE_FIRST"):  # a new file renamed over the first, read, then truncated in place
    with open(path + ".new", "wb") as f:
        f.write(good)
    os.replace(path + ".new", path)
    time.sleep(0.05)
    out["replaced"] = pynvml.nvmlDeviceGetUUID(h)
with open(path, "r+b") as f:  # as `cp backup nvml.snapshot` does first: the same file, truncated
    f.truncate(0)
time.sleep(float(os.environ.get("FHW_TEST_SETTLE", "0")))
try:
    out["torn"] = pynvml.nvmlDeviceGetUUID(h)
except pynvml.NVMLError as e:
    out["torn"] = e.value
with open(path, "r+b") as f:
    f.write(good)
time.sleep(0.05)
try:
    out["after"] = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
except pynvml.NVMLError as e:
    out["after"] = e.value
print(json.dumps(out))
"""


def test_a_snapshot_truncated_in_place_under_a_reader_is_unknown_until_written_again(
        node_snapshot: Callable[..., NodeSnap]) -> None:
    """docs/nvml.md ("Writing and noticing a new generation"): someone may rewrite a snapshot in place (`cp backup
    nvml.snapshot` truncates first); touching the mapped page of a truncated file raises SIGBUS (mmap(2)), which
    the shim takes on its own pages, "answering NVML_ERROR_UNKNOWN while the file is torn", and the file written
    again is read again. The reader process survives all of it. (c-coverage.py: the SIGBUS handler never ran.)"""
    snap = node_snapshot("dgx-h100")
    got = run_python(TRUNCATED_UNDER_A_READER, snap.path, timeout=30)
    uuid = snap.node.gpus[0].uuid
    assert got == {"before": uuid, "torn": 999, "after": uuid}


def test_a_snapshot_that_replaced_another_and_is_then_truncated_is_unknown_until_written_again(
        node_snapshot: Callable[..., NodeSnap]) -> None:
    """The same after a new file was renamed over the first one and read (docs/nvml.md: a replaced file is
    reloaded): the process now maps the second file, which `cp backup nvml.snapshot` then truncates. Touching its
    page raises SIGBUS (mmap(2)), which the shim takes as its own as it took the first file's (the first file's
    mapping is gone by then): UNKNOWN while torn, the node again once written, and the process survives."""
    snap = node_snapshot("dgx-h100")
    got = run_python(TRUNCATED_UNDER_A_READER, snap.path, timeout=30, FHW_TEST_REPLACE_FIRST="1")
    uuid = snap.node.gpus[0].uuid
    assert got == {"before": uuid, "replaced": uuid, "torn": 999, "after": uuid}


NO_SIGBUS_HANDLER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>

/* sigaction refusing every handler for SIGBUS, as a sandbox's seccomp filter refusing rt_sigaction does
   (seccomp(2): SECCOMP_RET_ERRNO); every other signal, and every query, as libc does it. */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    static int (*real)(int, const struct sigaction *, struct sigaction *);
    if (real == NULL) real = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    if (sig == SIGBUS && act != NULL) {
        errno = EPERM;
        return -1;
    }
    return real(sig, act, old);
}
"""


def test_a_library_that_may_not_take_sigbus_maps_nothing_and_still_sees_a_truncated_snapshot(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """The same truncation in place, in a process where the SIGBUS handler cannot be installed (sigaction refused,
    NO_SIGBUS_HANDLER). mmap(2): touching a mapped page past the end of a truncated file raises SIGBUS, whose
    default action ends the process (signal(7)); so without a handler of its own the shim must not have the page
    mapped, and notices the change as it notices a writer that does not use the word (docs/nvml.md: it stat()s the
    path at most every 10 ms; the test waits 50 ms): UNKNOWN while torn, the node again once written, and the
    process survives. (c-coverage.py: the refusal's branch never ran.)"""
    snap = node_snapshot("dgx-h100")
    preload = build_preload(tmp_path, "no_sigbus_handler", NO_SIGBUS_HANDLER)
    got = run_python(TRUNCATED_UNDER_A_READER, snap.path, timeout=30, FHW_TEST_SETTLE="0.05",
                     LD_PRELOAD=str(preload))
    uuid = snap.node.gpus[0].uuid
    assert got == {"before": uuid, "torn": 999, "after": uuid}


_WRITABLE_PHDRS = """
    /* The program's own program headers (found through the auxiliary vector), their load bias, and their pages
       made writable (the table's own pages only: its segment is read-only). Needs `page`. */
    ElfW(Phdr) *ph = (ElfW(Phdr) *)getauxval(AT_PHDR);
    size_t count = getauxval(AT_PHNUM);
    uintptr_t base = 0;
    for (size_t i = 0; i < count; i++)
        if (ph[i].p_type == PT_PHDR) base = (uintptr_t)ph - ph[i].p_vaddr;
    uintptr_t first = (uintptr_t)ph & ~(uintptr_t)(page - 1);
    size_t span = (uintptr_t)(ph + count) - first;
    if (mprotect((void *)first, span, PROT_READ | PROT_WRITE) != 0) return 6;
"""

_TABLE_GUID = """
    static const unsigned char guid[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                           0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
"""
"""The GUID of the export table nvidia-smi asks for (the C declaration both programs below use)."""
_ASK_FOR_THE_TABLE = r"""
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib == NULL) return 2;
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*table)(const void **, const unsigned char *) =
        (int (*)(const void **, const unsigned char *))dlsym(lib, "nvmlInternalGetExportTable");
    const void *t = NULL;
    if (init() != 0) return 3;
    printf("%d\n", table(&t, guid));
    return 0;
}
"""
"""Load the library, initialise it and print what asking for that table answers (both programs end so)."""

EXPORT_TABLE_CALLER = r"""
#include <dlfcn.h>
#include <stdio.h>
/* The release this program says it was built for, alone between NULs in its read-only data, as nvidia-smi's. */
__attribute__((used)) static const char release[] = "\0" RELEASE;
int main(void) {
""" + _TABLE_GUID + _ASK_FOR_THE_TABLE


def c_caller(tmp: Path, name: str, source: str, snapshot: Path, *defines: str) -> tuple[Path, dict[str, str]]:
    """A C program built from ``source`` (``-D`` ``defines``) that loads the library, and the environment that runs it
    against ``snapshot``; skips without a C compiler."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp / f"{name}.c"
    src.write_text(source)
    exe = tmp / name
    subprocess.run(["cc", "-O1", *(f"-D{d}" for d in defines), str(src), "-o", str(exe), "-ldl"], check=True)
    return exe, dict(os.environ, FAKEHW_NVML_SNAPSHOT=str(snapshot), LD_LIBRARY_PATH=str(lib_path().parent))


def export_table_answer(tmp: Path, release: str, snapshot: Path) -> int:
    """nvmlInternalGetExportTable's answer to nvidia-smi's GUID, asked by a C program built with ``release`` in its
    read-only data (empty: no release string)."""
    exe, env = c_caller(tmp, f"caller-{release or 'none'}", EXPORT_TABLE_CALLER, snapshot, f'RELEASE="{release}"')
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_a_program_of_a_two_part_release_is_refused_the_export_table_of_another(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """NVIDIA's releases are not all three-part: NVIDIA/open-gpu-kernel-modules' CHANGELOG.md lists 535.98, 515.76,
    525.53 and 515.57 beside 535.104.05 and the like. A driver's nvidia-smi and its libnvidia-ml are one release
    (Debian's nvidia-smi depends on exactly its libnvidia-ml1; docs/nvml.md), so the library of 535.261.03 refuses
    the table to a program built for 535.98 (nvidia-smi then prints its mismatch message) as it does to one built
    for 535.104.05, and gives it to a program of its own release and to one that names no release."""
    snap = node_snapshot(with_driver(tmp_path, "dgx-h100", "535.261.03"))
    answers = {release: export_table_answer(tmp_path, release, snap.path)
               for release in ("535.261.03", "", "535.104.05", "535.98")}
    assert answers == {"535.261.03": 0, "": 0, "535.104.05": 2, "535.98": 2}


UNREADABLE_SEGMENT_CALLER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>
/* Before the library loads, the program turns its own PT_GNU_STACK program header (read by the loader at start-up
   only) into a PT_LOAD of one page with no permission flags, and maps that page PROT_NONE: a segment the ELF gABI's
   p_flags say may not be read. The program names no release, so a reader of its read-only segments reads them all. */
int main(void) {
""" + _TABLE_GUID + r"""
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *closed = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (closed == MAP_FAILED) return 6;
""" + _WRITABLE_PHDRS + r"""    int changed = 0;
    for (size_t i = 0; i < count; i++) {
        if (ph[i].p_type != PT_GNU_STACK) continue;
        ph[i].p_type = PT_LOAD;
        ph[i].p_flags = 0;
        ph[i].p_vaddr = (uintptr_t)closed - base;
        ph[i].p_offset = 0;
        ph[i].p_filesz = ph[i].p_memsz = (size_t)page;
        changed = 1;
    }
    mprotect((void *)first, span, PROT_READ);
    if (!changed) return 7;
""" + _ASK_FOR_THE_TABLE


def test_a_program_segment_without_read_permission_is_not_read(node_snapshot: Callable[..., NodeSnap],
                                                                tmp_path: Path) -> None:
    """The export table looks for the calling program's release in its read-only PT_LOAD segments. The ELF gABI
    (Program Header, "Segment Permissions"): ``p_flags`` PF_R, PF_W, PF_X give a segment's permissions, and a
    segment without PF_R is one the program may not read (the loader maps it without PROT_READ). A program whose
    program headers hold a PT_LOAD with no flags over a PROT_NONE page, and that names no release, gets the table
    like any program naming none (SUCCESS, 0: test_a_program_of_a_two_part_release_...'s "" case) instead of a
    SIGSEGV from a read of that page (seed 10618's export.c:315, ``p_flags & PF_R`` -> ``|``)."""
    snap = node_snapshot(with_driver(tmp_path, "dgx-h100", "535.261.03"))
    exe, env = c_caller(tmp_path, "unreadable", UNREADABLE_SEGMENT_CALLER, snap.path)
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr


SEGMENT_OF_ITS_OWN_CALLER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>
/* As the program above, but the new PT_LOAD is readable (PF_R) and holds exactly NUL, argv[1], NUL: its first byte
   is the NUL before the release and its last the NUL after it. It ends where a page ends and the next page is
   PROT_NONE, so reading one byte past the segment faults. The program names no release of its own. */
int main(int argc, char **argv) {
""" + _TABLE_GUID + r"""
    if (argc < 2) return 8;
    long page = sysconf(_SC_PAGESIZE);
    size_t size = strlen(argv[1]) + (argc > 2 ? 1 : 2); /* argv[2]: no NUL after the release */
    unsigned char *pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED || mprotect(pages + page, (size_t)page, PROT_NONE) != 0) return 6;
    unsigned char *segment = pages + page - size;
    memset(segment, 0, size);
    memcpy(segment + 1, argv[1], strlen(argv[1]));
    mprotect(pages, (size_t)page, PROT_READ);
""" + _WRITABLE_PHDRS + r"""    int changed = 0;
    for (size_t i = 0; i < count; i++) {
        if (ph[i].p_type != PT_GNU_STACK) continue;
        ph[i].p_type = PT_LOAD;
        ph[i].p_flags = PF_R;
        ph[i].p_vaddr = (uintptr_t)segment - base;
        ph[i].p_offset = 0;
        ph[i].p_filesz = ph[i].p_memsz = size;
        changed = 1;
    }
    mprotect((void *)first, span, PROT_READ);
    if (!changed) return 7;
""" + _ASK_FOR_THE_TABLE


def test_a_release_that_fills_a_read_only_segment_is_found(node_snapshot: Callable[..., NodeSnap],
                                                            tmp_path: Path) -> None:
    """csrc/export.c (and docs/nvml.md): the release a program was built for is the NUL-delimited "NNN.NN.NN" or
    "NNN.NN" string in its read-only image, wherever it lies. A read-only PT_LOAD (ELF gABI: PF_R without PF_W) that
    is exactly NUL, release, NUL puts the release at the segment's second byte and its NUL at the last: the
    library of 535.261.03 refuses the table to 535.104.05 and to the two-part 535.98 (NVIDIA/open-gpu-kernel-
    modules' CHANGELOG.md) and gives it to 535.261.03, as test_a_program_of_a_two_part_release_... does with the
    release among the program's own constants; a segment of two NULs names no release, so the table is given. A
    scan that starts a byte late (fresh seed 10680's export.c:318, ``start + 1`` -> ``+ 2``) or stops ten bytes
    short of the end (the two-part release, 8 bytes with its NULs, was not found: a defect, fixed) gives the table;
    one that reads past the end faults on the PROT_NONE page."""
    snap = node_snapshot(with_driver(tmp_path, "dgx-h100", "535.261.03"))
    exe, env = c_caller(tmp_path, "segment", SEGMENT_OF_ITS_OWN_CALLER, snap.path)
    answers = {}
    for release in ("535.104.05", "535.98", "535.261.03", ""):
        proc = subprocess.run([str(exe), release], env=env, capture_output=True, text=True, timeout=30,
                              check=False)
        assert proc.returncode == 0, (release, proc.returncode, proc.stderr)
        answers[release] = int(proc.stdout)
    assert answers == {"535.104.05": 2, "535.98": 2, "535.261.03": 0, "": 0}
    # The same digits with no NUL after them, their last at the segment's last byte: not a NUL-delimited release, so
    # the program names none and gets the table, and the scan stops at the segment's end instead of reading the
    # PROT_NONE page after it (fresh seed 10627's export.c:292, ``q < end`` -> ``q <= end``, dies of SIGSEGV).
    for release in ("535.104.05", "535.98"):
        proc = subprocess.run([str(exe), release, "open"], env=env, capture_output=True, text=True, timeout=30,
                              check=False)
        assert (proc.returncode, proc.stdout) == (0, "0\n"), (release, proc.returncode, proc.stderr)

WRITABLE_RELEASE_CALLER = r"""
#include <dlfcn.h>
#include <stdio.h>
/* A release, NUL-delimited, in writable data only: not the read-only image the library reads (csrc/export.c). */
__attribute__((used)) char release[] = "\0" "535.104.05";
int main(void) {
""" + _TABLE_GUID + _ASK_FOR_THE_TABLE
"""A program whose one release string is in its writable data."""

PT_LOAD, PF_W, PF_R = 1, 2, 4
"""The ELF gABI's program header type of a loadable segment and its write and read flags."""


def _hide_a_read_only_view_of_the_data_past_the_program_headers(exe: Path) -> None:
    """Rewrite ``exe`` (ELF64, little-endian) so that the entry just past its program header table reads as a
    read-only PT_LOAD of its writable data segment: the table's last entry (GNU_RELRO or GNU_STACK, not loadable, so
    the kernel maps the same segments) is overwritten with that view and e_phnum lowered by one to leave it out."""
    image = bytearray(exe.read_bytes())
    assert image[:4] == b"\x7fELF" and image[4] == 2 and image[5] == 1, "an ELF64 little-endian program"
    phoff = int.from_bytes(image[0x20:0x28], "little")
    phentsize = int.from_bytes(image[0x36:0x38], "little")
    phnum = int.from_bytes(image[0x38:0x3A], "little")
    entries = [phoff + i * phentsize for i in range(phnum)]
    data = next(e for e in entries if int.from_bytes(image[e:e + 4], "little") == PT_LOAD
                and int.from_bytes(image[e + 4:e + 8], "little") & PF_W)
    last = entries[-1]
    assert int.from_bytes(image[last:last + 4], "little") != PT_LOAD
    image[last:last + phentsize] = image[data:data + phentsize]
    image[last + 4:last + 8] = PF_R.to_bytes(4, "little")
    image[0x38:0x3A] = (phnum - 1).to_bytes(2, "little")
    exe.write_bytes(bytes(image))


def test_the_release_scan_reads_only_the_program_headers_e_phnum_counts(node_snapshot: Callable[..., NodeSnap],
                                                                      tmp_path: Path) -> None:
    """The ELF gABI: e_phnum "holds the number of entries in the program header table", and dl_iterate_phdr(3)
    gives that count as dlpi_phnum; what lies past them is not a program header. A program whose only release string
    ("535.104.05", NVIDIA/open-gpu-kernel-modules' CHANGELOG.md) is in its writable data names no release in its
    read-only image (csrc/export.c, docs/nvml.md), so the library of 535.261.03 gives it the table (0), even when
    the bytes just past its program header table read as a read-only PT_LOAD of that data. A scan that reads one
    header past dlpi_phnum (fresh seed 10715's export.c:313, ``i < info->dlpi_phnum`` -> ``<=``) finds the release
    there and refuses the table (NVML_ERROR_INVALID_ARGUMENT, 2). The program unpatched gets the table too."""
    snap = node_snapshot(with_driver(tmp_path, "dgx-h100", "535.261.03"))
    exe, env = c_caller(tmp_path, "writable-release", WRITABLE_RELEASE_CALLER, snap.path)
    answers = []
    for patched in (False, True):
        if patched:
            _hide_a_read_only_view_of_the_data_past_the_program_headers(exe)
        proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, (patched, proc.returncode, proc.stderr)
        answers.append(int(proc.stdout))
    assert answers == [0, 0]


SIGBUS_CHAIN = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The program's own SIGBUS disposition, set before the library loads: a handler with SA_SIGINFO (argv[1]
   "siginfo"), called with the fault's siginfo; one without (argv[1] "plain"), called with the signal number alone;
   or SIG_IGN (argv[1] "ignored"). A handler exits with 0 when what it was given is its own fault: SIGBUS at the
   page it touched (si_addr, si_code BUS_ADRERR). argv[2] "library" loads the library and calls nvmlInit first.
   argv[3] "sent": no fault; the program sends itself SIGBUS with kill(2) and, still running, exits with 10;
   "queued": the same with the siginfo sigqueue(3) run by init as root would bring (si_code SI_QUEUE, si_pid 1,
   si_uid 0: the union's first 8 bytes, which si_addr overlays, read 1); "mapped-first": the program maps its page
   after loading the library and before nvmlInit, so the library's page (mapped by nvmlInit) may end where it
   starts. */
static volatile char *g_page;

static void with_info(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    _exit(sig == SIGBUS && info != NULL && info->si_addr == (void *)g_page && info->si_code == BUS_ADRERR ? 0 : 3);
}

static void plain(int sig) { _exit(sig == SIGBUS ? 0 : 3); }

int main(int argc, char **argv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (argc > 1 && strcmp(argv[1], "siginfo") == 0) {
        sa.sa_sigaction = with_info;
        sa.sa_flags = SA_SIGINFO;
    } else {
        sa.sa_handler = argc > 1 && strcmp(argv[1], "ignored") == 0 ? SIG_IGN : plain;
    }
    sigaction(SIGBUS, &sa, NULL);
    int (*init)(void) = NULL;
    int mapped_first = argc > 3 && strcmp(argv[3], "mapped-first") == 0;
    if (argc > 2 && strcmp(argv[2], "library") == 0) {
        void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (lib == NULL) return 4;
        init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
        if (!mapped_first && init() != 0) return 5;
    }
    if (argc > 3 && strcmp(argv[3], "sent") == 0) {
        kill(getpid(), SIGBUS); /* pending and unblocked: delivered before kill returns (POSIX kill) */
        return 10;
    }
    if (argc > 3 && strcmp(argv[3], "queued") == 0) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        si.si_signo = SIGBUS;
        si.si_code = SI_QUEUE;
        si.si_pid = 1;
        si.si_uid = 0;
        syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), SIGBUS, &si); /* to itself: delivered on return */
        return 10;
    }
    char path[] = "/tmp/fhw-sigbus-XXXXXX";
    int fd = mkstemp(path);
    long size = sysconf(_SC_PAGESIZE);
    if (fd < 0 || ftruncate(fd, size) != 0) return 6;
    g_page = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    unlink(path);
    if (mapped_first && init != NULL && init() != 0) return 5; /* Linux maps top-down: its page ends at ours */
    if (g_page == MAP_FAILED || ftruncate(fd, 0) != 0) return 7;
    return g_page[0] == 0 ? 8 : 9; /* the read past the file's end raises SIGBUS: the handler exits first */
}
"""


@pytest.mark.parametrize("kind", ["siginfo", "plain", "ignored"])
def test_a_sigbus_of_the_program_s_own_goes_where_it_would_without_the_library(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path, kind: str) -> None:
    """The shim takes SIGBUS for its own mappings only (csrc/core.c: "Any other SIGBUS goes to the handler installed
    before"). A program that installed a SIGBUS handler before nvmlInit and reads past the end of a file it mapped
    (POSIX mmap: "References within the address range starting at pa and continuing for len bytes to whole pages
    following the end of an object shall result in delivery of a SIGBUS signal") gets its fault in its handler, in
    the form POSIX sigaction gives a handler of that kind: with SA_SIGINFO, sa_sigaction(sig, info, context) with
    the fault's si_addr and si_code BUS_ADRERR ("nonexistent physical address"); without, sa_handler(sig). With
    SIGBUS ignored, the process ends as the same program ends without the library (the kernel's choice for an
    ignored fault signal, kernel/signal.c force_sig_info_to_task: the action is reset to the default, death by
    SIGBUS), not some other way."""
    snap = node_snapshot("dgx-h100")
    exe, env = c_caller(tmp_path, "sigbus", SIGBUS_CHAIN, snap.path)
    ends = {how: subprocess.run([str(exe), kind, how], env=env, capture_output=True, text=True, timeout=30,
                                check=False).returncode for how in ("alone", "library")}
    assert ends["library"] == ends["alone"] == (-signal.SIGBUS if kind == "ignored" else 0)


def test_a_sigbus_sent_to_a_program_that_ignores_it_is_ignored_with_the_library_too(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """POSIX sigaction: with SIG_IGN, "delivery of the signal shall have no effect on the process"; only a SIGBUS
    "that was not generated by kill(), sigqueue(), or raise()" leaves the behaviour undefined when ignored. So a
    program that ignores SIGBUS and is sent one with kill(2) goes on running (it exits with its own 10 after the
    call), with the library's handler in place of its SIG_IGN as without the library, instead of being killed by
    the default action the shim falls back to for faults."""
    snap = node_snapshot("dgx-h100")
    exe, env = c_caller(tmp_path, "sigbus", SIGBUS_CHAIN, snap.path)
    ends = {how: subprocess.run([str(exe), "ignored", how, "sent"], env=env, capture_output=True, text=True,
                                timeout=30, check=False).returncode for how in ("alone", "library")}
    assert ends == {"alone": 10, "library": 10}


@pytest.mark.parametrize("sent", ["sent", "queued"])
def test_a_sigbus_sent_to_a_program_with_a_handler_reaches_its_handler(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path, sent: str) -> None:
    """A SIGBUS that is no fault of the library's mapping (csrc/core.c: "Any other SIGBUS goes to the handler
    installed before") reaches the program's own handler (it exits 0 from there) as it does without the library:
    sent with kill(2) by the program itself, and as sigqueue(3) by init (pid 1, uid 0) delivers it, whose siginfo
    reads as an address in the first page, where nothing of the library's is mapped (POSIX sigaction: si_addr is
    defined for faults only; a queued signal's union holds the sender's pid and uid)."""
    snap = node_snapshot("dgx-h100")
    exe, env = c_caller(tmp_path, "sigbus", SIGBUS_CHAIN, snap.path)
    ends = {how: subprocess.run([str(exe), "plain", how, sent], env=env, capture_output=True, text=True,
                                timeout=30, check=False).returncode for how in ("alone", "library")}
    assert ends == {"alone": 0, "library": 0}


def test_a_fault_on_the_page_after_the_library_s_own_reaches_the_program_s_handler(
        node_snapshot: Callable[..., NodeSnap], tmp_path: Path) -> None:
    """The shim's page is one page long (mmap(2): a mapping of len bytes covers [addr, addr + len)); the byte just
    past it is not its own. A program that maps a file of its own between loading the library and nvmlInit (Linux
    places the next mapping just below: the library's page ends where the program's begins) and reads past the end
    of that file gets SIGBUS (POSIX mmap) in its own handler, which exits 0, as in the test above."""
    snap = node_snapshot("dgx-h100")
    exe, env = c_caller(tmp_path, "sigbus", SIGBUS_CHAIN, snap.path)
    ends = {how: subprocess.run([str(exe), "plain", how, "mapped-first"], env=env, capture_output=True, text=True,
                                timeout=10, check=False).returncode for how in ("alone", "library")}
    assert ends == {"alone": 0, "library": 0}


HELD_ODD = r"""
import ctypes, json, os, threading, time
path = os.environ["FAKEHW_NVML_SNAPSHOT"]
whole = open(path, "rb").read()
torn = bytearray(whole)
torn[-100] ^= 0xFF  # a chunk the writer has not finished: the checksum no longer matches
lib = ctypes.CDLL("libnvidia-ml.so.1")


def put(data, word):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, (1).to_bytes(4, "little"), 20)  # the writer's odd word first, then the bytes
        os.pwrite(fd, bytes(data[:20]) + (1).to_bytes(4, "little") + bytes(data[24:]), 0)
        os.pwrite(fd, word.to_bytes(4, "little"), 20)
    finally:
        os.close(fd)


def timed_init():
    t0 = time.monotonic()
    rc = lib.nvmlInit_v2()
    took = time.monotonic() - t0
    if rc == 0:
        lib.nvmlShutdown()
    return t0, rc, took


out = {}
for name, data in (("held, torn", torn), ("held, whole", whole)):
    put(data, 1)
    _, rc, took = timed_init()
    out[name] = [rc, took]
released = []
for attempt in range(10):
    put(torn, 1)
    at = []
    def release():
        time.sleep(0.003)
        put(whole, 2)
        at.append(time.monotonic())
    t = threading.Thread(target=release)
    t.start()
    t0, rc, took = timed_init()
    t.join()
    released.append([rc, at[0] - t0])
out["released"] = released
print(json.dumps(out))
"""


def test_a_reader_waits_out_a_writer_s_odd_word_and_then_lets_the_checksum_judge(
        node_snapshot: Callable[..., NodeSnap]) -> None:
    """docs/nvml.md ("Writing and noticing a new generation", the file's protocol): a writer updating in place sets
    ``superseded`` (header bytes 20-23) to the next odd value, writes its chunks, then sets the next even value; a
    reader's copy is whole only when the word held one even value around it, and "a word left odd for 10 ms, by a
    writer that died mid-update, is no longer waited for: the checksum then judges". The file is written here by
    hand so, with the word held odd:

    - over bytes whose checksum does not match (the writer's chunks half written), nvmlInit answers UNKNOWN (a bad
      checksum is refused, as ``test_bad_snapshots_are_refused``), but only after waiting the 10 ms out (each of the
      reader's sleeps lasts at least what it asks, POSIX nanosleep, so no correct reader answers sooner);
    - over whole bytes (good checksum) it answers SUCCESS, likewise no sooner than 10 ms;
    - over torn bytes that another thread replaces by the whole ones and an even word 3 ms later, nvmlInit answers
      SUCCESS whenever the even word was there before 9 ms had passed: a reader that is still waiting then sees it
      and copies the finished file. A reader that copies without waiting gets the torn bytes (its copy and the
      mapped word agree on the odd value) and answers UNKNOWN. Attempts whose release came later (a loaded
      machine) say nothing and are not judged; most land inside."""
    snap = node_snapshot("edge-pcie")
    got = run_python(HELD_ODD, snap.path, timeout=60)
    assert got["held, torn"][0] == 999 and got["held, torn"][1] >= 0.010, got
    assert got["held, whole"][0] == 0 and got["held, whole"][1] >= 0.010, got
    inside = [rc for rc, when in got["released"] if when < 0.009]
    assert len(inside) >= 3, got["released"]
    assert set(inside) == {0}, got["released"]


def test_a_handle_whose_gpu_is_gone_from_the_node_is_lost(pynvml_module: ModuleType,
                                                          node_snapshot: Callable[..., NodeSnap]) -> None:
    """A running process holds handles of a DGX H100's GPUs; the node's snapshot is then replaced by another
    machine's (an edge box with other GPUs, other UUIDs): the GPU each handle names is no longer on the node, which
    nvml.h calls NVML_ERROR_GPU_IS_LOST ("the target GPU has fallen off the bus or is otherwise inaccessible"), for
    every handle, not INVALID_ARGUMENT (the handle was valid) or UNKNOWN (the new snapshot is good: its own count
    is readable)."""
    import time

    n = pynvml_module
    old = node_snapshot("dgx-h100")
    new = node_snapshot("edge-pcie")
    assert not {g.uuid for g in old.node.gpus} & {g.uuid for g in new.node.gpus}
    with snapshot_env(old.path):
        n.nvmlInit()
    try:
        hs = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
        assert [n.nvmlDeviceGetUUID(h) for h in hs] == [g.uuid for g in old.node.gpus]
        write_snapshot(old.path, new.path.read_bytes())
        time.sleep(0.05)
        lost = []
        for h in hs:
            with pytest.raises(n.NVMLError) as err:
                n.nvmlDeviceGetUUID(h)
            lost.append(err.value.value)
        assert lost == [n.NVML_ERROR_GPU_IS_LOST] * len(hs)
        assert n.nvmlSystemGetDriverVersion() == new.system.driver.version
    finally:
        n.nvmlShutdown()


NVML_ERROR_INVALID_ARGUMENT = 2  # nvml.h

_UNKNOWN_GUID_PROGRAM = """
import ctypes, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
guid = (ctypes.c_ubyte * 16)(*bytes.fromhex(sys.argv[1]))
table = ctypes.c_void_p()
print(lib.nvmlInternalGetExportTable(ctypes.byref(table), guid), table.value)
lib.nvmlShutdown()
"""


def test_an_export_table_guid_nobody_offers_is_refused_and_traced_as_given(tmp_path: Path) -> None:
    """A GUID the library has no table for is INVALID_ARGUMENT with the table left NULL (the export table is only
    nvidia-smi's, csrc/export.c), and with FAKEHW_NVML_TRACE set (docs/nvml.md) the refusal names the GUID the
    caller passed: its 16 bytes as 32 hex digits, nothing read past them. The GUID is the caller's 16-byte buffer
    (nvidia-smi passes a pointer to one), so the expected digits are the input's."""
    snap = write_node(tmp_path / "snap.bin", "dgx-h100")
    guid = "00112233445566778899aabbccddeeff"
    proc = subprocess.run([sys.executable, "-c", _UNKNOWN_GUID_PROGRAM, guid], capture_output=True, text=True,
                          timeout=60, check=False, env=subprocess_env(snap.path, FAKEHW_NVML_TRACE="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(NVML_ERROR_INVALID_ARGUMENT), "None"]
    refused = [line for line in proc.stderr.splitlines() if "unknown GUID" in line]
    assert len(refused) == 1, proc.stderr
    assert re.search(r"unknown GUID ([0-9a-f]+) refused", refused[0]).group(1) == guid  # type: ignore[union-attr]


AT_A_SHIM_STEP = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

/* Another thread's work, done at one chosen step of a call the library is making: the test stores a function in
   fhw_test_hook and arms a step; the library's next such call runs the hook first (once), then goes on.
   1: the shim's next CLOCK_REALTIME reading (nvmlDeviceGetBBXTimeData_v1's, made while the call holds its
      snapshot, before it reads the GPU's flush time there);
   2: the shim's next pthread_setspecific (a thread's first call, registering its hazard slot, after the call
      checked the library is initialised and before it takes the current snapshot);
   3: the shim's next pthread_mutex_lock (a call that found its snapshot stale, about to take the reload lock).
   Only calls made from the library itself count (dladdr of the return address), not the interpreter's own. */
void (*fhw_test_hook)(void);
int fhw_test_armed;
int fhw_test_fired;

static void at_step(int step, void *caller) {
    Dl_info info;
    if (fhw_test_armed != step || fhw_test_hook == NULL) return;
    if (dladdr(caller, &info) == 0 || info.dli_fname == NULL || strstr(info.dli_fname, "libnvidia-ml") == NULL) return;
    fhw_test_armed = 0;
    fhw_test_fired = step;
    fhw_test_hook();
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (real == NULL) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    if (clk == CLOCK_REALTIME) at_step(1, __builtin_return_address(0));
    return real(clk, ts);
}

int pthread_mutex_lock(pthread_mutex_t *mutex) {
    static int (*real)(pthread_mutex_t *);
    if (real == NULL) real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    at_step(3, __builtin_return_address(0));
    return real(mutex);
}

int pthread_setspecific(pthread_key_t key, const void *value) {
    static int (*real)(pthread_key_t, const void *);
    if (real == NULL) real = (int (*)(pthread_key_t, const void *))dlsym(RTLD_NEXT, "pthread_setspecific");
    at_step(2, __builtin_return_address(0));
    return real(key, value);
}
"""

RACE_CALLER = r"""
import ctypes, json, os, sys, threading, time
from pathlib import Path
from fakehw.nvml.snapfile import write_snapshot
lib = ctypes.CDLL("libnvidia-ml.so.1")
pre = ctypes.CDLL(os.environ["LD_PRELOAD"])
path = os.environ["FAKEHW_NVML_SNAPSHOT"]
assert lib.nvmlInit_v2() == 0
device = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
out = {}


def processes():
    count = ctypes.c_uint(0)
    return [lib.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(count), None), count.value]


def bbx_time():
    seconds = ctypes.c_uint(0)
    return [lib.nvmlDeviceGetBBXTimeData_v1(device, ctypes.byref(seconds)), seconds.value]


def replace_and_read():
    with open(path + ".next", "rb") as f:
        write_snapshot(Path(path), f.read())
    out["other"] = processes()


def shut_down():
    out["shutdown"] = lib.nvmlShutdown()


def in_another_thread(work):
    t = threading.Thread(target=work)
    t.start()
    t.join()


step = int(sys.argv[1])
work = {1: replace_and_read, 2: shut_down, 3: lambda: out.__setitem__("other", processes())}[step]
hook = ctypes.CFUNCTYPE(None)(lambda: in_another_thread(work))
ctypes.c_void_p.in_dll(pre, "fhw_test_hook").value = ctypes.cast(hook, ctypes.c_void_p).value
ctypes.c_int.in_dll(pre, "fhw_test_armed").value = step
if step == 1:
    out["wall"] = [time.time()]
    out["during"] = bbx_time()
    out["wall"].append(time.time())
    flush, duration = ctypes.c_ulonglong(0), ctypes.c_ulong(0)
    assert lib.nvmlDeviceGetLastBBXFlushTime(device, ctypes.byref(flush), ctypes.byref(duration)) == 0
    out["flush_us"] = flush.value
elif step == 2:
    in_another_thread(lambda: out.__setitem__("during", processes()))  # a thread's first call
else:
    with open(path + ".next", "rb") as f:
        write_snapshot(Path(path), f.read())
    out["during"] = processes()
out["fired"] = ctypes.c_int.in_dll(pre, "fhw_test_fired").value
out["after"] = processes()
out["then"] = processes()
print(json.dumps(out))
"""


def run_race(tmp_path: Path, step: int) -> dict[str, Any]:
    """RACE_CALLER against dgx-h100 on a 615 driver (whose library has nvmlDeviceGetBBXTimeData_v1) with no
    process, ``.next`` listing one compute process on gpu0."""
    board = str(with_driver(tmp_path, "dgx-h100", "615.10.01"))
    snap = write_node(tmp_path / "nvml.snapshot", board)
    write_node(tmp_path / "nvml.snapshot.next", board, processes=[FakeProcess("gpu0", 4242, 1 << 30)])
    preload = build_preload(tmp_path, "at_a_shim_step", AT_A_SHIM_STEP)
    code = RACE_CALLER.replace("sys.argv[1]", repr(str(step)))
    # mallopt(3)'s M_PERTURB (MALLOC_PERTURB_): glibc fills what free releases with 0x5A, so a snapshot freed under
    # a reader is garbage to it, not its old bytes; with the per-thread cache off, every free goes through it.
    got: dict[str, Any] = run_python(code, snap.path, timeout=60, LD_PRELOAD=str(preload), MALLOC_PERTURB_="165",
                                     GLIBC_TUNABLES="glibc.malloc.tcache_count=0")
    assert got["fired"] == step, got  # the other thread's work was done inside the call
    return got


SUCCESS, UNINITIALIZED, INSUFFICIENT_SIZE = 0, 1, 7
"""nvml.h's codes."""
NO_PROCESS, ONE_PROCESS = [SUCCESS, 0], [INSUFFICIENT_SIZE, 1]
"""nvmlDeviceGetComputeRunningProcesses_v3 with a NULL array and a count of 0 (nvml.h): SUCCESS with 0 when the GPU
runs none, INSUFFICIENT_SIZE with the count needed when it runs one."""


def test_a_call_holding_the_snapshot_another_thread_replaces_reads_it_whole(tmp_path: Path) -> None:
    """A call (nvmlDeviceGetBBXTimeData_v1 on gpu0) holds the current snapshot when another thread has the project's
    writer replace the file and makes a call itself, which reloads and retires the old snapshot (docs/nvml.md: a
    reader notices at once; snapshots are freed "only when no thread's hazard pointer names them, so a reader never
    sees a ... freed snapshot"). The other thread's call answers the new file (one compute process: it began after
    the replace); the first call still reads a snapshot, not freed memory: its count of seconds covers at least the
    seconds since the GPU's last black-box flush, which was "during the current run" (nvml.h,
    nvmlDeviceGetLastBBXFlushTime; "Cumulative number of seconds the GPU has had the driver loaded",
    nvmlDeviceGetBBXTimeData_v1), and no more than the seconds since the H100 was announced (2022-03-22, as
    test_more_board_getters.py); every call after both answers the new file, and the process lives. glibc fills
    freed memory (mallopt(3) M_PERTURB), so a snapshot freed under the reader reads as garbage. (core.c:613, the
    reclaim keeping a snapshot a reader still names, never ran; its test negated freed the snapshot under the
    reader.)"""
    h100_announced = 1647907200  # 2022-03-22T00:00:00Z
    got = run_race(tmp_path, 1)
    assert got["other"] == ONE_PROCESS, got
    rc, seconds = got["during"]
    assert rc == SUCCESS, got
    assert int(got["wall"][0]) - got["flush_us"] // 1_000_000 <= seconds <= got["wall"][1] - h100_announced, got
    assert got["after"] == got["then"] == ONE_PROCESS, got


def test_a_thread_s_first_call_racing_nvml_shutdown_is_uninitialized(tmp_path: Path) -> None:
    """A thread's first call has found the library initialised when another thread's nvmlShutdown (the last
    reference: nvmlInit_v2 was called once) ends it, before the call takes the snapshot. The caller cannot tell that
    from a shutdown just before its call, so it answers as any call after nvmlShutdown: nvml.h's
    NVML_ERROR_UNINITIALIZED, "if the library has not been successfully initialized" (as the calls after it do).
    (core.c:657-658 never ran; its UNINITIALIZED made UNKNOWN answered the race unlike the calls after it.)"""
    got = run_race(tmp_path, 2)
    assert got["shutdown"] == SUCCESS, got
    assert got["during"] == [UNINITIALIZED, 0], got
    assert got["after"] == got["then"] == [UNINITIALIZED, 0], got


def test_two_calls_that_find_the_snapshot_replaced_reload_it_once_and_both_answer_the_new_file(tmp_path: Path) -> None:
    """The project's writer replaces the file; a call finds its snapshot stale and, about to take the reload lock,
    is overtaken by another thread's call, which finds the same and reloads first. The first call then finds the
    snapshot already replaced (core.c's reload: not current any more), reclaims what no reader names and answers
    from the new one. Both calls began after the replace, so both answer the new file (docs/nvml.md: a reader
    notices a replaced file at once), as every call after them; the process lives. (core.c:633, the overtaken
    reload's branch, never ran before.)"""
    got = run_race(tmp_path, 3)
    assert got["other"] == ONE_PROCESS, got
    assert got["during"] == ONE_PROCESS, got
    assert got["after"] == got["then"] == ONE_PROCESS, got
