"""MIG and platform-info calls of the fake NVML: per-call time of the getters against a bare ctypes no-op floor
measured in the same run, and the time of a change (create a GPU instance and its compute instance, destroy both)
through the node agent. Prints figures; asserts nothing.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_nvml_pynvml import noop_function, per_call_ns

from fakehw.agent.main import run_agent
from fakehw.agent.state import derive_state
from fakehw.model import load_profile
from fakehw.nvml import library_dir
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import build_snapshot


def _getters(lib: ctypes.CDLL) -> list[tuple[str, Callable[[Callable[..., Any]], Any]]]:
    """(symbol, call(f)): ``call`` passes the getter's real arguments to ``f`` (the getter, or the no-op floor)."""
    h = ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(7, ctypes.byref(h))  # dgx-a100 gpu7: MIG on, two 3g.40gb
    info = (ctypes.c_ubyte * 256)()
    ctypes.c_uint.from_buffer(info).value = 152 | 2 << 24  # nvmlGpuInstanceProfileInfo_v2
    mig, gi, count = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint()
    lib.nvmlDeviceGetGpuInstanceById(h, 1, ctypes.byref(gi))
    gi_info = (ctypes.c_ubyte * 64)()
    count_ref, mig_ref = ctypes.byref(count), ctypes.byref(mig)
    return [
        ("nvmlDeviceGetGpuInstanceProfileInfoV", lambda f: f(h, 2, info)),
        ("nvmlDeviceGetGpuInstanceRemainingCapacity", lambda f: f(h, 9, count_ref)),
        ("nvmlDeviceGetMigDeviceHandleByIndex", lambda f: f(h, 1, mig_ref)),
        ("nvmlGpuInstanceGetInfo", lambda f: f(gi, gi_info)),
    ]


def _interleaved(real: Callable[[], Any], floor: Callable[[], Any], rounds: int = 7) -> tuple[float, float]:
    """Best per-call ns of each, measured in alternation so load on this machine hits both alike."""
    best_real = best_floor = float("inf")
    for _ in range(rounds):
        best_real = min(best_real, per_call_ns(real, 0.1))
        best_floor = min(best_floor, per_call_ns(floor, 0.1))
    return best_real, best_floor


def _change_ms(lib: ctypes.CDLL, cycles: int) -> float:
    h, gi, ci = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    status = ctypes.c_int()
    assert lib.nvmlDeviceSetMigMode(h, 1, ctypes.byref(status)) == 0
    start = time.perf_counter()
    for _ in range(cycles):
        assert lib.nvmlDeviceCreateGpuInstance(h, 19, ctypes.byref(gi)) == 0
        assert lib.nvmlGpuInstanceCreateComputeInstance(gi, 0, ctypes.byref(ci)) == 0
        assert lib.nvmlComputeInstanceDestroy(ci) == 0
        assert lib.nvmlGpuInstanceDestroy(gi) == 0
    return (time.perf_counter() - start) / cycles * 1e3


def main() -> int:
    cc = shutil.which("cc")
    if cc is None:
        print("bench_nvml_mig: no C compiler (cc); skipped")
        return 0
    with tempfile.TemporaryDirectory(prefix="fhw-bench-") as tmp:
        out = Path(tmp)
        noop = noop_function(cc, out)
        lib = ctypes.CDLL(str(library_dir() / "libnvidia-ml.so.1"))
        system = load_profile("dgx-a100")
        node = system.nodes[0]
        snap = out / "nvml.snapshot"
        write_snapshot(snap, build_snapshot(system, node, derive_state(node, [], 1, system.seed)).to_bytes())
        os.environ["FAKEHW_NVML_SNAPSHOT"] = str(snap)
        os.environ.pop("FAKEHW_VISIBLE_DEVICES", None)
        lib.nvmlInit_v2()
        print("MIG getters of the fake (ctypes, dgx-a100 gpu7) against a no-op C function called with the same "
              "arguments in the same run")
        for symbol, call in _getters(lib):
            fn = getattr(lib, symbol)
            ns, floor = _interleaved(lambda fn=fn, call=call: call(fn), lambda call=call: call(noop))
            print(f"  {symbol:44} {ns:6.0f} ns  floor {floor:5.0f} ns  {ns / floor:5.2f}x")
        lib.nvmlShutdown()

        ready, stop = threading.Event(), threading.Event()
        state = out / "agent"
        thread = threading.Thread(target=run_agent, daemon=True,
                                  kwargs={"system": system, "state_dir": state, "ready": ready, "stop": stop})
        thread.start()
        ready.wait(60)
        os.environ["FAKEHW_NVML_SNAPSHOT"] = str(state / "nodes" / node.name / "nvml.snapshot")
        os.environ["FAKEHW_AGENT_SOCKET"] = str(state / "agent.sock")
        lib.nvmlInit_v2()
        cycles = 20
        ms = _change_ms(lib, cycles)
        lib.nvmlShutdown()
        stop.set()
        thread.join(20)
        print(f"create GPU instance + compute instance, destroy both, through the agent: {ms:.1f} ms per cycle "
              f"({cycles} cycles; each of the 4 changes journals, re-renders the node and waits for its generation)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
