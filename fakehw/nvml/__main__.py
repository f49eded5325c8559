"""``python -m fakehw.nvml``: build the shim, show where it is, dump a snapshot, run the real nvidia-smi on it.

    python -m fakehw.nvml build [--cc riscv64-linux-gnu-gcc --out DIR]
    python -m fakehw.nvml libdir
    python -m fakehw.nvml dump [SNAPSHOT]            (default: $FAKEHW_NVML_SNAPSHOT)
    python -m fakehw.nvml smi [--snapshot S] -- -q   (the real nvidia-smi 535 against the fake)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from fakehw.nvml import DEFAULT_SNAPSHOT, SNAPSHOT_ENV, library_dir
from fakehw.nvml.build import BuildError
from fakehw.nvml.build import main as build_main


def _snapshot_arg(value: str | None) -> Path:
    return Path(value or os.environ.get(SNAPSHOT_ENV) or DEFAULT_SNAPSHOT)


def _dump(path: Path) -> int:
    from fakehw.nvml.snapshot import SnapshotError, read_snapshot

    try:
        snap = read_snapshot(path)
    except SnapshotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    h = snap.header
    out = {
        "path": str(path),
        "format_version": h.format_version,
        "generation": h.generation,
        "node": h.node_name,
        "profile": h.profile,
        "driver_version": h.driver_version,
        "gpus": [{"index": g.index, "name": g.model_name, "uuid": g.uuid, "bus_id": g.bus_id, "lost": bool(g.lost),
                  "temperature": g.temperature, "nvlinks_up": sum(k.up for k in g.links if k.present)}
                 for g in snap.gpus],
        "mig_devices": [m.uuid for m in snap.migs],
        "nics": [n.name for n in snap.nics],
        "events": [dataclasses.asdict(e) for e in snap.events],
    }
    print(json.dumps(out, indent=2))
    return 0


def _smi(snapshot: Path, args: Sequence[str]) -> int:
    from fakehw.nvml.smi import SmiUnavailable, run_nvidia_smi
    from fakehw.nvml.snapshot import SnapshotError

    try:
        proc = run_nvidia_smi(list(args), snapshot)
    except (SmiUnavailable, BuildError, SnapshotError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["build"]:
        return build_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m fakehw.nvml", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the shim (see --help of the subcommand)")
    sub.add_parser("libdir", help="print the directory holding libnvidia-ml.so.1 (building it if needed)")
    dump = sub.add_parser("dump", help="summarise a snapshot as JSON")
    dump.add_argument("snapshot", nargs="?")
    smi = sub.add_parser("smi", help="run the real nvidia-smi against the fake library")
    smi.add_argument("--snapshot")
    smi.add_argument("args", nargs=argparse.REMAINDER, help="nvidia-smi arguments (after --)")
    ns = parser.parse_args(argv)
    if ns.command == "libdir":
        try:
            print(library_dir())
        except BuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    if ns.command == "dump":
        return _dump(_snapshot_arg(ns.snapshot))
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    return _smi(_snapshot_arg(ns.snapshot), args)


if __name__ == "__main__":
    sys.exit(main())
