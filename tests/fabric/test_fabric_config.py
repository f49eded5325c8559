"""Fabric configs as input: every way a config can be wrong gives file:line: path: message, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fakehw.fabric import FabricError, load_fabric, load_fabric_spec
from fakehw.fabric.generate import rail_optimised, spine_leaf, to_yaml
from fakehw.fabric.loader import broken_examples, builtin_fabrics
from fakehw.fabric.model import NicRef, PortRef

BASE = """\
name: t
profile: dgx-h100-roce
nodes: 2
switches:
  - name: leaf0
    ports:
      - {name: p0, connect: dgx-h100-0/mlx5_0}
      - {name: p1, connect: dgx-h100-1/mlx5_0}
"""


def _error(text: str, tmp_path: Path, name: str = "f.yaml") -> FabricError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(FabricError) as info:
        load_fabric(path)
    return info.value


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_builtin_configs_load() -> None:
    assert set(builtin_fabrics()) == {"dgx-h100-rail", "gb200-nvl72-spine-leaf"}
    for name in builtin_fabrics():
        model = load_fabric(name)
        # every NIC of the profile is cabled to exactly one switch port
        assert all(n.peer is not None for n in model.nics)
        assert len({n.peer for n in model.nics}) == len(model.nics)


def test_builtin_configs_equal_their_generators() -> None:
    rail = load_fabric_spec("dgx-h100-rail").spec
    assert rail == load_fabric_spec("x.yaml", to_yaml(rail_optimised("dgx-h100-roce", 4, name="dgx-h100-rail"))).spec
    sl = load_fabric_spec("gb200-nvl72-spine-leaf").spec
    assert sl == load_fabric_spec("x.yaml", to_yaml(spine_leaf("gb200-nvl72-roce", name="gb200-nvl72-spine-leaf"))).spec


def test_inheritance_port_over_switch_over_defaults(tmp_path: Path) -> None:
    text = BASE.replace("nodes: 2\n", "nodes: 2\ndefaults: {mtu: 9216, qos: {pfcPriorities: [3], cnpPriority: 6}}\n")
    text = text.replace("  - name: leaf0\n", "  - name: leaf0\n    mtu: 9100\n    qos: {pfcPriorities: [3, 4]}\n")
    text = text.replace("{name: p1, connect: dgx-h100-1/mlx5_0}",
                        "{name: p1, connect: dgx-h100-1/mlx5_0, mtu: 4200, qos: {cnpPriority: null}}")
    (tmp_path / "f.yaml").write_text(text)
    m = load_fabric(tmp_path / "f.yaml")
    p0, p1 = m.port(PortRef("leaf0", "p0")), m.port(PortRef("leaf0", "p1"))
    assert (p0.mtu, p1.mtu) == (9100, 4200)
    assert p0.qos.pfc_priorities == p1.qos.pfc_priorities == {3, 4}
    assert (p0.qos.cnp_priority, p1.qos.cnp_priority) == (6, None)
    # the origin of p1's MTU is the line that wrote it
    assert m.locate(p1.origin("mtu")) == (str(tmp_path / "f.yaml"), _line_of(text, "mtu: 4200"))
    # NICs follow their ports' VLAN (untagged VLAN 1 by default) and keep the profile's RoCE settings
    nic = m.host_nic(NicRef("dgx-h100-0", "mlx5_0"))
    assert nic.vlan is None and m.nic_vlan(nic) == 1
    assert nic.roce == m.system.nodes[0].nics[0].roce


def test_host_overrides_apply_in_order(tmp_path: Path) -> None:
    text = BASE + 'hosts:\n  "*/mlx5_0": {mtu: 4200, roce: {priority: 4}}\n  dgx-h100-1/mlx5_0: {mtu: 1500}\n'
    (tmp_path / "f.yaml").write_text(text)
    m = load_fabric(tmp_path / "f.yaml")
    a, b = m.host_nic(NicRef("dgx-h100-0", "mlx5_0")), m.host_nic(NicRef("dgx-h100-1", "mlx5_0"))
    assert (a.mtu, b.mtu) == (4200, 1500)
    assert a.roce.priority == b.roce.priority == 4
    assert a.roce.dscp == m.system.nodes[0].nics[0].roce.dscp


@pytest.mark.parametrize(
    ("change", "needle", "where", "words"),
    [
        (lambda t: t.replace("    ports:", "    portz:"), "portz", "switches[0].portz", "did you mean 'ports'"),
        (lambda t: t.replace("p1, connect", "p1, mtu: big, connect"), "mtu: big", "switches[0].ports[1].mtu",
         "valid integer"),
        (lambda t: t.replace("p1, connect", "p1, mtu: 20000, connect"), "mtu: 20000", "switches[0].ports[1].mtu",
         "less than or equal to 9216"),
        (lambda t: t.replace("dgx-h100-1/mlx5_0", "dgx-h100-7/mlx5_0"), "dgx-h100-7", "connect",
         "neither a switch of this config nor a node"),
        (lambda t: t.replace("dgx-h100-1/mlx5_0", "dgx-h100-1/mlx5_12"), "mlx5_12", "connect",
         "has no NIC 'mlx5_12'"),
        (lambda t: t.replace("dgx-h100-1/mlx5_0", "dgx-h100-0/mlx5_0"), "p1, connect", "connect",
         "already cabled to leaf0/p0"),
        # dgx-h100 runs its compute ports as InfiniBand (DGX H100 User Guide): not part of an Ethernet fabric
        (lambda t: t.replace("dgx-h100-1/mlx5_0", "dgx-h100-1/mlx5_1"), "dgx-h100-1/mlx5_1", "connect",
         "dgx-h100-1/mlx5_1 is an InfiniBand port; a RoCE fabric cables Ethernet ports"),
        (lambda t: t.replace("dgx-h100-1/mlx5_0", "leaf0/p1"), "p1, connect", "connect", "cabled to itself"),
        (lambda t: t.replace("dgx-h100-1/mlx5_0", "leaf0/p7"), "leaf0/p7", "connect", "has no port 'p7'"),
        (lambda t: t.replace("connect: dgx-h100-1/mlx5_0", "connect: nothing"), "nothing", "connect",
         "String should match pattern"),
        (lambda t: t + "hosts:\n  dgx-h100-9/*: {mtu: 1500}\n", "dgx-h100-9", "hosts.dgx-h100-9/*",
         "matches no NIC"),
        (lambda t: t + "  - name: leaf0\n    ports: [{name: q}]\n", "switches:", "switches", "listed twice"),
        (lambda t: t.replace("{name: p1,", "{name: p0,"), "    ports:", "ports", "listed twice"),
        (lambda t: t.replace("name: leaf0", "name: dgx-h100-0"), "name: dgx-h100-0", "switches[0].name",
         "name of a node"),
        (lambda t: t.replace("p1, connect", "p1, vlan: {untagged: 5, tagged: [5]}, connect"), "tagged: [5]",
         "switches[0].ports[1].vlan", "both untagged and tagged"),
        (lambda t: t.replace("p1, connect", "p1, vlan: {tagged: [5, 6]}, connect"), "tagged: [5, 6]",
         "switches[0].ports[1].vlan", "trunks several VLANs"),
        (lambda t: t.replace("profile: dgx-h100-roce", "profile: no-such-profile"), "profile:", "profile",
         "hardware profile 'no-such-profile' cannot be used"),
        (lambda t: t.replace("nodes: 2", "nodes: 2\nnodes: 3"), "nodes: 3", "(document)", "duplicate key 'nodes'"),
        (lambda t: t.replace("    ports:", "    ports: [\n"), None, "(document)", "malformed YAML"),
        (lambda t: t.replace("name: t", "name: t\nextends: no-such-fabric"), "extends", "extends",
         "no fabric config 'no-such-fabric'"),
    ],
)
def test_bad_config_names_file_line_and_path(
    tmp_path: Path, change: Callable[[str], str], needle: str | None, where: str, words: str
) -> None:
    text = change(BASE)
    exc = _error(text, tmp_path)
    shown = str(exc)
    assert "Traceback" not in shown
    assert words in shown, shown
    problem = next(p for p in exc.problems if words in p.message)
    assert problem.source == str(tmp_path / "f.yaml")
    assert where in str(problem)
    if needle is None:  # the YAML parser decides where it noticed the syntax error
        assert problem.line is not None
    else:
        assert problem.line == _line_of(text, needle), shown


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_non_mapping_documents(tmp_path: Path, text: str) -> None:
    exc = _error(text, tmp_path)
    assert "a fabric config is a YAML mapping" in str(exc)


def test_extends_loop_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n")
    with pytest.raises(FabricError, match="extends loops back"):
        load_fabric(tmp_path / "a.yaml")


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(FabricError, match="cannot read fabric config"):
        load_fabric(tmp_path / "bin.yaml")


def test_extends_locates_lines_in_the_child(tmp_path: Path) -> None:
    """A validation error in an override points at the child file even though lists merge by name."""
    text = "extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail5\n    ports:\n      - {name: p2, mtu: 1}\n"
    exc = _error(text, tmp_path)
    p = exc.problems[0]
    assert (p.source, p.line) == (str(tmp_path / "f.yaml"), 6)
    assert "switches[5].ports[2].mtu" in str(p)


def test_every_broken_example_is_valid_config() -> None:
    """The broken examples are wrong fabrics, not wrong documents: they all load."""
    for path in broken_examples().values():
        load_fabric(path)
