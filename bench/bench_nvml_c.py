"""ns per call of hot NVML getters in C (memory info, PCI info, NVLink state, temperature), 1 and 2 threads.

Builds bench/nvml_bench.c against the shim's sources at -O2, writes a dgx-h100 snapshot and runs it. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fakehw.agent.state import derive_state
from fakehw.model import load_profile
from fakehw.nvml.build import CSRC, c_sources, generate
from fakehw.nvml.snapshot import build_snapshot, write_snapshot

HERE = Path(__file__).resolve().parent


def main() -> int:
    cc = shutil.which("cc")
    if cc is None:
        print("bench_nvml_c: no C compiler (cc); skipped")
        return 0
    iterations = sys.argv[1] if len(sys.argv) > 1 else "2000000"
    with tempfile.TemporaryDirectory(prefix="fhw-bench-") as tmp:
        out = Path(tmp)
        gen = generate(out)
        exe = out / "nvml_bench"
        subprocess.run([cc, "-std=gnu11", "-O2", "-pthread", f"-I{gen}", f"-I{CSRC}", str(HERE / "nvml_bench.c"),
                        *map(str, c_sources()), str(gen / "stubs.c"), "-o", str(exe)], check=True)
        system = load_profile("dgx-h100")
        node = system.nodes[0]
        snapshot = out / "nvml.snapshot"
        write_snapshot(snapshot, build_snapshot(system, node, derive_state(node, [], 1, system.seed)).to_bytes())
        env = dict(os.environ, FAKEHW_NVML_SNAPSHOT=str(snapshot))
        env.pop("FAKEHW_VISIBLE_DEVICES", None)
        print(f"fake NVML, C callers, {iterations} calls each (dgx-h100 snapshot, {os.cpu_count()} CPUs):")
        proc = subprocess.run([str(exe), iterations], env=env, capture_output=True, text=True, check=False)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return proc.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
