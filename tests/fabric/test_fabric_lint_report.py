"""What a lint report tells its reader beyond the requirement IDs: which element each finding names, its reach, the
per-path listing and JSON, not-applicable lines, and an imported config's notes and manifest locations.

Every expected value is worked out by hand from the seeded mistake (each broken example's header says what it
changes) and from the built-in fabrics as their headers describe them: ``dgx-h100-rail`` is 4 DGX H100 nodes with
one leaf per rail (leaf-rail<r>, port p<n> facing dgx-h100-<n>, VLAN 100 + r, switch ports 9216, NICs 9000);
``gb200-nvl72-spine-leaf`` is 18 trays of 4 NICs, trays 0-8 on leaf0 and 9-17 on leaf1, rail r = VLAN 200 + r.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fakehw.cli import main as fakehw_main
from fakehw.fabric import load_fabric
from fakehw.fabric.lint import _describe, lint
from fakehw.fabric.loader import broken_examples, builtin_fabrics, examples_dir

SEEDED_AT: dict[str, tuple[str, str, int, int, str | None]] = {
    # stem: (the text of the line that seeds the mistake, the element named, ports/NICs, paths, example path).
    # dgx-h100-rail's rails: r = leaf-rail<r>, its 4 host ports (p<n> faces dgx-h100-<n>) and 6 paths; rail r's NIC
    # is mlx5_0, 3, 4, 5, 6, 9, 10, 11 (the DGX H100 User Guide's names). A switch-wide setting reaches the switch's
    # 4 ports and every path of its rail (all 6 enter and leave through it); one NIC or one host port reaches its
    # 3 paths; the example is the first path in node order (docs/fabric.md). Rules about settings rather than paths
    # (thresholds, buffers, watchdogs, PFC on other traffic, cabling, VLANs, rails) count no paths.
    "FAB-BUF-001-no-headroom": ("qos: {headroom: []}", "leaf-rail2", 4, 0, None),
    "FAB-CNP-001-cnp-map": ("qos: {dscpToPriority: {26: 3, 48: 5}}", "leaf-rail1", 4, 6,
                            "dgx-h100-0/mlx5_3 <-> dgx-h100-1/mlx5_3"),
    "FAB-CNP-001-no-cnp-priority": ("qos: {cnpPriority: null}", "leaf-rail6", 4, 6,
                                    "dgx-h100-0/mlx5_10 <-> dgx-h100-1/mlx5_10"),
    "FAB-ECN-001-nic": ("dgx-h100-3/mlx5_4: {roce: {ecn: false}}", "dgx-h100-3/mlx5_4", 1, 3,
                        "dgx-h100-0/mlx5_4 <-> dgx-h100-3/mlx5_4"),
    "FAB-ECN-001-no-ecn": ("ecn: {enabled: false}", "leaf-rail5", 4, 6, "dgx-h100-0/mlx5_9 <-> dgx-h100-1/mlx5_9"),
    "FAB-ECN-001-other-priority": ("qos: {ecn: {priorities: [4]", "leaf-rail6", 4, 6,
                                   "dgx-h100-0/mlx5_10 <-> dgx-h100-1/mlx5_10"),
    # defaults reach every host port: 8 leaves x 4
    "FAB-ECN-002-thresholds": ("minKB: 2000, maxKB: 1000", "defaults", 32, 0, None),
    # one hosts line for the 4 rail-4 NICs: the first of them names the finding
    "FAB-HOST-001-trust-pcp": ('"dgx-h100-*/mlx5_6": {roce: {trust: pcp}}', "dgx-h100-0/mlx5_6", 4, 6,
                               "dgx-h100-0/mlx5_6 <-> dgx-h100-1/mlx5_6"),
    "FAB-LINK-001-shutdown": ("- {name: p1, shutdown: true}", "dgx-h100-1/mlx5_5", 1, 0, None),
    # an uncabled NIC has no port to point at: the config's cabling (its switches) is where it is missing
    "FAB-LINK-001-uncabled": ("switches:", "dgx-h100-2/mlx5_11", 1, 0, None),
    "FAB-MTU-001-port-1500": ("- {name: p1, mtu: 1500}", "leaf-rail3/p1", 1, 3,
                              "dgx-h100-0/mlx5_5 <-> dgx-h100-1/mlx5_5"),
    "FAB-MTU-001-port-5000": ("- {name: p0, mtu: 5000}", "leaf-rail0/p0", 1, 3,
                              "dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0"),
    # FAB-MTU-002 blames the smaller NIC (1500 and 4200 against 9000-byte peers)
    "FAB-MTU-002-host-mtu": ("dgx-h100-2/mlx5_9: {mtu: 1500}", "dgx-h100-2/mlx5_9", 1, 3,
                             "dgx-h100-0/mlx5_9 <-> dgx-h100-2/mlx5_9"),
    "FAB-MTU-002-same-roce-mtu": ("dgx-h100-1/mlx5_6: {mtu: 4200}", "dgx-h100-1/mlx5_6", 1, 3,
                                  "dgx-h100-0/mlx5_6 <-> dgx-h100-1/mlx5_6"),
    # every NIC (32) on every path (48) runs RoCE 1024: the NICs' MTU line
    "FAB-MTU-003-small-mtu": ('"*/*": {mtu: 1500}', "RoCE paths", 32, 48, "dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0"),
    "FAB-PATH-001-split-rail": ("switches:", "rail 2", 1, 0, None),
    "FAB-PFC-001-nic": ("dgx-h100-2/mlx5_0: {roce: {pfcPriorities: [4]}}", "dgx-h100-2/mlx5_0", 1, 3,
                        "dgx-h100-0/mlx5_0 <-> dgx-h100-2/mlx5_0"),
    "FAB-PFC-001-no-pfc": ("qos: {pfcPriorities: []}", "leaf-rail1", 4, 6, "dgx-h100-0/mlx5_3 <-> dgx-h100-1/mlx5_3"),
    "FAB-PFC-002-default-priority": ("qos: {pfcPriorities: [3, 0]", "leaf-rail3", 4, 0, None),
    "FAB-PFC-002-nic-priority-0": ("dgx-h100-0/mlx5_10: {roce: {pfcPriorities: [0, 3]}}", "dgx-h100-0/mlx5_10", 1, 0,
                                   None),
    # the ports trust DSCP, so the DSCP map is what puts storage (DSCP 10) on a PFC priority
    "FAB-PFC-002-storage-lossless": ("dscpToPriority: {26: 3, 48: 6, 10: 3}", "defaults", 32, 0, None),
    "FAB-PFC-003-alert-only": ("qos: {pfcWatchdog: {action: alert", "leaf-rail1", 4, 0, None),
    "FAB-PFC-003-hasty-detection": ("qos: {pfcWatchdog: {action: forward, detectionMs: 20", "leaf-rail0", 4, 0, None),
    "FAB-PFC-003-no-watchdog": ("qos: {pfcWatchdog: {enabled: false}}", "leaf-rail6", 4, 0, None),
    "FAB-PFC-003-slow-detection": ("detectionMs: 3000", "leaf-rail5", 4, 0, None),
    "FAB-QOS-001-dscp-map": ("qos: {dscpToPriority: {26: 4, 48: 6}}", "leaf-rail2", 4, 6,
                             "dgx-h100-0/mlx5_4 <-> dgx-h100-1/mlx5_4"),
    # dgx-h100-1's rail-7 NIC differs from its 3 peers: its 3 paths
    "FAB-QOS-001-nic-priority": ("dgx-h100-1/mlx5_11: {roce: {priority: 4", "dgx-h100-1/mlx5_11", 1, 3,
                                 "dgx-h100-0/mlx5_11 <-> dgx-h100-1/mlx5_11"),
    "FAB-QOS-001-pcp-map": ("qos: {trust: pcp, pcpToPriority: {3: 4}}", "leaf-rail5", 4, 6,
                            "dgx-h100-0/mlx5_9 <-> dgx-h100-1/mlx5_9"),
    "FAB-QOS-002-pcp-untagged": ("qos: {trust: pcp}", "leaf-rail4", 4, 6, "dgx-h100-0/mlx5_6 <-> dgx-h100-1/mlx5_6"),
    # the misfit NIC's new cable puts it on rail 3
    "FAB-RAIL-001-same-rail": ("- {name: p4, connect: dgx-h100-1/mlx5_4}", "dgx-h100-1", 1, 0, None),
    # the port's VLAN puts tray 0's rail-1 NIC on rail 0
    "FAB-RAIL-001-vlan-rail": ("- {name: p1, vlan: {tagged: [200]}}", "gb200-tray-0", 1, 0, None),
    # spine1/p0 is the end that carries VLAN 299; the element is the cable's two ends (spine1/p0 faces leaf0/up1)
    "FAB-VLAN-001-cable": ("- {name: p0, vlan: {tagged: [201, 203, 299]}}", "leaf0/up1<->spine1/p0", 1, 0, None),
    "FAB-VLAN-001-host-vlan": ("dgx-h100-3/mlx5_3: {vlan: 111}", "dgx-h100-3/mlx5_3", 1, 0, None),
    "FAB-VLAN-001-untagged-nic": ("dgx-h100-3/mlx5_4: {vlan: untagged}", "dgx-h100-3/mlx5_4", 1, 0, None),
    # the cable that closes the loop (its message names it), and the loop is the VLAN's
    "FAB-VLAN-002-loop": ("- {name: p5, connect: patch/u1}", "VLAN 100", 1, 0, None),
}


def test_every_broken_example_is_in_the_table() -> None:
    assert sorted(SEEDED_AT) == sorted(broken_examples())


@pytest.mark.parametrize("stem", sorted(SEEDED_AT))
def test_a_seeded_mistake_is_found_at_its_line_naming_what_it_reaches(stem: str) -> None:
    """docs/fabric.md: "A setting that is wrong on many ports gives one finding at the line that set it, with the
    number of ports and paths it reaches and one example path (the first it reaches, in node order)". Each broken
    example's finding in its own file is at the line that seeds it (header comments say what it changes), names the
    element the mistake is about (a NIC, a port, a switch, a cable, a VLAN, a rail, a host) - never the config
    element that merely holds the line - and reaches what that setting reaches on the fabric."""
    at, element, ports, paths, example = SEEDED_AT[stem]
    path = broken_examples()[stem]
    lines = path.read_text().splitlines()
    (line,) = [i + 1 for i, text in enumerate(lines) if at in text]
    (finding,) = [f for f in lint(load_fabric(path)).findings if f.source == str(path)]
    assert (finding.line, finding.element, finding.ports, finding.paths, finding.example) == (
        line, element, ports, paths, example), str(finding)


def test_a_nic_off_its_segments_roce_setting_and_the_port_it_disagrees_with() -> None:
    """FAB-QOS-001-nic-priority: dgx-h100-1's rail-7 NIC (mlx5_11) sends RoCE on priority 4 while its 3 rail-7 peers
    use 3 and the switches map its DSCP 26 to 3 (dgx-h100-rail's defaults). Two findings: the NIC, differing from
    all 3 peers (3 paths); and the one port that receives its RoCE, leaf-rail7/p1, whose classification comes from
    the defaults' DSCP map in dgx-h100-rail.yaml - the same 3 paths. Both name the first path in node order
    (docs/fabric.md), the one from dgx-h100-0."""
    report = lint(load_fabric(broken_examples()["FAB-QOS-001-nic-priority"]))
    example = "dgx-h100-0/mlx5_11 <-> dgx-h100-1/mlx5_11"
    found = sorted((f.id, f.element, f.ports, f.paths, f.example) for f in report.findings)
    assert found == [("FAB-QOS-001", "defaults", 1, 3, example),
                     ("FAB-QOS-001", "dgx-h100-1/mlx5_11", 1, 3, example)], found
    (port,) = [f for f in report.findings if f.element == "defaults"]
    base = Path(builtin_fabrics()["dgx-h100-rail"])
    assert port.source == str(base) and port.line is not None, str(port)
    assert base.read_text().splitlines()[port.line - 1].strip() == "dscpToPriority: {26: 3, 48: 6}", str(port)
    assert port.message == "classifies RoCE (DSCP 26) into priority 3; the NICs use priority 4"


def test_two_nics_of_a_host_in_one_segment_without_a_rail_share_it(tmp_path: Path) -> None:
    """FAB-RAIL-001 takes a NIC's rail from its leaf's ``rail``, else its VLAN's ``rail``, else its segment
    (docs/fabric.md). Tray 0's rail-0 and rail-1 NICs both moved to an undeclared VLAN 299 on leaf0 (its ports p0
    and p1): no leaf or VLAN rail, so the segment decides and the two share one. The rails they left are split:
    each keeps its other 17 NICs on VLAN 200 + r across leaf0, leaf1 and the spine that trunks it."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: gb200-nvl72-spine-leaf\nname: x\nhosts:\n  "gb200-tray-0/mlx5_[01]": {vlan: 299}\n'
                 "switches:\n  - name: leaf0\n    ports:\n      - {name: p0, vlan: {tagged: [299]}}\n"
                 "      - {name: p1, vlan: {tagged: [299]}}\n")
    report = lint(load_fabric(f))
    found = {(x.id, x.element): x.message for x in report.findings}
    assert found[("FAB-RAIL-001", "gb200-tray-0")] == "mlx5_0 and mlx5_1 share one segment of VLAN 299", found
    assert found[("FAB-PATH-001", "rail 1")] == (
        "rail 1 is split into 2 layer-2 segments that cannot reach each other: VLAN 201 on leaf0, leaf1, spine1 "
        "(17 NIC(s), e.g. gb200-tray-1/mlx5_1); VLAN 299 on leaf0 (1 NIC(s), e.g. gb200-tray-0/mlx5_1)"), found
    assert set(found) == {("FAB-RAIL-001", "gb200-tray-0"), ("FAB-PATH-001", "rail 0"), ("FAB-PATH-001", "rail 1")}
    # pointed at the cable of the NIC that joins the first one's segment: mlx5_1's, leaf0/p1 in the base config
    (rail,) = [x for x in report.findings if x.id == "FAB-RAIL-001"]
    base = Path(builtin_fabrics()["gb200-nvl72-spine-leaf"])
    assert rail.source == str(base) and rail.line is not None, str(rail)
    assert base.read_text().splitlines()[rail.line - 1].strip().startswith("- {name: p1, connect: gb200-tray-0/mlx5_1,")


def test_the_listing_of_every_path_gives_its_hops_and_mtus(tmp_path: Path) -> None:
    """``fakehw fabric lint --paths``: one line per path with its ports in order and the MTUs along it (NIC 9000,
    ingress 9216, egress 9216, NIC 9000), the path MTU (their minimum), RoCE MTU 4096 (the largest IB MTU that fits
    9000 - 96; docs/fabric.md's MTU arithmetic) and the largest payload, 9000 - 44 = 8956 (a multiple of 4). A
    config without headroom lists also says FAB-BUF-001 is not applicable, and why."""
    f = tmp_path / "f.yaml"
    f.write_text(Path(builtin_fabrics()["dgx-h100-rail"]).read_text().replace("    headroom: [3]\n", ""))
    lines = lint(load_fabric(f)).format(show_paths=True).splitlines()
    assert "  dgx-h100-0/mlx5_0 <-> dgx-h100-1/mlx5_0  vlan 100  via leaf-rail0/p0 leaf-rail0/p1  MTUs " \
           "9000,9216,9216,9000  -> path MTU 9000, RoCE 4096/4096, max payload 8956" in lines, lines
    assert len([x for x in lines if x.startswith("  dgx-h100-")]) == 48
    assert [x.split(":")[0] for x in lines if x.startswith("not applicable")] == ["not applicable FAB-BUF-001"]
    assert lines[-1] == "summary: 0 error(s), 0 warning(s)"


def test_the_json_report_carries_each_findings_place_and_reach() -> None:
    """The seeded 1500-byte leaf-rail3/p1 (the 4th switch's 2nd port: switches[3].ports[1]) as JSON: the
    requirement's title, where it was set, 1 port, the 3 rail-3 paths of dgx-h100-1 (the first in node order, from
    dgx-h100-0, as the example); path MTU groups 45 x 9000 and 3 x 1500 (1456 B payload: 1500 - 44, RoCE 1024)."""
    stem = "FAB-MTU-001-port-1500"
    doc = json.loads(lint(load_fabric(broken_examples()[stem])).dumps(include_paths=True))
    (finding,) = doc["findings"]
    assert {k: finding[k] for k in ("id", "severity", "title", "element", "path", "key", "ports", "paths",
                                    "example")} == {
        "id": "FAB-MTU-001", "severity": "error",
        "title": "No hop of a RoCE path has a smaller MTU than the path's endpoints", "element": "leaf-rail3/p1",
        "path": "switches[3].ports[1].mtu", "key": None, "ports": 1, "paths": 3,
        "example": "dgx-h100-0/mlx5_5 <-> dgx-h100-1/mlx5_5"}, finding
    assert Path(finding["source"]).name == f"{stem}.yaml"
    assert doc["summary"] == {"errors": 1, "warnings": 0, "findings": 1, "paths": 48, "pathClasses": 9}
    assert [(g["pathMtu"], g["supportedRoceMtu"], g["maxRocePayload"], g["paths"]) for g in doc["pathMtus"]] == [
        (9000, 4096, 8956, 45), (1500, 1024, 1456, 3)]
    assert len(doc["paths"]) == 48 and doc["notApplicable"] == {}


def test_the_reports_json_text_is_what_the_cli_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """``LintReport.dumps`` gives the text ``fakehw fabric lint --json [--paths]`` prints for one config, byte for
    byte (2-space indentation), so a script switching from the CLI to the library sees no difference."""
    path = str(broken_examples()["FAB-MTU-001-port-1500"])
    for flags, include_paths in (([], False), (["--paths"], True)):
        assert fakehw_main(["fabric", "lint", "--json", *flags, path]) == 1
        assert capsys.readouterr().out == lint(load_fabric(path)).dumps(include_paths=include_paths) + "\n"


def _sonic_copy(tmp_path: Path) -> Path:
    out = tmp_path / "sonic"
    shutil.copytree(examples_dir() / "sonic" / "dgx-h100-rail", out)
    return out


@pytest.mark.parametrize(("extra", "listed"), [
    # the example's own 8 ignored tables plus 4 = 12: every one listed
    (("AAA", "NTP", "SNMP", "TACPLUS"), 12),
    # plus 5 = 13: the first 12 (sorted) and "and 1 more"
    (("AAA", "NTP", "SNMP", "TACPLUS", "KDUMP"), 12),
])
def test_an_imports_ignored_tables_are_summed_up(tmp_path: Path, extra: tuple[str, ...], listed: int) -> None:
    """SONiC tables that say nothing about RoCE (AAA, NTP, SNMP, TACACS+, kdump) are noted as ignored, one summary
    line over the files: how many files, the first 12 table names in order and how many more. A table the importer
    does not know is a note of its own. The example's 8 switch files all hold CABLE_LENGTH, FEATURE,
    LOOPBACK_INTERFACE, MAP_PFC_PRIORITY_TO_QUEUE, MGMT_INTERFACE, NTP_SERVER, SYSLOG_SERVER and VERSIONS."""
    root = _sonic_copy(tmp_path)
    db = root / "leaf-rail0" / "config_db.json"
    data = json.loads(db.read_text())
    data.update({t: {"x": {}} for t in extra})
    data["MY_VENDOR_TABLE"] = {"x": {}}
    db.write_text(json.dumps(data, indent=4))
    text = lint(load_fabric(f"sonic:{root}")).format()
    base = ["CABLE_LENGTH", "FEATURE", "LOOPBACK_INTERFACE", "MAP_PFC_PRIORITY_TO_QUEUE", "MGMT_INTERFACE",
            "NTP_SERVER", "SYSLOG_SERVER", "VERSIONS"]
    keys = sorted([*base, *extra])
    more = f" and {len(keys) - listed} more" if len(keys) > listed else ""
    summary = [x for x in text.splitlines() if x.startswith("note: ignored")]
    assert summary == [f"note: ignored (not relevant to RoCE) in 8 file(s): {', '.join(keys[:listed])}{more} "
                       "('fakehw fabric import' lists every one)"], text
    unknown = [x for x in text.splitlines() if "MY_VENDOR_TABLE" in x]
    assert len(unknown) == 1 and unknown[0].startswith("note: ") and "not known to the SONiC importer" in unknown[0]


def test_a_split_rail_points_at_its_vlan_in_an_imports_manifest_and_at_switches_natively() -> None:
    """docs/fabric.md: "the FAB-PATH-001 finding of an import points at the rail's VLAN in the manifest, the
    operator's files having no single key that splits a rail". The SONiC GB200 example splits rail 3 (VLAN 203,
    the 4th VLAN of the base manifest, on its line 10); the native one splits rail 2 and points at its own
    ``switches:`` (line 6), where the uplinks lost the VLAN."""
    imported = examples_dir() / "sonic" / "broken" / "FAB-PATH-001-gb200-rail-split"
    (finding,) = lint(load_fabric(f"sonic:{imported}")).findings
    manifest = examples_dir() / "sonic" / "gb200-nvl72-spine-leaf" / "fabric.yaml"
    assert (Path(finding.source).resolve(), finding.line, finding.key) == (manifest.resolve(), 10, "vlans[3]"), \
        str(finding)
    assert manifest.read_text().splitlines()[9].strip() == "- {id: 203, name: rail3, rail: 3}"
    assert str(finding).startswith(f"{finding.source}:10: vlans[3]: error FAB-PATH-001: rail 3: ")
    (native,) = lint(load_fabric(broken_examples()["FAB-PATH-001-split-rail"])).findings
    assert (native.line, native.key) == (6, None)
    assert Path(native.source).read_text().splitlines()[5] == "switches:"


@pytest.mark.parametrize(("doc_path", "name"), [
    (("switches", 2), "leaf-rail2"), (("switches", 2, "qos"), "leaf-rail2"),
    (("switches", 2, "ports", 1), "leaf-rail2/p1"), (("switches", 2, "ports", 1, "mtu"), "leaf-rail2/p1"),
    (("defaults", "qos"), "defaults"), (("hosts", "dgx-h100-1/mlx5_0", "mtu"), "hosts[dgx-h100-1/mlx5_0]"),
    (("hosts", "dgx-h100-1/mlx5_0"), "hosts[dgx-h100-1/mlx5_0]"),
    # paths that name no switch or port of the config: the path itself, never an IndexError
    (("switches",), "switches"), (("switches", 8), "switches[8]"), (("switches", 2, "ports"), "leaf-rail2"),
    (("switches", 2, "ports", 4), "leaf-rail2"), (("hosts",), "hosts"), (("vlans", 3), "vlans[3]"), ((), "(document)"),
])
def test_a_config_element_is_named_from_its_document_path(doc_path: tuple[str | int, ...], name: str) -> None:
    """How a finding names the config element that holds an offending value (docs/fabric.md's output:
    ``error FAB-PFC-001: defaults: ...``, ``leaf0/p3``, ``leaf0``). dgx-h100-rail's third switch is leaf-rail2 with
    ports p0-p3 (its header), so switches[8] and ports[4] do not exist: those, and paths outside the switches, are
    named by the path as the loader's errors write it (``switches[8]``)."""
    assert _describe(load_fabric("dgx-h100-rail"), doc_path) == name


def test_a_nic_value_that_only_the_profile_sets_is_pointed_at_by_the_nics_cable(tmp_path: Path) -> None:
    """dgx-h100-rail's header: "Switch ports 9216, NICs 9000 (from the profile)". Rail 0's NICs on nodes 1-3 raised
    to 9216 leave dgx-h100-0/mlx5_0 at the profile's 9000: FAB-MTU-002 blames the smaller end (its 3 rail-0 paths),
    a warning since both give RoCE MTU 4096 (9000 and 9216 both exceed 4096 plus RoCE's headers; 8192 is no IB
    MTU). No line of either config states that NIC's MTU, so the finding points at what places the NIC in the
    fabric: its cable, leaf-rail0/p0's ``connect`` in dgx-h100-rail.yaml, with no operator key."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: dgx-h100-rail\nname: x\nhosts:\n  "dgx-h100-[123]/mlx5_0": {mtu: 9216}\n')
    report = lint(load_fabric(f))
    (finding,) = report.findings
    assert (finding.id, finding.severity.value, finding.element, finding.ports, finding.paths, finding.key) == (
        "FAB-MTU-002", "warning", "dgx-h100-0/mlx5_0", 1, 3, None), str(finding)
    # One warning and no error, as the summaries count it (what `--strict` fails on; fresh seed 10805 counted two).
    assert report.format().splitlines()[-1] == "summary: 0 error(s), 1 warning(s)"
    assert {k: v for k, v in report.to_json()["summary"].items() if k in ("errors", "warnings", "findings")} == {
        "errors": 0, "warnings": 1, "findings": 1}
    assert finding.message == "MTU 9000 (active RoCE MTU 4096) differs from its peers' MTU 9216 (RoCE MTU 4096)"
    base = Path(builtin_fabrics()["dgx-h100-rail"])
    assert finding.source == str(base) and finding.line is not None, str(finding)
    assert base.read_text().splitlines()[finding.line - 1].strip() == "- {name: p0, connect: dgx-h100-0/mlx5_0}"
