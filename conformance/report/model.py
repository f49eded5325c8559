"""The certification report: what was certified, on what, with which verdicts, sealed by a sha256.

A report is built from a results file (``--conformance-results``) and is itself JSON (``report.json``) with a
versioned schema (``report.schema.json``, shipped with the package and generated from these models). The
``sha256`` field is computed over the canonical form of everything else, so changing one result (or a
verdict, or the manifest) makes :func:`verify` fail. Verdicts are re-derived from the results on verify too,
so a report whose hash was recomputed after editing a verdict is still caught.

Verdict rules: a level passes when every *required* requirement of that level that applies passed; skipped,
not-run, failed and errored all fail it ("a certification run may skip nothing that is required"). A requirement
whose tests all said it does not apply (``not-applicable``, with the reason in the row) neither passes nor fails
its level; a level where nothing applies is ``n/a``. A report built from an incomplete results file is partial and
certifies nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conformance import RESULTS_SCHEMA
from conformance.requirements import LEVELS, Level, catalogue

REPORT_SCHEMA = "fakehw.conformance.report/v1"
Status = Literal["passed", "failed", "error", "skipped", "not-applicable", "not-run"]
STATUSES: tuple[Status, ...] = ("passed", "failed", "error", "skipped", "not-applicable", "not-run")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Evidence(_Model):
    label: str
    value: Any


class RequirementResult(_Model):
    id: str
    title: str
    target: str
    category: str
    level: Level
    required: bool
    status: Status
    duration: float
    tests: list[str]
    message: str = ""
    evidence: list[Evidence] = Field(default_factory=list)
    seeds: list[str] = Field(default_factory=list, description="random seeds to replay fuzz findings")


class Component(_Model):
    kind: str
    spec: str
    version: str | None = None


class Manifest(_Model):
    """What was tested and on what: enough to reproduce the run."""

    profile: str | None
    profile_digest: str | None
    backend: str | None
    architectures: list[str]
    components: list[Component]
    nodes: int | None = Field(None, description="node count the profile was scaled to for the run (None: the "
                                                "profile's own)")
    images: dict[str, str] = Field(default_factory=dict, description="image digest per platform")
    versions: dict[str, str | None] = Field(default_factory=dict, description="harness, python, docker, kind, ...")


class LevelVerdict(_Model):
    verdict: Literal["pass", "fail", "incomplete", "n/a"]
    required: int
    passed: int
    failing: list[str]
    not_applicable: list[str] = Field(default_factory=list,
                                      description="required requirements that do not apply to this run")


class Verdicts(_Model):
    overall: Literal["certified", "not-certified", "partial"]
    levels: dict[str, LevelVerdict]


class Report(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["fakehw.conformance.report/v1"] = Field("fakehw.conformance.report/v1", alias="schema")
    generated: str
    partial: bool
    manifest: Manifest
    summary: dict[str, int]
    verdicts: Verdicts
    results: list[RequirementResult]
    sha256: str = ""

    def canonical(self) -> bytes:
        """The bytes the seal covers: every field but ``sha256``, sorted keys, no whitespace."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"sha256"})
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()

    def sealed(self) -> Report:
        return self.model_copy(update={"sha256": hashlib.sha256(self.canonical()).hexdigest()})

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True) + "\n"


class ReportError(ValueError):
    """A results or report file that cannot be used; the message says what is wrong and where."""


def derive_verdicts(results: list[RequirementResult], partial: bool) -> Verdicts:
    levels: dict[str, LevelVerdict] = {}
    for level in LEVELS:
        required = [r for r in results if r.level == level and r.required]
        passed = [r for r in required if r.status == "passed"]
        inapplicable = [r.id for r in required if r.status == "not-applicable"]
        failing = [r.id for r in required if r.status not in ("passed", "not-applicable")]
        if len(inapplicable) == len(required):
            verdict: Literal["pass", "fail", "incomplete", "n/a"] = "n/a"
        elif partial:
            verdict = "incomplete"
        else:
            verdict = "pass" if not failing else "fail"
        levels[level] = LevelVerdict(verdict=verdict, required=len(required), passed=len(passed), failing=failing,
                                     not_applicable=inapplicable)
    if partial:
        overall: Literal["certified", "not-certified", "partial"] = "partial"
    elif all(v.verdict in ("pass", "n/a") for v in levels.values()) and any(
            v.verdict == "pass" for v in levels.values()):
        overall = "certified"
    else:
        overall = "not-certified"
    return Verdicts(overall=overall, levels=levels)


def _components(targets: list[str], extra: dict[str, Any]) -> list[Component]:
    versions = extra.get("component_versions", {}) if isinstance(extra.get("component_versions"), dict) else {}
    out = []
    for t in targets:
        kind, _, spec = t.partition("=")
        out.append(Component(kind=kind, spec=spec, version=versions.get(kind)))
    return out


def build_report(results: dict[str, Any], now: float | None = None) -> Report:
    """A sealed report from a results document (as written by the conformance pytest plugin)."""
    if not isinstance(results, dict) or results.get("schema") != RESULTS_SCHEMA:
        raise ReportError(f"not a conformance results file (expected schema {RESULTS_SCHEMA!r})")
    try:
        env = dict(results["environment"])
        tests = {t["nodeid"]: t for t in results["tests"]}
        requirements = results["requirements"]
        complete = bool(results["complete"])
    except (KeyError, TypeError) as exc:
        raise ReportError(f"results file is missing {exc}") from None
    cat = catalogue()
    rows: list[RequirementResult] = []
    for req_id, entry in sorted(requirements.items()):
        req = cat.get(req_id)
        if req is None:
            raise ReportError(f"results name requirement {req_id}, which the catalogue does not have")
        evidence: list[Evidence] = []
        seeds: list[str] = []
        messages: list[str] = []
        for nodeid in entry.get("tests", []):
            test = tests.get(nodeid, {})
            for item in test.get("evidence", []):
                if item.get("label") == "seed":
                    seeds.append(str(item.get("value")))
                else:
                    evidence.append(Evidence(label=str(item.get("label")), value=item.get("value")))
            if test.get("outcome") in ("failed", "error", "skipped", "not-applicable") and test.get("message"):
                messages.append(f"{nodeid}: {test['message']}")
        rows.append(RequirementResult(
            id=req_id, title=req.title, target=req.target, category=req.category, level=req.level,
            required=req.required, status=entry.get("status", "not-run"), duration=round(entry.get("duration", 0.0), 3),
            tests=list(entry.get("tests", [])), message="\n".join(messages)[:4000], evidence=evidence, seeds=seeds,
        ))
    partial = not complete
    summary = Counter(r.status for r in rows)
    manifest = Manifest(
        profile=env.get("profile"),
        profile_digest=env.get("profile_digest"),
        backend=env.get("backend"),
        architectures=list(env.get("architectures", [])),
        components=_components(list(env.get("targets", [])), env),
        nodes=env.get("nodes") or env.get("scheduler_nodes"),
        images=dict(env.get("images", {})),
        versions={"harness": env.get("harness_version"), "python": env.get("python"),
                  **{k: env.get(k) for k in ("docker", "kind", "kubernetes") if env.get(k)}},
    )
    report = Report(
        generated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now if now is not None else time.time())),
        partial=partial,
        manifest=manifest,
        summary={s: summary.get(s, 0) for s in STATUSES},
        verdicts=derive_verdicts(rows, partial),
        results=rows,
    )
    return report.sealed()


def load_report(text: str, source: str = "report") -> Report:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{source}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        raise ReportError(f"{source}: not a certification report (expected schema {REPORT_SCHEMA!r})")
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ReportError(f"{source}: {where}: {first['msg']}") from None


def verify(report: Report) -> list[str]:
    """Problems with a report (empty when it is intact): a broken seal or verdicts that the results contradict."""
    problems = []
    expected = hashlib.sha256(report.canonical()).hexdigest()
    if report.sha256 != expected:
        problems.append(f"sha256 mismatch: the report says {report.sha256[:16]}..., its content hashes to "
                        f"{expected[:16]}... (the report was edited after it was sealed)")
    derived = derive_verdicts(report.results, report.partial)
    if derived != report.verdicts:
        problems.append("verdicts do not follow from the results (a verdict or a result was edited)")
    counts = Counter(r.status for r in report.results)
    if any(report.summary.get(s, 0) != counts.get(s, 0) for s in STATUSES):
        problems.append("summary counts do not match the results")
    return problems


def report_json_schema() -> dict[str, Any]:
    schema = Report.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = REPORT_SCHEMA
    schema["title"] = "fakehw conformance certification report"
    return schema
