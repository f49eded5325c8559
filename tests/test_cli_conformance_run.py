"""``conformance run`` takes bad components as bad input: exit 2, one line naming the target and what is wrong,
no traceback, and nothing run or written (docs/certification.md promises it). Also ``--version`` on every CLI.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fakehw import __version__
from tests.scratch import cluster_scratch

BIN = Path(sys.executable).parent
SCRATCH = cluster_scratch()
"""The runs' clusters on tmpfs where it has room and lets device nodes open, as the device plugin suite's own runs
(tests/conformance/test_device_plugin_suite.py): a node is some 28,000 files, at 30-400 us of kernel CPU each on
this machine's ext4 (docs/testbed.md)."""


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released without listening)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "out"
    return subprocess.run([str(BIN / "conformance"), "run", *args, "--out", str(out)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, **SCRATCH.env})


def _not_executable(tmp_path: Path) -> str:
    path = tmp_path / "plugin.sh"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return str(path)


CASES = {
    "plugin command that does not exist": (["--target", "device-plugin=cmd:no-such-plugin --flag"],
                                           "no command 'no-such-plugin' on this machine's PATH"),
    "bare word taken for a command": (["--target", "device-plugin=bogus"], "no command 'bogus'"),
    "plugin path that does not exist": (["--target", "device-plugin=cmd:/no/such/plugin"],
                                        "no such program /no/such/plugin"),
    "plugin file not executable": (["--target", "device-plugin=cmd:{not_executable}"], "is not executable"),
    "--plugin-cmd that does not exist": (["--target", "device-plugin", "--plugin-cmd", "no-such-plugin"],
                                         "no command 'no-such-plugin'"),
    "unbalanced quotes": (["--target", "device-plugin=cmd:python -c 'x"], "not a command line"),
    "image component on the local backend": (["--target", "device-plugin=image:registry/plugin:1"],
                                             "image: components run on the docker backend (--backend docker)"),
    "image component without an image": (["--target", "device-plugin=image:", "--backend", "docker"],
                                         "no image given (image:REPOSITORY[:TAG]"),
    "image component that is no reference": (["--target", "device-plugin=image:My Plugin!", "--backend", "docker"],
                                             "'My Plugin!' is not an image reference"),
    "extender url with nothing listening": (["--target", "extender=url:http://127.0.0.1:{port}"],
                                            "nothing answers at 127.0.0.1:{port}"),
    "extender url without a port": (["--target", "extender=url:http://localhost"], "url: needs http://host:port"),
    "extender command that does not exist": (["--target", "extender=cmd:no-such-extender --port {{port}}"],
                                             "no command 'no-such-extender'"),
    "extender mutant that does not exist": (["--target", "extender=reference:no-such-mutant"],
                                            "no mutant 'no-such-mutant'"),
    "extender image": (["--target", "extender=image:registry/extender:1"], "image: components are not run"),
    "fabric file that does not exist": (["--target", "fabric=/no/such/fabric.yaml"],
                                        "no fabric config '/no/such/fabric.yaml': no such file"),
    "fabric name that does not exist": (["--target", "fabric=no-such-fabric"],
                                        "no fabric config 'no-such-fabric': not a built-in"),
    "slurm prefix that does not exist": (["--target", "slurm=prefix:/no/such/slurm"],
                                         "no such directory /no/such/slurm"),
    "slurm spec of another form": (["--target", "slurm=/opt/slurm"], "use system or prefix:DIR"),
    "ray python that does not exist": (["--target", "ray=python:/no/such/python"], "no executable /no/such/python"),
    "unknown target": (["--target", "gpu-operator=reference"], "no suite for target 'gpu-operator'"),
    "profile file that does not exist": (["--target", "device-plugin=reference", "--profile", "/no/such.yaml"],
                                         "no profile '/no/such.yaml': no such file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_component_is_exit_2_in_one_line_before_anything_runs(case: str, tmp_path: Path) -> None:
    args, expected = CASES[case]
    port = _closed_port()
    fill = {"port": str(port), "not_executable": _not_executable(tmp_path)}
    args = [a.format(**fill) for a in args]
    proc = _run(args, tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("conformance: error: ")
    assert expected.format(**fill) in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


def test_a_component_that_exists_passes_the_checks(tmp_path: Path) -> None:
    """The checks do not refuse what works: an extender URL where something listens goes on to the suite (here
    with -k matching nothing, so the suite starts and selects no check)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        proc = _run(["--target", f"extender=url:http://127.0.0.1:{port}", "-k", "no_such_check_name"], tmp_path)
    assert "nothing answers" not in proc.stderr
    assert (tmp_path / "out").exists(), proc.stderr


@pytest.mark.parametrize("prog", ["fakehw", "testbed", "conformance"])
def test_version(prog: str) -> None:
    proc = subprocess.run([str(BIN / prog), "--version"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"{prog} {__version__}"


def test_a_second_run_leaves_only_its_own_runs_and_prints_each_table_once(tmp_path: Path) -> None:
    """Runs into the same --out: the earlier run's directories go (the new index.json lists all there is), a
    directory of the user's stays, and the per-requirement table is printed once per run (not by pytest too)."""
    out = tmp_path / "out"
    quick = ["-k", "test_registers_with_v1beta1"]
    first = _run(["--target", "device-plugin=reference", "--profile", "dgx-h100", "--profile", "edge-pcie", *quick],
                 tmp_path)
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"device-plugin-dgx-h100-local",
                                                             "device-plugin-edge-pcie-local"}, first.stderr
    assert first.stdout.count("DP-REG-001") == 2, first.stdout  # one table per run
    assert "results per requirement" not in first.stdout
    (out / "notes").mkdir()
    (out / "notes" / "mine.txt").write_text("keep")
    second = _run(["--target", "device-plugin=reference", "--profile", "edge-pcie", *quick], tmp_path)
    assert f"removed {out / 'device-plugin-dgx-h100-local'}" in second.stderr
    index = json.loads((out / "index.json").read_text())
    assert [Path(r["dir"]) for r in index["runs"]] == [out]  # one run: its files are in --out itself
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"notes"}
    assert (out / "results.json").is_file() and not (out / "index.html").exists()


def test_the_console_says_why_a_check_was_skipped() -> None:
    """A SKIPPED line is followed by the reason (e.g. the program the check needs), as failures are."""
    from conformance.cli_run import summarize

    nodeid = "conformance/suites/fabric/test_fabric.py::test_reach"
    doc = {"requirements": {"FAB-DYN-REACH-001": {"status": "skipped", "title": "reach", "tests": [nodeid]}},
           "tests": [{"nodeid": nodeid, "message": "nft is not installed (tools/install-system-deps.sh --run)"}],
           "complete": True}
    lines, ok = summarize(doc)
    at = next(i for i, line in enumerate(lines) if line.startswith("SKIPPED") and "FAB-DYN-REACH-001" in line)
    assert lines[at + 1].strip() == "nft is not installed (tools/install-system-deps.sh --run)"
    assert not ok
