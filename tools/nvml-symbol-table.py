#!/usr/bin/env python3
"""Regenerate fakehw/nvml/nvml_symbols.txt: every nvml* link symbol and the first driver branch that has it.

Sources (facts, nothing copied but names): the real libnvidia-ml of the branches Debian ships (nm -D of
535.261.03, 550.163.01, 555.58.02, as tools/fetch-real-nvidia.sh extracts them) and the public nvml.h of each
later branch from PyPI (nvidia-nvml-dev-cu12 / nvidia-nvml-dev; the CUDA version of a header names its driver
branch, see fakehw/model/drivers.py). A symbol's branch is the oldest source that has it. Run by hand when a new
header appears, e.g.:

    tools/nvml-symbol-table.py --lib 535=.cache/nvidia-535 --lib 550=.cache/nvidia-550 --lib 555=.cache/nvidia-555 \
        --header 560=h/12.6/nvml.h ... --header 615=h/13.4/nvml.h > fakehw/nvml/nvml_symbols.txt

Standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakehw.nvml.headers import declared_symbols  # standard library only


def library_symbols(root: Path) -> set[str]:
    libs = sorted(root.glob("usr/lib/*/nvidia/current/libnvidia-ml.so.*.*"))
    if not libs:
        raise SystemExit(f"no libnvidia-ml.so.<version> under {root}")
    out = subprocess.run(["nm", "-D", "--defined-only", str(libs[0])], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("nvml")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", action="append", default=[], metavar="BRANCH=DIR")
    parser.add_argument("--header", action="append", default=[], metavar="BRANCH=nvml.h")
    args = parser.parse_args()
    sources: list[tuple[int, str, set[str]]] = []
    for item in args.lib:
        branch, path = item.split("=", 1)
        sources.append((int(branch), f"libnvidia-ml {path}", library_symbols(Path(path))))
    for item in args.header:
        branch, path = item.split("=", 1)
        sources.append((int(branch), f"nvml.h {path}", declared_symbols(Path(path).read_text())))
    sources.sort(key=lambda s: s[0])
    since: dict[str, int] = {}
    for branch, _, names in sources:
        for name in names:
            since.setdefault(name, branch)
    print("# nvml* link symbols and the first driver branch whose libnvidia-ml has them (written by")
    print("# tools/nvml-symbol-table.py; sources: the real 535/550/555 libraries' nm -D, then each later branch's")
    print("# public nvml.h). A symbol newer than a profile's branch answers NVML_ERROR_FUNCTION_NOT_FOUND, as a")
    print("# loader finds nothing in that branch's library.")
    for name in sorted(since):
        print(f"{name} {since[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
