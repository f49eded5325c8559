"""The local backend end to end, through the real ``testbed`` console script and through the Python API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakehw.model import load_profile
from testbed import BackendError, Testbed

BIN = Path(sys.executable).parent


@pytest.fixture
def cli(testbed_state_dir: Path) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    names: set[str] = set()

    def run(*args: str, name: str = "cli") -> subprocess.CompletedProcess[str]:
        names.add(name)
        command, *rest = args
        return subprocess.run([str(BIN / "testbed"), command, "--name", name, "--state-dir", str(testbed_state_dir),
                               *rest], capture_output=True, text=True, timeout=120)

    yield run
    for name in names:
        run("down", name=name)


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.split(") ", 1)[1][0] != "Z"


def test_fault_is_visible_survives_agent_restart_and_heals(cli: Callable[..., subprocess.CompletedProcess[str]],
                                                          testbed_state_dir: Path) -> None:
    up = cli("up", "--profile", "dgx-h100")
    assert up.returncode == 0, up.stderr
    tb = Testbed.attach("cli", testbed_state_dir)
    node_dir = tb.node("dgx-h100-0").dir

    injected = cli("inject", "dgx-h100-0", "nvlink-down", "gpu3", "link=7", "--json")
    assert injected.returncode == 0, injected.stderr
    fault = json.loads(injected.stdout)
    api_view = tb.agent().device("dgx-h100-0", "gpu3")
    assert api_view["links"][7]["up"] is False and fault["id"] in api_view["faults"]
    rendered = json.loads((node_dir / "state.json").read_text())
    assert rendered["gpus"][3]["links"][7]["up"] is False

    old_pid = tb.record.agent_pid
    restarted = cli("restart-agent", "--kill")
    assert restarted.returncode == 0, restarted.stderr
    tb = Testbed.attach("cli", testbed_state_dir)
    assert tb.record.agent_pid != old_pid and old_pid is not None and not _pid_running(old_pid)
    assert [f["id"] for f in tb.agent().faults()] == [fault["id"]]
    assert json.loads((node_dir / "state.json").read_text())["gpus"][3]["links"][7]["up"] is False

    healed = cli("heal", fault["id"])
    assert healed.returncode == 0 and f"healed {fault['id']}" in healed.stdout
    assert tb.agent().faults() == []
    assert json.loads((node_dir / "state.json").read_text())["gpus"][3]["links"][7]["up"] is True
    status = cli("status")
    assert "dgx-h100-0" in status.stdout and "8 healthy" in status.stdout


def test_exec_runs_with_the_node_environment(testbed_factory: Callable[..., Testbed]) -> None:
    tb = testbed_factory("gb200-nvl72", nodes=18)
    node = tb.record.nodes[3]
    out = tb.exec(node, [sys.executable, "-c", "import os, json; print(json.dumps({k: v for k, v in os.environ.items()"
                                                " if k.startswith('FAKEHW_')}))"])
    env = json.loads(out.stdout)
    assert env["FAKEHW_NODE"] == node == "gb200-tray-3"
    assert Path(env["FAKEHW_NODE_DIR"]) == tb.node(node).dir
    node_json = json.loads((Path(env["FAKEHW_NODE_DIR"]) / "node.json").read_text())
    assert [g["uuid"] for g in node_json["gpus"]] == [g.uuid for g in load_profile("gb200-nvl72").nodes[3].gpus]
    assert tb.exec(node, ["sh", "-c", "exit 7"]).returncode == 7


def test_down_leaves_nothing_behind(testbed_factory: Callable[..., Testbed]) -> None:
    tb = testbed_factory("edge-pcie")
    pid, root = tb.record.agent_pid, tb.record.dir
    assert pid is not None and _pid_running(pid) and root.is_dir()
    tb.down()
    assert not _pid_running(pid) and not root.exists()


def test_a_second_up_with_the_same_name_is_refused(testbed_state_dir: Path) -> None:
    with Testbed.up("gh200", name="twice", state_dir=testbed_state_dir), \
            pytest.raises(BackendError, match="already up"):
        Testbed.up("gh200", name="twice", state_dir=testbed_state_dir)


def test_a_stale_cluster_is_replaced(testbed_state_dir: Path) -> None:
    tb = Testbed.up("gh200", name="stale", state_dir=testbed_state_dir)
    tb.backend.stop_agent(tb.record, kill=True)  # type: ignore[attr-defined]
    assert not tb.alive()
    with Testbed.up("edge-pcie", name="stale", state_dir=testbed_state_dir) as again:
        assert again.record.nodes == ["edge-0"] and again.alive()


def test_bad_input_gets_exit_2_and_a_message(cli: Callable[..., subprocess.CompletedProcess[str]],
                                             tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndescription: y\ngroups: []\n")
    r = cli("up", "--profile", str(bad), name="bad")
    assert r.returncode == 2 and "groups: List should have at least 1 item" in r.stderr and "Traceback" not in r.stderr
    r = cli("up", "--profile", "no-such-thing", name="bad")
    assert r.returncode == 2 and "no profile 'no-such-thing'" in r.stderr
    assert cli("up", "--profile", "gh200", name="ok").returncode == 0
    cases = [
        (("inject", "gh200-0", "xid", "gpu0"), "code: Field required"),
        (("inject", "gh200-0", "xid", "gpu0", "code"), "fault parameters are key=value"),
        (("inject", "gh200-0", "boil", "gpu0"), "unknown or missing fault kind 'boil'"),
        (("inject", "gh200-1", "xid", "gpu0", "code=1"), "unknown node 'gh200-1'"),
        (("inject", "gh200-0", "xid", "gpu7", "code=1"), "has no GPU 'gpu7'"),
        (("exec", "gh200-9", "--", "true"), "has no node 'gh200-9'"),
        (("exec", "gh200-0"), "nothing to run"),
        (("heal",), "say what to heal"),
    ]
    for args, message in cases:
        r = cli(*args, name="ok")
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    r = cli("status", name="missing")
    assert r.returncode == 2 and "no cluster 'missing'" in r.stderr


def test_demo_is_the_main_job(testbed_state_dir: Path) -> None:
    r = subprocess.run([str(BIN / "testbed"), "demo", "--state-dir", str(testbed_state_dir)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "GPU0\t X \tNV18" in out and "8 healthy" in out
    assert "7 healthy, 1 lost (gpu7: fallen off the bus (Xid 79))" in out
    assert out.rstrip().endswith("cluster demo is down")
    assert not (testbed_state_dir / "demo").exists()
