"""The dynamic requirements (FAB-DYN-*) measured on an emulated fabric, next to what the config predicts.

Every expected value comes from the resolved config and the linter: which pairs must reach each other (the
linter's RoCE paths), the largest payload each path carries (the linter's MTU prediction), the class a frame was
sent with, the CNP class of the receiving NIC. The measured values come from frames on the emulated fabric.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from fakehw.fabric.analysis import Path
from fakehw.fabric.emulate import EmulatedFabric
from fakehw.fabric.lint import LintReport
from fakehw.fabric.model import NicRef
from fakehw.fabric.traffic import Prober

MtuMode = Literal["none", "sample", "all"]


@dataclass(frozen=True)
class CheckResult:
    id: str
    subject: str
    passed: bool
    expected: str
    measured: str


@dataclass
class ProbeReport:
    fabric: str
    run_id: str
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    probes: int = 0

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def by_id(self, req: str) -> list[CheckResult]:
        return [r for r in self.results if r.id == req]

    def to_json(self) -> dict[str, Any]:
        return {"fabric": self.fabric, "run": self.run_id, "passed": self.passed, "seconds": round(self.seconds, 3),
                "probes": self.probes, "results": [asdict(r) for r in self.results]}

    def format(self, verbose: bool = False) -> str:
        lines = []
        ids = sorted({r.id for r in self.results})
        for req in ids:
            rs = self.by_id(req)
            bad = [r for r in rs if not r.passed]
            lines.append(f"{'PASS' if not bad else 'FAIL'} {req}: {len(rs) - len(bad)}/{len(rs)} passed")
            for r in (rs if verbose else bad):
                lines.append(f"  {'ok ' if r.passed else 'BAD'} {r.subject}: expected {r.expected}, measured "
                             f"{r.measured}")
        lines.append(f"{len(self.results)} check(s), {self.probes} probe frame(s) in {self.seconds:.1f} s: "
                     f"{'all passed' if self.passed else 'FAILED'}")
        return "\n".join(lines)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def _representatives(paths: Sequence[Path]) -> list[Path]:
    """One path per distinct sequence of MTUs (what decides the payload), in order."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for p in paths:
        key = tuple(p.mtus)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def check_reachability(prober: Prober, paths: Sequence[Path]) -> list[CheckResult]:
    pairs = [(p.a, p.b) for p in paths] + [(p.b, p.a) for p in paths]
    results = prober.probe_pairs(pairs)
    n = len(paths)
    out = []
    for i, p in enumerate(paths):
        fwd, back = results[i], results[i + n]
        measured = "ACK both ways" if fwd.ok and back.ok else ", ".join(
            f"no ACK {x.a} -> {x.b}" for x in (fwd, back) if not x.ok)
        out.append(CheckResult("FAB-DYN-REACH-001", p.id, fwd.ok and back.ok, "ACK both ways", measured))
    return out


def check_payload(prober: Prober, path: Path) -> CheckResult:
    m = prober.measure_payload(path.a, path.b)
    measured = (f"{m.largest} B ({path.a.node}->{path.b.node}: {m.a_to_b}, {path.b.node}->{path.a.node}: "
                f"{m.b_to_a})" if m.largest is not None else "no probe crossed")
    return CheckResult("FAB-DYN-MTU-001", path.id, m.largest == path.max_payload,
                       f"{path.max_payload} B (path MTU {path.path_mtu})", measured)


def check_priority(prober: Prober, a: NicRef, b: NicRef) -> CheckResult:
    obs = prober.observe(a, b)
    if obs is None:
        return CheckResult("FAB-DYN-PRIO-001", f"{a} -> {b}", False, "the frame", "nothing arrived")
    sent = f"PCP {obs.sent_pcp}, DSCP {obs.sent_dscp}, ECN {obs.sent_ecn:02b}"
    got = f"PCP {obs.pcp}, DSCP {obs.dscp}, ECN {obs.ecn:02b}"
    ok = (obs.pcp, obs.dscp, obs.ecn) == (obs.sent_pcp, obs.sent_dscp, obs.sent_ecn) and obs.icrc_ok
    return CheckResult("FAB-DYN-PRIO-001", f"{a} -> {b}", ok, sent, got + ("" if obs.icrc_ok else ", bad ICRC"))


def check_cnp(prober: Prober, fabric: EmulatedFabric, a: NicRef, b: NicRef) -> CheckResult:
    host_b = fabric.model.host_nic(b)
    tagged = fabric.plan.nics[b].vlan is not None
    want_pcp = host_b.roce.cnp_priority if tagged else None
    expected = f"CNP (BECN) with DSCP {host_b.roce.cnp_dscp}" + (f", PCP {want_pcp}" if tagged else "")
    r = prober.cnp(a, b)
    if not r.received:
        return CheckResult("FAB-DYN-CNP-001", f"{a} -> {b}", False, expected, "no CNP")
    ok = r.dscp == host_b.roce.cnp_dscp and r.pcp == want_pcp and r.becn == 1
    return CheckResult("FAB-DYN-CNP-001", f"{a} -> {b}", ok, expected,
                       f"CNP with DSCP {r.dscp}, PCP {r.pcp}, BECN {r.becn}")


def check_pfc(prober: Prober, fabric: EmulatedFabric, a: NicRef, others: Sequence[NicRef]) -> CheckResult:
    prio = fabric.model.host_nic(a).roce.priority
    quanta = {prio: 0xFFFF}
    r = prober.pfc(a, quanta, others)
    ok = r.at_partner == quanta and not r.leaked_to
    measured = f"partner saw {r.at_partner}" + (f", leaked to {r.leaked_to}" if r.leaked_to else ", nowhere else")
    return CheckResult("FAB-DYN-PFC-001", str(a), ok, f"partner sees {quanta}, nobody else", measured)


def run_checks(fabric: EmulatedFabric, report: LintReport, prober: Prober, *, mtu: MtuMode = "sample",
               priorities: bool = True) -> ProbeReport:
    """Measure every dynamic requirement on ``fabric`` (responders must already run on its NICs)."""
    start = time.monotonic()
    sent = prober.sent
    out = ProbeReport(fabric.model.name, fabric.plan.run_id)
    paths = list(report.paths)
    out.results += check_reachability(prober, paths)
    if mtu != "none":
        chosen = paths if mtu == "all" else _representatives(paths)
        out.results += [check_payload(prober, p) for p in chosen]
    if priorities:
        per_vlan: dict[int, Path] = {}
        for p in paths:
            per_vlan.setdefault(p.vlan, p)
        for p in per_vlan.values():
            out.results.append(check_priority(prober, p.a, p.b))
            out.results.append(check_cnp(prober, fabric, p.a, p.b))
        per_switch: dict[str, tuple[NicRef, list[NicRef]]] = {}
        for p in paths:
            port = fabric.model.host_nic(p.a).peer
            if port is not None and port.switch not in per_switch:
                per_switch[port.switch] = (p.a, [p.b])
        for a, others in per_switch.values():
            out.results.append(check_pfc(prober, fabric, a, others))
    out.seconds = time.monotonic() - start
    out.probes = prober.sent - sent
    return out
