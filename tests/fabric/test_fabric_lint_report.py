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

from fakehw.fabric import load_fabric
from fakehw.fabric.lint import Finding, lint
from fakehw.fabric.loader import broken_examples, builtin_fabrics, examples_dir


def _only(stem: str) -> Finding:
    (finding,) = lint(load_fabric(broken_examples()[stem])).findings
    return finding


@pytest.mark.parametrize(("stem", "element", "ports", "paths", "example"), [
    # a cable's two ends, as the message names them (spine1/p0 faces leaf0/up1; the header names both)
    ("FAB-VLAN-001-cable", "leaf0/up1<->spine1/p0", 1, 0, None),
    # a loop is a VLAN's property, not one port's: the VLAN the patch switch trunks twice
    ("FAB-VLAN-002-loop", "VLAN 100", 1, 0, None),
    # a NIC's own VLAN mistake names the NIC the header names, not the hosts entry that set it
    ("FAB-VLAN-001-host-vlan", "dgx-h100-3/mlx5_3", 1, 0, None),
    ("FAB-VLAN-001-untagged-nic", "dgx-h100-3/mlx5_4", 1, 0, None),
    # the uncabled NIC (leaf-rail7/p2 faces dgx-h100-2, rail 7 = mlx5_11 in the DGX H100 User Guide's naming)
    ("FAB-LINK-001-uncabled", "dgx-h100-2/mlx5_11", 1, 0, None),
    # rail 2 split by the leaf1-spine0 uplink: the rail, not a switch
    ("FAB-PATH-001-split-rail", "rail 2", 1, 0, None),
])
def test_a_finding_outside_any_path_names_the_element_the_mistake_is_about(
        stem: str, element: str, ports: int, paths: int, example: str | None) -> None:
    """Findings about cabling, VLANs, loops and rails name the thing that is wrong (docs/fabric.md's output lines:
    ``error FAB-VLAN-001: leaf0/up1<->spine1/p0: cable ...``), never the config element that merely holds the
    offending line: that is the location's job."""
    finding = _only(stem)
    assert (finding.element, finding.ports, finding.paths, finding.example) == (element, ports, paths, example), \
        str(finding)


def test_a_nic_off_its_segments_roce_setting_counts_and_names_its_paths() -> None:
    """FAB-QOS-001-nic-priority: dgx-h100-1's rail-7 NIC (mlx5_11) sends RoCE on priority 4 while its 3 rail-7
    peers use 3. It differs from all 3, so 3 paths, and the example is the first of them in node order
    (docs/fabric.md: "one example path (the first it reaches, in node order)"): the one from dgx-h100-0."""
    report = lint(load_fabric(broken_examples()["FAB-QOS-001-nic-priority"]))
    (finding,) = [f for f in report.findings if f.element == "dgx-h100-1/mlx5_11"]
    assert (finding.id, finding.ports, finding.paths, finding.example) == (
        "FAB-QOS-001", 1, 3, "dgx-h100-0/mlx5_11 <-> dgx-h100-1/mlx5_11"), str(finding)


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
    native = _only("FAB-PATH-001-split-rail")
    assert (native.line, native.key) == (6, None)
    assert Path(native.source).read_text().splitlines()[5] == "switches:"
