"""Per-call time through pynvml against the fake, next to the floors measured in the same run.

Two floors: a bare ctypes call to a C function that does nothing (what any Python caller of any C library pays),
and the same pynvml wrapper with its function pointer swapped for that no-op (what pynvml itself costs). Two
ratios show the fake library's own share: pynvml against pynvml-on-the-no-op, and the getter called straight
through ctypes (same arguments) against the no-op called the same way. Prints figures; asserts nothing.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from fakehw.agent.state import derive_state
from fakehw.model import load_profile
from fakehw.nvml import library_dir
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import build_snapshot

NOOP_C = "int fhw_noop(void *a, void *b, void *c) { (void)a; (void)b; (void)c; return 0; }\n"


def per_call_ns(fn: Callable[[], Any], seconds: float = 0.5) -> float:
    """Best of five runs of ``fn`` in a tight loop, nanoseconds per call."""
    best = float("inf")
    for _ in range(5):
        n = 0
        start = time.perf_counter()
        deadline = start + seconds / 5
        while True:
            for _ in range(200):
                fn()
            n += 200
            now = time.perf_counter()
            if now >= deadline:
                break
        best = min(best, (now - start) / n * 1e9)
    return best


def noop_function(cc: str, out: Path) -> Any:
    """A C function that does nothing, called through ctypes: the floor each getter's cost is held against."""
    (out / "noop.c").write_text(NOOP_C)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", str(out / "noop.c"), "-o", str(out / "libnoop.so")], check=True)
    return ctypes.CDLL(str(out / "libnoop.so")).fhw_noop


def main() -> int:
    cc = shutil.which("cc")
    if cc is None:
        print("bench_nvml_pynvml: no C compiler (cc); skipped")
        return 0
    with tempfile.TemporaryDirectory(prefix="fhw-bench-") as tmp:
        out = Path(tmp)
        noop = noop_function(cc, out)
        system = load_profile("dgx-h100")
        node = system.nodes[0]
        snapshot = out / "nvml.snapshot"
        write_snapshot(snapshot, build_snapshot(system, node, derive_state(node, [], 1, system.seed)).to_bytes())
        os.environ["FAKEHW_NVML_SNAPSHOT"] = str(snapshot)
        os.environ.pop("FAKEHW_VISIBLE_DEVICES", None)
        fake = ctypes.CDLL(str(library_dir() / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mem = pynvml.c_nvmlMemory_t()
        bare = per_call_ns(lambda: noop(h, ctypes.byref(mem), None))
        pci, value = pynvml.nvmlPciInfo_t(), ctypes.c_uint()
        # (label, symbol, pynvml call, arguments of the same call made straight through ctypes)
        cases: list[tuple[str, str, Callable[[], Any], tuple[Any, ...]]] = [
            ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
             (h, ctypes.byref(mem))),
            ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v3", lambda: pynvml.nvmlDeviceGetPciInfo(h),
             (h, ctypes.byref(pci))),
            ("nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkState", lambda: pynvml.nvmlDeviceGetNvLinkState(h, 3),
             (h, 3, ctypes.byref(value))),
            ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperature", lambda: pynvml.nvmlDeviceGetTemperature(h, 0),
             (h, 0, ctypes.byref(value))),
        ]
        print(f"pynvml {pynvml.__name__} against the fake (dgx-h100 snapshot); floor = bare ctypes call to a no-op "
              f"C function: {bare:.0f} ns")
        print(f"{'call':28} {'fake':>9} {'pynvml->noop':>13} {'x noop-wrapper':>15} {'x bare floor':>13} "
              f"{'ctypes->fake':>13} {'x ctypes->noop':>15}")
        cache = pynvml._nvmlGetFunctionPointer_cache
        for label, symbol, call, argv in cases:
            real = per_call_ns(call)
            saved = cache[symbol]
            cache[symbol] = noop
            try:
                wrapped_noop = per_call_ns(call)
            finally:
                cache[symbol] = saved
            fn = getattr(fake, symbol)
            direct = per_call_ns(partial(fn, *argv))
            direct_noop = per_call_ns(partial(noop, *argv))
            print(f"{label:28} {real:7.0f}ns {wrapped_noop:11.0f}ns {real / wrapped_noop:14.2f}x "
                  f"{real / bare:12.2f}x {direct:11.0f}ns {direct / direct_noop:14.2f}x")
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
