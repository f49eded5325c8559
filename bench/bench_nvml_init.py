"""nvmlInit on a GB200 NVL72 rack (18 trays x 4 GPUs), against dgx-h100 and the largest node the format holds.

The issue asks for "nvmlInit on a 72-GPU snapshot". No host presents 72 GPUs: NVIDIA's kernel driver supports
NV_MAX_DEVICES = 32 GPUs per system in every branch 535-595 (see ``fakehw.model.spec.MAX_GPUS_PER_NODE``), and
an NVL72 rack is 18 compute trays, each its own host with its own driver and NVML seeing 4 GPUs. So this times
what the rack really does: nvmlInit_v2 + nvmlShutdown on each tray's snapshot (every tray runs its own), the 18
summed (the rack's total CPU), and, as the same-run baseline, dgx-h100 (8 GPUs) and a node with the most GPUs one
host can have. A profile asking for a 72-GPU node is refused when it is loaded (the last line shows the error).

Timing is nvml_bench's ``init`` mode (bench_nvml_c.py builds it): the library reads, validates and CRC-32s the
whole file each round. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from bench_nvml_c import BenchProgram, bench_program, run, snapshot_of

from fakehw.model import ProfileError, load_profile
from fakehw.model.spec import MAX_GPUS_PER_NODE

PROFILES = Path(__file__).resolve().parents[1] / "fakehw" / "profiles"


def pcie_node(out: Path, count: int) -> Path:
    """edge-pcie's host with ``count`` L4s spread over four host bridges."""
    doc: dict[str, Any] = yaml.safe_load((PROFILES / "edge-pcie.yaml").read_text())
    doc["name"], doc["description"] = f"pcie-{count}", f"bench: one node with {count} PCIe GPUs"
    node = doc["groups"][0]["node"]
    buses = (0x10, 0x50, 0x90, 0xD0)
    node["pcie"] = {"hostBridges": [{"name": f"hb{i}", "numa": i // 2, "bus": b} for i, b in enumerate(buses)],
                    "switches": []}
    node["gpus"] = [{"name": f"gpu{k}", "sku": "l4", "bus": f"0000:{buses[k % 4] + 1 + k // 4:02x}:00.0",
                     "parent": f"hb{k % 4}"} for k in range(count)]
    node["nics"] = []
    path = out / f"pcie-{count}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass(frozen=True)
class Timing:
    """ms of nvmlInit_v2 + nvmlShutdown over the rounds on one snapshot of ``gpus`` GPUs and ``size`` bytes."""

    gpus: int
    size: int
    best: float
    median: float
    mean: float


def init_ms(prog: BenchProgram, snapshot: tuple[Path, int, int], rounds: int) -> Timing:
    path, gpus, size = snapshot
    best, median, mean = run(prog.exe, dict(prog.env, FAKEHW_NVML_SNAPSHOT=str(path)), "init", str(rounds)).split()
    return Timing(gpus, size, float(best), float(median), float(mean))


def refused_72(out: Path) -> str:
    """What loading a profile with one 72-GPU node answers (the first line of the error)."""
    try:
        load_profile(pcie_node(out, 72))
    except ProfileError as exc:
        return str(exc).splitlines()[0]
    return "accepted (no per-node limit?)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, help="directory holding the libnvidia-ml.so.1 to time")
    parser.add_argument("--rounds", type=int, default=200, help="nvmlInit rounds per snapshot")
    args = parser.parse_args()
    with bench_program(args.library) as prog:
        if prog is None:
            print("bench_nvml_init: no C compiler (cc); skipped")
            return 0
        out = prog.workdir
        print(f"nvmlInit_v2 + nvmlShutdown, {args.rounds} rounds each ({prog.library}, {os.cpu_count()} CPUs): "
              "load, validate, CRC-32 of the whole file")
        h100 = init_ms(prog, snapshot_of(load_profile("dgx-h100"), 0, out / "h100.snapshot"), args.rounds)
        rack = load_profile("gb200-nvl72")
        trays = [init_ms(prog, snapshot_of(rack, i, out / f"tray{i}.snapshot"), args.rounds)
                 for i in range(len(rack.nodes))]
        top = init_ms(prog, snapshot_of(load_profile(pcie_node(out, MAX_GPUS_PER_NODE)), 0, out / "max.snapshot"),
                      args.rounds)

        def line(label: str, t: Timing) -> None:
            print(f"  {label:<36} {t.gpus:3d} GPUs {t.size / 1024:7.0f} KiB   best {t.best:6.3f}   "
                  f"median {t.median:6.3f}   mean {t.mean:6.3f} ms   {t.median / h100.median:5.2f}x dgx-h100")

        line("dgx-h100 (baseline)", h100)
        median_tray = sorted(trays, key=lambda t: t.median)[len(trays) // 2]
        line("gb200-nvl72: one tray (median tray)", median_tray)
        print(f"  {'':<36} the {len(trays)} trays' medians: {min(t.median for t in trays):.3f}-"
              f"{max(t.median for t in trays):.3f} ms")
        line(f"gb200-nvl72: the {len(trays)} trays summed",
             Timing(sum(t.gpus for t in trays), sum(t.size for t in trays), sum(t.best for t in trays),
                    sum(t.median for t in trays), sum(t.mean for t in trays)))
        line(f"pcie-{top.gpus} (the most GPUs a host holds)", top)
        print(f"  a 72-GPU node: {refused_72(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
