"""Bad profiles are refused with exit code 2 and a message naming the file, the line, the path and the problem."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fakehw.cli import main as fakehw_main
from fakehw.model import ProfileError, load_profile
from fakehw.model.loader import builtin_dir

SMALL = """\
name: small
description: two H100s on one NVSwitch
groups:
  - name: box
    count: 1
    node:
      cpu: {arch: amd64, vendor: GenuineIntel, model: Test CPU, sockets: 2, coresPerSocket: 4}
      numa:
        nodes:
          - {id: 0, socket: 0, memory: 64GiB}
          - {id: 1, socket: 1, memory: 64GiB}
        distances:
          - [10, 21]
          - [21, 10]
      pcie:
        hostBridges:
          - {name: hb0, numa: 0, bus: 0x10}
          - {name: hb1, numa: 1, bus: 0x80}
      gpus:
        - {name: gpu0, sku: h100-sxm5-80gb, bus: "0000:1b:00.0", parent: hb0}
        - {name: gpu1, sku: h100-sxm5-80gb, bus: "0000:9b:00.0", parent: hb1}
      nvswitches:
        - {name: nvsw0, sku: nvswitch-gen3}
      nvlinks:
        - {from: "gpu*", to: nvsw0, count: 18}
"""


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    code = fakehw_main(["validate", str(path)])
    return code, capsys.readouterr().err


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_small_profile_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(SMALL)
    assert fakehw_main(["validate", str(path)]) == 0
    assert "ok:" in capsys.readouterr().out
    assert load_profile(path).topology.nodes["box-0"].nvlinks[0][1] == 18


@pytest.mark.parametrize(
    ("old", "new", "line_of", "path", "message"),
    [
        pytest.param("coresPerSocket: 4", "corePerSocket: 4", "corePerSocket", "groups[0].node.cpu.corePerSocket",
                     "unknown key 'corePerSocket' (did you mean 'coresPerSocket'?)", id="unknown-key"),
        pytest.param("sku: h100-sxm5-80gb, bus: \"0000:9b", "sku: h100-sxm9, bus: \"0000:9b", "h100-sxm9",
                     "groups[0].node.gpus[1].sku", "unknown GPU SKU 'h100-sxm9'", id="unknown-sku"),
        pytest.param("to: nvsw0", "to: nvsw9", "nvsw9", "groups[0].node.nvlinks[0].to",
                     "'nvsw9' matches no GPU or NVSwitch", id="link-to-missing-device"),
        pytest.param("count: 18}", "count: 20}", "gpu0, sku", "groups[0].node.gpus[0]",
                     "GPU gpu0 is wired with 20 NVLinks but h100-sxm5-80gb has 18", id="too-many-links"),
        pytest.param("bus: \"0000:9b:00.0\"", "bus: \"0000:1b:00.0\"", "gpu1, sku", "groups[0].node.gpus[1].bus",
                     "PCI address 0000:1b:00.0 is also used at groups[0].node.gpus[0].bus", id="duplicate-bus-id"),
        pytest.param("- [21, 10]", "- [21, 10, 30]", "[21, 10, 30]", "groups[0].node.numa.distances[1]",
                     "row has 3 entries for 2 NUMA nodes (matrix must be square)", id="distances-not-square"),
        pytest.param("- [10, 21]\n", "- [10, 21]\n          - [30, 30]\n", "distances:",
                     "groups[0].node.numa.distances", "distance matrix has 3 rows for 2 NUMA nodes",
                     id="distances-too-many-rows"),
        pytest.param("- [10, 21]", "- [11, 21]", "[11, 21]", "groups[0].node.numa.distances[0][0]",
                     "distance of a node to itself must be 10, not 11", id="distance-diagonal"),
        pytest.param("parent: hb1}", "parent: hb7}", "hb7", "groups[0].node.gpus[1].parent",
                     "PCIe parent 'hb7' is not a host bridge or switch of this node", id="unknown-pcie-parent"),
        pytest.param("socket: 1, memory", "socket: 3, memory", "socket: 3", "groups[0].node.numa.nodes[1].socket",
                     "socket 3 does not exist", id="numa-socket-missing"),
        pytest.param("coresPerSocket: 4}", "coresPerSocket: 4, caches: {l2: 1536}}", "caches", "groups[0].node.cpu."
                     "caches.l2", "a cache size is whole KiB (sysfs shows it as <n>K), not 1536 bytes",
                     id="cache-not-whole-kib"),
        pytest.param("count: 1\n", "count: many\n", "count: many", "groups[0].count",
                     "Input should be a valid integer", id="wrong-type"),
        pytest.param("      pcie:", "      bogus: 1\n      pcie:", "bogus", "groups[0].node.bogus",
                     "unknown key 'bogus'", id="unknown-key-no-suggestion"),
    ],
)
def test_bad_profile_is_refused_with_its_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, line_of: str, path: str, message: str
) -> None:
    assert old in SMALL
    text = SMALL.replace(old, new, 1)
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    expected = f"{tmp_path / 'profile.yaml'}:{_line_of(text, line_of)}: {path}: {message}"
    assert expected in err, err


def test_duplicate_uuids_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uuid = "GPU-11111111-2222-3333-4444-555555555555"
    text = SMALL.replace('parent: hb0}', f'parent: hb0, uuid: {uuid}}}').replace(
        'parent: hb1}', f'parent: hb1, uuid: {uuid}}}')
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    assert f":{_line_of(text, 'gpu1, sku')}: groups[0].node.gpus[1].uuid: GPU UUID {uuid} is used by box-0/gpu0 " \
           "and box-0/gpu1" in err


def test_a_template_uuid_repeated_on_two_nodes_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SMALL.replace("count: 1\n", "count: 2\n").replace(
        'parent: hb0}', 'parent: hb0, uuid: GPU-11111111-2222-3333-4444-555555555555}')
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "is used by box-0/gpu0 and box-1/gpu0" in err


def test_one_board_s_gpus_giving_two_serials_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """nvml.h, nvmlDeviceGetSerial: the serial "corresponds to the value printed directly on the board", so a board
    has one; two GPUs that name one board and give it different serials describe no real board."""
    text = SMALL.replace('parent: hb0}', 'parent: hb0, board: b0, serial: "1650000000001"}').replace(
        'parent: hb1}', 'parent: hb1, board: b0, serial: "1650000000002"}')
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    assert f":{_line_of(text, 'gpu1, sku')}: groups[0].node.gpus[1].serial: GPU gpu1 gives board b0 serial " \
           "1650000000002 but gpu0 gives it 1650000000001" in err, err


def test_a_serial_one_gpu_gives_its_board_is_the_board_s(tmp_path: Path) -> None:
    """A board has one serial (nvml.h: "printed directly on the board"): one GPU giving it names it for the board's
    other GPU too; GPUs naming no board keep serials of their own."""
    path = tmp_path / "profile.yaml"
    path.write_text(SMALL.replace('parent: hb0}', 'parent: hb0, board: b0}')
                    .replace('parent: hb1}', 'parent: hb1, board: b0, serial: "1650000000007"}'))
    assert [g.serial for g in load_profile(path).gpus()] == ["1650000000007"] * 2
    path.write_text(SMALL)
    serials = [g.serial for g in load_profile(path).gpus()]
    assert len(set(serials)) == 2


def test_malformed_yaml_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SMALL.replace("      nvlinks:", "      nvlinks: [unclosed", 1)
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    assert f"{tmp_path / 'profile.yaml'}:" in err and "malformed YAML" in err


def test_duplicate_keys_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SMALL.replace("name: small\n", "name: small\nname: other\n")
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "profile.yaml:2: (document): duplicate key 'name'" in err


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n", "42\n"])
def test_a_document_that_is_not_a_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "a profile is a YAML mapping" in err


def test_nvl72_wiring_short_of_links_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (builtin_dir() / "gb200-nvl72.yaml").read_text().replace("count: 18}", "count: 17}")
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    line = _line_of(text, "  links:")
    assert (f"profile.yaml:{line}: nvlinkDomains[0].links: GPU gpu0 of group gb200-tray is wired with 17 of its 18 "
            "NVLinks; domain nvl72 requires full wiring") in err


def test_nvl72_switch_port_overflow_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (builtin_dir() / "gb200-nvl72.yaml").read_text().replace("count: 18\n    node:", "count: 36\n    node:")
    text = text.replace("nodesPerDomain: 18", "nodesPerDomain: 36")
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "needs 144 ports; nvswitch-gen4 has 72" in err


def test_every_problem_is_reported_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SMALL.replace("sku: h100-sxm5-80gb, bus: \"0000:9b", "sku: nope, bus: \"0000:9b").replace(
        "parent: hb0}", "parent: hb5}")
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2
    assert "gpus[1].sku: unknown GPU SKU 'nope'" in err and "gpus[0].parent: PCIe parent 'hb5'" in err


def test_extends_loops_and_unknown_bases_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n")
    assert fakehw_main(["validate", str(tmp_path / "a.yaml")]) == 2
    assert "extends loops back to" in capsys.readouterr().err
    (tmp_path / "c.yaml").write_text("extends: no-such-profile\nname: c\n")
    assert fakehw_main(["validate", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert "c.yaml:1: extends: no profile 'no-such-profile'" in err and "dgx-h100" in err


def test_errors_in_a_base_profile_point_into_the_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base.yaml").write_text(SMALL.replace("to: nvsw0", "to: nvsw9"))
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nname: child\ndescription: a child\nnodes: 2\n")
    assert fakehw_main(["validate", str(tmp_path / "child.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'base.yaml'}:{_line_of(SMALL, 'to: nvsw0')}: groups[0].node.nvlinks[0].to" in err


def test_extends_sets_the_node_count(tmp_path: Path) -> None:
    (tmp_path / "four.yaml").write_text("extends: dgx-h100\nname: four\ndescription: four DGX\nnodes: 4\n")
    system = load_profile(tmp_path / "four.yaml")
    assert [n.name for n in system.nodes] == [f"dgx-h100-{i}" for i in range(4)]
    assert system.name == "four"


def test_override_errors_name_the_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = textwrap.dedent("""\
        name: bad-override
        description: override with a typo
        groups:
          - name: x
            from: dgx-h100
            override:
              gpus:
                - {name: gpu0, skew: h200-sxm5-141gb}
        """)
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "groups[0].override.gpus[0].skew: Extra inputs are not permitted" in err


def test_the_console_script_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SMALL.replace("h100-sxm5-80gb", "h100-nope", 1))
    proc = subprocess.run([sys.executable, "-m", "fakehw.cli", "validate", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "groups[0].node.gpus[0].sku: unknown GPU SKU 'h100-nope'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_profile_error_lists_problems() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("bad.yaml", text=SMALL.replace("h100-sxm5-80gb", "x", 1))
    (problem,) = info.value.problems
    assert problem.path == ("groups", 0, "node", "gpus", 0, "sku") and problem.line == _line_of(SMALL, "gpu0, sku")


@pytest.mark.parametrize(("old", "new", "message"), [
    ('bus: "0000:1b:00.0", parent: sw1', 'bus: "0000:1a:00.0", parent: sw1',
     "groups[0].node.gpus[0].bus: gpu gpu0 at 0000:1a:00.0 cannot sit below PCIe switch sw1 (upstream port "
     "0000:19:00.0, internal bus 1a): buses below it start at 1b"),
    ('bus: "0000:22:00.0", parent: hb0', 'bus: "0000:39:01.0", parent: hb1',
     "gpu gpu4 at 0000:39:00.0 and gpu gpu3 at 0000:39:01.0 are both on bus 39 below host bridge hb1 (bus 38): "
     "a port leads to one device"),
], ids=["device-on-a-switch-internal-bus", "two-devices-behind-one-root-port"])
def test_a_pcie_tree_hardware_cannot_build_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str,
                                                      new: str, message: str) -> None:
    """PCI Express Base 7.2: a switch's downstream ports sit on its internal bus (upstream bus + 1), and a port
    leads to one device. edge-pcie's first numbering broke both (lspci -t showed a bridge with two 00.0 children)."""
    text = (builtin_dir() / "edge-pcie.yaml").read_text()
    assert old in text
    code, err = _validate(tmp_path, text.replace(old, new), capsys)
    assert code == 2 and message in err, err


def test_pcie_switches_in_a_loop_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A PCIe tree has no cycles (every bridge has one upstream port, ending at a host bridge); a profile whose
    switches are each other's parents is refused before any topology is derived. topology.py's ancestor walk
    relies on this: its length bound never binds on an acyclic tree (tools/mutation-equivalents.toml)."""
    text = SMALL.replace("          - {name: hb1, numa: 1, bus: 0x80}\n",
                         "          - {name: hb1, numa: 1, bus: 0x80}\n        switches:\n"
                         "          - {name: swa, parent: swb, bus: \"0000:81:00.0\"}\n"
                         "          - {name: swb, parent: swa, bus: \"0000:82:00.0\"}\n", 1)
    text = text.replace("parent: hb1}", "parent: swa}", 1)
    code, err = _validate(tmp_path, text, capsys)
    assert code == 2 and "groups[0].node.pcie.switches: PCIe switches form a loop: swa -> swb" in err, err


def test_a_cxl_pool_behind_a_restricted_host_bridge_is_refused() -> None:
    """A restricted CXL host (RCH) is CXL 1.1: its root port is the link to its one device (an RCD, no switch, no
    logical devices; CXL 2.0 9.11), so a pooled multi-logical device, which CXL 2.0 brings, cannot sit behind it.
    The profile is refused at the pool's hostPort instead of rendering a pool no port decodes."""
    doc = yaml.safe_load((builtin_dir() / "cxl-pool.yaml").read_text())
    cxl = doc["groups"][0]["node"]["cxl"]
    cxl["hostBridges"].append({"name": "cxlhb3", "uid": 3, "numa": 0, "rootPorts": 1, "restricted": True})
    doc["cxlPools"][0]["hostPort"] = "cxlhb3.rp0"
    with pytest.raises(ProfileError, match=r"cxlPools\[0\]\.hostPort: CXL port cxlhb3\.rp0 of group cxl-host is a "
                                           r"restricted host bridge's \(RCH"):
        load_profile("rch-pool", text=yaml.safe_dump(doc))
