"""``fakehw fabric up / probe / chaos / status / down`` against a real emulated fabric, and their bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakehw.cli import main as fakehw_main
from fakehw.fabric.emulate import Ledger, leftovers
from fakehw.fabric.loader import broken_examples


def test_up_probe_chaos_down(need_root: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "fab"
    assert fakehw_main(["fabric", "up", "dgx-h100-rail", "--state-dir", str(state)]) == 0
    ledger = Ledger.load(state)
    try:
        assert fakehw_main(["fabric", "up", "dgx-h100-rail", "--state-dir", str(state)]) == 2
        assert "already holds a fabric" in capsys.readouterr().err
        assert fakehw_main(["fabric", "probe", "--state-dir", str(state), "--mtu", "none", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["passed"] and len([r for r in report["results"] if r["id"] == "FAB-DYN-REACH-001"]) == 48
        assert fakehw_main(["fabric", "chaos", "loss", "dgx-h100-0/mlx5_0", "--rate", "1", "--direction", "in",
                            "--state-dir", str(state)]) == 0
        imp_id = capsys.readouterr().out.split(":")[0]
        assert [r["id"] for r in Ledger.load(state).impairments] == [imp_id]
        # the impairment is real: every path from that NIC fails now, the others still pass
        assert fakehw_main(["fabric", "probe", "--state-dir", str(state), "--mtu", "none", "--json"]) == 1
        results = json.loads(capsys.readouterr().out)["results"]
        reach = [r for r in results if r["id"] == "FAB-DYN-REACH-001"]
        assert {r["subject"] for r in reach if not r["passed"]} == {
            r["subject"] for r in reach if "dgx-h100-0/mlx5_0" in r["subject"]}
        assert fakehw_main(["fabric", "chaos", "reorder", "dgx-h100-0/mlx5_0", "--state-dir", str(state)]) == 1
        assert "sch_netem" in capsys.readouterr().err
        assert fakehw_main(["fabric", "chaos", "loss", "nosuch/mlx5_0", "--state-dir", str(state)]) == 2
        assert "neither a NIC nor a switch port" in capsys.readouterr().err
        assert fakehw_main(["fabric", "chaos", "revert", "nope", "--state-dir", str(state)]) == 2
        assert fakehw_main(["fabric", "chaos", "revert", imp_id, "--state-dir", str(state)]) == 0
        assert capsys.readouterr().out.strip() == f"reverted {imp_id}"
        assert Ledger.load(state).impairments == []
        assert fakehw_main(["fabric", "probe", "--state-dir", str(state), "--mtu", "none"]) == 0
        capsys.readouterr()
        assert fakehw_main(["fabric", "status", "--state-dir", str(state), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["present"] > 0 and len(status["processes"]) == 1
        # a delay keeps its forwarder running after the command returns; revert stops it
        assert fakehw_main(["fabric", "chaos", "delay", "dgx-h100-1/mlx5_3", "--ms", "5", "--jitter-ms", "1",
                            "--state-dir", str(state)]) == 0
        capsys.readouterr()
        forwarder = [p for p in Ledger.load(state).processes if p["role"] == "forwarder"]
        assert len(forwarder) == 1 and Path(f"/proc/{forwarder[0]['pid']}").exists()
        assert fakehw_main(["fabric", "chaos", "revert", "all", "--state-dir", str(state)]) == 0
        capsys.readouterr()
        assert not Path(f"/proc/{forwarder[0]['pid']}/cmdline").exists() or \
            b"forwarder" not in Path(f"/proc/{forwarder[0]['pid']}/cmdline").read_bytes()
    finally:
        assert fakehw_main(["fabric", "down", "--state-dir", str(state)]) == 0
    assert leftovers(ledger) == []
    assert fakehw_main(["fabric", "down", "--state-dir", str(state)]) == 0  # nothing left to do is fine


def test_runtime_commands_reject_bad_input(need_root: None, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert fakehw_main(["fabric", "probe", "--state-dir", str(tmp_path / "none")]) == 2
    assert "fabric.json missing" in capsys.readouterr().err
    (tmp_path / "fabric.json").write_text("{broken")
    assert fakehw_main(["fabric", "status", "--state-dir", str(tmp_path)]) == 2
    assert "is not a fabric ledger" in capsys.readouterr().err
    loop = str(broken_examples()["FAB-VLAN-002-loop"])
    assert fakehw_main(["fabric", "up", loop, "--state-dir", str(tmp_path / "loop")]) == 2
    assert "loops through" in capsys.readouterr().err
    assert fakehw_main(["fabric", "up", "dgx-h100-rail", "--state-dir", str(tmp_path / "x"), "--attach", "oops"]) == 2
    assert fakehw_main(["fabric", "chaos", "loss", "dgx-h100-0/mlx5_0"]) == 2
    assert "--state-dir is required" in capsys.readouterr().err
    assert fakehw_main(["fabric", "chaos", "kinds"]) == 0
    assert "corrupt" in capsys.readouterr().out
