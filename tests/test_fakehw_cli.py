"""The ``fakehw`` command line: what people see, parsed back and compared with the model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from fakehw.cli import main
from fakehw.model import builtin_profiles, load_profile

BIN = Path(sys.executable).parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "fakehw"), *args], capture_output=True, text=True, timeout=120)


def _cells(line: str) -> list[str]:
    """Non-empty cells of a topo -m line (nvidia-smi underlines the header and pads with empty cells)."""
    return [c.strip() for c in re.sub(r"\x1b\[[0-9;]*m", "", line).split("\t") if c.strip()]


def _matrix(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """Parse the topo -m table into its header and rows."""
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    header = _cells(lines[0])
    rows = {}
    for line in lines[1:]:
        if line.startswith("Legend"):
            break
        cells = _cells(line)
        rows[cells[0]] = cells[1:]
    return header, rows


def test_profiles_lists_every_builtin() -> None:
    out = _run("profiles")
    assert out.returncode == 0
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert names == sorted(builtin_profiles())
    assert "(projection)" in next(line for line in out.stdout.splitlines() if line.startswith("riscv-nvlink-fusion"))


def test_topo_dgx_h100_acceptance() -> None:
    out = _run("topo", "dgx-h100")
    assert out.returncode == 0
    header, rows = _matrix(out.stdout)
    gpus = [h for h in header if h.startswith("GPU") and h[3:].isdigit()]
    assert gpus == [f"GPU{i}" for i in range(8)]
    numa_col = header.index("NUMA Affinity")
    for i in range(8):
        row = rows[f"GPU{i}"]
        assert row[i] == "X"
        assert all(row[j] == "NV18" for j in range(8) if j != i)
        assert row[numa_col] == ("0" if i < 4 else "1")
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in out.stdout
    assert "NIC0: mlx5_0" in out.stdout


def test_topo_edge_pcie_shows_every_pcie_level_of_its_tree() -> None:
    out = _run("topo", "edge-pcie")
    _, rows = _matrix(out.stdout)
    system = load_profile("edge-pcie")
    topo = system.topology.nodes["edge-0"]
    for i in range(8):
        assert rows[f"GPU{i}"][:8] == [("X" if i == j else topo.levels[i][j].short) for j in range(8)]
    assert rows["GPU0"][:8] == ["X", "PIX", "PXB", "PHB", "NODE", "SYS", "SYS", "SYS"]
    assert not any(cell.startswith("NV") for row in rows.values() for cell in row)


def test_topo_gb200_tray_shows_its_four_gpus_over_the_switches() -> None:
    out = _run("topo", "gb200-nvl72", "--node", "3")
    assert out.returncode == 0
    assert out.stdout.startswith("# gb200-tray-3 (gb200-nvl72)")
    header, rows = _matrix(out.stdout)
    assert [h for h in header if h.startswith("GPU") and h[3:].isdigit()] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    for i in range(4):
        assert [rows[f"GPU{i}"][j] for j in range(4) if j != i] == ["NV18"] * 3
    gpu_numa = header.index("GPU NUMA ID")
    assert [rows[f"GPU{i}"][gpu_numa] for i in range(4)] == ["2", "10", "18", "26"]  # a real tray's numactl -H


def test_topo_refuses_a_node_that_does_not_exist() -> None:
    out = _run("topo", "gb200-nvl72", "--node", "18")
    assert out.returncode == 2 and "has 18 node(s); there is no node 18" in out.stderr
    out = _run("topo", "dgx-h100", "--node", "tray")
    assert out.returncode == 2 and "has no node 'tray'" in out.stderr


def test_show_summarises_from_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "gb200-nvl72"]) == 0
    out = capsys.readouterr().out
    system = load_profile("gb200-nvl72")
    assert f"profile digest sha256:{system.digest}" in out
    assert "18 node(s), 72 GPU(s)" in out
    assert f"NVLink domain nvl72: 18 nodes, 72 GPUs, 18 switch chips, cluster " \
           f"{system.nvlink_domains[0].fabric.cluster_uuid}" in out  # type: ignore[union-attr]
    assert main(["show", "dgx-h100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [g["uuid"] for g in data["nodes"][0]["gpus"]] == [g.uuid for g in load_profile("dgx-h100").gpus()]
    assert main(["show", "--catalogue"]) == 0
    assert "h100-sxm5-80gb     NVIDIA H100 80GB HBM3" in capsys.readouterr().out


def test_schema_accepts_every_builtin_and_rejects_typos(tmp_path: Path) -> None:
    out = _run("schema")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    for name, path in builtin_profiles().items():
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert errors == [], (name, errors[:1])
    doc = yaml.safe_load(builtin_profiles()["dgx-h100"].read_text())
    doc["groups"][0]["node"]["cpu"]["corePerSocket"] = 4
    assert any("corePerSocket" in e.message for e in validator.iter_errors(doc))
    assert main(["schema", "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == schema


def test_render_writes_every_node(fast_tmp: Path) -> None:
    out = _run("render", "gb200-nvl72", "--out", str(fast_tmp), "--node", "0", "--node", "gb200-tray-17")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in fast_tmp.iterdir() if not p.name.startswith(".")) == ["gb200-tray-0", "gb200-tray-17"]
    node = json.loads((fast_tmp / "gb200-tray-17" / "node.json").read_text())
    assert node["nvlink_domain"] == "nvl72" and len(node["gpus"]) == 4
    state = json.loads((fast_tmp / "gb200-tray-17" / "state.json").read_text())
    assert state["health"] == "healthy" and state["faults"] == []
    mine = ("node.json", "state.json")
    before = {n: (fast_tmp / "gb200-tray-0" / n).stat().st_mtime_ns for n in mine}
    again = _run("render", "gb200-nvl72", "--out", str(fast_tmp), "--node", "0")
    assert again.returncode == 0
    after = {n: (fast_tmp / "gb200-tray-0" / n).stat().st_mtime_ns for n in mine}
    assert before == after, "unchanged files are not rewritten"


def test_kinds_lists_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kinds"]) == 0
    out = capsys.readouterr().out
    assert "xid" in out and "code=<required>" in out and "nvlink-down" in out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "examples:" in capsys.readouterr().out


def test_render_outputs_can_be_chosen(tmp_path: Path) -> None:
    out = _run("render", "dgx-h100", "--out", str(tmp_path), "--outputs", "model,nvml")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "dgx-h100-0").iterdir()) == ["node.json", "nvml.snapshot"]
    bad = _run("render", "dgx-h100", "--out", str(tmp_path), "--outputs", "model,sysfs")
    assert bad.returncode == 2 and "unknown output(s) sysfs (outputs: model, state, nvml, root)" in bad.stderr
