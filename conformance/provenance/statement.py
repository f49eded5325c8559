"""The in-toto statement of a certification run: SLSA-style provenance over every file of the run.

    _type          https://in-toto.io/Statement/v1
    subject        each component under test by digest (report.json when none can be pinned)
    predicateType  https://slsa.dev/provenance/v1
    predicate
      buildDefinition
        buildType             BUILD_TYPE (this layout)
        externalParameters    target(s) as given, profile, backend, architectures
        internalParameters    catalogue version, signing mode
        resolvedDependencies  the harness (git commit and content digest), the catalogue, the profile, images
      runDetails
        builder.id            the workflow that certified (GitHub Actions) or urn:fakehw:runner:local
        metadata              invocationId (the run's URL), startedOn/finishedOn
        byproducts            report.json (with the verdict), results.json, junit.xml, summary.md, report.html,
                              each by sha256

It is a pure function of the run directory, so anyone can recompute it: ``conformance verify`` does, and compares
it with the sealed copy (``attestation.intoto.json``) and with the signed one (``attestation.sigstore.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.provenance.component import file_digest
from conformance.report.model import Report

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://github.com/fakehw/fakehw/blob/main/docs/certification.md#the-attestation"
RUN_FILES = ("report.json", "results.json", "junit.xml", "summary.md", "report.html")
STATEMENT_FILE = "attestation.intoto.json"
BUNDLE_FILE = "attestation.sigstore.json"
LOCAL_BUILDER = "urn:fakehw:runner:local"


class StatementError(ValueError):
    """A run directory the statement cannot be computed for (a file is missing)."""


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def subjects(report: Report, run_dir: Path) -> list[dict[str, Any]]:
    out = [{"name": f"{c.kind}:{c.name or c.spec}", "digest": {"sha256": _hex(c.digest)},
            "annotations": {"spec": c.spec, "hashed": c.hashed}}
           for c in report.manifest.components if c.digest]
    return out or [{"name": "report.json", "digest": {"sha256": file_digest(run_dir / "report.json")},
                    "annotations": {"hashed": "no component could be pinned by digest"}}]


def _dependencies(report: Report) -> list[dict[str, Any]]:
    m = report.manifest
    deps: list[dict[str, Any]] = []
    if m.harness is not None:
        harness: dict[str, Any] = {"name": "fakehw", "digest": {"sha256": _hex(m.harness.digest)},
                                   "annotations": {"version": m.harness.version, "source": m.harness.source,
                                                   "modified": m.harness.modified}}
        if m.harness.commit:
            harness["digest"]["gitCommit"] = m.harness.commit
            if m.harness.source.startswith("https://"):
                harness["uri"] = f"git+{m.harness.source}@{m.harness.commit}"
        deps.append(harness)
    deps.append({"name": "catalogue", "digest": {"sha256": m.catalogue.digest},
                 "annotations": {"version": m.catalogue.version}})
    if m.profile_digest:
        deps.append({"name": f"profile:{m.profile}", "digest": {"sha256": m.profile_digest}})
    for platform, image in sorted(m.images.items()):
        deps.append({"name": f"image:{platform}", "digest": {"sha256": _hex(image)}})
    return deps


def _byproducts(report: Report, run_dir: Path) -> list[dict[str, Any]]:
    missing = [name for name in RUN_FILES if not (run_dir / name).is_file()]
    if missing:
        raise StatementError(f"{run_dir}: missing {', '.join(missing)} (a run writes {', '.join(RUN_FILES)})")
    out = []
    for name in RUN_FILES:
        item: dict[str, Any] = {"name": name, "digest": {"sha256": file_digest(run_dir / name)}}
        if name == "report.json":
            item["annotations"] = {"verdict": report.verdicts.overall, "seal": report.sha256}
        out.append(item)
    return out


def statement(report: Report, run_dir: Path) -> dict[str, Any]:
    """The statement for the run in ``run_dir`` whose report is ``report`` (read from ``run_dir/report.json``)."""
    m = report.manifest
    runner = m.runner
    metadata: dict[str, Any] = {"startedOn": report.generated, "finishedOn": report.generated}
    if runner is not None and runner.kind != "local":
        metadata["invocationId"] = runner.id
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects(report, run_dir),
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"targets": [f"{c.kind}={c.spec}" for c in m.components],
                                       "profile": m.profile, "backend": m.backend,
                                       "architectures": m.architectures},
                "internalParameters": {"catalogueVersion": m.catalogue.version, "signing": m.signing.mode,
                                       "partial": report.partial,
                                       "componentIsolation": runner.isolation if runner else "not recorded"},
                "resolvedDependencies": _dependencies(report),
            },
            "runDetails": {
                "builder": {"id": runner.builder if runner is not None and runner.kind != "local" else LOCAL_BUILDER,
                            **({"version": {"fakehw": m.harness.version}} if m.harness else {})},
                "metadata": metadata,
                "byproducts": _byproducts(report, run_dir),
            },
        },
    }


def payload(stmt: dict[str, Any]) -> bytes:
    """The bytes that are signed: compact JSON with sorted keys."""
    return json.dumps(stmt, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def differences(sealed: Any, actual: Any, where: str = "") -> list[str]:
    """Where two statements differ, as readable paths (``subject[0].digest.sha256``), most specific first."""
    if isinstance(sealed, dict) and isinstance(actual, dict):
        out = []
        for key in sorted(set(sealed) | set(actual)):
            path = f"{where}.{key}" if where else key
            if key not in sealed or key not in actual:
                out.append(f"{path} is {'missing from the seal' if key not in sealed else 'not in the run'}")
            else:
                out += differences(sealed[key], actual[key], path)
        return out
    if isinstance(sealed, list) and isinstance(actual, list):
        if _named(sealed) and _named(actual):
            return differences({i["name"]: i for i in sealed}, {i["name"]: i for i in actual}, where)
        if len(sealed) != len(actual):
            return [f"{where}: the seal has {len(sealed)} entries, the run {len(actual)}"]
        return [d for i, (a, b) in enumerate(zip(sealed, actual, strict=True))
                for d in differences(a, b, f"{where}[{i}]")]
    if sealed != actual:
        return [f"{where}: sealed {_short(sealed)}, the run has {_short(actual)}"]
    return []


def _named(items: list[Any]) -> bool:
    names = [i.get("name") for i in items if isinstance(i, dict)]
    return len(names) == len(items) and len(set(names)) == len(names) and all(isinstance(n, str) for n in names)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
