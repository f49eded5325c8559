"""The shipped fake libnvidia-ml.so.1 from C: ns per getter against a no-op floor, and nvmlInit time by snapshot size.

Links bench/nvml_bench.c against the library the package ships (``python -m fakehw.nvml libdir``, or
``--library DIR`` to time another build, e.g. one from an older commit) and against a no-op function in a
separate shared object, so both go through the same PLT call into another object: the ratio is what the fake
adds. nvmlInit_v2 + nvmlShutdown is timed on a dgx-h100 node (8 GPUs), a GB200 NVL72 tray (4) and a node with
64 PCIe GPUs (the snapshot format's maximum): loading validates and checksums the whole file. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from fakehw.agent.state import derive_state
from fakehw.model import load_profile
from fakehw.model.system import System
from fakehw.nvml import library_dir
from fakehw.nvml.build import CSRC
from fakehw.nvml.snapshot import build_snapshot, write_snapshot

HERE = Path(__file__).resolve().parent
PROFILES = Path(__file__).resolve().parents[1] / "fakehw" / "profiles"
NOOP_C = "int fhw_noop(void *a, void *b, unsigned int c) { (void)a; (void)b; (void)c; return 0; }\n"


def pcie_64(out: Path) -> Path:
    """edge-pcie's host with 64 L4s on four host bridges: the most GPUs one snapshot holds."""
    doc: dict[str, Any] = yaml.safe_load((PROFILES / "edge-pcie.yaml").read_text())
    doc["name"], doc["description"] = "pcie-64", "bench: one node with 64 PCIe GPUs"
    node = doc["groups"][0]["node"]
    buses = (0x10, 0x50, 0x90, 0xD0)
    node["pcie"] = {"hostBridges": [{"name": f"hb{i}", "numa": i // 2, "bus": b} for i, b in enumerate(buses)],
                    "switches": []}
    node["gpus"] = [{"name": f"gpu{k}", "sku": "l4", "bus": f"0000:{buses[k // 16] + 1 + k % 16:02x}:00.0",
                     "parent": f"hb{k // 16}"} for k in range(64)]
    node["nics"] = []
    path = out / "pcie-64.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, help="directory holding the libnvidia-ml.so.1 to time")
    parser.add_argument("--iterations", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=200, help="nvmlInit rounds per snapshot")
    args = parser.parse_args()
    cc = shutil.which("cc")
    if cc is None:
        print("bench_nvml_c: no C compiler (cc); skipped")
        return 0
    lib = (args.library or library_dir()).resolve()
    with tempfile.TemporaryDirectory(prefix="fhw-bench-") as tmp:
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
        h100 = load_profile("dgx-h100")
        snaps = [("dgx-h100", *snapshot_of(h100, 0, out / "h100.snapshot")),
                 ("gb200-nvl72 tray", *snapshot_of(load_profile("gb200-nvl72"), 0, out / "gb200.snapshot")),
                 ("pcie-64", *snapshot_of(load_profile(pcie_64(out)), 0, out / "pcie64.snapshot"))]
        env["FAKEHW_NVML_SNAPSHOT"] = str(snaps[0][1])
        print(f"fake NVML from C: {lib / 'libnvidia-ml.so.1'}, dgx-h100 GPU 0, {args.iterations} calls, best of 3 "
              f"({os.cpu_count()} CPUs); floor = the same call shape into a no-op in another shared object")
        sys.stdout.write(run(exe, env, "getters", str(args.iterations)))
        print(f"nvmlInit_v2 + nvmlShutdown, {args.rounds} rounds (load, validate, CRC-32 of the whole file):")
        for label, path, gpus, size in snaps:
            env["FAKEHW_NVML_SNAPSHOT"] = str(path)
            best, mean = run(exe, env, "init", str(args.rounds)).split()
            print(f"  {label:<18} {gpus:3d} GPUs {size / 1024:8.0f} KiB   best {float(best):7.3f} ms   "
                  f"mean {float(mean):7.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
