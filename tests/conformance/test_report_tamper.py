"""Forgeries of a signed certification run: every top-level field of report.json, every file of the run, deleted
requirements, emptied seals, and the forger's best move (edit results.json, rebuild and reseal everything with the
project's own code, unsigned or with their own key). ``conformance verify --key TRUSTED`` must refuse each one with
a message naming what does not match.

The first rows are the forgeries issue 16 measured against the unkeyed seal (all accepted then, 9 of 11 still
accepted before this work: see the commit that added this file)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance import catalogue_versions as cv
from conformance.cli import main as conformance_main
from conformance.provenance.attest import Signer, write_run
from conformance.provenance.statement import BUNDLE_FILE, STATEMENT_FILE, statement
from conformance.report.model import derive_verdicts, load_report, verify
from conformance.report.text import to_markdown
from tests.conformance.runs import certified_run, write_key

FAILING = "DP-ALLOC-001"
"""The genuine run fails this requirement (a plugin that gives container 2 three GPUs), so it is NOT CERTIFIED."""
INAPPLICABLE = "DP-POOL-001"
"""... and this one does not apply (said with a reason; it neither passes nor fails its level)."""


@dataclass(frozen=True)
class Forger:
    run: Path
    key: Path
    """The forger's own signing key (they do not have the vendor's)."""

    def edit_json(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        doc = json.loads((self.run / name).read_text())
        change(doc)
        (self.run / name).write_text(json.dumps(doc, indent=2))

    def reseal_report(self, rederive: bool = True) -> None:
        """Recompute report.json's sha256 (after re-deriving verdicts and counts with the project's code)."""
        report = load_report((self.run / "report.json").read_text())
        if rederive:
            counts: Counter[str] = Counter(r.status for r in report.results)
            report = report.model_copy(update={"verdicts": derive_verdicts(report.results, report.partial),
                                               "summary": {s: counts.get(s, 0) for s in report.summary}})
        (self.run / "report.json").write_text(report.sealed().to_json())

    def restate(self) -> None:
        """Recompute the seal over the (edited) files, keeping the genuine signature."""
        report = load_report((self.run / "report.json").read_text())
        (self.run / STATEMENT_FILE).write_text(json.dumps(statement(report, self.run), indent=2))

    def rebuild(self, signer: Signer) -> None:
        """The forger's best move: rebuild every file from (edited) results.json with the project's own code."""
        write_run(self.run / "results.json", self.run, signer)


def _row(doc: dict[str, Any], req_id: str) -> dict[str, Any]:
    return next(r for r in doc["results"] if r["id"] == req_id)


def _flip(doc: dict[str, Any]) -> None:
    _row(doc, FAILING).update(status="passed", message="")


def _all_passed(doc: dict[str, Any]) -> None:
    for r in doc["results"]:
        r.update(status="passed", message="")


def _swap_manifest(doc: dict[str, Any]) -> None:
    comp = doc["manifest"]["components"][0]
    comp.update(spec="cmd:other-plugin", name="other-plugin", digest="sha256:" + "ab" * 32)
    doc["manifest"]["profile"] = "gb200-nvl72"
    doc["generated"] = "2030-01-01T00:00:00Z"


def _failure_made_inapplicable(doc: dict[str, Any]) -> None:
    """The forger's cheapest trick since not-applicable exists: it does not block a level."""
    _row(doc, FAILING).update(status="not-applicable", message="not applicable: the profile has no such GPUs")


def _inapplicable_made_passed(doc: dict[str, Any]) -> None:
    _row(doc, INAPPLICABLE).update(status="passed", message="")


def _keep_one(doc: dict[str, Any]) -> None:
    doc["results"] = [r for r in doc["results"] if r["id"] != FAILING][:1]


def _recommend(doc: dict[str, Any]) -> None:
    _row(doc, FAILING)["required"] = False


def _results_passed(doc: dict[str, Any]) -> None:
    entry = doc["requirements"][FAILING]
    entry["status"] = "passed"
    for t in doc["tests"]:
        if FAILING in t["requirements"]:
            t.update(outcome="passed", message="")


def _results_other_component(doc: dict[str, Any]) -> None:
    doc["environment"]["components"][0].update(spec="cmd:other-plugin", digest="sha256:" + "cd" * 32)


def _append(name: str) -> Callable[[Forger], None]:
    def edit(f: Forger) -> None:
        with open(f.run / name, "a") as fh:
            fh.write("<!-- edited -->\n" if name.endswith((".html", ".md", ".xml")) else " ")
    return edit


def _restated(edit: Callable[[Forger], None]) -> Callable[[Forger], None]:
    def forge(f: Forger) -> None:
        edit(f)
        f.restate()
    return forge


def _delete(name: str) -> Callable[[Forger], None]:
    return lambda f: (f.run / name).unlink()


def _field(field: str, value: Any) -> Callable[[Forger], None]:
    return lambda f: f.edit_json("report.json", lambda d: d.update({field: value}))


def _edit_resealed(change: Callable[[dict[str, Any]], None], restate: bool = True,
                   rederive: bool = True) -> Callable[[Forger], None]:
    def forge(f: Forger) -> None:
        f.edit_json("report.json", change)
        f.reseal_report(rederive)
        if restate:
            f.restate()
    return forge


def _results_rebuilt(change: Callable[[dict[str, Any]], None], own_key: bool) -> Callable[[Forger], None]:
    def forge(f: Forger) -> None:
        f.edit_json("results.json", change)
        f.rebuild(Signer.with_key(f.key) if own_key else Signer())
    return forge


def _flip_bundle_signature(f: Forger) -> None:
    def change(b: dict[str, Any]) -> None:
        sig = b["dsseEnvelope"]["signatures"][0]
        sig["sig"] = ("A" if sig["sig"][0] != "A" else "B") + sig["sig"][1:]
    f.edit_json(BUNDLE_FILE, change)


def _bundle_with_forged_payload(f: Forger) -> None:
    """Swap the signed statement for one over edited files (the signature no longer covers it)."""
    import base64

    f.edit_json("report.json", _flip)
    f.reseal_report()
    f.restate()
    forged = (f.run / STATEMENT_FILE).read_bytes()
    f.edit_json(BUNDLE_FILE, lambda b: b["dsseEnvelope"].update(payload=base64.b64encode(forged).decode()))


def _declare_unsigned(f: Forger) -> None:
    f.edit_json("results.json", _results_passed)
    f.rebuild(Signer())
    assert not (f.run / BUNDLE_FILE).exists()


FORGERIES: dict[str, tuple[Callable[[Forger], None], str]] = {
    # issue 16's forgeries, each as the forger would best do it
    "a failed result flipped, verdicts re-derived, report and seal recomputed":
        (_edit_resealed(_flip), "the signed statement differs from the run: report.json was changed"),
    "component, profile and date swapped, resealed":
        (_edit_resealed(_swap_manifest), "the signed statement differs from the run: the component under test"),
    "NOT CERTIFIED rewritten to all passed, resealed":
        (_edit_resealed(_all_passed), "the signed statement differs from the run: report.json was changed"),
    "results.json edited and the report rebuilt (unsigned)":
        (_results_rebuilt(_results_passed, own_key=False), "the run is UNSIGNED: a signature is required"),
    "results.json edited and the report rebuilt, signed with the forger's key":
        (_results_rebuilt(_results_passed, own_key=True), "not with the key you trust"),
    "all requirements but one deleted, resealed":
        (_edit_resealed(_keep_one), "requirement(s) of catalogue version"),
    "empty report seal": (_field("sha256", ""), "the report has no seal (sha256 is empty)"),
    "a failed requirement declared not applicable, resealed":
        (_edit_resealed(_failure_made_inapplicable), "the signed statement differs from the run: report.json was "
                                                     "changed"),
    "a not-applicable requirement declared passed, resealed":
        (_edit_resealed(_inapplicable_made_passed), "the signed statement differs from the run: report.json was "
                                                    "changed"),
    "manifest edited, not resealed":
        (lambda f: f.edit_json("report.json", lambda d: d["manifest"].update(backend="docker")), "sha256 mismatch"),
    "report.html edited": (_append("report.html"), "report.html was changed after the run was sealed"),
    # every top-level field of report.json, edited in place
    "field schema": (_field("schema", "fakehw.conformance.report/v1"), "not a certification report"),
    "field generated": (_field("generated", "2030-01-01T00:00:00Z"), "sha256 mismatch"),
    "field partial": (_field("partial", True), "verdicts do not follow from the results"),
    "field manifest": (lambda f: f.edit_json("report.json", _swap_manifest), "sha256 mismatch"),
    "field summary": (lambda f: f.edit_json("report.json", lambda d: d["summary"].update(failed=0)),
                      "summary counts do not match the results: failed 0 (results: 1)"),
    "field summary, a status dropped": (lambda f: f.edit_json("report.json", lambda d: d["summary"].pop("failed")),
                                        "summary counts do not match the results: failed 0 (results: 1)"),
    "field verdicts": (lambda f: f.edit_json("report.json", lambda d: d["verdicts"].update(overall="certified")),
                       "overall certified (results give not-certified)"),
    "field results": (lambda f: f.edit_json("report.json", _flip), "sha256 mismatch"),
    "field sha256": (_field("sha256", "0" * 64), "sha256 mismatch"),
    # ... and edited with the report resealed (its own checks pass; the run's seal does not)
    "field generated, resealed": (_edit_resealed(lambda d: d.update(generated="2030-01-01T00:00:00Z"), False),
                                  "report.json was changed after the run was sealed"),
    "field partial, resealed": (_edit_resealed(lambda d: d.update(partial=True), False),
                                "report.json was changed after the run was sealed"),
    "field manifest (catalogue version), resealed":
        (_edit_resealed(lambda d: d["manifest"]["catalogue"].update(version="999"), False),
         "catalogue version '999' is unknown to this verifier"),
    "field manifest (signing declared unsigned), resealed":
        (_edit_resealed(lambda d: d["manifest"].update(signing={"mode": "unsigned"}), False),
         "the report declares itself unsigned but attestation.sigstore.json is present"),
    "field results (a requirement made recommended), resealed":
        (_edit_resealed(_recommend, False), "required False; catalogue version"),
    "field summary, resealed": (_edit_resealed(lambda d: d["summary"].update(passed=99), False, False),
                                "report.json was changed after the run was sealed"),
    "field verdicts, resealed":
        (_edit_resealed(lambda d: d["verdicts"].update(overall="certified"), False, False),
         "report.json was changed after the run was sealed"),
    # every file of the run
    "results.json edited": (_append("results.json"), "results.json was changed after the run was sealed"),
    "junit.xml edited": (_append("junit.xml"), "junit.xml was changed after the run was sealed"),
    "summary.md edited": (_append("summary.md"), "summary.md was changed after the run was sealed"),
    "results.json component swapped, report rebuilt with the forger's key":
        (_results_rebuilt(_results_other_component, own_key=True), "not with the key you trust"),
    **{f"{name} deleted": (_delete(name), f"missing {name}")
       for name in ("results.json", "junit.xml", "summary.md", "report.html")},
    "report.json deleted": (_delete("report.json"), "cannot read"),
    # the seal and the signature
    "seal deleted": (_delete(STATEMENT_FILE), "no seal: attestation.intoto.json is missing"),
    "seal emptied": (lambda f: (f.run / STATEMENT_FILE).write_text("{}"), "the seal is empty"),
    "seal recomputed over an edited summary.md":
        (_restated(_append("summary.md")),
         "the signed statement differs from the run: summary.md was changed"),
    "signature deleted": (_delete(BUNDLE_FILE), "attestation.sigstore.json is missing"),
    "signature bytes altered": (_flip_bundle_signature, "no signature in the envelope verifies"),
    "signed statement replaced": (_bundle_with_forged_payload, "no signature in the envelope verifies"),
    "everything rebuilt declaring itself unsigned": (_declare_unsigned, "a signature is required"),
}


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A signed NOT CERTIFIED device-plugin run, the vendor's public key and the forger's private key."""
    root = tmp_path_factory.mktemp("genuine")
    vendor = write_key(root / "vendor.pem")
    forger = write_key(root / "forger.pem")
    run = certified_run(root, Signer.with_key(vendor), "device-plugin", frozenset({FAILING}),
                        frozenset({INAPPLICABLE}))
    return run, vendor.with_suffix(".pub"), forger


def test_the_genuine_run_verifies_with_the_vendor_key(genuine: tuple[Path, Path, Path],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run, vendor_pub, _ = genuine
    assert conformance_main(["verify", str(run), "--key", str(vendor_pub)]) == 0
    out = capsys.readouterr().out
    assert "verdict NOT CERTIFIED; signed by key sha256:" in out and "(as required)" in out, out
    report = json.loads((run / "report.json").read_text())
    published = cv.published()[cv.current_version()].for_targets(["device-plugin"])
    assert [r["id"] for r in report["results"]] == sorted(published) and report["manifest"]["signing"]["mode"] == "key"
    assert report["manifest"]["components"][0]["digest"].startswith("sha256:")
    pool = next(r for r in report["results"] if r["id"] == INAPPLICABLE)
    assert pool["status"] == "not-applicable" and "the profile has nothing DP-POOL-001 could check" in pool["message"]
    assert report["summary"]["not-applicable"] == 1
    assert "1 not applicable" in (run / "summary.md").read_text()


@pytest.mark.parametrize("name", list(FORGERIES))
def test_verify_refuses_the_forgery(name: str, genuine: tuple[Path, Path, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run, vendor_pub, forger_key = genuine
    forged = tmp_path / "run"
    shutil.copytree(run, forged)
    forge, expected = FORGERIES[name]
    forge(Forger(forged, forger_key))
    capsys.readouterr()
    assert conformance_main(["verify", str(forged), "--key", str(vendor_pub)]) == 1
    err = capsys.readouterr().err
    assert expected in err, f"{name}: expected {expected!r} in:\n{err}"
    assert "does NOT verify" in err


def test_an_unsigned_forgery_is_accepted_only_as_unsigned(genuine: tuple[Path, Path, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Without a key to check against, the rebuilt forgery is consistent, and verify says it is UNSIGNED; the
    summary a reader sees says it too."""
    run, _, forger_key = genuine
    forged = tmp_path / "run"
    shutil.copytree(run, forged)
    _results_rebuilt(_results_passed, own_key=False)(Forger(forged, forger_key))
    assert conformance_main(["verify", str(forged)]) == 0
    out = capsys.readouterr().out
    assert "verdict CERTIFIED; UNSIGNED: the files agree with each other, but anyone could have written them" in out
    assert "UNSIGNED: anyone could have written this report" in (forged / "summary.md").read_text()
    assert conformance_main(["verify", str(forged), "--require-signature"]) == 1
    assert "a signature is required" in capsys.readouterr().err


def test_a_summary_without_a_zero_count_reads_as_zero(genuine: tuple[Path, Path, Path]) -> None:
    """Every reader of report.json's summary (summary.md, report.html, the JUnit file: conformance/report/text.py,
    html.py) shows a status the summary leaves out as 0, so the check that "the summary counts follow from the
    results" (docs/certification.md, verify step 1) must read it the same way: a summary without the errors it
    does not have says "0 errors", which is true. (Leaving out a status that IS counted is a forgery:
    FORGERIES["field summary, a status dropped"].)"""
    run, _, _ = genuine
    report = load_report((run / "report.json").read_text())
    assert report.summary["error"] == 0 and verify(report) == []
    thin = report.model_copy(update={"summary": {s: n for s, n in report.summary.items() if s != "error"}}).sealed()
    assert "0 errors" in to_markdown(thin)
    assert verify(thin) == []


def test_the_statement_names_the_harness_that_judged(genuine: tuple[Path, Path, Path]) -> None:
    """SLSA provenance v1 (slsa.dev/spec/v1.0/provenance): ``resolvedDependencies`` lists the artifacts the build
    used, as resource descriptors (name, digest). docs/certification.md: the provenance names "the harness (version,
    source, git commit, whether the checkout was modified, and the digest of" its code). A verifier reading the
    signed statement must find the harness there, with the digest and commit report.json records."""
    run, _, _ = genuine
    report = json.loads((run / "report.json").read_text())
    harness = report["manifest"]["harness"]
    assert harness is not None
    sealed = json.loads((run / STATEMENT_FILE).read_text())
    deps = {d["name"]: d for d in sealed["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert "fakehw" in deps, sorted(deps)
    assert deps["fakehw"]["digest"]["sha256"] == harness["digest"].removeprefix("sha256:")
    assert deps["fakehw"]["digest"].get("gitCommit") == (harness["commit"] or None)
    assert deps["fakehw"]["annotations"]["version"] == harness["version"]


def test_a_stranger_recomputes_the_seal_from_report_json_alone(genuine: tuple[Path, Path, Path]) -> None:
    """docs/certification.md: report.json carries "a sha256 over the canonical form of all of it" (every field but
    the seal itself, as the file names them, keys sorted, no whitespace, ASCII). A verifier in another language
    needs only report.json and hashlib: the seal must be the hash of the file's own fields, not of the harness's
    internal field names."""
    run, _, _ = genuine
    doc = json.loads((run / "report.json").read_text())
    seal = doc.pop("sha256")
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert seal == hashlib.sha256(canonical).hexdigest()


def test_each_level_is_judged_on_its_own_requirements(genuine: tuple[Path, Path, Path]) -> None:
    """docs/certification.md: "a level passes when every required requirement of it that applies passed". The
    levels and required flags come from the published catalogue version the report records (conformance/catalogue/
    versions.json): each level's verdict counts exactly that level's required requirements, and the one failure of
    the genuine run fails its own level only."""
    run, _, _ = genuine
    report = json.loads((run / "report.json").read_text())
    published = cv.published()[cv.current_version()].for_targets(["device-plugin"])
    status = {r["id"]: r["status"] for r in report["results"]}
    for level, verdict in report["verdicts"]["levels"].items():
        mine = [i for i, e in published.items() if e.level == level and e.required]
        assert verdict["required"] == len(mine), level
        assert verdict["passed"] == sum(status[i] == "passed" for i in mine), level
        assert verdict["failing"] == ([FAILING] if FAILING in mine else []), level
        assert verdict["verdict"] == ("fail" if FAILING in mine else "pass" if mine else "n/a"), level


def test_a_requirement_listed_twice_is_refused(genuine: tuple[Path, Path, Path]) -> None:
    """docs/certification.md, verify step 2: every requirement of the recorded catalogue version is there "once".
    A second row for the failing requirement (saying it passed) is named, even when it appears just twice."""
    run, _, _ = genuine
    report = load_report((run / "report.json").read_text())
    row = next(r for r in report.results if r.id == FAILING)
    doubled = report.model_copy(update={"results": [*report.results, row.model_copy(update={"status": "passed"})]})
    assert f"requirements listed more than once: {FAILING}" in verify(doubled.sealed())


def test_the_statement_carries_the_verdict_on_report_json(genuine: tuple[Path, Path, Path]) -> None:
    """conformance/provenance/statement.py's documented layout: byproducts are the run's files by sha256, "report.json
    (with the verdict)": a reader of the signed statement learns the verdict and the report's seal from it without
    opening the run, and only report.json carries them."""
    run, _, _ = genuine
    report = json.loads((run / "report.json").read_text())
    sealed = json.loads((run / STATEMENT_FILE).read_text())
    products = {p["name"]: p for p in sealed["predicate"]["runDetails"]["byproducts"]}
    assert products["report.json"]["annotations"] == {"verdict": report["verdicts"]["overall"],
                                                      "seal": report["sha256"]}
    assert report["verdicts"]["overall"] == "not-certified"
    assert all("annotations" not in p for name, p in products.items() if name != "report.json"), products


@pytest.mark.parametrize("extra", [20, 21, 25])
def test_a_seal_differing_everywhere_lists_twenty_differences_and_counts_the_rest(
        extra: int, genuine: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/certification.md: a seal that differs from the run in many places lists its first 20 differences and
    says how many more there are (a forged seal cannot flood the output, and a cut list is never taken for all of
    it). A seal with ``extra`` keys the run does not have: 20 listed at most, the rest counted in one line."""
    run, vendor_pub, _ = genuine
    forged = tmp_path / "run"
    shutil.copytree(run, forged)
    sealed = json.loads((forged / STATEMENT_FILE).read_text())
    sealed["predicate"].update({f"forged{i:02d}": i for i in range(extra)})
    (forged / STATEMENT_FILE).write_text(json.dumps(sealed))
    capsys.readouterr()
    assert conformance_main(["verify", str(forged), "--key", str(vendor_pub)]) == 1
    lines = [line.split("seal mismatch: ", 1)[1] for line in capsys.readouterr().err.splitlines()
             if "seal mismatch: " in line]
    more = [] if extra <= 20 else [f"{extra - 20} more not listed"]
    assert lines == [f"predicate.forged{i:02d} is not in the run" for i in range(min(extra, 20))] + more, lines


def test_the_statement_names_the_builder_and_invocation_of_the_run(genuine: tuple[Path, Path, Path]) -> None:
    """SLSA provenance v1 (slsa.dev/spec/v1.0/provenance): ``runDetails.builder.id`` is a URI naming the builder
    and ``runDetails.metadata.invocationId`` the invocation. docs/certification.md: the builder is "the certify
    workflow's identity, or ``urn:fakehw:runner:local``". A local run names the local builder and no invocation (its
    runner id is the word ``local``, not a URI); a GitHub Actions run names its workflow and its run's URL."""
    run, _, _ = genuine
    report = load_report((run / "report.json").read_text())
    assert report.manifest.runner is not None and report.manifest.runner.kind == "local"
    details = json.loads((run / STATEMENT_FILE).read_text())["predicate"]["runDetails"]
    assert details["builder"]["id"] == "urn:fakehw:runner:local"
    assert "invocationId" not in details["metadata"]
    workflow = "https://github.com/fakehw/fakehw/.github/workflows/certify.yml@refs/heads/main"
    url = "https://github.com/vendor/plugin/actions/runs/42/attempts/1"
    actions = report.manifest.runner.model_copy(update={"kind": "github-actions", "id": url, "builder": workflow})
    ci = report.model_copy(update={"manifest": report.manifest.model_copy(update={"runner": actions})})
    details = statement(ci, run)["predicate"]["runDetails"]
    assert (details["builder"]["id"], details["metadata"]["invocationId"]) == (workflow, url)
