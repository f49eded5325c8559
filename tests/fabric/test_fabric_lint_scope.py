"""What a lint finding says about its reach: the element and line that set the value, how many ports/NICs and paths it
reaches (docs/fabric.md: "A setting that is wrong on many ports gives one finding at the line that set it, with
the number of ports and paths it reaches and one example path").

The expected counts are worked out by hand from the built-in ``dgx-h100-rail`` as docs/fabric.md describes it:
4 DGX H100 nodes, one leaf per rail (8 leaves, one port per node each: 32 host-facing ports), every pair of NICs of
a rail a RoCE path (4 nodes: 6 per rail, 48 in all).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakehw.fabric import load_fabric
from fakehw.fabric.lint import lint


def _one_finding(tmp_path: Path, text: str) -> str:
    f = tmp_path / "f.yaml"
    f.write_text(text)
    (finding,) = lint(load_fabric(f)).findings
    return str(finding)


def test_a_wrong_default_is_one_finding_at_defaults_reaching_every_port(tmp_path: Path) -> None:
    line = _one_finding(tmp_path, "extends: dgx-h100-rail\nname: x\ndefaults:\n  qos: {pfcPriorities: []}\n")
    assert line.startswith(f"{tmp_path / 'f.yaml'}:4: error FAB-PFC-001: defaults: "), line
    assert line.endswith("[32 ports/NICs; 48 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0]"), line


def test_a_host_setting_on_two_nics_counts_both_and_their_paths(tmp_path: Path) -> None:
    """Two rail-0 NICs lose PFC: 2 NICs; of rail 0's 6 paths all but dgx-h100-2 <-> dgx-h100-3 touch one: 5."""
    line = _one_finding(tmp_path, 'extends: dgx-h100-rail\nname: x\nhosts:\n'
                                  '  "dgx-h100-[01]/mlx5_0": {roce: {pfcPriorities: []}}\n')
    assert ": error FAB-PFC-001: dgx-h100-0/mlx5_0: " in line, line
    assert line.endswith("[2 ports/NICs; 5 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0]"), line


def test_a_single_port_finding_names_the_port_and_no_port_count(tmp_path: Path) -> None:
    """One port at 5000 under 9000-byte NICs: leaf-rail0/p0 faces dgx-h100-0, so the 3 rail-0 paths from it."""
    line = _one_finding(tmp_path, "extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail0\n"
                                  "    ports:\n      - {name: p0, mtu: 5000}\n")
    assert line.startswith(f"{tmp_path / 'f.yaml'}:6: warning FAB-MTU-001: leaf-rail0/p0: "), line
    assert line.endswith(" [3 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0]"), line


@pytest.mark.parametrize("node", [1, 2, 3])
def test_the_example_path_of_one_bad_nic_starts_at_the_first_nic_of_its_rail(tmp_path: Path, node: int) -> None:
    """One rail-0 NIC without PFC reaches its 3 paths to the other rail-0 NICs; the example is the first of them in
    node order (docs/fabric.md), the one from dgx-h100-0 (for dgx-h100-0 itself: to dgx-h100-1)."""
    line = _one_finding(tmp_path, f'extends: dgx-h100-rail\nname: x\nhosts:\n'
                                  f'  "dgx-h100-{node}/mlx5_0": {{roce: {{pfcPriorities: []}}}}\n')
    assert f": error FAB-PFC-001: dgx-h100-{node}/mlx5_0: " in line, line
    assert line.endswith(f" [3 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-{node}/mlx5_0]"), line


def test_the_example_path_of_the_first_nic_goes_to_the_second(tmp_path: Path) -> None:
    line = _one_finding(tmp_path, 'extends: dgx-h100-rail\nname: x\nhosts:\n'
                                  '  "dgx-h100-0/mlx5_0": {roce: {pfcPriorities: []}}\n')
    assert line.endswith(" [3 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0]"), line


def test_a_port_facing_the_last_nic_of_a_rail_counts_its_three_paths(tmp_path: Path) -> None:
    """leaf-rail0/p3 faces dgx-h100-3 (the far end of its paths): 3 paths, the example from dgx-h100-0; the report's
    path summary splits rail 0's 6 paths and the other rails' 42 as 45 at 9000 and 3 at 5000."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail0\n    ports:\n"
                 "      - {name: p3, mtu: 5000}\n")
    report = lint(load_fabric(f))
    (finding,) = report.findings
    assert str(finding).endswith(" [3 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-3/mlx5_0]"), finding
    text = report.format()
    assert "paths: 45 x path MTU 9000:" in text and "paths: 3 x path MTU 5000:" in text, text


def test_the_healthy_rail_fabric_summarises_its_48_paths() -> None:
    text = lint(load_fabric("dgx-h100-rail")).format()
    assert "48 RoCE path(s)" in text and "paths: 48 x path MTU 9000: RoCE MTU 4096 fits" in text, text


def test_a_nic_with_another_dscp_is_told_what_its_peers_use(tmp_path: Path) -> None:
    """dgx-h100-rail marks RoCE DSCP 26 on priority 3 (docs/fabric.md's example config: dscpToPriority {26: 3});
    a NIC sending DSCP 24 is told its peers' DSCP 26 / priority 3."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: dgx-h100-rail\nname: x\nhosts:\n  "dgx-h100-2/mlx5_0": {roce: {dscp: 24}}\n')
    messages = [x.message for x in lint(load_fabric(f)).findings if x.element == "dgx-h100-2/mlx5_0"]
    assert messages == ["the NIC sends RoCE with DSCP 24 / priority 3, most of its VLAN 100 peers with DSCP 26 / "
                        "priority 3"], messages


_PRIORITY_4_PORT = ("{dscpToPriority: {26: 3, 34: 4, 48: 6}, pfcPriorities: [3, 4], headroom: [3, 4], "
                    "ecn: {priorities: [3, 4], minKB: 150, maxKB: 1500, probability: 10}}")


def test_a_far_end_port_missing_the_senders_priority_counts_every_port_of_its_class(tmp_path: Path) -> None:
    """Rail 0's dgx-h100-0 and -1 send RoCE with DSCP 34 on priority 4, and their ports p0/p1 classify and protect
    it; p2 and p3 (facing dgx-h100-2 and -3) keep the defaults' PFC [3] and ECN [3]. Only traffic from nodes 0/1
    towards 2/3 is hurt, at the far end's egress: 2 ports (p2, p3), 2 x 2 = 4 paths; each of the three groups of
    ports agrees among itself (0<->1 and 2<->3 are clean), so only the far end of a path reaches it."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: dgx-h100-rail\nname: x\nhosts:\n'
                 '  "dgx-h100-[01]/mlx5_0": {roce: {dscp: 34, priority: 4, pfcPriorities: [4]}}\n'
                 'switches:\n  - name: leaf-rail0\n    ports:\n'
                 f'      - {{name: p0, qos: {_PRIORITY_4_PORT}}}\n      - {{name: p1, qos: {_PRIORITY_4_PORT}}}\n')
    lines = {x.id: str(x) for x in lint(load_fabric(f)).findings if x.element == "defaults"}
    reach = " [2 ports/NICs; 4 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-2/mlx5_0]"
    assert lines["FAB-PFC-001"].endswith(": PFC priorities [3] do not include priority 4, which RoCE is classified "
                                         "into" + reach), lines
    assert lines["FAB-ECN-001"].endswith(": ECN marks priorities [3] only; RoCE runs on priority 4" + reach), lines


def test_each_line_that_set_a_bad_value_counts_only_its_own_ports_paths(tmp_path: Path) -> None:
    """The far-end case above, but p2 now states its PFC list ([3]) on a line of its own while p3 keeps the
    defaults': the same wrong value from two lines is two findings (docs/fabric.md: "one finding at the line that
    set it"), each reaching only its own port's paths. p2 faces dgx-h100-2, so from nodes 0 and 1 to node 2: 2 paths,
    e.g. 0 <-> 2; the defaults now reach only p3: 0 <-> 3 and 1 <-> 3, e.g. 0 <-> 3 (not 0 <-> 2, which is p2's)."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: dgx-h100-rail\nname: x\nhosts:\n'
                 '  "dgx-h100-[01]/mlx5_0": {roce: {dscp: 34, priority: 4, pfcPriorities: [4]}}\n'
                 'switches:\n  - name: leaf-rail0\n    ports:\n'
                 f'      - {{name: p0, qos: {_PRIORITY_4_PORT}}}\n      - {{name: p1, qos: {_PRIORITY_4_PORT}}}\n'
                 '      - {name: p2, qos: {pfcPriorities: [3]}}\n')
    pfc = sorted(str(x).split(": error FAB-PFC-001: ")[1] for x in lint(load_fabric(f)).findings
                 if x.id == "FAB-PFC-001")
    why = "PFC priorities [3] do not include priority 4, which RoCE is classified into"
    assert pfc == [f"defaults: {why} [2 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-3/mlx5_0]",
                   f"leaf-rail0/p2: {why} [2 path(s), e.g. dgx-h100-0/mlx5_0 <-> dgx-h100-2/mlx5_0]"], pfc


def test_a_spine_port_finding_counts_every_path_that_crosses_the_spine(tmp_path: Path) -> None:
    """gb200-nvl72-spine-leaf as its header describes it: trays 0-8 on leaf0, 9-17 on leaf1, spine1 trunks rails 1
    and 3. A 1500-byte spine1/p0 (a port in the middle of paths, facing leaf0) sits on every rail-1 and rail-3 path
    from a leaf0 tray to a leaf1 tray: 9 x 9 per rail, 162 in all; paths within one leaf never reach it."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: gb200-nvl72-spine-leaf\nname: x\nswitches:\n  - name: spine1\n    ports:\n"
                 "      - {name: p0, mtu: 1500}\n")
    (finding,) = lint(load_fabric(f)).findings
    assert (finding.id, finding.element, finding.paths) == ("FAB-MTU-001", "spine1/p0", 9 * 9 * 2), finding
    assert finding.example == "gb200-tray-0/mlx5_1 <-> gb200-tray-9/mlx5_1", finding


def test_two_far_leaf_ports_each_count_the_paths_of_their_own_nic_across_the_spine(tmp_path: Path) -> None:
    """gb200-nvl72-spine-leaf as its header describes it (trays 0-8 on leaf0, 9-17 on leaf1, a VLAN per rail):
    leaf1/p1 and leaf1/p5 face the rail-1 NICs of gb200-tray-9 and gb200-tray-10. At 1500 bytes each, on lines of
    their own, each port sits on every rail-1 path of its own NIC: to the 8 other leaf1 trays and, through spine1,
    to the 9 leaf0 trays, 17 in all (the 9 <-> 10 path crosses both). On the paths from leaf0 each is the far end
    (leaf0 access port, uplink, spine1, leaf1 uplink, leaf1 access port); a path from leaf0 to tray 10 never
    crosses p1. The example is the first path in node order, from gb200-tray-0."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: gb200-nvl72-spine-leaf\nname: x\nswitches:\n  - name: leaf1\n    ports:\n"
                 "      - {name: p1, mtu: 1500}\n      - {name: p5, mtu: 1500}\n")
    found = {(x.id, x.element): (x.paths, x.example) for x in lint(load_fabric(f)).findings}
    assert found == {("FAB-MTU-001", "leaf1/p1"): (8 + 9, "gb200-tray-0/mlx5_1 <-> gb200-tray-9/mlx5_1"),
                     ("FAB-MTU-001", "leaf1/p5"): (8 + 9, "gb200-tray-0/mlx5_1 <-> gb200-tray-10/mlx5_1")}, found


def test_a_value_shared_by_a_whole_rail_but_written_on_two_lines_is_two_findings(tmp_path: Path) -> None:
    """All four rail-0 NICs lose PFC, nodes 0-1 on one line and nodes 2-3 on another: the NICs look alike (one
    class), but each line is a finding of its own with its 2 NICs. Of rail 0's 6 paths, all but the one between
    the other line's two nodes touch a NIC of the line: 5 each; the example is the first such path, 0 <-> 1 for the
    first line, 0 <-> 2 for the second (node 2's first path goes to node 0)."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: dgx-h100-rail\nname: x\nhosts:\n'
                 '  "dgx-h100-[01]/mlx5_0": {roce: {pfcPriorities: []}}\n'
                 '  "dgx-h100-[23]/mlx5_0": {roce: {pfcPriorities: []}}\n')
    found = sorted((x.line, x.ports, x.paths, x.example) for x in lint(load_fabric(f)).findings
                   if x.id == "FAB-PFC-001")
    assert found == [(4, 2, 5, "dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0"),
                     (5, 2, 5, "dgx-h100-0/mlx5_0 <-> dgx-h100-2/mlx5_0")], found


def test_every_nic_off_the_common_roce_setting_is_named_when_three_settings_meet(tmp_path: Path) -> None:
    """FAB-QOS-001 (all NICs of a segment send RoCE with one DSCP and priority): rail 0's dgx-h100-2 sends DSCP 24
    and dgx-h100-3 DSCP 34 while nodes 0 and 1 keep the common 26. Three settings in one segment: both odd NICs are
    named, each with its 3 paths to the NICs that differ from it (the switches' DSCP map findings aside)."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: dgx-h100-rail\nname: x\nhosts:\n  "dgx-h100-2/mlx5_0": {roce: {dscp: 24}}\n'
                 '  "dgx-h100-3/mlx5_0": {roce: {dscp: 34}}\n')
    found = sorted((x.element, x.message, x.paths) for x in lint(load_fabric(f)).findings
                   if x.id == "FAB-QOS-001" and x.element.startswith("dgx-h100-"))  # not the switches' own findings
    common = "most of its VLAN 100 peers with DSCP 26 / priority 3"
    assert found == [("dgx-h100-2/mlx5_0", f"the NIC sends RoCE with DSCP 24 / priority 3, {common}", 3),
                     ("dgx-h100-3/mlx5_0", f"the NIC sends RoCE with DSCP 34 / priority 3, {common}", 3)], found


_ALL_1500 = 'extends: dgx-h100-rail\nname: x\ndefaults:\n  mtu: 1500\nhosts:\n  "*/*": {mtu: 1500}\n'
"""The seeded FAB-MTU-003 example: 1500 bytes everywhere, so every path runs RoCE at 1024 (NVIDIA's RoCE MTU rule:
the largest InfiniBand MTU, 256-4096, that fits the Ethernet MTU with RoCE's headers; 2048 plus headers > 1500)."""


_MTU_1000_HOP = ("MTU 1000 is below the endpoints' MTU 1500: the path carries at most 956 bytes of RoCE payload "
                 "(RoCE path MTU 512) but the NICs negotiate 1024: larger frames are dropped silently")


@pytest.mark.parametrize(("extra", "cause", "element", "severity", "message"), [
    ('  "dgx-h100-1/mlx5_5": {mtu: 1400}\n', "FAB-MTU-002", "dgx-h100-1/mlx5_5", "warning",
     "MTU 1400 (active RoCE MTU 1024) differs from its peers' MTU 1500 (RoCE MTU 1024)"),
    ("switches:\n  - name: leaf-rail3\n    ports:\n      - {name: p1, mtu: 1000}\n", "FAB-MTU-001", "leaf-rail3/p1",
     "error", _MTU_1000_HOP),
], ids=["nic-1400", "port-1000"])
def test_a_path_whose_mtu_is_already_faulted_is_not_told_again_it_lacks_4096(tmp_path: Path, extra: str, cause: str,
                                                                                element: str, severity: str,
                                                                                message: str) -> None:
    """docs/fabric.md's FAB-MTU-003 is the consistent-but-small case ("not 1024 because everything is 1500"); a path
    with a smaller hop (FAB-MTU-001) or mismatched ends (FAB-MTU-002) has that finding as its cause, and the module
    gives the cause, not its echoes. dgx-h100-1's rail-3 NIC (mlx5_5, the DGX H100 User Guide's GPU-3 NIC, on
    leaf-rail3/p1) at 1400, or its leaf port at 1000: its 3 rail-3 paths (to nodes 0, 2, 3) are the cause's; the
    other 48 - 3 = 45 of the 4 x 8 rails x 6 paths stay FAB-MTU-003's. 1400 still gives RoCE 1024 (a warning, as
    FAB-MTU-002-same-roce-mtu); 1000 gives 512 (1024 plus headers > 1000), and RoCE v2's IPv4 + UDP + BTH + ICRC
    headers (20 + 8 + 12 + 4 = 44 bytes) leave (1000 - 44) rounded down to 4 = 956 bytes of payload: an error."""
    f = tmp_path / "f.yaml"
    f.write_text(_ALL_1500 + extra)
    found = sorted((x.id, x.paths) for x in lint(load_fabric(f)).findings)
    assert found == sorted([(cause, 3), ("FAB-MTU-003", 45)]), found
    (faulted,) = [x for x in lint(load_fabric(f)).findings if x.id == cause]
    assert (faulted.element, faulted.severity.value, faulted.message) == (element, severity, message), faulted
