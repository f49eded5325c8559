#!/usr/bin/env python3
"""Line, branch and function coverage of the NVML shim's C sources under the tests of an area (issue 16).

The mutation rounds of the "nvml C getters" area kept finding getters and branches no test called. This measures
that directly: a private copy of the tree (as tools/mutate.py makes) gets the shim built with gcov instrumentation
(``--coverage -O0``, each source compiled on its own so its counts land next to its object), stamped with the
BUILD-ID the ordinary build would have so the tests load it unchanged; the area's tests run against the copy; gcov's
JSON output is then summed per file and per function. The shipped build (fakehw/nvml/build.py) is not touched.

    .venv/bin/python tools/c-coverage.py                       # the "nvml C getters" area's test files
    .venv/bin/python tools/c-coverage.py tests/nvml/test_pynvml.py -k memory
    .venv/bin/python tools/c-coverage.py --uncovered-lines     # also every line of a called function not run

Standard library only (gcov comes with gcc).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CSRC_REL = Path("fakehw/nvml/csrc")
COVERAGE_CFLAGS = ("--coverage", "-O0", "-g")
AREA = "nvml C getters"


@dataclass
class FunctionCoverage:
    """One C function: where it starts, whether it ran, and its lines and branches."""

    file: str
    name: str
    line: int
    calls: int = 0
    lines: int = 0
    lines_run: int = 0
    branches: int = 0
    branches_taken: int = 0
    missed_lines: list[int] = field(default_factory=list)

    @property
    def exported(self) -> bool:
        """An entry point of the library (nvml.h's names), not a static helper."""
        return self.name.startswith("nvml")


@dataclass
class Totals:
    """Sums over a set of functions."""

    functions: int = 0
    functions_called: int = 0
    lines: int = 0
    lines_run: int = 0
    branches: int = 0
    branches_taken: int = 0

    def add(self, f: FunctionCoverage) -> None:
        self.functions += 1
        self.functions_called += f.calls > 0
        self.lines += f.lines
        self.lines_run += f.lines_run
        self.branches += f.branches
        self.branches_taken += f.branches_taken

    def row(self, label: str) -> str:
        return (f"{label:<14} lines {_pct(self.lines_run, self.lines)}  branches "
                f"{_pct(self.branches_taken, self.branches)}  functions {_pct(self.functions_called, self.functions)}")


def _pct(part: int, whole: int) -> str:
    return f"{part:>5} / {whole:<5} ({100.0 * part / whole if whole else 0.0:5.1f} %)"


def mutate_tool() -> Any:
    """tools/mutate.py, which names the "nvml C getters" area's test files and what a private copy leaves out."""
    spec = importlib.util.spec_from_file_location("fhw_mutate_tool", ROOT / "tools" / "mutate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def make_copy(work: Path, not_copied: Sequence[str]) -> Path:
    """A private copy of the tree as the mutation tool makes one, less the built shim (an instrumented one is
    built in its place)."""
    dest = work / "tree"
    shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(*not_copied, "_lib"))
    return dest


def _in_copy(copy: Path, code: str) -> str:
    """Run Python code with the copy's packages first on the path; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def build_instrumented(copy: Path, cc: str) -> Path:
    """Compile the copy's shim with gcov counters into the place the tests look for it; the object directory.

    The library is linked from per-source objects (the ordinary build compiles and links in one command, which
    leaves no stable place for the counts) and stamped with the uninstrumented build's BUILD-ID, so
    ``fakehw.nvml.library_dir()`` in the copy takes it as current instead of rebuilding.
    """
    info = json.loads(_in_copy(copy, (
        "import json, platform; from fakehw.nvml import build as b; "
        f"cc = {cc!r}; "
        "print(json.dumps({'id': b.fingerprint(cc), 'cflags': list(b.BASE_CFLAGS), 'ldflags': list(b.BASE_LDFLAGS), "
        "'lib': b.LIB_NAME, 'machine': platform.machine() or 'unknown', "
        "'sources': [str(p) for p in b.c_sources()], 'generated': b.GENERATED_SOURCES}))")))
    obj = copy / ".coverage-obj"
    obj.mkdir()
    _in_copy(copy, f"from pathlib import Path; from fakehw.nvml import build as b; b.generate(Path({str(obj)!r}))")
    gen = obj / "gen"
    sources = [Path(s) for s in info["sources"]] + [gen / name for name in info["generated"]]
    objects = []
    for src in sources:
        o = obj / (src.stem + ".o")
        cmd = [*shlex.split(cc), *info["cflags"], *COVERAGE_CFLAGS, f"-I{gen}", f"-I{copy / CSRC_REL}", "-c",
               str(src), "-o", str(o)]
        subprocess.run(cmd, check=True, cwd=obj)
        objects.append(str(o))
    lib_dir = copy / "fakehw" / "nvml" / "_lib" / info["machine"]
    lib_dir.mkdir(parents=True)
    subprocess.run([*shlex.split(cc), "--coverage", *objects, *info["ldflags"],
                    f"-Wl,--version-script={gen / 'exports.map'}", "-o", str(lib_dir / info["lib"])], check=True)
    (lib_dir / "libnvidia-ml.so").symlink_to(info["lib"])
    (lib_dir / "BUILD-ID").write_text(info["id"] + "\n")
    return obj


def run_tests(copy: Path, tests: Sequence[str], pytest_args: Sequence[str]) -> int:
    """The tests in the copy, against the instrumented shim; pytest's exit status."""
    env = {**os.environ, "PYTHONPATH": str(copy), "FAKEHW_STATE_DIR": str(copy / ".state")}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist",
           *pytest_args, *tests]
    return subprocess.run(cmd, cwd=copy, env=env, check=False).returncode


def gcov_functions(copy: Path, obj: Path) -> list[FunctionCoverage]:
    """Per-function coverage of the copy's csrc/*.c from the counts the test processes left in ``obj``."""
    out: list[FunctionCoverage] = []
    for src in sorted((copy / CSRC_REL).glob("*.c")):
        # Without a .gcda (no test process loaded the counters) gcov reports every line as not run.
        subprocess.run(["gcov", "--json-format", "-b", "-o", str(obj), str(src)], cwd=obj, check=True,
                       capture_output=True)
        report = obj / f"{src.stem}.gcov.json.gz"
        data = json.loads(gzip.decompress(report.read_bytes()))
        out.extend(_functions_of(data, src.name))
    return out


def _functions_of(data: dict[str, Any], name: str) -> Iterable[FunctionCoverage]:
    for f in data["files"]:
        if Path(f["file"]).name != name:
            continue  # a header's inline functions: counted in every including file, left out
        funcs = {fn["name"]: FunctionCoverage(name, fn["name"], fn["start_line"], fn["execution_count"])
                 for fn in f["functions"]}
        for line in f["lines"]:
            fc = funcs.get(line.get("function_name", ""))
            if fc is None:
                continue
            fc.lines += 1
            if line["count"] > 0:
                fc.lines_run += 1
            else:
                fc.missed_lines.append(line["line_number"])
            for b in line["branches"]:
                if b.get("throw"):
                    continue
                fc.branches += 1
                fc.branches_taken += b["count"] > 0
        yield from funcs.values()


def report(funcs: list[FunctionCoverage], uncovered_lines: bool) -> str:
    lines = ["Coverage of fakehw/nvml/csrc/*.c", ""]
    total = Totals()
    by_file: dict[str, Totals] = {}
    for f in funcs:
        total.add(f)
        by_file.setdefault(f.file, Totals()).add(f)
    for name, t in sorted(by_file.items()):
        lines.append(t.row(name))
    lines.append(total.row("all"))
    exported = Totals()
    for f in funcs:
        if f.exported:
            exported.add(f)
    lines.append(exported.row("exported"))
    never = sorted((f for f in funcs if f.exported and f.calls == 0), key=lambda f: (f.file, f.line))
    lines += ["", f"Exported functions never called ({len(never)}):"]
    lines += [f"  {f.file}:{f.line} {f.name}" for f in never]
    helpers = sorted((f for f in funcs if not f.exported and f.calls == 0), key=lambda f: (f.file, f.line))
    lines += ["", f"Static functions never called ({len(helpers)}):"]
    lines += [f"  {f.file}:{f.line} {f.name}" for f in helpers]
    partial = sorted((f for f in funcs if f.calls > 0 and f.missed_lines),
                     key=lambda f: (-len(f.missed_lines), f.file, f.line))
    lines += ["", f"Called functions with lines never run ({len(partial)}; most missed lines first):"]
    for f in partial:
        missed = f" lines {_ranges(f.missed_lines)}" if uncovered_lines else ""
        lines.append(f"  {f.file}:{f.line} {f.name}: {len(f.missed_lines)} of {f.lines} lines not run, "
                     f"{f.branches - f.branches_taken} of {f.branches} branches not taken{missed}")
    return "\n".join(lines)


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    for n in sorted(numbers):
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Line, branch and function coverage of fakehw/nvml/csrc/*.c under a set of tests (default: "
                    f"the \"{AREA}\" mutation area's test files), from a gcov-instrumented shim built in a private "
                    "copy of the tree.")
    parser.add_argument("tests", nargs="*", help="test files or node ids (default: the area's)")
    parser.add_argument("-k", dest="select", help="pytest -k expression")
    parser.add_argument("--work", type=Path, help="keep the copy here (default: a temporary directory, removed)")
    parser.add_argument("--json", type=Path, help="also write every function's figures here")
    parser.add_argument("--uncovered-lines", action="store_true", help="list the missed lines of called functions")
    parser.add_argument("--cc", default=os.environ.get("CC") or "cc", help="C compiler (default: $CC or cc)")
    args = parser.parse_args(argv)
    tool = mutate_tool()
    tests = tuple(args.tests) or tuple(tool.NVML_C_AREA.tests)
    work = args.work or Path(tempfile.mkdtemp(prefix="c-coverage-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        copy = make_copy(work, tool.NOT_COPIED)
        obj = build_instrumented(copy, args.cc)
        status = run_tests(copy, tests, ("-k", args.select) if args.select else ())
        funcs = gcov_functions(copy, obj)
        print(report(funcs, args.uncovered_lines))
        print(f"\ntests: {' '.join(tests)}{' -k ' + args.select if args.select else ''} (pytest exit {status})")
        if args.json:
            args.json.write_text(json.dumps([f.__dict__ for f in funcs], indent=1) + "\n")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return status  # the report stands either way; a failing test still shows


if __name__ == "__main__":
    sys.exit(main())
