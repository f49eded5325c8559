"""ndctl's own CXL tests (``../shared/peer-suites/ndctl-cxl``, ndctl v81, written for the kernel's cxl_test) run
unchanged against the cxl-test profile, through ``testbed exec`` with the node's live ``/sys``.

The harness supplies only what a machine running cxl_test has and a fake node cannot: ``modprobe`` and
``udevadm`` that do nothing (the "module" is the profile, loaded by ``testbed up``; a fresh cluster per script is
the ``modprobe -r; modprobe`` each script starts with), a ``journalctl`` that prints the node's kernel log (empty:
the fake kernel never warns, which ``check_dmesg`` greps for), and the ndctl v81 binaries through ``$CXL``,
``$DAXCTL`` and ``$NDCTL`` (tools/build-ndctl.sh; Debian's 76.1 predates some options the scripts use). No check
is edited or skipped: the scripts are run from ``../shared`` as they are.

A script can pass without testing anything (a loop that finds no device, a decoder it cannot find): each
script's run must show the work its checks rest on (``EVIDENCE``), else it fails here. cxl-destroy-region.sh
looks for a volatile x1 root decoder with room for a whole device's RAM; on the kernel's cxl_test the auto
region leaves cfmws0 half full, so on a real kernel it finds none and checks nothing. The harness therefore first
destroys region0 with the real ``cxl destroy-region`` (state set up for the script, the script unchanged).
cxl-xor-region.sh loads the module with ``interleave_arithmetic=1``: its cluster is the cxl-test-xor profile.

cxl-labels.sh is not run: it reads and writes each memdev's label storage area through the mailbox
(``/dev/cxl/memN`` ioctls: CXL_MEM_SEND_COMMAND with GET_LSA/SET_LSA) and ``ndctl`` over the nvdimm bridge
(``/sys/bus/nd``, ``ndbusN``, ``nmemN`` and its ND_IOCTL_*_CONFIG_* ioctls), neither of which fakehw emulates:
both libraries insist on a character device whose number matches sysfs, which FUSE cannot provide and CUSE (the
user-space character device) is not built into this machine's kernel (docs/platform.md says what it would take).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from fakehw.livefs import unavailable
from testbed.api import Testbed

ROOT = Path(__file__).resolve().parents[2]
SUITE_CANDIDATES = (ROOT.parent.parent / "shared/peer-suites/ndctl-cxl", Path("/work/shared/peer-suites/ndctl-cxl"))
"""../shared beside a worktree or /work/main, and the machine's /work/shared (a fresh clone elsewhere, as CI makes)."""
SUITE = Path(os.environ.get("FAKEHW_NDCTL_SUITE") or next((p for p in SUITE_CANDIDATES if p.is_dir()),
                                                          SUITE_CANDIDATES[-1]))
NDCTL = ROOT / ".cache/ndctl-81/bin"
NODE = "cxl-test-0"


@dataclass(frozen=True)
class Evidence:
    pattern: str
    count: int
    what: str


@dataclass(frozen=True)
class Script:
    name: str
    profile: str
    timeout: float
    evidence: tuple[Evidence, ...]
    setup: tuple[tuple[str, ...], ...] = ()


SCRIPTS = (
    Script("cxl-topology.sh", "cxl-test", 600, (
        Evidence(r"^\+ region=region0$", 1, "the auto-discovered region"),
        Evidence(r"^\+ bridges=3$", 1, "three host bridge ports below root0"),
        Evidence(r"cmd_disable_memdev: disabled 1 mem", 8, "memdevs disabled under each of 4 switches"),
        Evidence(r"cmd_disable_port: disabled 1 port", 6, "4 switch ports and 2 host bridge ports disabled"),
        Evidence(r"^\+ \(\( count == 4 \)\)$", 4, "4 memdevs disabled then enabled below each host bridge"),
        Evidence(r"cmd_disable_bus: disabled 1 bus", 1, "the bus disabled"),
    )),
    Script("cxl-region-sysfs.sh", "cxl-test", 600, (
        Evidence(r"^region\d+ added 8 targets: (decoder\d+\.\d+ ?){8}$", 1, "8 endpoint decoders attached"),
        Evidence(r"^\+ nr_switch_decoders=6$", 1, "6 host bridge and switch decoders expected"),
        Evidence(r"^\+ for i in \$\{switch_decoders\[@\]\}$", 6, "6 switch decoders checked"),
        Evidence(r"^region\d+ released 8 targets", 1, "DPA released on 8 decoders"),
    )),
    Script("cxl-create-region.sh", "cxl-test", 900, (
        Evidence(r"cmd_create_region: created 1 region", 37, "1 single-port, 6 x1 twice, 6 x 4 subregions"),
        Evidence(r"cmd_destroy_region: destroyed 1 region", 37, "every region destroyed"),
        Evidence(r"cmd_disable_region: disabled 1 region", 6, "x1 regions disabled and enabled"),
    )),
    Script("cxl-destroy-region.sh", "cxl-test", 600, (
        Evidence(r"^\+ check_destroy_ram mem\d+ decoder0\.0$", 1, "a RAM region destroyed"),
        Evidence(r"^\+ check_destroy_devdax mem\d+ decoder0\.0$", 1, "a device-DAX region destroyed"),
        Evidence(r"^reconfigured 1 device$", 1, "daxctl reconfigured the DAX device to devdax"),
        Evidence(r"cmd_destroy_region: destroyed 1 region", 2, "both regions destroyed"),
    ), setup=(("destroy-region", "-f", "-b", "cxl_test", "region0"),)),
    Script("cxl-xor-region.sh", "cxl-test-xor", 600, (
        Evidence(r"^\+ memdevs=mem\d+$", 1, "x1 memdev found"),
        Evidence(r"^\+ memdevs='mem\d+ mem\d+'$", 1, "x2 memdevs found"),
        Evidence(r"^\+ memdevs='mem\d+ mem\d+ mem\d+'$", 1, "x3 memdevs found"),
        Evidence(r"^\+ memdevs='mem\d+ mem\d+ mem\d+ mem\d+'$", 1, "x4 memdevs found"),
        Evidence(r"cmd_create_region: created 1 region", 4, "x1, x2, x4 and x3 regions created"),
    )),
    Script("cxl-qos-class.sh", "cxl-test", 600, (
        Evidence(r"^\+ num_decoders=6$", 1, "6 root decoders checked"),
        Evidence(r"^\+ num_memdevs=11$", 1, "11 memdevs checked"),
        Evidence(r"^\+ count=6$", 1, "every root decoder's qos_class seen"),
        Evidence(r"cmd_create_region: created 1 region", 1, "a region created with -Q"),
    )),
)

RESULTS_ENV = "FAKEHW_PEER_RESULTS"
"""The file (named by the controlling pytest process, tests/peer/conftest.py) every worker appends a line of JSON
to per script run: (script, result, seconds, evidence) for the summary table printed after the run."""


def needs() -> str | None:
    """Why the peer suite cannot run on this host, or None."""
    if os.geteuid() != 0 or unavailable() is not None:
        return f"a live /sys needs root and FUSE: {unavailable() or 'not root'}"
    if not (NDCTL / "cxl").exists():
        return f"ndctl v81 is not built at {NDCTL} (tools/install-system-deps.sh runs tools/build-ndctl.sh)"
    if not SUITE.is_dir():
        return f"ndctl's CXL tests are not at {SUITE}"
    return None


def script(name: str) -> Script:
    return next(s for s in SCRIPTS if s.name == name)


@dataclass
class Run:
    output: str
    returncode: int
    seconds: float
    missing: list[str] = field(default_factory=list)


def _run(script: Script, tb: Testbed, shims: Path) -> Run:
    """Run one script in the node view of ``tb``'s node and count the evidence its output shows."""
    for argv in script.setup:
        done = tb.exec(NODE, [str(NDCTL / "cxl"), *argv], timeout=120)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
    env = {"PATH": f"{shims}:{os.environ.get('PATH', '/usr/bin:/bin')}", "CXL": str(NDCTL / "cxl"),
           "DAXCTL": str(NDCTL / "daxctl"), "NDCTL": str(NDCTL / "ndctl")}
    start = time.monotonic()
    done = tb.exec(NODE, ["bash", str(SUITE / script.name)], env=env, timeout=script.timeout)
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    run = Run(output, done.returncode, time.monotonic() - start)
    lines = output.splitlines()
    for ev in script.evidence:
        seen = sum(1 for line in lines if re.search(ev.pattern, line))
        if seen < ev.count:
            run.missing.append(f"{ev.what}: {seen} of {ev.count} ({ev.pattern!r})")
    return run


def make_shims(d: Path) -> Path:
    """``modprobe``/``udevadm`` that do nothing and a ``journalctl`` with the node's (empty) kernel log, in ``d``."""
    for name, body in (("modprobe", "exit 0"), ("udevadm", "exit 0"),
                       ("journalctl", 'echo "-- No entries --"')):
        (d / name).write_text(f"#!/bin/sh\n# fakehw: the node has no kernel modules or kernel log of its own\n{body}\n")
        (d / name).chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return d


def run_and_judge(name: str, state_dir: Path, shims: Path) -> None:
    """Bring up a fresh cluster of the script's profile (the script's ``modprobe -r; modprobe``), run the script
    unchanged, record its row for the table and fail unless it exited 0 with all its evidence."""
    s = script(name)
    tb = Testbed.up(s.profile, name=f"ndctl-{SCRIPTS.index(s)}", state_dir=state_dir)
    try:
        run = _run(s, tb, shims)
    finally:
        tb.down()
    evidence = "all" if not run.missing else f"missing: {'; '.join(run.missing)}"
    result = "PASS" if run.returncode == 0 and not run.missing else f"FAIL ({run.returncode})"
    _record(s.name, result, run.seconds, evidence)
    tail = "\n".join(run.output.splitlines()[-40:])
    assert run.returncode == 0, f"{s.name} exited {run.returncode}:\n{tail}"
    assert not run.missing, f"{s.name} passed without doing what its checks rest on: {run.missing}\n{tail}"


def _record(name: str, result: str, seconds: float, evidence: str) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps([name, result, round(seconds, 1), evidence]) + "\n")
