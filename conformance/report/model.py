"""The certification report: what was certified (by digest), on what, by which harness, with which verdicts.

A report is built from a results file (``--conformance-results``) and is itself JSON (``report.json``) with a
versioned schema (``report.schema.json``, shipped with the package and generated from these models). The
``sha256`` field is computed over the canonical form of everything else. :func:`verify` checks what the report
can show about itself: the seal is present and matches, the verdicts and counts follow from the results, and
every requirement of the recorded catalogue version for the report's targets is there with a status and with
the catalogue's level and ``required`` flag. Anyone can recompute an unkeyed seal, so none of this tells a
forgery from a real run: that is the signed attestation's job (:mod:`conformance.provenance`), which covers
this file and every other file of the run.

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
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conformance import RESULTS_SCHEMA
from conformance.catalogue_versions import CatalogueStamp, CatalogueVersionError, resolve, stamp
from conformance.requirements import LEVELS, Level, catalogue

REPORT_SCHEMA = "fakehw.conformance.report/v2"
Status = Literal["passed", "failed", "error", "skipped", "not-applicable", "not-run"]
STATUSES: tuple[Status, ...] = ("passed", "failed", "error", "skipped", "not-applicable", "not-run")
MAX_MESSAGE_CHARS = 4000
"""A row's failure messages are cut at this many characters (docs/certification.md): they quote the component's
output, which the component controls."""


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
    """A component under test, named by what was hashed (see conformance.provenance.component)."""

    kind: str
    spec: str = Field(description="the target as given, absolute directories cut off")
    version: str | None = None
    name: str = ""
    digest: str | None = Field(None, description="sha256:<hex> of what was hashed; null when it cannot be pinned")
    hashed: str = Field("", description="what the digest covers")


class CatalogueRef(_Model):
    version: str
    digest: str


class Harness(_Model):
    version: str
    source: str
    commit: str | None
    modified: bool = Field(description="the harness checkout had local changes")
    digest: str = Field(description="directory digest of the fakehw, testbed and conformance packages")


class Runner(_Model):
    kind: str
    id: str
    builder: str
    environment: str
    platform: str
    isolation: str = Field(description="how the component was kept from the harness's output")


class Signing(_Model):
    """How the run is signed, declared when the report is written (the summary says it)."""

    mode: Literal["unsigned", "key", "sigstore"]
    keyid: str | None = Field(None, description="sha256 of the signing key's SubjectPublicKeyInfo (mode key)")
    public_key: str | None = Field(None, description="PEM public key (mode key), checked against --key on verify")


UNSIGNED = Signing(mode="unsigned")


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
    catalogue: CatalogueRef
    harness: Harness | None = Field(description="null only for results written by a harness that did not record it")
    runner: Runner | None
    signing: Signing


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

    schema_: Literal["fakehw.conformance.report/v2"] = Field("fakehw.conformance.report/v2", alias="schema")
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


def _components(env: dict[str, Any]) -> list[Component]:
    """The components by digest as the harness resolved them; results of an older harness name targets only."""
    versions = env.get("component_versions", {}) if isinstance(env.get("component_versions"), dict) else {}
    resolved = env.get("components")
    if isinstance(resolved, list):
        return [Component.model_validate({**c, "version": versions.get(c.get("kind"))}) for c in resolved]
    out = []
    for t in env.get("targets", []):
        kind, _, spec = str(t).partition("=")
        out.append(Component(kind=kind, spec=spec, version=versions.get(kind), hashed="not pinned: not recorded"))
    return out


def _row(req_id: str, entry: dict[str, Any], tests: dict[str, Any]) -> RequirementResult:
    req = catalogue().get(req_id)
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
    return RequirementResult(
        id=req_id, title=req.title, target=req.target, category=req.category, level=req.level,
        required=req.required, status=entry.get("status", "not-run"), duration=round(entry.get("duration", 0.0), 3),
        tests=list(entry.get("tests", [])), message="\n".join(messages)[:MAX_MESSAGE_CHARS], evidence=evidence,
        seeds=seeds,
    )


def _manifest(env: dict[str, Any], signing: Signing) -> Manifest:
    cat = stamp()
    return Manifest(
        profile=env.get("profile"),
        profile_digest=env.get("profile_digest"),
        backend=env.get("backend"),
        architectures=list(env.get("architectures", [])),
        components=_components(env),
        nodes=env.get("nodes") or env.get("scheduler_nodes"),
        images=dict(env.get("images", {})),
        versions={"harness": env.get("harness_version"), "python": env.get("python"),
                  **{k: env.get(k) for k in ("docker", "kind", "kubernetes") if env.get(k)}},
        catalogue=CatalogueRef(version=cat.version, digest=cat.digest),
        harness=_environment_part(env, "harness", Harness),
        runner=_environment_part(env, "runner", Runner),
        signing=signing,
    )


_Part = TypeVar("_Part", bound=BaseModel)


def _environment_part(env: dict[str, Any], key: str, model: type[_Part]) -> _Part | None:
    """``environment.<key>`` of a results file as ``model`` (None when it is not an object); a wrong one is refused
    naming its first wrong field as the file writes them (``environment.harness.commit``), as :func:`load_report`
    names a report's."""
    value = env.get(key)
    if not isinstance(value, dict):
        return None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ReportError(f"results file: {_first_error(exc, value, ('environment', key))}") from None


def _generated(results: dict[str, Any], now: float | None) -> str:
    """When the run last wrote its results (so a report rebuilt from them is the same report), else now."""
    when = now if now is not None else results.get("updated")
    if isinstance(when, bool) or not isinstance(when, int | float):  # a boolean is no time (JSON true is not 1 s)
        when = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(type(value),
                                                                                        type(value).__name__)


def _tests_problem(env: Any, tests: Any) -> str | None:
    """What is wrong with the shape of ``environment`` and ``tests`` (the pytest plugin writes an object of
    settings and a list of test objects, each with a string ``nodeid`` and a list of evidence objects), or None."""
    if not isinstance(env, dict):
        return f"environment: expected an object, got {_kind(env)}"
    if not isinstance(tests, list):
        return f"tests: expected a list, got {_kind(tests)}"
    for i, t in enumerate(tests):
        if not isinstance(t, dict):
            return f"tests[{i}]: expected an object, got {_kind(t)}"
        if not isinstance(t.get("nodeid"), str):
            return f"tests[{i}].nodeid: expected a string, got {_kind(t.get('nodeid'))}"
        evidence = t.get("evidence", [])
        if not isinstance(evidence, list) or not all(isinstance(e, dict) for e in evidence):
            return f"tests[{i}].evidence: expected a list of objects"
    return None


def _requirements_problem(requirements: Any) -> str | None:
    """What is wrong with the shape of the ``requirements`` object (an object per requirement id: a status, a
    duration in seconds, the ids of its tests), or None."""
    if not isinstance(requirements, dict):
        return f"requirements: expected an object, got {_kind(requirements)}"
    for req_id, entry in requirements.items():
        where = f"requirements.{req_id}"
        if not isinstance(entry, dict):
            return f"{where}: expected an object, got {_kind(entry)}"
        if entry.get("status", "not-run") not in STATUSES:
            return f"{where}.status: {entry['status']!r} is not one of {', '.join(STATUSES)}"
        duration = entry.get("duration", 0.0)
        if isinstance(duration, bool) or not isinstance(duration, int | float):
            return f"{where}.duration: expected a number of seconds, got {_kind(duration)}"
        names = entry.get("tests", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return f"{where}.tests: expected a list of test ids"
    return None


def build_report(results: dict[str, Any], now: float | None = None, signing: Signing = UNSIGNED) -> Report:
    """A sealed report from a results document (as written by the conformance pytest plugin)."""
    if not isinstance(results, dict) or results.get("schema") != RESULTS_SCHEMA:
        raise ReportError(f"not a conformance results file (expected schema {RESULTS_SCHEMA!r})")
    missing = [k for k in ("environment", "tests", "requirements", "complete") if k not in results]
    if missing:
        raise ReportError(f"results file is missing {', '.join(missing)}")
    problem = _tests_problem(results["environment"], results["tests"]) or _requirements_problem(
        results["requirements"])
    if problem is not None:
        raise ReportError(f"results file: {problem}")
    env = dict(results["environment"])
    tests = {t["nodeid"]: t for t in results["tests"]}
    requirements = results["requirements"]
    complete = bool(results["complete"])
    rows = [_row(req_id, entry, tests) for req_id, entry in sorted(requirements.items())]
    try:
        manifest = _manifest(env, signing)
    except ValidationError as exc:
        raise ReportError(f"results file: {_first_error(exc, env, ('environment',))}") from None
    partial = not complete
    summary: Counter[str] = Counter(r.status for r in rows)
    report = Report(
        generated=_generated(results, now),
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
        raise ReportError(f"{source}: {_first_error(exc, data)}") from None


def _first_error(exc: ValidationError, data: Any, prefix: tuple[str, ...] = ()) -> str:
    """``where: what`` of the wrong field of ``data`` (the document ``exc`` came from, at ``prefix`` in its file) that
    a reader of the file meets first (:func:`_position`), not the first in the model's order."""
    first = min(exc.errors(include_url=False), key=lambda error: _position(data, error["loc"]))
    return f"{'.'.join(str(x) for x in (*prefix, *first['loc']))}: {first['msg']}"


def _position(data: Any, loc: tuple[int | str, ...]) -> tuple[int, ...]:
    """Where a wrong field sits in the document, so that a refusal names the one a reader of the file meets first
    (pydantic lists errors in the order the model declares its fields): at each level the index of the member among
    those its object writes, or the list index. A member the document lacks is placed after every member its object
    writes. (The report's models have no tagged unions, so a location ends at the offending value; parts past a value
    that is no object or list would name no place in the document and do not move it.)"""
    position: list[int] = []
    node = data
    for part in loc:
        if isinstance(node, dict):
            keys = list(node)
            if part not in node:
                return (*position, len(keys))
            position.append(keys.index(part))
            node = node[part]
        elif isinstance(node, list):
            position.append(int(part))
            node = node[int(part)]
    return tuple(position)


def verify(report: Report) -> list[str]:
    """Problems with a report (empty when it is intact): a missing or broken seal, verdicts or counts the results
    contradict, requirements of the recorded catalogue that are missing or not as the catalogue defines them."""
    problems = []
    expected = hashlib.sha256(report.canonical()).hexdigest()
    if not report.sha256:
        problems.append("the report has no seal (sha256 is empty)")
    elif report.sha256 != expected:
        problems.append(f"sha256 mismatch: the report says {report.sha256[:16]}..., its content hashes to "
                        f"{expected[:16]}... (the report was edited after it was sealed)")
    derived = derive_verdicts(report.results, report.partial)
    if derived != report.verdicts:
        problems.append("verdicts do not follow from the results (a verdict or a result was edited): "
                        + _verdict_difference(report.verdicts, derived))
    counts: Counter[str] = Counter(r.status for r in report.results)
    wrong = [s for s in set(STATUSES) | set(report.summary) if report.summary.get(s, 0) != counts.get(s, 0)]
    if wrong:
        problems.append("summary counts do not match the results: " + ", ".join(
            f"{s} {report.summary.get(s, 0)} (results: {counts.get(s, 0)})" for s in sorted(wrong)))
    return problems + completeness(report)


def _verdict_difference(stated: Verdicts, derived: Verdicts) -> str:
    """What the stated verdicts say that the results do not: the overall verdict, a level's verdict, or (the verdict
    word being right) each count or list of a level that is not, and levels the catalogue does not have."""
    parts = [] if stated.overall == derived.overall else [f"overall {stated.overall} (results give {derived.overall})"]
    for level, v in derived.levels.items():
        said = stated.levels.get(level)
        if said is None or said.verdict != v.verdict:
            parts.append(f"{level} {said.verdict if said else 'missing'} (results give {v.verdict})")
        else:
            parts += [f"{level} {name} {getattr(said, name)} (results give {getattr(v, name)})"
                      for name in LevelVerdict.model_fields if getattr(said, name) != getattr(v, name)]
    parts += [f"{level} is not a level (results give none)" for level in stated.levels if level not in derived.levels]
    return "; ".join(parts)


def completeness(report: Report) -> list[str]:
    """Every requirement of the recorded catalogue version for the report's targets is in the report, once, with
    the catalogue's target, category, level and required flag; no component, no certification."""
    try:
        version = resolve(CatalogueStamp(report.manifest.catalogue.version, report.manifest.catalogue.digest))
    except CatalogueVersionError as exc:
        return [str(exc)]
    targets = {c.kind for c in report.manifest.components} | {r.target for r in report.results}
    if not targets:
        return ["the report names no component and no result: it certifies nothing"]
    problems = []
    wanted = version.for_targets(targets)
    seen = Counter(r.id for r in report.results)
    missing = sorted(set(wanted) - set(seen))
    if missing:
        problems.append(f"{len(missing)} requirement(s) of catalogue version {version.version} for "
                        f"{', '.join(sorted(targets))} are missing from the report: {', '.join(missing[:12])}"
                        + (" ..." if len(missing) > 12 else ""))
    twice = sorted(i for i, n in seen.items() if n > 1)
    if twice:
        problems.append(f"requirements listed more than once: {', '.join(twice)}")
    for r in report.results:
        entry = version.requirements.get(r.id)
        if entry is None:
            problems.append(f"{r.id} is not in catalogue version {version.version}")
        elif (r.target, r.category, r.level, r.required) != (entry.target, entry.category, entry.level, entry.required):
            problems.append(f"{r.id} says target {r.target}, category {r.category}, level {r.level}, required "
                            f"{r.required}; catalogue version {version.version} says {entry.target}, "
                            f"{entry.category}, {entry.level}, {entry.required}")
    return problems


def report_json_schema() -> dict[str, Any]:
    schema = Report.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = REPORT_SCHEMA
    schema["title"] = "fakehw conformance certification report"
    return schema
