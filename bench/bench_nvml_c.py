"""The shipped fake libnvidia-ml.so.1 from C: ns per getter against a no-op floor.

Links bench/nvml_bench.c against the library the package ships (``python -m fakehw.nvml libdir``, or
``--library DIR`` to time another build, e.g. one from an older commit) and against a no-op function in a
separate shared object, so both go through the same PLT call into another object: the ratio is what the fake
adds. nvmlInit by snapshot size (a GB200 NVL72 rack's trays, the format's largest node) is bench_nvml_init.py,
which builds the same program with :func:`bench_program`. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fakehw.agent.state import derive_state
from fakehw.model import load_profile
from fakehw.model.system import System
from fakehw.nvml import library_dir
from fakehw.nvml.build import CSRC
from fakehw.nvml.snapfile import write_snapshot
from fakehw.nvml.snapshot import build_snapshot

HERE = Path(__file__).resolve().parent
NOOP_C = "int fhw_noop(void *a, void *b, unsigned int c) { (void)a; (void)b; (void)c; return 0; }\n"


def snapshot_of(system: System, node_index: int, path: Path) -> tuple[Path, int, int]:
    node = system.nodes[node_index]
    data = build_snapshot(system, node, derive_state(node, [], 1, system.seed)).to_bytes()
    write_snapshot(path, data)
    return path, len(node.gpus), len(data)


def run(exe: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)
    return proc.stdout


@dataclass(frozen=True)
class BenchProgram:
    """nvml_bench built against one libnvidia-ml.so.1, the directory it lives in and the environment it runs in."""

    exe: Path
    workdir: Path
    library: Path
    env: dict[str, str]


@contextmanager
def bench_program(library: Path | None) -> Iterator[BenchProgram | None]:
    """nvml_bench linked against ``library``'s libnvidia-ml.so.1 (default: the shipped one) and a no-op .so, in a
    temporary directory; None without a C compiler. It runs with every GPU visible and finds the library through
    its rpath only."""
    lib = (library or library_dir()).resolve()
    cc = shutil.which("cc")
    with tempfile.TemporaryDirectory(prefix="fhw-bench-") as tmp:
        if cc is None:
            yield None
            return
        out = Path(tmp)
        (out / "noop.c").write_text(NOOP_C)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", str(out / "noop.c"), "-o", str(out / "libfhwnoop.so")],
                       check=True)
        exe = out / "nvml_bench"
        subprocess.run([cc, "-std=gnu11", "-O2", "-pthread", f"-I{CSRC}", str(HERE / "nvml_bench.c"),
                        f"-L{lib}", "-l:libnvidia-ml.so.1", f"-L{out}", "-lfhwnoop",
                        f"-Wl,-rpath,{lib}:{out}", "-o", str(exe)], check=True)
        env = dict(os.environ)
        env.pop("FAKEHW_VISIBLE_DEVICES", None)
        env.pop("LD_LIBRARY_PATH", None)
        yield BenchProgram(exe, out, lib / "libnvidia-ml.so.1", env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, help="directory holding the libnvidia-ml.so.1 to time")
    parser.add_argument("--iterations", type=int, default=2_000_000)
    args = parser.parse_args()
    with bench_program(args.library) as prog:
        if prog is None:
            print("bench_nvml_c: no C compiler (cc); skipped")
            return 0
        env = dict(prog.env, FAKEHW_NVML_SNAPSHOT=str(snapshot_of(load_profile("dgx-h100"), 0,
                                                                  prog.workdir / "h100.snapshot")[0]))
        print(f"fake NVML from C: {prog.library}, dgx-h100 GPU 0, {args.iterations} calls, best of 3 "
              f"({os.cpu_count()} CPUs); floor = the same call shape into a no-op in another shared object")
        sys.stdout.write(run(prog.exe, env, "getters", str(args.iterations)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
