"""The README's quick start and tour, run literally on a fresh clone, as a newcomer would: ``make run`` alone, then
every ``$`` line of the tour in order, each checked against what the README says it does.

The clone is of this checkout's HEAD (what CI tests on its own fresh clone; uncommitted edits are not in it).
pip's cache makes the install quick after the first time; the certification run is most of the time.

Clusters go where the rest of the suite puts them: ``$FAKEHW_STATE_DIR`` (the tour's) and ``$FAKEHW_SCRATCH_DIR``
(the certification's), both documented in docs/testbed.md, on tmpfs when it has room and lets device nodes open
(:func:`tests.scratch.cluster_scratch_base`). A node is rendered on its first ``testbed exec``, a gb200 tray some
78,000 files: on this machine's ext4 that one command took 15-31 s. The clone itself (with its venv, hundreds of
MB) stays on ``/tmp``, as a newcomer's would be on disk.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.scratch import cluster_scratch_base

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

pytestmark = pytest.mark.slow


def _block(text: str, heading: str) -> list[str]:
    """The lines of the first code block after ``heading``."""
    rest = text[text.index(heading):]
    start = rest.index("```\n") + 4
    return rest[start:rest.index("```", start)].strip().splitlines()


def _command(line: str) -> str:
    """A README line without its prompt and its trailing ``  # comment``."""
    return re.sub(r"\s{2,}#.*$", "", line.removeprefix("$ ")).strip()


def quick_start() -> list[str]:
    return [_command(line) for line in _block(README.read_text(), "## Quick start")]


def tour() -> list[str]:
    return [_command(line) for line in _block(README.read_text(), "## A tour") if line.startswith("$ ")]


def _gpu_lines(out: str) -> bool:
    lines = out.strip().splitlines()
    return len(lines) == 8 and all(line.startswith(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-")
                                   for i, line in enumerate(lines))


# What each tour command must show, in order (the README's comment on its line says the same in words).
EXPECT: list[tuple[str, Callable[[str], bool]]] = [
    (".venv/bin/fakehw profiles", lambda out: all(p in out for p in ("dgx-h100", "gb200-nvl72", "mixed-arch"))),
    (".venv/bin/fakehw topo dgx-h100", lambda out: "GPU0" in out and "NV18" in out),
    (".venv/bin/fakehw validate fakehw/profiles/gb200-nvl72.yaml", lambda out: "not valid" not in out),
    (".venv/bin/testbed up --profile gb200-nvl72", lambda out: "cluster default is up: 18 node(s)" in out),
    (".venv/bin/testbed exec gb200-tray-3 -- python -c", lambda out: out.strip() == "4"),
    (".venv/bin/testbed inject gb200-tray-3 xid gpu2 code=79", lambda out: "xid on gb200-tray-3/gpu2 code=79" in out),
    (".venv/bin/testbed status", lambda out: "gpu2: fallen off the bus (Xid 79)" in out),
    (".venv/bin/testbed down", lambda out: "cluster default is down" in out),
    (".venv/bin/testbed up --driver 535.261.03", lambda out: "cluster default is up: 1 node(s)" in out),
    (".venv/bin/testbed exec dgx-h100-0 -- nvidia-smi -L", _gpu_lines),
    (".venv/bin/testbed down", lambda out: "cluster default is down" in out),
]


def test_the_readme_lists_what_this_test_checks() -> None:
    """Every tour line has an expectation here, and every expectation a tour line (the two stay in step)."""
    commands = tour()
    assert len(commands) == len(EXPECT)
    for command, (prefix, _) in zip(commands, EXPECT, strict=True):
        assert command.startswith(prefix), (command, prefix)
    assert quick_start()[0] == "make run"


@pytest.fixture(scope="module")
def clone() -> Iterator[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    if os.geteuid() != 0:
        pytest.skip("the tour's nvidia-smi comes from Debian non-free, which make run fetches as root")
    path = Path(tempfile.mkdtemp(prefix="fhw-tour-", dir="/tmp"))
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(path / "fakehw")], check=True, timeout=300)
        yield path / "fakehw"
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sh(command: str, cwd: Path, state: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    # As in a newcomer's shell: no venv, no FAKEHW_ settings but where clusters go, not inside another make (make
    # test runs this test).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VIRTUAL_ENV", "PYTHON", "FAKEHW_", "MAKE", "MFLAGS"))}
    env["FAKEHW_STATE_DIR"] = str(state)
    if (scratch := cluster_scratch_base()) is not None:
        env["FAKEHW_SCRATCH_DIR"] = scratch
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if ".venv" not in p)  # no venv active
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_quick_start_then_the_tour_on_a_fresh_clone(clone: Path) -> None:
    state = Path(tempfile.mkdtemp(prefix="fhw-tr-", dir=cluster_scratch_base() or "/tmp"))
    try:
        run = _sh(quick_start()[0], clone, state, timeout=1800)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert run.stdout.rstrip().endswith("verdict: CERTIFIED")
        html = clone / "out" / "certification" / "index.html"  # the path the README names
        assert f"HTML report: {html}" in run.stdout and html.is_file()
        index = json.loads((html.parent / "index.json").read_text())
        assert [(r["target"], r["profile"], r["certified"]) for r in index["runs"]] == [
            ("device-plugin", "dgx-h100", True), ("extender", "dgx-h100", True)]
        for command, (_, check) in zip(tour(), EXPECT, strict=True):
            proc = _sh(command, clone, state, timeout=600)
            assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
            assert check(proc.stdout), (command, proc.stdout[-2000:])
    finally:
        _sh(".venv/bin/testbed down --all", clone, state, timeout=300)
        shutil.rmtree(state, ignore_errors=True)
