"""Slurm: configuration rendered from the model (units), and the Slurm suite run against Debian's real slurm-wlm.

- gres.conf/slurm.conf/TaskProlog follow the model (types, device files, Cores, Links, drained GPUs);
- the suite passes on dgx-h100 (srun --gres=gpu:h100:4), edge-pcie (gpu:l4:4, PCIe only) and a profile of
  NVLink-bridged pairs (where only Links= makes Slurm pick bridged GPUs), and its NVLink check fails when Links=
  is left out (the check has teeth).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fakehw.model import load_profile
from testbed.api import Testbed
from testbed.cluster import scratch_dir
from testbed.slurm.cluster import Binaries, SlurmCluster, SlurmError, parse_record
from testbed.slurm.render import ClusterLayout, NodeLayout, gpu_type, gres_conf, slurm_conf, task_prolog
from tests.scratch import cluster_scratch

DATA = Path(__file__).resolve().parent / "data"
SUITE = Path(__file__).resolve().parents[2] / "conformance" / "suites" / "slurm"
PAIRS = str(DATA / "nvlink-pairs.yaml")
SCRATCH = cluster_scratch()
"""The clusters' fake roots on tmpfs where it has room: slurmd runs on the host, no node view hides it (see
:func:`testbed.cluster.scratch_dir`); on a busy ext4 disk rendering them was most of this file's time."""


def layout(profile: str, nodes: int | None = None, drained: dict[str, frozenset[int]] | None = None) -> Any:
    system = load_profile(profile, nodes=nodes)
    root = Path("/tmp/slurm-x")
    lay = ClusterLayout("t", root, 6817, root / "munge.sock",
                        tuple(NodeLayout(n.name, 7000 + i, root / n.name / "dev") for i, n in enumerate(system.nodes)),
                        root / "prolog", drained or {})
    return system, lay


def test_gres_conf_from_the_model() -> None:
    system, lay = layout("dgx-h100")
    lines = [ln for ln in gres_conf(system, lay).splitlines() if not ln.startswith("#")]
    assert lines[0] == ("NodeName=dgx-h100-0 Name=gpu Type=h100 File=/tmp/slurm-x/dgx-h100-0/dev/nvidia0 "
                        "Cores=0-55 Links=-1,18,18,18,18,18,18,18")
    assert lines[7].endswith("File=/tmp/slurm-x/dgx-h100-0/dev/nvidia7 Cores=56-111 Links=18,18,18,18,18,18,18,-1")
    conf = slurm_conf(system, lay)
    assert "NodeName=dgx-h100-0 NodeHostname=localhost NodeAddr=127.0.0.1 Port=7000 CPUs=224 Boards=1 Sockets=2 " \
           "CoresPerSocket=56 ThreadsPerCore=2 RealMemory=2097152 Gres=gpu:h100:8" in conf
    assert "GresTypes=gpu" in conf and "TaskProlog=/tmp/slurm-x/prolog" in conf


def test_pcie_only_gpus_have_no_links_and_gb200_types() -> None:
    system, lay = layout("edge-pcie")
    assert "Links=" not in gres_conf(system, lay)
    assert {gpu_type(g) for g in system.nodes[0].gpus} == {"l4"}
    system, lay = layout("gb200-nvl72")
    text = gres_conf(system, lay)
    assert text.count("Type=gb200") == 72 and "Cores=0-71 Links=-1,18,18,18" in text


def test_drained_gpus_leave_gres_and_the_count() -> None:
    system, lay = layout("dgx-h100", drained={"dgx-h100-0": frozenset({3})})
    text = gres_conf(system, lay)
    assert "nvidia3" not in text and text.count("Name=gpu") == 7
    assert "Links=-1,18,18,18,18,18,18 " not in text and "Links=-1,18,18,18,18,18,18\n" in text
    assert "Gres=gpu:h100:7" in slurm_conf(system, lay)
    prolog = task_prolog(system, lay, {"dgx-h100-0": {"FAKEHW_NODE": "dgx-h100-0"}})
    assert 'minors="0 1 2 4 5 6 7"' in prolog and "echo 'export FAKEHW_NODE=dgx-h100-0'" in prolog


def test_task_prolog_maps_slurm_indices_to_minors(tmp_path: Path) -> None:
    system, lay = layout("dgx-h100", drained={"dgx-h100-0": frozenset({0, 3})})
    script = tmp_path / "prolog.sh"
    script.write_text(task_prolog(system, lay, {}))
    run = subprocess.run(["sh", str(script)], env={"SLURMD_NODENAME": "dgx-h100-0", "CUDA_VISIBLE_DEVICES": "0,2,5",
                                                   "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "export FAKEHW_VISIBLE_DEVICES=1,4,7"
    run = subprocess.run(["sh", str(script)], env={"SLURMD_NODENAME": "dgx-h100-0", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "export FAKEHW_VISIBLE_DEVICES=none"


def test_parse_record() -> None:
    rec = parse_record("NodeName=a Gres=gpu:h100:8(S:0-1) Reason=gres/gpu count too low [root@x] Comment=(null)")
    assert rec["Gres"] == "gpu:h100:8(S:0-1)" and rec["Reason"] == "gres/gpu count too low [root@x]"


def test_missing_programs_are_named(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match=r"slurmctld.*tools/install-system-deps\.sh"):
        Binaries.find(tmp_path, path=str(tmp_path))


# --------------------------------------------------------------------------------------------------- real Slurm


def _slurm_ready() -> str | None:
    if os.geteuid() != 0:
        return "Slurm's daemons need root"
    try:
        Binaries.find()
    except SlurmError as exc:
        return str(exc)
    return None


needs_slurm = pytest.mark.skipif(_slurm_ready() is not None, reason=str(_slurm_ready()))


SUITE_TIMEOUT_S = 900
STUCK_TEST_S = 300


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def _suite(profile: str, out: Path) -> tuple[dict[str, Any], str]:
    results = out / "results.json"
    # Every wait in the suite is bounded (60-180 s), so a test running for minutes is stuck: pytest's faulthandler
    # then prints every thread's stack to stderr, and a suite killed at the outer timeout shows where it was.
    argv = [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q", "-o",
            f"faulthandler_timeout={STUCK_TEST_S}", "--import-mode=importlib", "--profile", profile,
            "--conformance-results", str(results), "--conformance-complete"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S, check=False,
                              env={**os.environ, **SCRATCH.env})
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the Slurm suite on {profile} did not finish within {SUITE_TIMEOUT_S} s; it printed:\n"
                    f"{_text(exc.stdout)[-3000:]}\n{_text(exc.stderr)[-12000:]}")
    log = proc.stdout[-5000:] + proc.stderr[-2000:]
    assert results.is_file(), log
    return json.loads(results.read_text()), log


@pytest.fixture(scope="module")
def suite_runs() -> Iterator[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="fhw-slt-", dir="/tmp"))
    profiles = ("dgx-h100", "edge-pcie", PAIRS)
    with ThreadPoolExecutor(max_workers=len(profiles)) as pool:  # mostly waits on Slurm and jobs: little CPU
        futures = {}
        for i, p in enumerate(profiles):
            (work / str(i)).mkdir()
            futures[p] = pool.submit(_suite, p, work / str(i))
        yield {p: f.result() for p, f in futures.items()}
    shutil.rmtree(work, ignore_errors=True)


@needs_slurm
@pytest.mark.slow
@pytest.mark.parametrize("profile", ["dgx-h100", "edge-pcie", PAIRS], ids=["dgx-h100", "edge-pcie", "nvlink-pairs"])
def test_slurm_suite_passes(suite_runs: dict[str, Any], profile: str) -> None:
    doc, log = suite_runs[profile]
    statuses = {k: v["status"] for k, v in doc["requirements"].items()}
    assert len(statuses) == 7 and set(statuses.values()) == {"passed"}, f"{statuses}\n{log}"


@needs_slurm
@pytest.mark.slow
def test_nvlink_check_fails_without_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Render gres.conf without Links=: Slurm then hands out unbridged GPUs and the suite's check says so."""
    import testbed.slurm.render as render
    from conformance.suites.slurm import test_jobs
    from conformance.suites.slurm.support import SlurmUnderTest

    original = render.GresLine.render

    def no_links(self: render.GresLine) -> str:
        return original(render.GresLine(self.node, self.type, self.file, self.minor, self.cores,
                                        tuple(0 for _ in self.links)))

    monkeypatch.setattr(render.GresLine, "render", no_links)
    state = scratch_dir("fhw-sln-", SCRATCH.base)
    tb = Testbed.up(PAIRS, name="nolinks", state_dir=state)
    root = scratch_dir("fhw-slnc-", SCRATCH.base)
    cluster = None
    try:
        infos = tb.nodes()
        env = {n.name: {k: v for k, v in n.env.items() if k.startswith("FAKEHW_") or k == "LD_LIBRARY_PATH"}
               for n in infos}
        cluster = SlurmCluster(tb.system, {n.name: n.dir for n in infos}, env, root)
        cluster.start()
        with pytest.raises(AssertionError, match="not all joined by NVLink"):
            test_jobs.test_multi_gpu_job_gets_nvlink_connected_gpus(SlurmUnderTest(tb, cluster))
    finally:
        if cluster is not None:
            cluster.stop()
        tb.down()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
