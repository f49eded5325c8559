"""Static conformance: each seeded misconfiguration is flagged with its requirement ID, healthy configs are clean,
and the RoCE path MTU predictions follow from the MTUs in the config."""

from __future__ import annotations

import json
import re
from math import comb
from pathlib import Path

import pytest

from fakehw.cli import main as fakehw_main
from fakehw.fabric import REQUIREMENTS, Severity, load_fabric
from fakehw.fabric.analysis import IB_MTUS, ROCE_HEADROOM, max_send_payload, roce_mtu
from fakehw.fabric.lint import lint
from fakehw.fabric.loader import broken_examples, builtin_fabrics
from fakehw.fabric.model import FabricModel, NicRef, PortRef

SEEDED = re.compile(r"^(FAB-[A-Z]+-\d{3})-")


def _expected_paths(model: FabricModel) -> int:
    """Every pair of NICs of one rail is a path (both built-in fabrics keep rails apart)."""
    by_rail: dict[int | None, int] = {}
    for nic in model.nics:
        by_rail[nic.rail] = by_rail.get(nic.rail, 0) + 1
    return sum(comb(n, 2) for n in by_rail.values())


@pytest.mark.parametrize("name", sorted(builtin_fabrics()))
def test_healthy_configs_have_no_findings(name: str) -> None:
    model = load_fabric(name)
    report = lint(model)
    assert report.findings == (), report.format()
    assert len(report.paths) == _expected_paths(model)
    for path in report.paths:
        a, b = model.host_nic(path.a), model.host_nic(path.b)
        assert a.rail == b.rail
        assert path.path_mtu == min(a.mtu, b.mtu, *(model.port(p).mtu for p in path.ports))
        assert path.negotiated_roce_mtu == path.supported_roce_mtu == 4096


EXPECT = re.compile(r"^# expect: (error|warning) (.+)$", re.MULTILINE)


@pytest.mark.parametrize("stem", sorted(broken_examples()))
def test_each_broken_example_flags_exactly_its_seeded_requirement(stem: str) -> None:
    """One example per branch of each rule: its file says (``# expect: SEVERITY TEXT``, written by hand from what
    the seeded mistake does) which branch must fire, so a mutant that removes that branch fails here."""
    match = SEEDED.match(stem)
    assert match, f"broken example {stem} does not start with the requirement ID it seeds"
    seeded = match.group(1)
    path = broken_examples()[stem]
    expect = EXPECT.search(path.read_text())
    assert expect, f"{stem} has no '# expect: SEVERITY TEXT' line"
    report = lint(load_fabric(path))
    assert report.ids == {seeded}, report.format()
    assert any(f.severity.value == expect.group(1) and expect.group(2) in f.message for f in report.findings), \
        report.format()
    # a finding points at the seeding file; every finding at a line that exists in the file it names (a NIC that
    # disagrees with the fabric also shows where the fabric's side was written)
    assert any(f.source == str(path) for f in report.findings), report.format()
    for finding in report.findings:
        assert finding.line is not None and 1 <= finding.line <= len(Path(finding.source).read_text().splitlines())
        assert finding.severity in (Severity.ERROR, Severity.WARNING)


@pytest.mark.parametrize("name", [*sorted(builtin_fabrics()), *sorted(broken_examples())])
def test_path_classes_find_what_every_path_finds(name: str) -> None:
    """The class-based linter (one representative path per class) reports exactly what checking every path on its
    own reports: rule, severity, element, message, place, port and path counts."""
    model = load_fabric({**builtin_fabrics(), **broken_examples()}[name])

    def shape(exhaustive: bool) -> list[tuple[object, ...]]:
        return [(f.id, f.severity, f.element, f.message, f.source, f.line, f.key, f.ports, f.paths)
                for f in lint(model, exhaustive=exhaustive).findings]

    assert shape(False) == shape(True)
    report = lint(model)
    assert len(report.classes) <= len(lint(model, exhaustive=True).classes)
    assert report.path_count == len(report.paths)


def test_every_static_requirement_has_a_broken_example() -> None:
    seeded = {SEEDED.match(stem).group(1) for stem in broken_examples()}  # type: ignore[union-attr]
    static = {r.id for r in REQUIREMENTS.values() if r.kind == "static"}
    assert seeded == static


def test_a_config_that_states_no_watchdogs_is_not_applicable_not_passed(tmp_path: Path) -> None:
    """Without qos pfcWatchdog nothing says whether pause storms are mitigated: FAB-PFC-003 is not applicable (with
    the reason), never a pass; a watchdog switched off on a port without PFC is no finding (it guards nothing)."""
    f = tmp_path / "f.yaml"
    text = Path(builtin_fabrics()["dgx-h100-rail"]).read_text()
    f.write_text(text.replace("    pfcWatchdog: {action: drop, detectionMs: 200, restorationMs: 200}\n", ""))
    report = lint(load_fabric(f))
    assert report.findings == () and "states no PFC watchdogs" in report.not_applicable["FAB-PFC-003"]
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail0\n"
                 "    qos: {pfcPriorities: [], headroom: [], pfcWatchdog: {enabled: false}}\n"
                 "hosts:\n  \"*/mlx5_0\": {roce: {pfcPriorities: []}}\n")
    report = lint(load_fabric(f))
    assert "FAB-PFC-003" not in report.ids and "FAB-PFC-003" not in report.not_applicable, report.format()


def test_roce_mtu_follows_the_headroom_rule() -> None:
    for ib in IB_MTUS:
        assert roce_mtu(ib + ROCE_HEADROOM) == ib
        below = roce_mtu(ib + ROCE_HEADROOM - 1)
        assert below == (IB_MTUS[IB_MTUS.index(ib) - 1] if ib != IB_MTUS[0] else 0)
    assert roce_mtu(1500) == 1024 and roce_mtu(9000) == 4096  # the facts in reference/platform.md


def test_mtu_prediction_on_the_seeded_1500_port() -> None:
    model = load_fabric(broken_examples()["FAB-MTU-001-port-1500"])
    report = lint(model)
    bad = PortRef("leaf-rail3", "p1")
    small = model.port(bad).mtu
    assert small == 1500
    through = [p for p in report.paths if bad in p.ports]
    assert {str(p.a) for p in through} | {str(p.b) for p in through} == {f"dgx-h100-{i}/mlx5_5" for i in range(4)}
    assert len(through) == 3
    for p in report.paths:
        expected = small if bad in p.ports else min(model.host_nic(p.a).mtu, model.host_nic(p.b).mtu)
        assert p.path_mtu == expected
        assert p.max_payload == (expected - (20 + 8 + 12 + 4)) // 4 * 4
    (finding,) = report.findings
    assert finding.paths == 3 and finding.severity is Severity.ERROR
    assert f"at most {max_send_payload(small)} bytes" in finding.message
    assert f"RoCE path MTU {roce_mtu(small)}" in finding.message


def test_mtu_mismatch_that_still_fits_roce_is_a_warning(tmp_path: Path) -> None:
    """A 5000-byte hop under 9000-byte NICs drops jumbo frames but not RoCE (4096 + headers fits)."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail0\n    ports:\n"
                 "      - {name: p0, mtu: 5000}\n")
    report = lint(load_fabric(f))
    (finding,) = report.findings
    assert (finding.id, finding.severity) == ("FAB-MTU-001", Severity.WARNING)
    assert roce_mtu(5000) == 4096


def test_pcp_trust_on_tagged_ports_is_fine_and_untagged_is_not(tmp_path: Path) -> None:
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\ndefaults:\n  qos: {trust: pcp}\n")
    assert lint(load_fabric(f)).findings == ()  # NICs tag with PCP 3 and CNPs with PCP 6


def test_pcp_trust_holds_across_a_spine_because_trunks_keep_the_tag(tmp_path: Path) -> None:
    """gb200-nvl72-spine-leaf trunks every rail's VLAN tagged on the leaf-spine links (its header: each rail is a
    VLAN, 200 + rail), so a frame keeps its 802.1Q priority from hop to hop: with every port trusting PCP, RoCE
    (PCP 3) and CNPs (PCP 6, the NICs' CNP priority) are still classified into 3 and 6 at the spine and the far
    leaf, on all 612 paths (per rail 18 NICs: 9 x 8 / 2 = 36 within each leaf and 9 x 9 across, 4 x 153). A leaf
    that forgot the tag of the hop before would give them the default priority 0."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: gb200-nvl72-spine-leaf\nname: x\ndefaults:\n  qos: {trust: pcp}\n")
    report = lint(load_fabric(f))
    assert report.findings == () and report.path_count == 612, report.format()


def test_spine_leaf_paths_cross_the_spine() -> None:
    model = load_fabric("gb200-nvl72-spine-leaf")
    report = lint(model)
    p = report.path(NicRef("gb200-tray-0", "mlx5_1"), NicRef("gb200-tray-17", "mlx5_1"))
    assert p is not None
    switches = [r.switch for r in p.ports]
    # leaf0 in/out, spine1 in/out (rail 1 rides spine1), leaf1 in/out
    assert switches == ["leaf0", "leaf0", "spine1", "spine1", "leaf1", "leaf1"]
    assert report.path(NicRef("gb200-tray-0", "mlx5_1"), NicRef("gb200-tray-0", "mlx5_4")) is None
    ids = [path.id for path in report.paths]
    assert len(set(ids)) == len(ids)


def test_lint_cli_exit_codes_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert fakehw_main(["fabric", "lint", "dgx-h100-rail"]) == 0
    broken = str(broken_examples()["FAB-QOS-001-dscp-map"])
    assert fakehw_main(["fabric", "lint", broken]) == 1
    out = capsys.readouterr().out
    assert "FAB-QOS-001" in out and f"{broken}:" in out
    assert fakehw_main(["fabric", "lint", "--json", broken]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [f["id"] for f in data["findings"]] == ["FAB-QOS-001"]
    assert data["summary"]["paths"] == 48 and "paths" not in data
    assert fakehw_main(["fabric", "lint", "--json", "--paths", broken]) == 1
    assert len(json.loads(capsys.readouterr().out)["paths"]) == 48
    # warnings pass unless --strict
    warn = str(broken_examples()["FAB-LINK-001-uncabled"])
    assert fakehw_main(["fabric", "lint", warn]) == 0
    assert fakehw_main(["fabric", "lint", "--strict", warn]) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nprofile: dgx-h100\nswitches: 3\n")
    assert fakehw_main(["fabric", "lint", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: switches:" in err and "Traceback" not in err


def test_requirements_cli_lists_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert fakehw_main(["fabric", "requirements", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == list(REQUIREMENTS)
    assert all(r["rationale"] and r["title"] for r in rows)


def test_generate_cli_round_trips(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "g.yaml"
    assert fakehw_main(["fabric", "generate", "rail", "dgx-h100-roce", "--nodes", "3", "--out", str(out)]) == 0
    model = load_fabric(out)
    assert len(model.system.nodes) == 3 and lint(model).findings == ()
    capsys.readouterr()
    norail = tmp_path / "norail.yaml"
    nics = "".join(f"        - {{name: mlx5_{i}, rail: null}}\n" for i in range(12))
    norail.write_text(f"extends: dgx-h100\nname: norail\ngroups:\n  - name: dgx-h100\n    node:\n      nics:\n{nics}")
    assert fakehw_main(["fabric", "generate", "rail", str(norail)]) == 2
    assert "gives its NICs no rails" in capsys.readouterr().err
    assert fakehw_main(["fabric", "generate", "spine-leaf", "no-such-profile"]) == 2
    assert "no profile 'no-such-profile'" in capsys.readouterr().err


def test_docs_list_every_requirement() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "fabric.md").read_text()
    missing = [r for r in REQUIREMENTS if f"| {r} |" not in docs]
    assert missing == []


@pytest.mark.parametrize(("ms", "message"), [
    (100, None), (1000, None),
    (99, "the PFC watchdog acts after 99 ms, below 100 ms"),
    (1001, "the PFC watchdog acts after 1001 ms, above 1000 ms"),
])
def test_the_watchdog_window_is_100_to_1000_ms_inclusive(tmp_path: Path, ms: int, message: str | None) -> None:
    """FAB-PFC-003 asks for mitigation "within 100-1000 ms": both ends are allowed (SONiC's YANG model and Cumulus'
    polling minimum allow 100 ms; 1000 ms is still inside the 1.07 s RDMA local ACK timeout its rationale cites)."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail2\n"
                 f"    qos: {{pfcWatchdog: {{action: drop, detectionMs: {ms}, restorationMs: 200}}}}\n")
    found = [(x.element, x.message.split(":")[0]) for x in lint(load_fabric(f)).findings if x.id == "FAB-PFC-003"]
    assert found == ([] if message is None else [("leaf-rail2", message)]), found


def test_a_port_the_watchdog_rule_skips_does_not_end_the_check(tmp_path: Path) -> None:
    """leaf-rail0 (the first switch) has no PFC, so its ports need no watchdog; leaf-rail7 (the last) only alerts:
    that is still a finding, on each of its 4 ports."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail0\n"
                 "    qos: {pfcPriorities: [], headroom: [], pfcWatchdog: {enabled: false}}\n"
                 "  - name: leaf-rail7\n"
                 "    qos: {pfcWatchdog: {action: alert, detectionMs: 200, restorationMs: 200}}\n"
                 "hosts:\n  \"*/mlx5_0\": {roce: {pfcPriorities: []}}\n")
    (finding,) = [x for x in lint(load_fabric(f)).findings if x.id == "FAB-PFC-003"]
    assert (finding.element, finding.ports) == ("leaf-rail7", 4), finding
    assert finding.message.startswith("the PFC watchdog only alerts"), finding


def test_findings_of_one_requirement_in_one_file_come_in_line_order(tmp_path: Path) -> None:
    """Like a compiler's diagnostics (gcc, mypy, ruff): within a severity and requirement, a file's findings are
    listed top to bottom, so an editor's jump list walks down the file. Line 4 blames dgx-h100-3, line 5 dgx-h100-0:
    line order is not name order."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nhosts:\n"
                 "  \"dgx-h100-3/mlx5_0\": {roce: {pfcPriorities: []}}\n"
                 "  \"dgx-h100-0/mlx5_3\": {roce: {pfcPriorities: []}}\n")
    found = [(x.line, x.element) for x in lint(load_fabric(f)).findings if x.id == "FAB-PFC-001"]
    assert found == [(4, "dgx-h100-3/mlx5_0"), (5, "dgx-h100-0/mlx5_3")], found


def test_the_path_summary_says_when_the_nics_negotiate_more_than_a_path_carries() -> None:
    """NVIDIA's RoCE MTU rule: the active RoCE MTU is the largest IB MTU (256-4096) that fits the Ethernet MTU
    with RoCE's headers, so 9000-byte NICs negotiate 4096 and a 1500-byte port carries 1024. The seeded 1500-byte
    leaf-rail3/p1 is on the 3 rail-3 paths of dgx-h100-1 (of 48): those carry 1024 while the NICs negotiate 4096,
    and the summary says so; the other 45 paths fit 4096 and the line says nothing more."""
    text = lint(load_fabric(broken_examples()["FAB-MTU-001-port-1500"])).format()
    rows = [line.split("; largest")[0] for line in text.splitlines() if line.startswith("paths: ")]
    assert rows == ["paths: 45 x path MTU 9000: RoCE MTU 4096 fits",
                    "paths: 3 x path MTU 1500: RoCE MTU 1024 fits but the NICs negotiate 4096: oversized frames "
                    "drop"], rows


def test_two_nics_on_one_rail_are_named_with_the_leaf_that_makes_it_their_rail() -> None:
    """The seeded example cables dgx-h100-1's rail-2 NIC to the rail-3 leaf. dgx-h100-rail's rails follow the DGX
    H100 User Guide's NIC names (rail 2 = mlx5_4, rail 3 = mlx5_5), so mlx5_4 is on rail 3 beside mlx5_5, both
    because of switch leaf-rail3."""
    report = lint(load_fabric(broken_examples()["FAB-RAIL-001-same-rail"]))
    (finding,) = [f for f in report.findings if f.id == "FAB-RAIL-001"]
    assert finding.message == ("mlx5_4 (rail 2 in the profile) is on rail 3 (switch leaf-rail3); mlx5_4 and mlx5_5 "
                               "share rail 3 (switch leaf-rail3)"), finding.message


def test_nics_the_profile_gives_no_rail_are_not_judged_by_the_rail_rule(tmp_path: Path) -> None:
    """FAB-RAIL-001 checks each NIC against "the rail the profile gives it" (docs/fabric.md); a NIC given none has
    none to be off. A DGX H100's in-band ports (port 2 of the storage ConnectX-7 cards, mlx5_2 and mlx5_8 in the
    DGX H100 User Guide's naming, "in-band management and storage") are not compute rails, and a BasePOD puts
    the pair on one in-band network (bonded), so both sit in one segment of one VLAN. Cabled that way on a leaf
    of their own, the profile's compute rails stay as they were and the lint stays clean."""
    f = tmp_path / "f.yaml"
    ports = "".join(f"      - {{name: p{2 * i}, connect: dgx-h100-{i}/mlx5_2}}\n"
                    f"      - {{name: p{2 * i + 1}, connect: dgx-h100-{i}/mlx5_8}}\n" for i in range(4))
    f.write_text("extends: dgx-h100-rail\nname: x\nvlans:\n  - {id: 200, name: inband}\nswitches:\n"
                 "  - name: leaf-inband\n    role: leaf\n    vlan: {untagged: 200}\n    ports:\n" + ports)
    model = load_fabric(f)
    inband = [n for n in model.nics if n.nic.name in ("mlx5_2", "mlx5_8")]
    assert len(inband) == 8 and all(n.rail is None and n.peer is not None for n in inband)  # in the fabric, cabled
    report = lint(model)
    assert report.findings == (), report.format()


def test_lossless_buffers_are_checked_where_stated_and_not_applicable_where_not(tmp_path: Path) -> None:
    """FAB-BUF-001 (its rationale): "Applies where the config states its buffers (... a qos headroom list); a config
    that does not is reported as not applicable." dgx-h100-rail states headroom [3] on every port: it applies (and
    passes). Without the headroom lists it is not applicable, with the reason; never a pass."""
    assert "FAB-BUF-001" not in lint(load_fabric("dgx-h100-rail")).not_applicable
    f = tmp_path / "f.yaml"
    f.write_text(Path(builtin_fabrics()["dgx-h100-rail"]).read_text().replace("    headroom: [3]\n", ""))
    report = lint(load_fabric(f))
    assert report.findings == () and "states no lossless buffers" in report.not_applicable["FAB-BUF-001"]


@pytest.mark.parametrize(("min_kb", "max_kb", "flagged"), [(1500, 1500, True), (1499, 1500, False)])
def test_equal_ecn_thresholds_are_not_ordered(tmp_path: Path, min_kb: int, max_kb: int, flagged: bool) -> None:
    """FAB-ECN-002 asks for minimum below maximum: a RED-style marker with min >= max marks everything or nothing
    (its rationale; RED's marking probability ramps between the two thresholds), so equal ones are a finding."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail1\n"
                 f"    qos: {{ecn: {{priorities: [3], minKB: {min_kb}, maxKB: {max_kb}, probability: 10}}}}\n")
    found = [(x.element, x.message) for x in lint(load_fabric(f)).findings if x.id == "FAB-ECN-002"]
    assert found == ([("leaf-rail1", f"ECN minKB {min_kb} is not below maxKB {max_kb}")] if flagged else []), found


def test_a_port_that_carries_nothing_needs_no_buffers_watchdog_or_pfc_care(tmp_path: Path) -> None:
    """FAB-BUF-001 and FAB-PFC-003 are about lossless queues of live links (headroom absorbs what is in flight after
    a pause; the watchdog guards against a peer that keeps pausing), and FAB-PFC-002 about traffic that arrives: a
    shut-down port (leaf-rail2/p1) and a port with no cable (leaf-rail2/p4, added) carry none, so headroom [],
    no watchdog and storage mapped onto the RoCE priority there are no finding. The shut-down port is FAB-LINK-001
    (dgx-h100-1's rail-2 NIC, mlx5_4, loses its link), and nothing else is."""
    f = tmp_path / "f.yaml"
    idle = "headroom: [], pfcWatchdog: {enabled: false}"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail2\n    ports:\n"
                 f"      - {{name: p1, shutdown: true, qos: {{{idle}}}}}\n"
                 f"      - {{name: p4, qos: {{{idle}, dscpToPriority: {{26: 3, 48: 6, 10: 3}}}}}}\n")
    found = [(x.id, x.element) for x in lint(load_fabric(f)).findings]
    assert found == [("FAB-LINK-001", "dgx-h100-1/mlx5_4")], found


def test_a_port_at_exactly_the_nics_mtu_drops_nothing(tmp_path: Path) -> None:
    """FAB-MTU-001 is about a hop *smaller* than the endpoints' MTU: a 9000-byte port between 9000-byte NICs
    forwards every frame they send (path MTU 9000; RoCE 4096, the largest InfiniBand MTU - IBTA spec vol. 1's
    256-4096, which the RoCEv2 annex keeps - that fits with the headers), so it is no finding; 8999 is one."""
    f = tmp_path / "f.yaml"
    for mtu, ids in ((9000, []), (8999, ["FAB-MTU-001"])):
        f.write_text(f"extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail3\n    ports:\n"
                     f"      - {{name: p0, mtu: {mtu}}}\n")
        report = lint(load_fabric(f))
        assert [x.id for x in report.findings] == ids, report.format()
        assert sorted(report.mtu_groups().items(), reverse=True)[-1][0] == (min(mtu, 9000), 4096, 4096)


def test_a_setting_no_line_states_is_blamed_on_each_switch_that_lacks_it(tmp_path: Path) -> None:
    """dgx-h100-rail without its one ``cnpPriority: 6`` (in defaults): no line sets a CNP priority, so each of the 8
    leaves lacks one on its own - 8 FAB-CNP-001 findings, each at the leaf's ``- name:`` line, naming the leaf,
    with its 4 ports and the 6 paths of its rail (every rail-r path enters and leaves through leaf-rail<r>)."""
    f = tmp_path / "f.yaml"
    text = Path(builtin_fabrics()["dgx-h100-rail"]).read_text()
    assert text.count("    cnpPriority: 6\n") == 1
    f.write_text(text.replace("    cnpPriority: 6\n", ""))
    lines = f.read_text().splitlines()
    found = [(x.id, x.element, lines[(x.line or 0) - 1].strip(), x.ports, x.paths)
             for x in lint(load_fabric(f)).findings]
    assert found == [("FAB-CNP-001", f"leaf-rail{r}", f"- name: leaf-rail{r}", 4, 6) for r in range(8)], found


def test_a_pcp_trusting_switch_that_misfiles_cnps_is_told_their_pcp(tmp_path: Path) -> None:
    """A port that trusts PCP classifies a frame by its 802.1Q priority (the PCP field of the VLAN tag, IEEE
    802.1Q; PFC, IEEE 802.1Qbb, pauses per such priority), not its DSCP (NVIDIA's mlnx_qos --trust pcp, SONiC's
    DOT1P_TO_TC_MAP; docs/fabric.md's FAB-QOS-002). dgx-h100-rail's NICs tag RoCE with PCP 3 and CNPs with their
    CNP priority 6 (the NIC's cnp_802p_prio); leaf-rail5 trusting PCP but mapping PCP 6 to priority 5 misfiles
    the CNPs by their PCP, so the finding names PCP 6 (as FAB-QOS-001 names "PCP 3" for RoCE), at the line that
    sets the map, on the leaf's 4 ports and the 6 rail-5 paths."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail5\n"
                 "    qos: {trust: pcp, pcpToPriority: {3: 3, 6: 5}}\n")
    found = [(x.id, x.line, x.element, x.message, x.ports, x.paths) for x in lint(load_fabric(f)).findings]
    assert found == [("FAB-CNP-001", 5, "leaf-rail5", "CNPs (PCP 6) are classified into priority 5, not the CNP "
                      "priority 6", 4, 6)], found


def test_pfc_on_priority_0_is_the_nics_own_business_when_roce_runs_there(tmp_path: Path) -> None:
    """FAB-PFC-002's NIC branch: PFC on priority 0 makes the NIC's non-RoCE traffic lossless - unless RoCE itself
    runs on priority 0. Rail 0 moved whole to priority 0 (NICs and leaf-rail0): the NICs are no finding; the leaf
    is, since its priority 0 is also the default priority and where storage (DSCP 10, unmapped) and management
    (DSCP 0) land (dgx-h100-rail's traffic), one warning each, on its 4 ports."""
    f = tmp_path / "f.yaml"
    f.write_text('extends: dgx-h100-rail\nname: x\nhosts:\n  "*/mlx5_0": {roce: {priority: 0, pfcPriorities: [0]}}\n'
                 "switches:\n  - name: leaf-rail0\n    qos: {dscpToPriority: {26: 0, 48: 6}, pfcPriorities: [0], "
                 "headroom: [0], ecn: {priorities: [0], minKB: 150, maxKB: 1500, probability: 10}}\n")
    found = sorted((x.id, x.element, x.message.split(":")[0], x.ports) for x in lint(load_fabric(f)).findings)
    assert found == [("FAB-PFC-002", "leaf-rail0", "PFC is on the default priority 0", 4),
                     ("FAB-PFC-002", "leaf-rail0", "management traffic (DSCP 0) is classified into PFC priority 0", 4),
                     ("FAB-PFC-002", "leaf-rail0", "storage traffic (DSCP 10) is classified into PFC priority 0", 4)], \
        found


@pytest.mark.parametrize(("pcp", "how", "prio"), [(3, "PCP 3", 3), (None, "untagged", 0)])
def test_other_traffic_on_a_pcp_trusting_switch_is_told_by_its_pcp(tmp_path: Path, pcp: int | None, how: str,
                                                                   prio: int) -> None:
    """A port that trusts PCP classifies by the 802.1Q priority (the VLAN tag's PCP field, IEEE 802.1Q; frames
    without a tag get the port's default priority; FAB-QOS-002): storage tagged PCP 3 lands in
    leaf-rail5's lossless priority 3 whatever its DSCP 10 says, and untagged storage in the default priority 0;
    made lossless (PFC [3, 0] on the leaf), both are FAB-PFC-002 findings naming what classified them. The leaf
    sets no PCP map, so the PFC list is what to change: the leaf's qos line, on its 4 ports."""
    f = tmp_path / "f.yaml"
    tag = "" if pcp is None else f", pcp: {pcp}"
    f.write_text(f"extends: dgx-h100-rail\nname: x\ntraffic:\n  - {{name: storage, dscp: 10{tag}}}\nswitches:\n"
                 "  - name: leaf-rail5\n    qos: {trust: pcp, pfcPriorities: [3, 0], headroom: [3, 0]}\n")
    found = [(x.line, x.element, x.message, x.ports) for x in lint(load_fabric(f)).findings
             if x.message.startswith("storage")]
    assert found == [(7, "leaf-rail5", f"storage traffic ({how}) is classified into PFC priority {prio}", 4)], found


def test_a_cable_that_tags_a_vlan_on_one_end_and_not_the_other_is_named_by_both_modes(tmp_path: Path) -> None:
    """IEEE 802.1Q: an untagged frame carries no VLAN ID, so the receiving port files it under its own PVID (its
    untagged VLAN), and a tagged frame is only accepted on a port that is a member of that VLAN. A cable carrying
    VLAN 201 untagged on one end and tagged on the other therefore does not carry it: gb200-nvl72-spine-leaf's
    leaf0/up1 faces spine1/p0 and both trunk rails 1 and 3 (VLANs 201, 203) tagged (its header); leaf0/up1 made to
    send 201 untagged is one FAB-VLAN-001 error on that cable, at the line that changed (6), naming both modes."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: gb200-nvl72-spine-leaf\nname: x\nswitches:\n  - name: leaf0\n    ports:\n"
                 "      - {name: up1, vlan: {tagged: [203], untagged: 201}}\n")
    found = [(x.id, x.severity, x.line, x.element, x.message) for x in lint(load_fabric(f)).findings]
    assert found == [("FAB-VLAN-001", Severity.ERROR, 6, "leaf0/up1<->spine1/p0",
                      "cable leaf0/up1 <-> spine1/p0: VLAN 201 is untagged on leaf0/up1 but tagged on spine1/p0")], \
        found


def test_a_switch_with_no_ecn_block_marks_nothing_and_has_no_thresholds_to_order(tmp_path: Path) -> None:
    """DCQCN (NVIDIA's RoCE congestion control) only slows a sender when a switch marks its packets Congestion
    Experienced (RFC 3168's ECN field, set between the WRED/RED min and max thresholds): a leaf with no ECN
    configuration at all (``ecn: null``, not merely ``enabled: false``) marks nothing, so RoCE on priority 3 through
    leaf-rail4 is one FAB-ECN-001 error at that line, on the leaf's 4 ports and rail 4's 6 paths; with no
    thresholds there is nothing for FAB-ECN-002 to order."""
    f = tmp_path / "f.yaml"
    f.write_text("extends: dgx-h100-rail\nname: x\nswitches:\n  - name: leaf-rail4\n    qos: {ecn: null}\n")
    model = load_fabric(f)
    assert [model.port(PortRef("leaf-rail4", f"p{n}")).qos.ecn for n in range(4)] == [None] * 4
    found = [(x.id, x.severity, x.line, x.element, x.message, x.ports, x.paths) for x in lint(model).findings]
    assert found == [("FAB-ECN-001", Severity.ERROR, 5, "leaf-rail4", "no ECN marking; RoCE runs on priority 3", 4,
                      6)], found
