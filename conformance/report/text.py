"""Text renderings of a report: JUnit XML (for CI systems) and Markdown (for ``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict

from conformance.report.model import Report, RequirementResult

STATUS_MARK = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️", "not-applicable": "🚫", "not-run": "⚪"}
VERDICT_TEXT = {"certified": "CERTIFIED", "not-certified": "NOT CERTIFIED", "partial": "PARTIAL (run incomplete)"}
RECOMMENDED_MISS_MARK = "⚠️"
"""A recommended requirement that failed or errored: visible, but not the ❌ of a failure that decides a level."""


def missed_recommended(r: RequirementResult) -> bool:
    """A recommended (``required: false``) requirement that failed or errored: reported, never blocking a level."""
    return not r.required and r.status in ("failed", "error")


def status_mark(r: RequirementResult) -> str:
    return RECOMMENDED_MISS_MARK if missed_recommended(r) else STATUS_MARK[r.status]


def importance(r: RequirementResult) -> str:
    return "required" if r.required else "recommended"


def signing_text(report: Report) -> str:
    """How the run is signed, in words (the summary and the HTML say it; ``conformance verify`` checks it)."""
    s = report.manifest.signing
    if s.mode == "key":
        return f"signed with key {s.keyid} (check: conformance verify DIR --key PUBLIC_KEY)"
    if s.mode == "sigstore":
        return "signed keyless with Sigstore (check: conformance verify DIR --identity WORKFLOW --issuer ISSUER)"
    return "UNSIGNED: anyone could have written this report; only a signed run proves who ran it"


def provenance_facts(report: Report) -> list[tuple[str, str]]:
    """What was certified by digest and by what: rows for the summary and the HTML manifest."""
    m = report.manifest
    rows = [(f"{c.kind}", f"{c.name or c.spec}: {c.digest or 'no digest'} ({c.hashed})") for c in m.components]
    if m.harness is not None:
        h = m.harness
        rows.append(("harness", f"fakehw {h.version}, {h.source}, commit {h.commit or 'unknown'}"
                                f"{' (modified)' if h.modified else ''}, {h.digest}"))
    rows.append(("catalogue", f"version {m.catalogue.version} (sha256 {m.catalogue.digest})"))
    if m.runner is not None:
        rows.append(("runner", f"{m.runner.id} ({m.runner.environment}, {m.runner.platform}); component "
                               f"isolation: {m.runner.isolation}"))
    rows.append(("signature", signing_text(report)))
    return rows


def _evidence_text(r: RequirementResult) -> str:
    parts = [r.message] if r.message else []
    for e in r.evidence:
        parts.append(f"{e.label}: {json.dumps(e.value, sort_keys=True)[:2000]}")
    if r.seeds:
        parts.append("seeds: " + ", ".join(r.seeds))
    return "\n".join(parts)


def to_junit(report: Report) -> str:
    """One testsuite per target, one testcase per requirement (classname ``target.category``)."""
    by_target: dict[str, list[RequirementResult]] = defaultdict(list)
    for r in report.results:
        by_target[r.target].append(r)
    root = ET.Element("testsuites", name="fakehw conformance", tests=str(len(report.results)),
                      failures=str(report.summary.get("failed", 0)), errors=str(report.summary.get("error", 0)),
                      skipped=str(sum(report.summary.get(k, 0) for k in ("skipped", "not-applicable", "not-run"))),
                      time=f"{sum(r.duration for r in report.results):.3f}")
    for target, rows in sorted(by_target.items()):
        suite = ET.SubElement(root, "testsuite", name=target, tests=str(len(rows)),
                              failures=str(sum(r.status == "failed" for r in rows)),
                              errors=str(sum(r.status == "error" for r in rows)),
                              skipped=str(sum(r.status in ("skipped", "not-applicable", "not-run") for r in rows)),
                              time=f"{sum(r.duration for r in rows):.3f}")
        props = ET.SubElement(suite, "properties")
        for key, value in (("verdict", report.verdicts.overall), ("profile", report.manifest.profile),
                           ("profile_digest", report.manifest.profile_digest), ("backend", report.manifest.backend),
                           ("architectures", ",".join(report.manifest.architectures)), ("sha256", report.sha256)):
            ET.SubElement(props, "property", name=key, value=str(value))
        for r in rows:
            case = ET.SubElement(suite, "testcase", classname=f"{target}.{r.category}", name=f"{r.id} {r.title}",
                                 time=f"{r.duration:.3f}")
            text = _evidence_text(r)
            if r.status == "failed":
                ET.SubElement(case, "failure", message=(r.message.splitlines() or ["failed"])[0][:300]).text = text
            elif r.status == "error":
                ET.SubElement(case, "error", message=(r.message.splitlines() or ["error"])[0][:300]).text = text
            elif r.status in ("skipped", "not-run"):
                ET.SubElement(case, "skipped", message=r.message[:300] or r.status)
            elif r.status == "not-applicable":
                ET.SubElement(case, "skipped", message=f"not applicable: {r.message[:280]}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _first_line(message: str) -> str:
    """A message's first line without the test's node id it starts with (``path::test: text``)."""
    line = message.splitlines()[0] if message else ""
    head, sep, rest = line.partition(": ")
    return rest if sep and "::" in head else line


def _why_markdown(report: Report) -> list[str]:
    """What decided the verdict, before any table: each failing required requirement with its first message line;
    then, apart, the recommended ones that failed (they never decide a level, but a reader must see them), and what
    does not apply here with the reason."""
    lines = []
    if report.partial:
        lines.append("**The run did not finish**: requirements it did not reach are not run.")
    failing = sorted((r for r in report.results if r.status in ("failed", "error") and r.required), key=lambda r: r.id)
    if failing:
        lines.append("**Why:**")
        lines += [_cause_line(r) for r in failing]
    missed = sorted((r for r in report.results if missed_recommended(r)), key=lambda r: r.id)
    if missed:
        lines.append(f"**{RECOMMENDED_MISS_MARK} Recommended, not met** (reported; they do not decide the verdict):")
        lines += [_cause_line(r) for r in missed]
    na = [r for r in report.results if r.status == "not-applicable"]
    if na:
        lines.append("**Not applicable here:** " + "; ".join(f"`{r.id}` ({_cell(_first_line(r.message)[:120])})"
                                                          for r in na))
    return [*lines, ""] if lines else []


def _cause_line(r: RequirementResult) -> str:
    return (f"- {status_mark(r)} `{r.id}` {_cell(r.title)} ({r.level}, {importance(r)}, {r.status}): "
            f"{_cell(_first_line(r.message)[:200]) or r.status}")


def _level_rows(report: Report) -> list[str]:
    """One row per level that has requirements: its verdict (decided by the required ones) and, in a column of
    its own, how many recommended requirements of that level failed."""
    missed: defaultdict[str, int] = defaultdict(int)
    recommended: defaultdict[str, int] = defaultdict(int)
    for r in report.results:
        if not r.required:
            recommended[r.level] += 1
            missed[r.level] += missed_recommended(r)
    rows = []
    for level, v in report.verdicts.levels.items():
        if v.required or recommended[level]:
            applies = v.required - len(v.not_applicable)
            rows.append(f"| {level} | {v.verdict} | {v.passed}/{applies} | {len(v.not_applicable)} | "
                        f"{missed[level]}/{recommended[level]} |")
    return rows


def to_markdown(report: Report) -> str:
    m = report.manifest
    components = ", ".join(f"{c.kind} `{c.spec}`" for c in m.components) or "(no component)"
    lines = [
        f"## fakehw certification: {VERDICT_TEXT[report.verdicts.overall]}",
        "",
        f"{components} on profile `{m.profile}` ({', '.join(m.architectures) or '?'}), backend `{m.backend}`.",
        "",
        f"**{signing_text(report)}**",
        "",
        *_why_markdown(report),
        "| level | verdict | required passed | not applicable | recommended not met |",
        "|---|---|---|---|---|",
        *_level_rows(report),
    ]
    s = report.summary
    missed = sum(missed_recommended(r) for r in report.results)
    of_them = f" ({missed} of them recommended: {RECOMMENDED_MISS_MARK} below)" if missed else ""
    lines += ["", f"{s.get('passed', 0)} passed, {s.get('failed', 0)} failed, {s.get('error', 0)} errors{of_them}, "
                  f"{s.get('skipped', 0)} skipped, {s.get('not-applicable', 0)} not applicable, "
                  f"{s.get('not-run', 0)} not run.", ""]
    lines += ["<details><summary>Requirements</summary>", "",
              "| | requirement | level | required | status | title | detail |", "|---|---|---|---|---|---|---|"]
    for r in report.results:
        detail = _cell(r.message.splitlines()[0][:160]) if r.message else ""
        lines.append(f"| {status_mark(r)} | {r.id} | {r.level} | {importance(r)} | {r.status} | {_cell(r.title)} | "
                     f"{detail} |")
    lines += ["", "</details>", "",
              f"Profile digest `{m.profile_digest}`; harness {m.versions.get('harness')}, python "
              f"{m.versions.get('python')}; report sha256 `{report.sha256}`.", ""]
    lines += [f"- {k}: {_cell(v)}" for k, v in provenance_facts(report)]
    return "\n".join(lines) + "\n"
