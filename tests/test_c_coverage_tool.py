"""``tools/c-coverage.py`` reads gcov's JSON as gcov means it: a small C program whose run is known line by line."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "c-coverage.py"

PROGRAM = """\
int nvmlUsed(int x) {
    if (x > 0)
        return 1;
    return 2;
}
int nvmlUnused(int x) {
    return x * 2;
}
int main(void) {
    return nvmlUsed(1) - 1;
}
"""
"""nvmlUsed runs once and takes one of its two branches (line 4 never runs); nvmlUnused never runs."""


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fakehw_c_coverage_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("gcov") is None, reason="needs gcc and gcov")
def test_a_known_run_is_read_function_by_function(tmp_path: Path) -> None:
    tool = _load_tool()
    (tmp_path / "prog.c").write_text(PROGRAM)
    subprocess.run(["gcc", "--coverage", "-O0", "-c", "prog.c", "-o", "prog.o"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "--coverage", "prog.o", "-o", "prog"], cwd=tmp_path, check=True)
    subprocess.run(["./prog"], cwd=tmp_path, check=True)
    subprocess.run(["gcov", "--json-format", "-b", "-o", ".", "prog.c"], cwd=tmp_path, check=True,
                   capture_output=True)
    data = json.loads(gzip.decompress((tmp_path / "prog.gcov.json.gz").read_bytes()))
    funcs = {f.name: f for f in tool._functions_of(data, "prog.c")}
    used, unused = funcs["nvmlUsed"], funcs["nvmlUnused"]
    assert (used.calls, used.missed_lines, used.branches, used.branches_taken) == (1, [4], 2, 1)
    assert (unused.calls, unused.lines_run) == (0, 0) and unused.lines > 0
    text = tool.report(list(funcs.values()), uncovered_lines=True)
    assert "Exported functions never called (1):\n  prog.c:6 nvmlUnused" in text
    assert "prog.c:1 nvmlUsed: 1 of" in text and "lines 4" in text
