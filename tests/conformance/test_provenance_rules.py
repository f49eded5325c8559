"""Edges of report verification the tamper table does not reach: malformed seals, the statement's difference
report, catalogue-version files edited by hand, value types. Written to kill the mutants ``make mutate`` found
surviving in conformance/report and conformance/provenance."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conformance import catalogue_versions as cv
from conformance.cli import main as conformance_main
from conformance.provenance.attest import Signer
from conformance.provenance.dsse import MAX_KEY_BYTES, Envelope, SignatureError, SigningKey
from conformance.provenance.statement import BUNDLE_FILE, STATEMENT_FILE, differences
from conformance.provenance.verify import MAX_FILE_BYTES
from conformance.report.model import completeness, load_report
from tests.conformance.runs import certified_run, write_key


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return certified_run(tmp_path_factory.mktemp("rules"), Signer(), "device-plugin")


def _copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


@pytest.mark.parametrize("seal", ["[]", '"sealed"', "null", '{"subject": [], "predicate": {"x": 1}}',
                                  '{"subject": [{"name": "x"}]}', "{not json"])
def test_a_malformed_seal_is_refused_cleanly(seal: str, run: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    forged = _copy(run, tmp_path)
    (forged / STATEMENT_FILE).write_text(seal)
    assert conformance_main(["verify", str(forged)]) == 1
    err = capsys.readouterr().err
    assert "the seal is empty" in err or "unreadable seal" in err, err
    assert "Traceback" not in err


def test_the_statement_says_how_the_component_was_isolated(run: Path) -> None:
    statement = json.loads((run / STATEMENT_FILE).read_text())
    report = json.loads((run / "report.json").read_text())
    isolation = statement["predicate"]["buildDefinition"]["internalParameters"]["componentIsolation"]
    assert isolation == report["manifest"]["runner"]["isolation"] == "none: the component ran as the harness's user"


def test_a_difference_quotes_an_object_the_same_whatever_order_its_members_were_written_in() -> None:
    """RFC 8259, section 4: an object's members are unordered, and JSON parsed from a seal keeps whatever order its
    writer chose. Two seals holding the same object where the run has something else are the same seal, so the
    difference quoted must read the same for both (a reader comparing two verify outputs, or a message cut at 80
    characters, must not depend on how a forged seal ordered its keys)."""
    one = differences({"a": {"y": 1, "x": 2}}, {"a": [1]})
    other = differences({"a": {"x": 2, "y": 1}}, {"a": [1]})
    assert one == other
    assert len(one) == 1 and one[0].startswith("a: sealed {") and one[0].endswith("}, the run has [1]")
    long_one = {f"k{i:02}": "v" * 8 for i in range(12)}
    long_other = dict(reversed(list(long_one.items())))
    assert differences({"a": long_one}, {"a": 1}) == differences({"a": long_other}, {"a": 1})


def test_differences_name_the_path_and_both_values() -> None:
    assert differences({"a": [1]}, {"a": {"x": 1}}) == ['a: sealed [1], the run has {"x": 1}']
    assert differences({"a": {"x": 1}}, {"a": [1]}) == ['a: sealed {"x": 1}, the run has [1]']
    assert differences({"a": [1, 2]}, {"a": [1]}) == ["a: the seal has 2 entries, the run 1"]
    assert differences({"a": [{"name": "r", "v": 1}]}, {"a": [{"name": "r", "v": 2}]}) == ["a.r.v: sealed 1, the run "
                                                                                           "has 2"]
    assert differences({"k": 1}, {}) == ["k is not in the run"] and differences({}, {"k": 1}) == [
        "k is missing from the seal"]
    long = "x" * 100
    assert differences({"k": long}, {"k": "y"}) == [f'k: sealed "{long[:76]}..., the run has "y"']
    # a value is quoted whole up to 80 characters of JSON (78 x's and their quotes), cut to 77 and "..." beyond
    assert differences({"k": long[:78]}, {"k": "y"}) == [f'k: sealed "{long[:78]}", the run has "y"']
    assert differences({"k": long[:79]}, {"k": "y"}) == [f'k: sealed "{long[:76]}..., the run has "y"']


def test_the_missing_requirements_are_listed_up_to_twelve(run: Path) -> None:
    report = load_report((run / "report.json").read_text())
    for keep, ellipsis in ((len(report.results) - 12, False), (len(report.results) - 13, True)):
        cut = report.model_copy(update={"results": report.results[:keep]})
        (problem,) = [p for p in completeness(cut) if "missing from the report" in p]
        assert problem.startswith(f"{len(report.results) - keep} requirement(s) of catalogue version")
        assert problem.endswith(" ...") is ellipsis, problem
        assert problem.count("DP-") == 12


@pytest.mark.parametrize("entry", [["t", "c", "gold", True], ["t", "c", "core"], ["t", "c", "core", "yes"],
                                   ["t", 3, "core", True], "core", ["t", "c", "core", True, 1]])
def test_a_hand_edited_version_entry_is_refused(entry: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.loads((Path(cv.__file__).parent / "catalogue" / "versions.json").read_text())
    first = data["versions"]["1"]["requirements"]
    first[next(iter(first))] = entry
    edited = tmp_path / "versions.json"
    edited.write_text(json.dumps(data))
    monkeypatch.setattr(cv, "_versions_path", lambda: edited)
    cv._published.cache_clear()
    try:
        with pytest.raises(cv.CatalogueVersionError, match=r"expected \[target, category, level, required\]"):
            cv.published()
    finally:
        cv._published.cache_clear()


def test_value_types_cannot_change_after_the_fact() -> None:
    """What a verification is judged by (catalogue entries, the envelope read, the recorded stamp, the user's
    trust policy: a check deep in verify_run must not be able to widen what --key/--identity asked for) and the key
    a run is signed with are immutable."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from conformance.provenance.verify import TrustPolicy

    entry = cv.Entry("device-plugin", "allocation", "core", True)
    assert {entry: 1}[cv.Entry("device-plugin", "allocation", "core", True)] == 1
    envelope = Envelope(b"{}", "application/vnd.in-toto+json", (("k", b"s"),))
    for value, field in ((entry, "required"), (envelope, "payload"), (cv.CatalogueStamp("1", "d"), "digest"),
                         (TrustPolicy(identity="someone@example.com"), "identity"),
                         (SigningKey(ed25519.Ed25519PrivateKey.generate()), "private")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("signed")
    key = write_key(root / "vendor.pem")
    return certified_run(root, Signer.with_key(key), "extender"), key


def test_a_key_signed_run_without_a_key_to_check_says_so(signed: tuple[Path, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = signed
    assert conformance_main(["verify", str(run)]) == 0
    out = capsys.readouterr().out
    assert "signed by key sha256:" in out and "not checked against a key or identity you trust" in out


def test_malformed_envelopes_are_named_not_tracebacks(signed: tuple[Path, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run, key = signed
    for signatures in (["not-an-object"], [{"keyid": "k"}], [{"sig": "!!!"}], "nope"):
        forged = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(run, forged)
        bundle = json.loads((forged / BUNDLE_FILE).read_text())
        bundle["dsseEnvelope"]["signatures"] = signatures
        (forged / BUNDLE_FILE).write_text(json.dumps(bundle))
        assert conformance_main(["verify", str(forged), "--key", str(key.with_suffix(".pub"))]) == 1
        err = capsys.readouterr().err
        assert "signature: malformed DSSE envelope" in err and "Traceback" not in err, err


def test_oversized_files_are_refused_before_reading(signed: tuple[Path, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert (MAX_FILE_BYTES, MAX_KEY_BYTES) == (64 << 20, 64 << 10)  # the limits docs/certification.md states
    run, _ = signed
    forged = _copy(run, tmp_path)
    with open(forged / "report.json", "r+b") as fh:
        fh.truncate(MAX_FILE_BYTES)  # exactly the limit: read (and then refused for what it holds, not its size)
    assert conformance_main(["verify", str(forged)]) == 1
    err = capsys.readouterr().err
    assert "not JSON" in err and "MiB, not a report" not in err, err
    with open(forged / "report.json", "r+b") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    assert conformance_main(["verify", str(forged)]) == 1
    assert "larger than 64 MiB, not a report" in capsys.readouterr().err
    forged = _copy(run, tmp_path / "again")
    with open(forged / STATEMENT_FILE, "r+b") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: no 64 MiB written
    assert conformance_main(["verify", str(forged)]) == 1
    assert f"unreadable seal (larger than {MAX_FILE_BYTES >> 20} MiB)" in capsys.readouterr().err
    big = tmp_path / "big.pem"
    pem = write_key(tmp_path / "k.pem").read_bytes()
    big.write_bytes(pem + b"\n" * (MAX_KEY_BYTES - len(pem)))
    assert SigningKey.load(big).public is not None  # exactly the limit is fine
    big.write_bytes(pem + b"\n" * (MAX_KEY_BYTES + 1 - len(pem)))
    with pytest.raises(SignatureError, match=f"too large for a signing key \\({MAX_KEY_BYTES + 1} bytes\\)"):
        SigningKey.load(big)


def test_a_modified_catalogue_names_both_digests() -> None:
    now = cv.stamp()
    with pytest.raises(cv.CatalogueVersionError) as info:
        cv.resolve(cv.CatalogueStamp(now.version, "ab" * 32))
    assert str(info.value).startswith(f"catalogue digest {'ab' * 8}... is not that of catalogue version "
                                      f"{now.version} ({now.digest[:16]}...)")


def test_report_building_edges() -> None:
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import ReportError, build_report

    for bad in ([], "results", None, {"schema": "other"}):
        with pytest.raises(ReportError, match="not a conformance results file"):
            build_report(bad)  # type: ignore[arg-type]
    results = {"schema": RESULTS_SCHEMA, "complete": True, "updated": 86400.0, "environment": {},
               "tests": [{"nodeid": "t::a", "outcome": "passed", "evidence": [
                   {"label": "seed", "value": 42}, {"label": "allocate", "value": [1]}]}],
               "requirements": {"SCHED-FIT-001": {"status": "passed", "tests": ["t::a"], "duration": 1.0}}}
    report = build_report(results)
    assert report.generated == "1970-01-02T00:00:00Z"  # the results' own time: a rebuilt report is the same
    assert build_report(results, now=0).generated == "1970-01-01T00:00:00Z"
    (row,) = report.results
    assert row.seeds == ["42"] and [(e.label, e.value) for e in row.evidence] == [("allocate", [1])]
    assert report.manifest.nodes is None  # the profile's own node count
    scaled = {**results, "environment": {"scheduler_nodes": 4}}  # the scheduler suite scales one-node profiles
    assert build_report(scaled).manifest.nodes == 4
    assert build_report({**results, "environment": {"nodes": 2}}).manifest.nodes == 2


_RESULTS_SHAPES: list[tuple[dict[str, Any], str]] = [
    ({"environment": "dgx-h100"}, "environment: expected an object, got a string"),
    ({"environment": [["profile", "dgx-h100"]]}, "environment: expected an object, got a list"),
    ({"tests": None}, "tests: expected a list, got null"),
    ({"tests": ["t::a"]}, "tests[0]: expected an object, got a string"),
    ({"tests": [{"nodeid": ["t::a"]}]}, "tests[0].nodeid: expected a string, got a list"),
    ({"tests": [{"nodeid": "t::a", "evidence": 3}]}, "tests[0].evidence: expected a list of objects"),
    ({"requirements": []}, "requirements: expected an object, got a list"),
    ({"requirements": {"SCHED-FIT-001": "passed"}}, "requirements.SCHED-FIT-001: expected an object, got a string"),
    ({"requirements": {"SCHED-FIT-001": {"status": "great"}}},
     "requirements.SCHED-FIT-001.status: 'great' is not one of passed, failed, error, skipped, not-applicable, "
     "not-run"),
    ({"requirements": {"SCHED-FIT-001": {"status": "passed", "duration": "1.5"}}},
     "requirements.SCHED-FIT-001.duration: expected a number of seconds, got a string"),
    ({"requirements": {"SCHED-FIT-001": {"status": "passed", "tests": [["t::a"]]}}},
     "requirements.SCHED-FIT-001.tests: expected a list of test ids"),
    ({"requirements": {"SCHED-FIT-001": {"status": "passed", "tests": "t::a"}}},
     "requirements.SCHED-FIT-001.tests: expected a list of test ids"),
    ({"environment": 4}, "environment: expected an object, got a number"),
    ({"tests": {"t::a": {}}}, "tests: expected a list, got an object"),
    ({"tests": [{"outcome": "passed"}]}, "tests[0].nodeid: expected a string, got null"),
    ({"tests": [{"nodeid": "t::a"}, {"nodeid": 7.5}]}, "tests[1].nodeid: expected a string, got a number"),
    ({"tests": [{"nodeid": "t::a", "evidence": ["seed"]}]}, "tests[0].evidence: expected a list of objects"),
    ({"requirements": {"SCHED-FIT-001": {"status": "passed", "duration": True}}},
     "requirements.SCHED-FIT-001.duration: expected a number of seconds, got a boolean"),
    ({"requirements": {"SCHED-FIT-001": {"status": "passed"}, "SCHED-FIT-002": None}},
     "requirements.SCHED-FIT-002: expected an object, got null"),
]


@pytest.mark.parametrize(("change", "expected"), _RESULTS_SHAPES)
def test_a_results_file_of_the_wrong_shape_is_refused_naming_the_part(change: dict[str, Any], expected: str) -> None:
    """A results file is the input of ``conformance report``; one with a part of the wrong shape (a hand-written or
    damaged file) is refused with that part named, not a traceback (the guide's rule for bad input). Before, 5 of
    these raised AttributeError/TypeError/ValueError out of build_report and one said "results file is missing
    string indices must be integers"."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import ReportError, build_report

    results = {"schema": RESULTS_SCHEMA, "complete": True, "environment": {}, "tests": [],
               "requirements": {"SCHED-FIT-001": {"status": "passed", "tests": [], "duration": 1.0}}, **change}
    with pytest.raises(ReportError) as info:
        build_report(results)
    assert str(info.value) == f"results file: {expected}"


def test_a_results_file_missing_its_parts_names_each() -> None:
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import ReportError, build_report

    with pytest.raises(ReportError, match=r"^results file is missing environment, requirements$"):
        build_report({"schema": RESULTS_SCHEMA, "complete": True, "tests": []})


@pytest.mark.parametrize(("part", "value", "expected"), [
    # three wrong fields, written in an order that is neither the model's (version, source, ..., digest) nor its
    # reverse: the message names the one the file shows first
    ("harness", {"source": 1, "version": 2, "digest": 3, "commit": None, "modified": False},
     "environment.harness.source: Input should be a valid string"),
    ("runner", {"builder": 1, "kind": 2, "platform": 3, "id": "r", "environment": "e", "isolation": "i"},
     "environment.runner.builder: Input should be a valid string"),
])
def test_a_wrong_harness_or_runner_in_a_results_file_is_named_where_the_file_writes_it(
        part: str, value: dict[str, Any], expected: str) -> None:
    """``conformance report`` refuses a results file whose ``environment.harness`` or ``environment.runner`` has wrong
    fields, naming the first one a reader of the file meets, with its path in the file, as ``load_report`` names a
    report's (before: the first in the model's order, and only the field's name, ``source``, not where it is)."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import ReportError, build_report

    results = {"schema": RESULTS_SCHEMA, "complete": True, "environment": {part: value}, "tests": [],
               "requirements": {"SCHED-FIT-001": {"status": "passed", "tests": [], "duration": 1.0}}}
    with pytest.raises(ReportError) as info:
        build_report(results)
    assert str(info.value) == f"results file: {expected}"


def test_an_environment_of_wrong_values_is_refused_naming_the_first_the_file_writes() -> None:
    """The manifest's own fields from ``environment`` (profile, backend, nodes): two wrong, the later one in the
    model's order written first, is refused naming that one with its path."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import ReportError, build_report

    results = {"schema": RESULTS_SCHEMA, "complete": True, "environment": {"nodes": "many", "profile": 5},
               "tests": [], "requirements": {"SCHED-FIT-001": {"status": "passed", "tests": [], "duration": 1.0}}}
    with pytest.raises(ReportError, match=r"^results file: environment\.nodes: "):
        build_report(results)


def test_a_requirement_no_test_ran_took_no_time() -> None:
    """A requirement's duration is the sum of its tests' durations (docs/certification.md: "duration, the tests that
    checked it"); an entry that lists no test and no duration (a results file from another writer) took 0 s, the
    empty sum, and is not-run."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import build_report

    results = {"schema": RESULTS_SCHEMA, "complete": True, "environment": {}, "tests": [],
               "requirements": {"SCHED-FIT-001": {}}}
    (row,) = build_report(results).results
    assert (row.status, row.duration, row.tests) == ("not-run", 0.0, [])


def test_a_2048_bit_rsa_key_is_strong_enough_and_1024_is_not(tmp_path: Path) -> None:
    """NIST SP 800-131A rev. 2 (table 2) allows RSA from 2048 bits for digital signatures (112-bit security) and
    disallows 1024; the key loader says "at least 2048 bits", so 2048 itself signs, and what it signs verifies."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from conformance.provenance.dsse import verify_signature

    for bits in (2048, 1024):
        private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        path = tmp_path / f"rsa{bits}.pem"
        path.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        if bits == 1024:
            with pytest.raises(SignatureError, match=r"RSA keys need at least 2048 bits \(this one has 1024\)"):
                SigningKey.load(path)
            continue
        key = SigningKey.load(path)
        assert verify_signature(key.public, key.sign(b"DSSEv1 ..."), b"DSSEv1 ...")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl (tools/install-system-deps.sh installs it)")
@pytest.mark.parametrize("kind", ["ed25519", "p256", "p384", "rsa"])
def test_each_key_kind_signs_what_openssl_verifies(kind: str, tmp_path: Path) -> None:
    """openssl is the outside oracle for each supported key kind: it verifies the signature over DSSE's PAE with
    the digest the key's kind calls for (ECDSA P-256 with SHA-256 and P-384 with SHA-384, RFC 5656 6.2.1 / FIPS
    186-5; RSA-PSS with SHA-256; Ed25519 over the raw message, RFC 8032), and the key id is the sha256 of the DER
    SubjectPublicKeyInfo it prints. The verifier accepts that signature and refuses it with one bit flipped."""
    import hashlib
    import subprocess

    from conformance.provenance.dsse import PAYLOAD_TYPE, keyid, pae, verify_signature

    path = write_key(tmp_path / f"{kind}.pem", kind)
    key = SigningKey.load(path)
    message = pae(PAYLOAD_TYPE, b'{"_type":"https://in-toto.io/Statement/v1"}')
    signature = key.sign(message)
    (tmp_path / "msg").write_bytes(message)
    (tmp_path / "sig").write_bytes(signature)
    pub = str(path.with_suffix(".pub"))
    if kind == "ed25519":
        argv = ["pkeyutl", "-verify", "-pubin", "-inkey", pub, "-rawin", "-in", str(tmp_path / "msg"),
                "-sigfile", str(tmp_path / "sig")]
    else:
        pss = ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:auto"] if kind == "rsa" else []
        argv = ["dgst", "-sha384" if kind == "p384" else "-sha256", *pss, "-verify", pub, "-signature",
                str(tmp_path / "sig"), str(tmp_path / "msg")]
    checked = subprocess.run(["openssl", *argv], capture_output=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", pub, "-outform", "DER"], capture_output=True,
                         timeout=60, check=True).stdout
    assert keyid(key.public) == "sha256:" + hashlib.sha256(der).hexdigest()
    assert verify_signature(key.public, signature, message)
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    assert not verify_signature(key.public, flipped, message)
    assert not verify_signature(key.public, signature, message + b" ")


def test_a_finished_unsigned_run_can_be_signed_afterwards_with_a_key(run: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """docs/certification.md: a key you hold signs at run time or later, ``conformance sign DIR --sign-key
    key.pem``; the run is checked first, and an unsigned run is not a problem there (no signature was asked for).
    The signed run then verifies against that key."""
    forged = _copy(run, tmp_path)
    key = write_key(tmp_path / "vendor.pem")
    assert conformance_main(["sign", str(forged), "--sign-key", str(key)]) == 0, capsys.readouterr().err
    assert "signed (key)" in capsys.readouterr().out
    assert conformance_main(["verify", str(forged), "--key", str(key.with_suffix(".pub"))]) == 0
    assert "(as required)" in capsys.readouterr().out


def test_a_signed_payload_that_is_not_json_is_refused_by_name(signed: tuple[Path, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A DSSE envelope of type application/vnd.in-toto+json carries an in-toto statement, a JSON object
    (in-toto attestation framework, Statement v1). One the trusted key really signed whose payload is not JSON is
    refused as a statement that differs from the run, named, not a traceback."""
    from conformance.provenance.dsse import sign_bundle

    run, key = signed
    forged = _copy(run, tmp_path)
    (forged / BUNDLE_FILE).write_text(json.dumps(sign_bundle(b"{not json", SigningKey.load(key))))
    assert conformance_main(["verify", str(forged), "--key", str(key.with_suffix(".pub"))]) == 1
    err = capsys.readouterr().err
    assert "the signed statement differs from the run: not JSON" in err and "Traceback" not in err, err


def test_a_broken_seal_quotes_both_digests_alike(run: Path) -> None:
    """The sha256 mismatch quotes what the report says and what its content hashes to as prefixes of the same
    length of the real hex digests, so a reader can set one against the other (and check either with sha256sum)."""
    import hashlib
    import re

    from conformance.report.model import verify

    report = load_report((run / "report.json").read_text())
    broken = report.model_copy(update={"sha256": "0123456789abcdef" * 4})
    (problem,) = [p for p in verify(broken) if p.startswith("sha256 mismatch")]
    said, hashed = re.findall(r"([0-9a-f]+)\.\.\.", problem)
    assert len(said) == len(hashed) >= 16
    assert broken.sha256.startswith(said) and hashlib.sha256(report.canonical()).hexdigest().startswith(hashed)


def _openssl(*argv: str, stdin: bytes = b"") -> bytes:
    import subprocess

    return subprocess.run(["openssl", *argv], input=stdin, capture_output=True, timeout=60, check=True).stdout


def test_an_encrypted_key_openssl_made_is_opened_with_its_password_only(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/certification.md: an encrypted key takes its password from $FAKEHW_SIGN_KEY_PASSWORD. The key is made
    and its public half printed by openssl (``genpkey -aes-256-cbc -pass``, ``pkey -pubout -passin``), so the key id
    of what is loaded must be the sha256 of openssl's DER SubjectPublicKeyInfo. Without the password the loader
    says which variable to set; with a wrong one it refuses the key (openssl: "bad decrypt"); an unencrypted key
    loads whatever the variable holds, as ``openssl pkey -passin`` ignores a password a key does not need (before,
    it was refused as "the key is encrypted" while the variable was set)."""
    import hashlib

    from conformance.provenance.dsse import PASSWORD_ENV, keyid

    enc = tmp_path / "enc.pem"
    _openssl("genpkey", "-algorithm", "ed25519", "-aes-256-cbc", "-pass", "pass:s3cret", "-out", str(enc))
    der = _openssl("pkey", "-in", str(enc), "-passin", "pass:s3cret", "-pubout", "-outform", "DER")
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(SignatureError, match=r"the key is encrypted: set \$FAKEHW_SIGN_KEY_PASSWORD"):
        SigningKey.load(enc)
    monkeypatch.setenv(PASSWORD_ENV, "wrong")
    with pytest.raises(SignatureError, match="not a PEM private key this tool can use"):
        SigningKey.load(enc)
    monkeypatch.setenv(PASSWORD_ENV, "s3cret")
    assert keyid(SigningKey.load(enc).public) == "sha256:" + hashlib.sha256(der).hexdigest()
    plain = tmp_path / "plain.pem"
    _openssl("genpkey", "-algorithm", "ed25519", "-out", str(plain))
    _openssl("pkey", "-in", str(plain), "-passin", "pass:s3cret", "-noout")  # openssl: the password is not needed
    der = _openssl("pkey", "-in", str(plain), "-pubout", "-outform", "DER")
    assert keyid(SigningKey.load(plain).public) == "sha256:" + hashlib.sha256(der).hexdigest()


def _older_harness_results(environment: dict[str, Any]) -> dict[str, Any]:
    from conformance import RESULTS_SCHEMA

    return {"schema": RESULTS_SCHEMA, "complete": True, "updated": 0.0, "environment": environment, "tests": [],
            "requirements": {}}


def test_results_naming_targets_only_keep_them_unpinned_and_still_owe_their_requirements(tmp_path: Path) -> None:
    """A harness that did not resolve components (results with ``environment.targets`` only, each as given on the
    command line, ``--target KIND=SPEC``) still names what was tested: one component per target, of that kind and
    spec, with its version when recorded, no digest and "not pinned". The report then owes every requirement of
    those kinds in its catalogue version (the published catalogue lists them), and since nothing could be pinned
    the statement's subject is report.json itself, by the sha256 of the file (what sha256sum prints; in-toto's
    DigestSet holds lowercase hex). Without the targets the report names nothing and certifies nothing."""
    import hashlib

    from conformance.provenance.statement import RUN_FILES, statement
    from conformance.report.model import build_report
    from conformance.requirements import catalogue

    env = {"targets": ["device-plugin=cmd:my-plugin --socket /x", "extender=reference"],
           "component_versions": {"extender": "0.3.1"}}
    report = build_report(_older_harness_results(env))
    assert [(c.kind, c.spec, c.version, c.digest, c.hashed) for c in report.manifest.components] == [
        ("device-plugin", "cmd:my-plugin --socket /x", None, None, "not pinned: not recorded"),
        ("extender", "reference", "0.3.1", None, "not pinned: not recorded")]
    owed = sorted(r.id for t in ("device-plugin", "extender") for r in catalogue().for_target(t))
    (problem,) = completeness(report)
    assert problem.startswith(f"{len(owed)} requirement(s) of catalogue version {report.manifest.catalogue.version} "
                              f"for device-plugin, extender are missing from the report: {', '.join(owed[:12])}")
    for name in RUN_FILES:
        (tmp_path / name).write_text(report.to_json() if name == "report.json" else name)
    stmt = statement(report, tmp_path)
    sha256sum = hashlib.sha256((tmp_path / "report.json").read_bytes()).hexdigest()
    assert stmt["subject"] == [{"name": "report.json", "digest": {"sha256": sha256sum},
                                "annotations": {"hashed": "no component could be pinned by digest"}}]
    assert stmt["predicate"]["buildDefinition"]["externalParameters"]["targets"] == env["targets"]
    bare = build_report(_older_harness_results({"component_versions": ["not", "an", "object"]}))
    assert bare.manifest.components == []
    assert completeness(bare) == ["the report names no component and no result: it certifies nothing"]


def test_a_requirement_s_duration_is_kept_to_the_millisecond() -> None:
    """Durations are seconds to the millisecond, the precision pytest's own JUnit XML gives a test's time
    (``time="%.3f"``, _pytest/junitxml.py) and the junit.xml of a run repeats: 1.23456 s is 1.235 s, 0.0004 s is
    0 (a summed total then equals the sum of what each row shows)."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import build_report

    results = {"schema": RESULTS_SCHEMA, "complete": True, "environment": {}, "tests": [],
               "requirements": {"SCHED-FIT-001": {"status": "passed", "duration": 1.23456},
                                "SCHED-FIT-002": {"status": "passed", "duration": 0.0004}}}
    assert [r.duration for r in build_report(results).results] == [1.235, 0.0]


def _resealed(run: Path, tmp_path: Path, change: Any) -> Path:
    """A copy of ``run`` whose report.json was edited by ``change`` (a function of the parsed document), then
    resealed and restated with the project's own code: the forger's best move for an unkeyed seal."""
    from conformance.provenance.statement import statement

    forged = _copy(run, tmp_path)
    doc = json.loads((forged / "report.json").read_text())
    change(doc)
    report = load_report(json.dumps(doc)).sealed()
    (forged / "report.json").write_text(report.to_json())
    (forged / STATEMENT_FILE).write_text(json.dumps(statement(report, forged)))
    return forged


def _problems(run: Path, **policy: Any) -> list[str]:
    from conformance.provenance.verify import TrustPolicy, verify_run

    return verify_run(run, TrustPolicy(**policy)).problems


def test_a_signature_of_one_kind_is_not_accepted_for_the_other(signed: tuple[Path, Path], tmp_path: Path) -> None:
    """docs/certification.md: --key checks a key signature, --identity/--issuer a Sigstore one; asking for one
    kind refuses a run signed (or declared signed) the other way, naming both, before any bundle is read as the
    other kind."""
    from conformance.provenance.dsse import load_public_key

    run, key = signed
    recorded = json.loads((run / "report.json").read_text())["manifest"]["signing"]["keyid"]
    for policy in ({"identity": "https://github.com/o/r/.github/workflows/certify.yml@refs/heads/main"},
                   {"issuer": "https://token.actions.githubusercontent.com"}):
        assert f"signature: the run is signed with a key ({recorded}), not by a Sigstore identity" in _problems(
            run, **policy)
    keyless = _resealed(run, tmp_path, lambda d: d["manifest"].update(signing={"mode": "sigstore"}))
    assert ("signature: the run is signed keyless (Sigstore), not with a key: give --identity and --issuer"
            in _problems(keyless, key=load_public_key(key.with_suffix(".pub"))))


def test_the_recorded_public_key_must_be_the_recorded_key_id(signed: tuple[Path, Path], tmp_path: Path) -> None:
    """A key-signed report records the key id (sha256 of the DER SubjectPublicKeyInfo, as openssl prints it) and
    the public key; without --key the signature is checked with that public key, so the two must agree: another
    key's PEM under the vendor's key id is refused naming both ids, and a key id without a public key is refused."""
    import hashlib

    run, _ = signed
    other = write_key(tmp_path / "other.pem").with_suffix(".pub")
    other_id = "sha256:" + hashlib.sha256(_openssl("pkey", "-pubin", "-in", str(other), "-outform", "DER")).hexdigest()
    recorded = json.loads((run / "report.json").read_text())["manifest"]["signing"]["keyid"]
    swapped = _resealed(run, tmp_path / "swapped",
                        lambda d: d["manifest"]["signing"].update(public_key=other.read_text()))
    assert (f"signature: the recorded public key is {other_id}, the recorded key id {recorded}"
            in _problems(swapped))
    for field in ("public_key", "keyid"):
        dropped = _resealed(run, tmp_path / field, lambda d, f=field: d["manifest"]["signing"].update({f: None}))
        assert "signature: the report declares a key signature but records no public key" in _problems(dropped)


def test_a_dsse_envelope_is_read_as_the_spec_defines_it(signed: tuple[Path, Path], tmp_path: Path) -> None:
    """DSSE (secure-systems-lab/dsse, envelope.md): an envelope is payload, payloadType and signatures; the in-toto
    attestation framework's envelope says payloadType "application/vnd.in-toto+json". A bundle without one, with
    another payload type, or with no signature is refused by name; with several signatures one verifying with the
    trusted key is enough (DSSE's protocol: accept when a signature verifies with a trusted key), wherever it is in
    the list."""
    import base64

    from conformance.provenance.dsse import load_public_key

    run, key = signed
    pub = load_public_key(key.with_suffix(".pub"))
    genuine = json.loads((run / BUNDLE_FILE).read_text())

    def with_bundle(name: str, change: Any) -> Path:
        forged = _copy(run, tmp_path / name)
        bundle = json.loads(json.dumps(genuine))
        change(bundle)
        (forged / BUNDLE_FILE).write_text(json.dumps(bundle))
        return forged

    stranger = base64.b64encode(SigningKey.load(write_key(tmp_path / "s.pem")).sign(b"x")).decode()
    cases: dict[str, tuple[Any, str | None]] = {
        "no-envelope": (lambda b: b.pop("dsseEnvelope"), "signature: the bundle holds no DSSE envelope"),
        "plain-json": (lambda b: b["dsseEnvelope"].update(payloadType="application/json"),
                       "signature: the envelope holds 'application/json', not an in-toto statement"),
        "no-signature": (lambda b: b["dsseEnvelope"].update(signatures=[]),
                         "signature: the envelope carries no signature"),
        "stranger-first": (lambda b: b["dsseEnvelope"]["signatures"].insert(0, {"keyid": "x", "sig": stranger}),
                           None),
        "stranger-last": (lambda b: b["dsseEnvelope"]["signatures"].append({"keyid": "x", "sig": stranger}), None),
    }
    for name, (change, expected) in cases.items():
        problems = _problems(with_bundle(name, change), key=pub)
        assert (expected in problems) if expected else problems == [], (name, problems)


def test_resolved_dependencies_are_in_toto_resource_descriptors(run: Path) -> None:
    """SLSA provenance v1's ``resolvedDependencies`` are in-toto ResourceDescriptors (in-toto attestation spec,
    v1/resource_descriptor.md): ``digest`` is a DigestSet, algorithm name to lowercase hex (no "sha256:" prefix),
    where ``gitCommit`` is the standard name for a git commit; ``uri`` locates the resource, for a git checkout the
    SPDX/pip VCS form ``git+https://host/repo@commit``. A harness without a commit has neither gitCommit nor uri;
    one from a non-https source has no uri; the profile is a dependency when its digest is known; each image is
    one, by platform."""
    from conformance.provenance.statement import statement

    report = load_report((run / "report.json").read_text())
    harness = report.manifest.harness
    assert harness is not None
    commit = "0123456789abcdef0123456789abcdef01234567"
    manifest = report.manifest.model_copy(update={
        "harness": harness.model_copy(update={"commit": commit, "source": "https://github.com/fakehw/fakehw",
                                              "digest": "sha256:" + "ab" * 32}),
        "profile": "dgx-h100", "profile_digest": "cd" * 32,
        "images": {"linux/riscv64": "sha256:" + "ef" * 32, "linux/amd64": "sha256:" + "12" * 32}})
    deps = statement(report.model_copy(update={"manifest": manifest}), run)[
        "predicate"]["buildDefinition"]["resolvedDependencies"]
    assert [d["name"] for d in deps] == ["fakehw", "catalogue", "profile:dgx-h100", "image:linux/amd64",
                                         "image:linux/riscv64"]
    assert deps[0]["digest"] == {"sha256": "ab" * 32, "gitCommit": commit}
    assert deps[0]["uri"] == f"git+https://github.com/fakehw/fakehw@{commit}"
    assert [d["digest"] for d in deps[2:]] == [{"sha256": "cd" * 32}, {"sha256": "12" * 32}, {"sha256": "ef" * 32}]
    for source, commit_or_none in (("/home/me/fakehw", commit), ("https://github.com/fakehw/fakehw", None)):
        local = manifest.model_copy(update={
            "harness": harness.model_copy(update={"commit": commit_or_none, "source": source}),
            "profile_digest": None, "images": {}})
        deps = statement(report.model_copy(update={"manifest": local}), run)[
            "predicate"]["buildDefinition"]["resolvedDependencies"]
        assert [d["name"] for d in deps] == ["fakehw", "catalogue"]
        assert "uri" not in deps[0]
        assert ("gitCommit" in deps[0]["digest"]) == (commit_or_none is not None)


def test_verdicts_and_counts_name_what_the_results_contradict(run: Path) -> None:
    """docs/certification.md, verify step 1: verdicts and counts follow from the results. A level removed from the
    verdicts is named as missing with what the results give; a level whose verdict is right but whose counts were
    edited is refused naming the count (before, it read "core pass (results give pass)"); a level the catalogue does
    not have is named; a summary status that no result has but is counted (a made-up status) is named; a row
    for a requirement the recorded catalogue version does not have is named."""
    from conformance.report.model import RequirementResult, verify

    report = load_report((run / "report.json").read_text())
    assert verify(report) == []
    levels = dict(report.verdicts.levels)
    level, said = next(iter(levels.items()))
    dropped = report.model_copy(update={"verdicts": report.verdicts.model_copy(
        update={"levels": {k: v for k, v in levels.items() if k != level}})}).sealed()
    assert (f"verdicts do not follow from the results (a verdict or a result was edited): {level} missing "
            f"(results give {said.verdict})") in verify(dropped)
    recount = report.model_copy(update={"verdicts": report.verdicts.model_copy(
        update={"levels": {**levels, level: said.model_copy(update={"passed": said.passed + 1})}})}).sealed()
    assert (f"verdicts do not follow from the results (a verdict or a result was edited): {level} passed "
            f"{said.passed + 1} (results give {said.passed})") in verify(recount)
    gold = report.model_copy(update={"verdicts": report.verdicts.model_copy(
        update={"levels": {**levels, "gold": said}})}).sealed()
    assert ("verdicts do not follow from the results (a verdict or a result was edited): gold is not a level "
            "(results give none)") in verify(gold)
    made_up = report.model_copy(update={"summary": {**report.summary, "flaky": 2}}).sealed()
    assert "summary counts do not match the results: flaky 2 (results: 0)" in verify(made_up)
    ghost = RequirementResult(id="DP-GHOST-001", title="t", target="device-plugin", category="allocation",
                              level="core", required=False, status="passed", duration=0.0, tests=[])
    extra = report.model_copy(update={"results": [*report.results, ghost],
                                      "summary": {**report.summary, "passed": report.summary["passed"] + 1}})
    version = report.manifest.catalogue.version
    assert verify(extra.sealed()) == [f"DP-GHOST-001 is not in catalogue version {version}"]


def test_a_report_of_the_wrong_shape_names_the_field(run: Path, tmp_path: Path) -> None:
    """A report.json with a field of the wrong type is refused naming the file, the field's path and what was
    expected, not a traceback (the guide's rule for bad input); a bundle that is JSON but not an object is named
    as unreadable."""
    from conformance.report.model import ReportError

    for text in ("[]", '"report"', "null", '{"schema": "fakehw.conformance.results/v1"}'):
        with pytest.raises(ReportError, match=r"^report.json: not a certification report \(expected schema "
                                              r"'fakehw.conformance.report/v2'\)$"):
            load_report(text, "report.json")
    with pytest.raises(ReportError, match=r"^report.json: not JSON \("):
        load_report("{", "report.json")
    doc = json.loads((run / "report.json").read_text())
    doc["manifest"]["signing"]["mode"] = "pgp"
    with pytest.raises(ReportError, match=r"^report.json: manifest\.signing\.mode: Input should be 'unsigned', "):
        load_report(json.dumps(doc), "report.json")
    forged = _copy(run, tmp_path)
    (forged / BUNDLE_FILE).write_text("[]")
    assert f"{BUNDLE_FILE}: unreadable (not a JSON object)" in _problems(
        _resealed(forged, tmp_path / "key", lambda d: d["manifest"].update(signing={"mode": "key"})))


def test_a_report_with_several_wrong_fields_names_the_first_one_in_the_file(run: Path) -> None:
    """A refusal names one wrong field; with several, the one a reader of the file meets first (as ``json``'s own
    errors give the first position in the text). Hand-worked: report.json is written with sorted keys, so
    ``results`` (r) comes before ``summary`` (s) in the file, while the model declares ``summary`` first; a status
    no report has in ``results[0]`` and a non-integer count in ``summary`` name ``results.0.status``. The same two
    errors in a document that writes ``summary`` before ``results`` name ``summary.passed``. A member the document
    lacks has no place in it: it is named after every member its object does write (here ``verdicts``, written
    last of the report's members, before the missing ``generated``)."""
    from conformance.report.model import ReportError

    doc = json.loads((run / "report.json").read_text())
    assert list(doc).index("results") < list(doc).index("summary")
    doc["results"][0]["status"] = "maybe"
    doc["summary"] = {**doc["summary"], "passed": "many"}
    with pytest.raises(ReportError, match=r"^report.json: results\.0\.status: Input should be 'passed', "):
        load_report(json.dumps(doc), "report.json")
    summary_first = {"summary": doc["summary"], **{k: v for k, v in doc.items() if k != "summary"}}
    with pytest.raises(ReportError, match=r"^report.json: summary\.passed: Input should be a valid integer"):
        load_report(json.dumps(summary_first), "report.json")
    missing = json.loads((run / "report.json").read_text())
    keys = list(missing)
    assert keys[0] == "generated" and keys[-1] == "verdicts"
    del missing["generated"]
    missing["verdicts"] = "pass"
    with pytest.raises(ReportError, match=r"^report.json: verdicts: Input should be a valid dictionary"):
        load_report(json.dumps(missing), "report.json")


def test_only_a_failing_test_s_message_is_kept_in_its_row() -> None:
    """docs/certification.md: a row carries "the failure message"; a passing test's text is not a failure. Each
    failing, erroring, skipped or not-applicable test's message is kept, named by its test id, one per line."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import build_report

    tests = [{"nodeid": "t::ok", "outcome": "passed", "message": "chatter"},
             {"nodeid": "t::bad", "outcome": "failed", "message": "gave 3 GPUs"},
             {"nodeid": "t::na", "outcome": "not-applicable", "message": "no MIG"},
             {"nodeid": "t::quiet", "outcome": "failed"}]
    results = {"schema": RESULTS_SCHEMA, "complete": True, "environment": {}, "tests": tests,
               "requirements": {"SCHED-FIT-001": {"status": "failed", "tests": [t["nodeid"] for t in tests]}}}
    (row,) = build_report(results).results
    assert row.message == "t::bad: gave 3 GPUs\nt::na: no MIG"


@pytest.mark.parametrize("length", [3999, 4000, 4001, 9000])
def test_a_failure_message_is_kept_up_to_4000_characters(length: int) -> None:
    """docs/certification.md: a row keeps "the failure message (its first 4000 characters)": the message quotes
    the component's output, which a report must not carry unbounded."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import build_report

    prefix = "t::bad: "
    results = {"schema": RESULTS_SCHEMA, "complete": True, "environment": {},
               "tests": [{"nodeid": "t::bad", "outcome": "failed", "message": "x" * (length - len(prefix))}],
               "requirements": {"SCHED-FIT-001": {"status": "failed", "tests": ["t::bad"]}}}
    (row,) = build_report(results).results
    assert row.message == (prefix + "x" * (length - len(prefix)))[:4000]
    assert len(row.message) == min(length, 4000)


def test_any_one_thing_asked_of_the_signer_makes_an_unsigned_run_fail(run: Path) -> None:
    """docs/certification.md: with --key, --identity, --issuer or --require-signature an unsigned run is refused
    (anyone could have written it); with none of them it verifies as UNSIGNED. Each alone is enough."""
    from conformance.provenance.dsse import load_public_key

    refused = ("the run is UNSIGNED: a signature is required (--key/--identity/--issuer given), and an unsigned "
               "report could have been written by anyone")
    key = load_public_key(write_key(run.parent / "any.pem").with_suffix(".pub"))
    assert _problems(run) == []
    for policy in ({"require_signature": True}, {"key": key}, {"identity": "someone@example.com"},
                   {"issuer": "https://token.actions.githubusercontent.com"}):
        assert _problems(run, **policy) == [refused], policy


def test_differences_between_lists_with_repeated_names_go_by_position() -> None:
    """Lists of named entries (in-toto subjects, SLSA byproducts) are compared by name so a reordering is no
    difference; when names repeat (or are not all strings) a name does not identify an entry, so they are compared
    by position."""
    sealed = [{"name": "a", "v": 1}, {"name": "a", "v": 2}]
    assert differences(sealed, [{"name": "a", "v": 1}, {"name": "a", "v": 3}]) == ["[1].v: sealed 2, the run has 3"]
    assert differences([{"name": 1, "v": 1}, {"name": 2, "v": 2}], [{"name": 1, "v": 1}, {"name": 2, "v": 3}]) == [
        "[1].v: sealed 2, the run has 3"]
    assert differences([{"name": "b", "v": 2}, {"name": "a", "v": 1}], [{"name": "a", "v": 1}, {"name": "b", "v": 2}]
                       ) == []
    # a seal repeating a name (one entry forged over another) against the run's distinct names: by position too,
    # whichever side repeats
    unique = [{"name": "a", "v": 1}, {"name": "b", "v": 2}]
    repeated = [{"name": "a", "v": 1}, {"name": "a", "v": 2}]
    assert differences(repeated, unique) == ['[1].name: sealed "a", the run has "b"']
    assert differences(unique, repeated) == ['[1].name: sealed "b", the run has "a"']
    # ... and when an entry is not an object at all (a seal cannot be trusted to have the run's shape)
    assert differences([{"name": "a"}, 5], [{"name": "a"}, 6]) == ["[1]: sealed 5, the run has 6"]


def test_a_report_from_results_without_a_time_is_dated_when_it_is_built() -> None:
    """A results file without a numeric ``updated`` (another writer's) gives a report dated when it was built, in
    RFC 3339 UTC like every other time the report carries, not an error."""
    import calendar
    import time

    from conformance.report.model import build_report

    before = time.time()
    for updated in ("yesterday", None, True):  # JSON true is no time (before, it dated the report 1970-01-01T00:00:01Z)
        results = {**_older_harness_results({}), "updated": updated}
        generated = build_report(results).generated
        stamp = calendar.timegm(time.strptime(generated, "%Y-%m-%dT%H:%M:%SZ"))
        assert int(before) <= stamp <= time.time(), (updated, generated)


@pytest.mark.parametrize(("algorithm", "name"), [("ed448", "Ed448"), ("x25519", "X25519"), ("x448", "X448")])
def test_keys_of_other_kinds_openssl_makes_are_refused_by_kind(algorithm: str, name: str, tmp_path: Path) -> None:
    """docs/certification.md: signing keys are Ed25519, ECDSA P-256/P-384 or RSA. openssl makes keys of other kinds
    (Ed448 signs, but no DSSE verifier of ours checks it; X25519/X448 are key agreement keys, RFC 7748, and cannot
    sign): each is refused naming its kind, as a signing key and as the key to verify with."""
    from conformance.provenance.dsse import load_public_key

    key = tmp_path / f"{algorithm}.pem"
    _openssl("genpkey", "-algorithm", algorithm, "-out", str(key))
    pub = key.with_suffix(".pub")
    _openssl("pkey", "-in", str(key), "-pubout", "-out", str(pub))
    with pytest.raises(SignatureError, match=f"{name}PrivateKey keys are not supported \\(Ed25519, ECDSA or RSA\\)"):
        SigningKey.load(key)
    with pytest.raises(SignatureError, match=f"{name}PublicKey keys are not supported"):
        load_public_key(pub)


def test_the_manifest_names_the_tools_a_run_used_only() -> None:
    """docs/certification.md: the manifest records "versions of the harness, Python, Docker/kind/Kubernetes when
    used": the harness and Python always (null when the results did not say), the others only when the results
    name a version."""
    from conformance.report.model import build_report

    env = {"harness_version": "0.9.0", "python": "3.11.2", "docker": "27.1.1", "kind": "", "kubernetes": None}
    assert build_report(_older_harness_results(env)).manifest.versions == {
        "harness": "0.9.0", "python": "3.11.2", "docker": "27.1.1"}
    assert build_report(_older_harness_results({"kind": "0.24.0"})).manifest.versions == {
        "harness": None, "python": None, "kind": "0.24.0"}


def test_a_statement_of_a_report_without_runner_or_harness_says_so(run: Path) -> None:
    """Results of an older harness record no runner and no harness (report.json's schema allows null for both).
    SLSA provenance v1: ``builder.version`` is optional, ``startedOn``/``finishedOn`` are timestamps of the run.
    The statement then names the local builder without a version, no invocation, isolation "not recorded", and no
    harness among the resolved dependencies; both times are the report's."""
    from conformance.provenance.statement import statement

    report = load_report((run / "report.json").read_text())
    bare = report.model_copy(update={"manifest": report.manifest.model_copy(update={"runner": None,
                                                                                     "harness": None})})
    stmt = statement(bare, run)["predicate"]
    assert stmt["runDetails"]["builder"] == {"id": "urn:fakehw:runner:local"}
    assert stmt["runDetails"]["metadata"] == {"startedOn": report.generated, "finishedOn": report.generated}
    assert stmt["buildDefinition"]["internalParameters"]["componentIsolation"] == "not recorded"
    assert stmt["buildDefinition"]["resolvedDependencies"][0]["name"] == "catalogue"
    assert report.manifest.harness is not None
    assert statement(report, run)["predicate"]["runDetails"]["builder"]["version"] == {
        "fakehw": report.manifest.harness.version}


def _rows(statuses: dict[str, tuple[str, str, bool]]) -> list[Any]:
    from conformance.report.model import RequirementResult

    return [RequirementResult(id=i, title=i, target="device-plugin", category="c", level=level, required=required,
                              status=status, duration=0.0, tests=[])
            for i, (level, status, required) in statuses.items()]


def test_verdicts_follow_the_documented_rules() -> None:
    """docs/certification.md: "a level passes when every required requirement of it that applies passed — skipped
    and not-run fail it ...; not-applicable neither passes nor fails it — and the overall verdict (certified,
    not-certified, or partial for an incomplete run)"; report/model.py: a level where nothing applies is n/a.
    A recommended (not required) failure fails nothing; a run where nothing passed certifies nothing."""
    from conformance.report.model import derive_verdicts

    rows = _rows({"A": ("core", "passed", True), "B": ("core", "failed", False),
                  "C": ("topology", "not-applicable", True), "D": ("isolation", "passed", True),
                  "E": ("isolation", "not-applicable", True)})
    verdicts = derive_verdicts(rows, partial=False)
    assert verdicts.overall == "certified"
    assert {k: (v.verdict, v.required, v.passed, v.failing, v.not_applicable) for k, v in verdicts.levels.items()} == {
        "core": ("pass", 1, 1, [], []), "topology": ("n/a", 1, 0, [], ["C"]), "resilience": ("n/a", 0, 0, [], []),
        "isolation": ("pass", 2, 1, [], ["E"])}
    partial = derive_verdicts(rows, partial=True)
    assert partial.overall == "partial"
    assert {k: v.verdict for k, v in partial.levels.items()} == {
        "core": "incomplete", "topology": "n/a", "resilience": "n/a", "isolation": "incomplete"}
    for status in ("failed", "error", "skipped", "not-run"):
        failing = derive_verdicts([*rows, *_rows({"F": ("core", status, True)})], partial=False)
        assert (failing.overall, failing.levels["core"].verdict, failing.levels["core"].failing) == (
            "not-certified", "fail", ["F"]), status
    nothing = derive_verdicts(_rows({"C": ("topology", "not-applicable", True)}), partial=False)
    assert nothing.overall == "not-certified" and {v.verdict for v in nothing.levels.values()} == {"n/a"}


@pytest.mark.parametrize("harness", ["none", "no commit"])
def test_a_keyless_signature_needs_the_harness_commit_it_names(harness: str, run: Path, tmp_path: Path) -> None:
    """docs/certification.md: the Fulcio certificate names the commit the signing workflow ran at (Build Signer
    Digest, OID 1.3.6.1.4.1.57264.1.10), which must be the report's harness commit. A report that records no
    harness, or a harness without a commit, cannot show that: refused, saying the commit is not recorded."""
    from conformance.provenance.statement import payload
    from tests.conformance.sigstore_instance import GITHUB_ISSUER, SigstoreInstance, Workflow

    instance, wf = SigstoreInstance(), Workflow()
    root = tmp_path / "trusted_root.json"
    root.write_text(json.dumps(instance.trusted_root()))

    def forget(doc: dict[str, Any]) -> None:
        doc["manifest"]["signing"] = {"mode": "sigstore"}
        if harness == "none":
            doc["manifest"]["harness"] = None
        else:
            doc["manifest"]["harness"]["commit"] = None

    forged = _resealed(run, tmp_path, forget)
    (forged / BUNDLE_FILE).write_text(instance.sign_dsse(payload(json.loads((forged / STATEMENT_FILE).read_text())),
                                                         wf))
    assert _problems(forged, identity=wf.identity, issuer=GITHUB_ISSUER, trust_root=root) == [
        f"signature: the signing workflow ran at commit {wf.sha} but the report's harness commit is not recorded"]


def test_a_run_missing_a_file_is_refused_once_for_it(signed: tuple[Path, Path], tmp_path: Path) -> None:
    """With a file of the run gone the statement cannot be recomputed, so neither the seal nor the (genuine)
    signed statement can be compared with it: the one problem is the missing file, named with the files a run
    writes, not a comparison of the signed statement against nothing."""
    from conformance.provenance.dsse import load_public_key

    run, key = signed
    forged = _copy(run, tmp_path)
    (forged / "junit.xml").unlink()
    assert _problems(forged, key=load_public_key(key.with_suffix(".pub"))) == [
        f"{forged}: missing junit.xml (a run writes report.json, results.json, junit.xml, summary.md, report.html)"]


def test_only_components_pinned_by_digest_are_subjects(run: Path) -> None:
    """in-toto Statement v1: each subject is an artifact by digest (a DigestSet of lowercase hex). A component the
    harness could not pin has no digest, so it is no subject (it stays in externalParameters.targets); when at
    least one is pinned, report.json is not made the subject."""
    from conformance.provenance.statement import statement
    from conformance.report.model import Component

    report = load_report((run / "report.json").read_text())
    pinned = Component(kind="device-plugin", spec="cmd:plugin", name="plugin", digest="sha256:" + "ab" * 32,
                       hashed="the executable")
    loose = Component(kind="extender", spec="http://localhost:8888", hashed="not pinned: a URL")
    both = report.model_copy(update={"manifest": report.manifest.model_copy(update={"components": [loose, pinned]})})
    stmt = statement(both, run)
    assert stmt["subject"] == [{"name": "device-plugin:plugin", "digest": {"sha256": "ab" * 32},
                                "annotations": {"spec": "cmd:plugin", "hashed": "the executable"}}]
    assert stmt["predicate"]["buildDefinition"]["externalParameters"]["targets"] == [
        "extender=http://localhost:8888", "device-plugin=cmd:plugin"]


def test_a_seal_with_another_verdict_names_the_annotation_not_a_changed_file(run: Path, tmp_path: Path) -> None:
    """A seal whose report.json digest is right but whose verdict annotation was edited is a forged seal, not an
    edited file: the difference is quoted as it is (path, both values), and no file is said to have changed."""
    forged = _copy(run, tmp_path)
    sealed = json.loads((forged / STATEMENT_FILE).read_text())
    products = sealed["predicate"]["runDetails"]["byproducts"]
    genuine = products[0]["annotations"]["verdict"]
    products[0]["annotations"]["verdict"] = "forged"
    (forged / STATEMENT_FILE).write_text(json.dumps(sealed))
    assert _problems(forged) == [f'seal mismatch: predicate.runDetails.byproducts.report.json.annotations.verdict: '
                                 f'sealed "forged", the run has "{genuine}"']


def test_resolved_components_carry_the_versions_the_harness_recorded() -> None:
    """Results of the current harness list the components it resolved (kind, spec, digest, what was hashed) and,
    separately, the version each kind reported; the report joins them per kind. A kind without a version has
    none; targets are then not read again as components."""
    from conformance.report.model import build_report

    resolved = [{"kind": "device-plugin", "spec": "cmd:plugin", "name": "plugin", "digest": "sha256:" + "ab" * 32,
                 "hashed": "the executable"},
                {"kind": "extender", "spec": "reference", "name": "ref", "digest": None, "hashed": "not pinned"}]
    env = {"components": resolved, "component_versions": {"device-plugin": "v0.17.0"},
           "targets": ["device-plugin=cmd:plugin", "extender=reference"]}
    components = build_report(_older_harness_results(env)).manifest.components
    assert [(c.kind, c.spec, c.name, c.version, c.digest, c.hashed) for c in components] == [
        ("device-plugin", "cmd:plugin", "plugin", "v0.17.0", "sha256:" + "ab" * 32, "the executable"),
        ("extender", "reference", "ref", None, None, "not pinned")]


def test_pae_is_the_dsse_specification_s() -> None:
    """DSSE v1 (secure-systems-lab/dsse, protocol.md): PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body)
    SP body, lengths in ASCII decimal bytes; the specification's example is "DSSEv1 29 http://example.com/HelloWorld
    11 hello world". Lengths count bytes, not characters."""
    from conformance.provenance.dsse import pae

    example = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert pae("http://example.com/HelloWorld", b"hello world") == example
    assert pae("t/\u00e9", "\u00e9".encode()) == b"DSSEv1 4 t/\xc3\xa9 2 \xc3\xa9"


def test_an_envelope_payload_that_is_not_base64_is_malformed(signed: tuple[Path, Path], tmp_path: Path) -> None:
    """DSSE envelopes carry the payload in standard base64 (RFC 4648); characters outside its alphabet make the
    envelope malformed, named as such, rather than being skipped into another payload."""
    from conformance.provenance.dsse import load_public_key

    run, key = signed
    forged = _copy(run, tmp_path)
    bundle = json.loads((forged / BUNDLE_FILE).read_text())
    bundle["dsseEnvelope"]["payload"] = "!!" + bundle["dsseEnvelope"]["payload"]
    (forged / BUNDLE_FILE).write_text(json.dumps(bundle))
    (problem,) = _problems(forged, key=load_public_key(key.with_suffix(".pub")))
    assert problem.startswith("signature: malformed DSSE envelope"), problem


def test_a_keyless_signature_is_trusted_when_an_identity_or_an_issuer_was_asked_for(run: Path,
                                                                                   tmp_path: Path) -> None:
    """docs/certification.md: without --key/--identity/--issuer a signed run is verified and who signed it is said,
    but nothing is trusted; with --identity, or --issuer alone (any workflow of that issuer), the certificate was
    checked against what the user asked for. The signer is named from the Fulcio certificate either way."""
    from conformance.provenance.statement import payload
    from conformance.provenance.verify import TrustPolicy, verify_run
    from tests.conformance.sigstore_instance import GITHUB_ISSUER, SigstoreInstance, Workflow

    instance, wf = SigstoreInstance(), Workflow()
    root = tmp_path / "trusted_root.json"
    root.write_text(json.dumps(instance.trusted_root()))

    def keyless(doc: dict[str, Any]) -> None:
        doc["manifest"]["signing"] = {"mode": "sigstore"}
        doc["manifest"]["harness"]["commit"] = wf.sha

    forged = _resealed(run, tmp_path, keyless)
    (forged / BUNDLE_FILE).write_text(instance.sign_dsse(payload(json.loads((forged / STATEMENT_FILE).read_text())),
                                                         wf))
    for policy, trusted in (({}, False), ({"identity": wf.identity}, True), ({"issuer": GITHUB_ISSUER}, True)):
        result = verify_run(forged, TrustPolicy(trust_root=root, **policy))
        assert (result.problems, result.trusted) == ([], trusted), policy
        assert result.signer == f"sigstore {wf.identity} (issuer {GITHUB_ISSUER})"


def test_a_byproduct_only_the_seal_lists_is_not_called_a_changed_file(run: Path, tmp_path: Path) -> None:
    """docs/certification.md, verify step 3: an edited ``summary.md`` shows as "summary.md was changed after the run
    was sealed". A forged seal that lists a byproduct the run does not have (here named ``notes.digest.md``, a name
    holding the ``.digest.`` of a digest path) names no file of the run that changed: it is quoted as the statement
    comparison states it, not explained as a change to a file called ``notes``. An edited run file is still named
    as changed. (Seed 10223: the old explanation split any byproducts path at ``.digest.``.)"""
    forged = _copy(run, tmp_path)
    sealed = json.loads((forged / STATEMENT_FILE).read_text())
    sealed["predicate"]["runDetails"]["byproducts"].append({"name": "notes.digest.md",
                                                             "digest": {"sha256": "ab" * 32}})
    (forged / STATEMENT_FILE).write_text(json.dumps(sealed))
    assert _problems(forged) == ["seal mismatch: predicate.runDetails.byproducts.notes.digest.md is not in the run"]
    with open(forged / "summary.md", "a") as fh:
        fh.write("edited\n")
    assert [p.split(" (")[0] for p in _problems(forged)] == [
        "seal mismatch: predicate.runDetails.byproducts.notes.digest.md is not in the run",
        "seal mismatch: summary.md was changed after the run was sealed"]


def test_a_target_whose_path_is_not_utf8_is_signed_as_json_that_reads_back() -> None:
    """Linux paths and argv are bytes; Python hands on a byte that is not UTF-8 as a lone surrogate (PEP 383,
    surrogateescape), so a target given as ``cmd:/opt/caf\\xe9/plugin`` (a Latin-1 directory) reaches the statement as
    ``caf\\udce9``. JSON can carry it (RFC 8259, section 7: any code unit as a \\u escape), so the signed payload must
    be bytes that parse back to the same statement, not an encoding error at signing time."""
    from conformance.provenance.statement import STATEMENT_TYPE, payload

    stmt = {"_type": STATEMENT_TYPE, "predicate": {"buildDefinition": {"externalParameters": {
        "targets": ["device-plugin=cmd:/opt/caf\udce9/plugin", "scheduler=cmd:/opt/café/extender"]}}}}
    assert json.loads(payload(stmt)) == stmt


def test_report_json_does_not_depend_on_the_order_of_members_in_the_results() -> None:
    """RFC 8259, section 4: an object is an unordered collection of members, so two results files that differ only in
    the order of an object's members are the same results (``jq -S`` or any JSON tool may reorder them). A report
    rebuilt from them is the same report (model.py: "so a report rebuilt from them is the same report"), to the byte:
    report.json is a byproduct of the run by sha256 in the statement."""
    from conformance import RESULTS_SCHEMA
    from conformance.report.model import build_report

    def results(evidence: dict[str, Any], images: dict[str, str]) -> dict[str, Any]:
        return {"schema": RESULTS_SCHEMA, "complete": True, "updated": 86400.0, "environment": {"images": images},
                "tests": [{"nodeid": "t::a", "outcome": "passed",
                           "evidence": [{"label": "allocate", "value": evidence}]}],
                "requirements": {"SCHED-FIT-001": {"status": "passed", "tests": ["t::a"], "duration": 1.0}}}

    one = build_report(results({"gpus": [0, 1], "node": "n0"}, {"linux/amd64": "sha256:" + "a" * 64,
                                                                 "linux/arm64": "sha256:" + "b" * 64}))
    other = build_report(results({"node": "n0", "gpus": [0, 1]}, {"linux/arm64": "sha256:" + "b" * 64,
                                                                   "linux/amd64": "sha256:" + "a" * 64}))
    assert one.to_json() == other.to_json()


def test_a_written_report_validates_against_the_schema_the_package_ships(run: Path) -> None:
    """docs/certification.md: ``report.json`` has the schema ``fakehw.conformance.report/v2``, shipped as
    ``conformance/report/report.schema.json``, and the report's own ``schema`` member names it. A consumer checks a
    report with a JSON Schema 2020-12 validator (the ``$schema`` the file declares), not with our models: a run's
    report.json must pass it, and the shipped file must be the schema the package generates. The models' Python
    field name ``schema_`` is no member of the document; a schema generated under it would forbid the ``schema``
    member every report writes (the models forbid extra members, ``additionalProperties: false``)."""
    import jsonschema  # type: ignore[import-untyped]  # no stubs installed (as in test_report.py)

    from conformance.report.model import REPORT_SCHEMA, report_json_schema

    shipped = json.loads((Path(cv.__file__).parent / "report" / "report.schema.json").read_text())
    generated = json.loads(json.dumps(report_json_schema()))
    assert generated == shipped
    assert shipped["$schema"] == "https://json-schema.org/draft/2020-12/schema" and shipped["$id"] == REPORT_SCHEMA
    doc = json.loads((run / "report.json").read_text())
    assert doc["schema"] == REPORT_SCHEMA
    jsonschema.Draft202012Validator(generated).validate(doc)
    assert "schema" in generated["properties"] and "schema_" not in generated["properties"]
