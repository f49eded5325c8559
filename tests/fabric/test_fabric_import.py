"""SONiC and NVUE imports: the operator's files give the same effective fabric as the hand-written configs, each
broken example fails exactly its requirement at the operator's key, bad input is a located error (exit 2), and
the imported fabric carries RoCE on the emulated fabric (root)."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import pytest

from fakehw.cli import main as fakehw_main
from fakehw.fabric import load_fabric
from fakehw.fabric.checks import run_checks
from fakehw.fabric.emulate import EmulatedFabric
from fakehw.fabric.lint import LintReport, lint
from fakehw.fabric.loader import examples_dir

EX = examples_dir()
HEALTHY = {f"{fmt}:{EX / fmt / name}": name for fmt in ("sonic", "nvue")
           for name in ("dgx-h100-rail", "gb200-nvl72-spine-leaf")}
BROKEN = {f"{fmt}:{d}": d for fmt in ("sonic", "nvue") for d in sorted((EX / fmt / "broken").iterdir())}


@cache
def _broken_report(ref: str) -> LintReport:
    """Each broken import is linted once per session (the GB200 ones take about a second)."""
    return lint(load_fabric(ref))


@pytest.mark.parametrize("ref", sorted(HEALTHY))
def test_healthy_imports_match_the_native_configs(ref: str) -> None:
    """The native configs are hand-checked; the operator's equivalent files must give the same RoCE paths, the same
    NIC settings and the same classification of RoCE and CNPs on every port a NIC is cabled to."""
    imported, native = load_fabric(ref), load_fabric(HEALTHY[ref])
    report = lint(imported)
    assert report.findings == (), report.format()
    assert report.not_applicable == {}
    assert report.path_count == lint(native).path_count
    assert report.mtu_groups() == lint(native).mtu_groups()
    for nic in imported.nics:
        twin = native.host_nic(nic.ref)
        assert (nic.mtu, nic.vlan, nic.roce) == (twin.mtu, twin.vlan, twin.roce), nic.id
        port, nport = imported.port(nic.peer), native.port(twin.peer)  # type: ignore[arg-type]
        for q, nq in ((port.qos, nport.qos),):
            assert q.classify(26, None) == nq.classify(26, None) == 3
            assert q.classify(48, None) == nq.classify(48, None) == q.cnp_priority == 6
            assert q.pfc_priorities == nq.pfc_priorities and q.headroom == nq.headroom == frozenset({3})
            assert q.marks_ecn(3) and not q.marks_ecn(0)
    # the watchdog the operator's files run on every lossless port: SONiC's pfcwd default (200 ms, drop) as the
    # examples write it, Cumulus' documented defaults (100 ms polling x robustness 3, always drop)
    expected = {"sonic": (200, 200), "nvue": (300, 100)}[ref.partition(":")[0]]
    for port in imported.ports():
        if port.peer is not None and port.qos.pfc_priorities:
            wd = port.qos.watchdog
            assert wd is not None and wd.enabled and wd.action == "drop", port.id
            assert (wd.detection_ms, wd.restoration_ms) == expected, port.id


@pytest.mark.parametrize("ref", sorted(BROKEN))
def test_broken_imports_fail_exactly_their_requirement_at_the_operators_key(ref: str) -> None:
    directory = BROKEN[ref]
    seeded = "-".join(directory.name.split("-")[:3])
    report = _broken_report(ref)
    assert report.ids == {seeded}, report.format()
    for f in report.findings:
        assert f.key and Path(f.source).is_file() and f.line is not None, str(f)
        assert "switches[" not in str(f) and "hosts[" not in f.key
    # the overriding file of the example is named by at least one finding, unless the finding is the switch's
    # side of a host mistake (then the host file is the only change and the switch's map is named)
    # side of a host mistake (then the host file is the only change and the switch's map is named), or a split
    # rail (no operator key splits it: the rail's VLAN in the base manifest is named)
    changed = {str(p) for p in directory.rglob("*") if p.is_file() and p.name != "fabric.yaml"}
    assert any(f.source in changed for f in report.findings) or seeded in ("FAB-CNP-001", "FAB-PATH-001")


def _seeded(fmt: str) -> dict[str, set[str]]:
    """requirement -> the finding messages the format's broken examples give for it."""
    out: dict[str, set[str]] = {}
    for ref in (r for r in BROKEN if r.startswith(f"{fmt}:")):
        for f in _broken_report(ref).findings:
            out.setdefault(f.id, set()).add(f.message)
    return out


def test_both_formats_seed_the_same_requirements_and_watchdog_branches() -> None:
    """What one format's broken set seeds the other's does too, and FAB-PFC-003 is seeded per branch: no watchdog,
    too slow, and (SONiC only: Cumulus' watchdog always drops) alert-only."""
    sonic, nvue = _seeded("sonic"), _seeded("nvue")
    assert sonic.keys() == nvue.keys()
    assert {"FAB-PFC-003", "FAB-MTU-001", "FAB-PATH-001", "FAB-ECN-001", "FAB-QOS-001"} <= sonic.keys()
    branches = {"sonic": sonic["FAB-PFC-003"], "nvue": nvue["FAB-PFC-003"]}
    for fmt in branches:
        assert any(b.startswith("PFC is enabled on priority") for b in branches[fmt]), branches
        assert any(b.startswith("the PFC watchdog acts after") for b in branches[fmt]), branches
    assert any(b.startswith("the PFC watchdog only alerts") for b in branches["sonic"]), branches


def test_the_issue_example_is_located_as_operators_read_it(capsys: pytest.CaptureFixture[str]) -> None:
    ref = f"sonic:{EX / 'sonic/broken/FAB-MTU-001-port-1500'}"
    assert fakehw_main(["fabric", "lint", ref]) == 1
    out = capsys.readouterr().out
    assert "leaf-rail3/config_db.json:" in out
    assert ": PORT|Ethernet8.mtu: error FAB-MTU-001: leaf-rail3/Ethernet8:" in out


def test_import_prints_a_config_that_lints_like_the_original(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "f.yaml"
    assert fakehw_main(["fabric", "import", "nvue", str(EX / "nvue/dgx-h100-rail"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "service: ignored" in err
    assert lint(load_fabric(out)).findings == () and lint(load_fabric(out)).path_count == 48


# --------------------------------------------------------------------------------------------------- bad input


def _copy(tmp_path: Path, fmt: str) -> Path:
    dst = tmp_path / "fab"
    shutil.copytree(EX / fmt / "dgx-h100-rail", dst, ignore=shutil.ignore_patterns("hosts"))
    return dst


def _bad(ref: str, capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    assert fakehw_main(["fabric", "lint", ref]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_invalid_json_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "sonic")
    f = d / "leaf-rail0/config_db.json"
    f.write_text(f.read_text().replace('"PORT": {', '"PORT": {,', 1))
    _bad(f"sonic:{d}", capsys, f"{f}:", "not valid JSON")


def test_invalid_yaml_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "nvue")
    f = d / "leaf-rail0/startup.yaml"
    f.write_text(f.read_text().replace("    interface:", "    interface: [", 1))
    _bad(f"nvue:{d}", capsys, f"{f}:", "not valid YAML")


def test_a_neighbour_on_a_port_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "sonic")
    f = d / "leaf-rail0/config_db.json"
    data = json.loads(f.read_text())
    data["DEVICE_NEIGHBOR"]["Ethernet999"] = data["DEVICE_NEIGHBOR"].pop("Ethernet0")
    f.write_text(json.dumps(data, indent=4))
    _bad(f"sonic:{d}", capsys, "DEVICE_NEIGHBOR|Ethernet999", "names port 'Ethernet999'")


def test_a_vlan_member_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "sonic")
    f = d / "leaf-rail2/config_db.json"
    data = json.loads(f.read_text())
    data["VLAN_MEMBER"]["Vlan102|Ethernet1000"] = {"tagging_mode": "tagged"}
    f.write_text(json.dumps(data, indent=4))
    _bad(f"sonic:{d}", capsys, "VLAN_MEMBER|Vlan102|Ethernet1000")


def test_a_link_to_a_port_the_switch_does_not_have(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "nvue")
    links = d / "links.csv"
    links.write_text(links.read_text().replace("leaf-rail0,swp1,", "leaf-rail0,swp99,", 1))
    _bad(f"nvue:{d}", capsys, f"{links}:2:", "names port 'swp99'")


def test_a_host_that_is_not_in_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "sonic")
    f = d / "leaf-rail0/config_db.json"
    f.write_text(f.read_text().replace('"name": "dgx-h100-3"', '"name": "dgx-h100-9"'))
    _bad(f"sonic:{d}", capsys, "DEVICE_NEIGHBOR|Ethernet24", "dgx-h100-9")


@pytest.mark.parametrize(("table", "entry", "needle"), [
    ("PORTCHANNEL_MEMBER", {"PortChannel1|Ethernet0": {}}, "link aggregation"),
    ("INTERFACE", {"Ethernet8|10.0.0.1/31": {}}, "routed port"),
    ("VXLAN_TUNNEL", {"vtep": {"src_ip": "10.1.0.1"}}, "VXLAN"),
    ("ACL_RULE", {"DATAACL|RULE_1": {"PRIORITY": "10", "DSCP_ACTION": "46"}}, "remarks DSCP_ACTION"),
])
def test_sonic_features_the_model_cannot_represent(table: str, entry: dict[str, object], needle: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "sonic")
    f = d / "leaf-rail0/config_db.json"
    data = json.loads(f.read_text())
    data[table] = entry
    f.write_text(json.dumps(data, indent=4))
    _bad(f"sonic:{d}", capsys, f"{table}|{next(iter(entry))}", needle)


def test_nvue_features_the_model_cannot_represent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "nvue")
    f = d / "leaf-rail0/startup.yaml"
    top = "\n    bridge:\n      domain:\n"
    original = f.read_text()
    f.write_text(original.replace(top, "\n    nve:\n      vxlan:\n        enable: on" + top, 1))
    _bad(f"nvue:{d}", capsys, "nve", "VXLAN")
    routed = "            br_default: {}\n        ip:\n          address:\n            10.0.0.1/31: {}\n"
    f.write_text(original.replace("            br_default: {}\n", routed, 1))
    _bad(f"nvue:{d}", capsys, "interface.swp1-4.ip.address", "routed port")


@pytest.mark.parametrize(("key", "fields", "where", "needle"), [
    ("Ethernet0", {"detection_time": "50"}, "PFC_WD|Ethernet0.detection_time",
     "detection_time (ms) 50 is outside 100-5000"),
    ("Ethernet0", {"restoration_time": "90000"}, "PFC_WD|Ethernet0.restoration_time",
     "restoration_time (ms) 90000 is outside 100-60000"),
    ("Ethernet0", {"detection_time": "soon"}, "PFC_WD|Ethernet0.detection_time",
     "detection_time (ms) must be an integer"),
    ("Ethernet0", {"action": "shutdown"}, "PFC_WD|Ethernet0.action", "action must be drop, forward or alert"),
    ("GLOBAL", {"POLL_INTERVAL": "5000"}, "PFC_WD|GLOBAL.POLL_INTERVAL", "POLL_INTERVAL (ms) 5000 is outside 100-1000"),
    ("GLOBAL", {"POLL_INTERVAL": "400"}, "PFC_WD|Ethernet0.detection_time",
     "detection_time 200 ms is below PFC_WD|GLOBAL.POLL_INTERVAL 400 ms"),
    ("GLOBAL", {"BIG_RED_SWITCH": "enable"}, "PFC_WD|GLOBAL.BIG_RED_SWITCH", "not modelled"),
    ("Ethernet999", {"action": "drop", "detection_time": "200"}, "PFC_WD|Ethernet999", "names port 'Ethernet999'"),
])
def test_sonic_watchdog_values_sonic_itself_rejects(key: str, fields: dict[str, str], where: str, needle: str,
                                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Outside the ranges of SONiC's YANG model (sonic-pfcwd.yang) a PFC_WD entry is not a config SONiC loads: a
    located error, not a finding."""
    d = _copy(tmp_path, "sonic")
    f = d / "leaf-rail0/config_db.json"
    data = json.loads(f.read_text())
    data["PFC_WD"].setdefault(key, {}).update(fields)
    f.write_text(json.dumps(data, indent=4))
    _bad(f"sonic:{d}", capsys, f"{f}:", where, needle)


def test_a_sonic_watchdog_without_detection_time_runs_no_watchdog(tmp_path: Path) -> None:
    """orchagent logs "detection_time missing" and starts nothing: the port is a lossless port without a watchdog
    (a finding at the entry), and the import says why."""
    d = _copy(tmp_path, "sonic")
    f = d / "leaf-rail0/config_db.json"
    data = json.loads(f.read_text())
    data["PFC_WD"]["Ethernet8"] = {"action": "drop"}
    f.write_text(json.dumps(data, indent=4))
    report = lint(load_fabric(f"sonic:{d}"))
    (finding,) = report.findings
    assert (finding.id, finding.key, finding.source) == ("FAB-PFC-003", "PFC_WD|Ethernet8", str(f))
    assert any(n.at.key == "PFC_WD|Ethernet8" and "orchagent starts no PFC watchdog" in n.message
               for n in report.model.loaded.notes)


@pytest.mark.parametrize(("text", "needle", "where"), [
    ("      pfc-watchdog:\n        robustness: 0\n", "pfc-watchdog robustness 0 is outside 1-1000",
     "qos.pfc-watchdog.robustness"),
    ("      pfc-watchdog:\n        polling-interval: fast\n", "pfc-watchdog polling-interval must be an integer",
     "qos.pfc-watchdog.polling-interval"),
    ("      pfc-watchdog:\n        polling-interval: 50\n", "pfc-watchdog polling-interval 50 is outside 100-5000",
     "qos.pfc-watchdog.polling-interval"),
])
def test_nvue_watchdog_values_cumulus_rejects(text: str, needle: str, where: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "nvue")
    f = d / "leaf-rail0/startup.yaml"
    f.write_text(f.read_text().replace("        mode: lossless\n", "        mode: lossless\n" + text, 1))
    _bad(f"nvue:{d}", capsys, f"{f}:", where, needle)
    f.write_text(f.read_text().replace(text, "").replace("state: enable", "state: sometimes"))
    _bad(f"nvue:{d}", capsys, "interface.swp1-4.qos.pfc-watchdog.state", "state must be enable or disable")


def test_missing_profile_and_missing_cabling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(tmp_path, "nvue")
    (d / "links.csv").unlink()
    _bad(f"nvue:{d}", capsys, "NVUE configs carry no cabling")
    d = _copy(tmp_path / "x", "sonic")
    (d / "fabric.yaml").write_text("name: x\n")
    _bad(f"sonic:{d}", capsys, "no hardware profile")


def test_bad_host_files_are_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "fab"
    shutil.copytree(EX / "sonic" / "dgx-h100-rail", d)
    q = d / "hosts/dgx-h100-0/mlnx_qos/enp24s0np0.txt"
    q.write_text(q.read_text().replace("Priority trust state: dscp", "Priority trust state: fancy"))
    _bad(f"sonic:{d}", capsys, f"{q}:2:", "trust state must be dscp or pcp")


# --------------------------------------------------------------------------------------------------- emulated


@pytest.mark.parametrize("fmt", ["sonic", "nvue"])
@pytest.mark.parametrize("name", ["dgx-h100-rail", "gb200-nvl72-spine-leaf"])
def test_imported_fabric_carries_roce_on_the_emulated_fabric(fmt: str, name: str, need_root: None,
                                                             tmp_path: Path) -> None:
    """The operator's files, brought up as veths and bridges, answer RoCE on every path the linter found: on the
    GB200 spine-leaf more than half of them cross a spine, through the VLANs trunked on the leaf-spine links."""
    from fakehw.fabric.traffic import Prober, start_responder

    model = load_fabric(f"{fmt}:{EX / fmt / name}")
    report = lint(model)
    assert report.findings == ()
    with EmulatedFabric.build(model, state_dir=tmp_path) as fabric:
        start_responder(fabric)
        prober = Prober(fabric)
        try:
            probe = run_checks(fabric, report, prober, mtu="sample")
        finally:
            prober.close()
    assert probe.passed, probe.format()
    assert {r.id for r in probe.results} == {"FAB-DYN-REACH-001", "FAB-DYN-MTU-001", "FAB-DYN-PRIO-001",
                                             "FAB-DYN-CNP-001", "FAB-DYN-PFC-001"}
    assert len(probe.by_id("FAB-DYN-REACH-001")) == report.path_count == {"dgx-h100-rail": 48,
                                                                          "gb200-nvl72-spine-leaf": 612}[name]
    # trays 0-8 hang off leaf0 and 9-17 off leaf1: each of the 4 rails has 9 x 9 paths across a spine
    spines = {s.name for s in model.switches if s.name.startswith("spine")}
    crossing = sum(1 for p in report.paths if spines & {r.switch for r in p.ports})
    assert crossing == {"dgx-h100-rail": 0, "gb200-nvl72-spine-leaf": 4 * 9 * 9}[name]
