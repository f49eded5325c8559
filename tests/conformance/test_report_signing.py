"""Signed certification runs: local keys (checked with openssl as the outside oracle for DSSE's signature and the
key id) and keyless Sigstore bundles as the certify workflow's signing job makes them, verified offline by the
sigstore client library against a trust root of our own (tests/conformance/sigstore_instance.py)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conformance.cli import main as conformance_main
from conformance.provenance import keyless
from conformance.provenance.attest import Signer
from conformance.provenance.dsse import PAYLOAD_TYPE, pae
from conformance.provenance.statement import BUNDLE_FILE, STATEMENT_FILE
from tests.conformance.runs import certified_run, run_suite, write_key, write_suite
from tests.conformance.sigstore_instance import GITHUB_ISSUER, SigstoreInstance, Workflow

OPENSSL = shutil.which("openssl")


def _openssl(*argv: str) -> subprocess.CompletedProcess[bytes]:
    assert OPENSSL is not None
    return subprocess.run([OPENSSL, *argv], capture_output=True, timeout=60, check=False)


@pytest.mark.skipif(OPENSSL is None, reason="needs openssl (tools/install-system-deps.sh installs it)")
@pytest.mark.parametrize("kind", ["ed25519", "p256", "p384", "rsa"])
def test_a_key_signed_run_verifies_and_openssl_agrees(kind: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    key = write_key(tmp_path / f"{kind}.pem", kind)
    run = certified_run(tmp_path, Signer.with_key(key), "extender")
    assert conformance_main(["verify", str(run), "--key", str(key.with_suffix(".pub"))]) == 0
    assert "(as required)" in capsys.readouterr().out
    bundle = json.loads((run / BUNDLE_FILE).read_text())
    envelope = bundle["dsseEnvelope"]
    payload = base64.b64decode(envelope["payload"])
    assert json.loads(payload) == json.loads((run / STATEMENT_FILE).read_text())
    (tmp_path / "pae").write_bytes(pae(envelope["payloadType"], payload))
    (tmp_path / "sig").write_bytes(base64.b64decode(envelope["signatures"][0]["sig"]))
    pub = str(key.with_suffix(".pub"))
    if kind == "ed25519":
        checked = _openssl("pkeyutl", "-verify", "-pubin", "-inkey", pub, "-rawin", "-in", str(tmp_path / "pae"),
                           "-sigfile", str(tmp_path / "sig"))
    else:
        digest = "-sha384" if kind == "p384" else "-sha256"
        pss = ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:auto"] if kind == "rsa" else []
        checked = _openssl("dgst", digest, *pss, "-verify", pub, "-signature", str(tmp_path / "sig"),
                           str(tmp_path / "pae"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    der = _openssl("pkey", "-pubin", "-in", pub, "-outform", "DER").stdout
    import hashlib

    keyid = "sha256:" + hashlib.sha256(der).hexdigest()
    assert bundle["verificationMaterial"]["publicKey"]["hint"] == keyid
    assert json.loads((run / "report.json").read_text())["manifest"]["signing"]["keyid"] == keyid
    assert f"signed with key {keyid}" in (run / "summary.md").read_text()


def test_bad_keys_are_refused_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk.pem").write_text("not a key")
    assert conformance_main(["run", "--target", "device-plugin=reference", "--sign-key", str(tmp_path / "junk.pem"),
                             "--out", str(tmp_path / "out")]) == 2
    assert "not a PEM private key" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert conformance_main(["run", "--target", "device-plugin=reference", "--sign-key",
                             str(tmp_path / "missing.pem")]) == 2
    assert "cannot read signing key" in capsys.readouterr().err


def test_an_encrypted_key_needs_its_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    path = tmp_path / "enc.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(b"s3cret")))
    suite = write_suite(tmp_path / "suite", "extender")
    results = run_suite(suite, tmp_path / "results.json", "extender")
    monkeypatch.delenv("FAKEHW_SIGN_KEY_PASSWORD", raising=False)
    assert conformance_main(["report", str(results), "--out", str(tmp_path / "run"), "--sign-key", str(path)]) == 2
    assert "the key is encrypted: set $FAKEHW_SIGN_KEY_PASSWORD" in capsys.readouterr().err
    monkeypatch.setenv("FAKEHW_SIGN_KEY_PASSWORD", "s3cret")
    assert conformance_main(["report", str(results), "--out", str(tmp_path / "run"), "--sign-key", str(path)]) == 0
    assert (tmp_path / "run" / BUNDLE_FILE).is_file()


# ------------------------------------------------------------------------------------------------ keyless


@pytest.fixture
def sigstore(tmp_path: Path) -> tuple[SigstoreInstance, Path]:
    instance = SigstoreInstance()
    root = tmp_path / "trusted_root.json"
    root.write_text(json.dumps(instance.trusted_root()))
    return instance, root


def _pending_run(tmp_path: Path, wf: Workflow, commit: str | None = None) -> Path:
    """The certify workflow's run job: no OIDC identity, so the keyless signature is left pending."""
    suite = write_suite(tmp_path / "suite", "extender")
    out = tmp_path / "run"
    out.mkdir()
    run_suite(suite, out / "results.json", "extender",
              env={"FAKEHW_SOURCE_COMMIT": commit or wf.sha, "FAKEHW_SOURCE": f"https://github.com/{wf.repository}"})
    from conformance.provenance.attest import write_run

    written = write_run(out / "results.json", out, Signer("sigstore", defer=True))
    assert not written.signed
    return out


def _sign_as_workflow(run: Path, instance: SigstoreInstance, wf: Workflow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The signing job: ``conformance sign DIR --sigstore`` with Fulcio and Rekor played by ``instance``."""
    monkeypatch.setattr(keyless, "sign", lambda payload: instance.sign_dsse(payload, wf))
    assert conformance_main(["sign", str(run), "--sigstore"]) == 0


def test_a_keyless_run_verifies_offline_against_the_workflow_identity(
        tmp_path: Path, sigstore: tuple[SigstoreInstance, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    instance, root = sigstore
    wf = Workflow()
    run = _pending_run(tmp_path, wf)
    assert conformance_main(["verify", str(run)]) == 1
    assert "the signature is still pending: conformance sign" in capsys.readouterr().err
    _sign_as_workflow(run, instance, wf, monkeypatch)
    policy = ["--identity", wf.identity, "--issuer", GITHUB_ISSUER, "--trust-root", str(root)]
    assert conformance_main(["verify", str(run), *policy]) == 0
    out = capsys.readouterr().out
    assert f"signed by sigstore {wf.identity} (issuer {GITHUB_ISSUER}) (as required)" in out, out
    summary = (run / "summary.md").read_text()
    assert "signed keyless with Sigstore" in summary and wf.sha in summary
    # Without an identity the signature is checked and who signed is said, but nothing is trusted.
    assert conformance_main(["verify", str(run), "--trust-root", str(root)]) == 0
    assert "not checked against a key or identity you trust" in capsys.readouterr().out
    # Claiming another harness commit: report.json and the seal are unkeyed, so a forger can reseal both, but the
    # Fulcio certificate names the commit the signing workflow ran at (Build Signer Digest, OID
    # 1.3.6.1.4.1.57264.1.10), which docs/certification.md requires to be the report's harness commit.
    from conformance.provenance.statement import statement
    from conformance.report.model import load_report

    doc = json.loads((run / "report.json").read_text())
    doc["manifest"]["harness"]["commit"] = "f" * 40
    report = load_report(json.dumps(doc)).sealed()
    (run / "report.json").write_text(report.to_json())
    (run / STATEMENT_FILE).write_text(json.dumps(statement(report, run)))
    assert conformance_main(["verify", str(run), *policy]) == 1
    err = capsys.readouterr().err
    assert f"the signing workflow ran at commit {wf.sha} but the report's harness commit is {'f' * 40}" in err, err


@pytest.mark.parametrize(("case", "expected"), [
    ("the caller's own workflow signed", "Certificate's SANs do not match"),
    ("another issuer", "Certificate's OIDCIssuer does not match"),
    ("the public-good root (our CA is not in it)", "failed to build timestamp certificate chain"),
    ("a key was asked for", "signed keyless (Sigstore), not with a key"),
    ("the harness ran another commit", "the signing workflow ran at commit"),
    ("the statement was swapped", "the Sigstore bundle does not verify: DSSE: invalid signature"),
    ("a result flipped and resealed", "the signed statement differs from the run"),
])
def test_keyless_forgeries_are_refused(case: str, expected: str, tmp_path: Path,
                                       sigstore: tuple[SigstoreInstance, Path], monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    instance, root = sigstore
    wf = Workflow()
    signer_wf = Workflow(repository="vendor/plugin", path=".github/workflows/release.yml",
                         ref="refs/heads/main") if case.startswith("the caller") else wf
    run = _pending_run(tmp_path, wf, commit="f" * 40 if case.startswith("the harness") else None)
    _sign_as_workflow(run, instance, signer_wf, monkeypatch)
    policy = ["--identity", wf.identity, "--issuer", GITHUB_ISSUER, "--trust-root", str(root)]
    if case == "another issuer":
        policy[3] = "https://accounts.google.com"
    elif case.startswith("the public-good root"):
        policy = policy[:4]
    elif case == "a key was asked for":
        policy = ["--key", str(write_key(tmp_path / "k.pem").with_suffix(".pub"))]
    elif case == "the statement was swapped":
        bundle = json.loads((run / BUNDLE_FILE).read_text())
        stmt = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
        stmt["predicate"]["runDetails"]["byproducts"][0]["annotations"]["verdict"] = "certified"
        bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
        (run / BUNDLE_FILE).write_text(json.dumps(bundle))
    elif case == "a result flipped and resealed":
        doc = json.loads((run / "report.json").read_text())
        doc["generated"] = "2030-01-01T00:00:00Z"
        from conformance.provenance.statement import statement
        from conformance.report.model import load_report

        report = load_report(json.dumps(doc)).sealed()
        (run / "report.json").write_text(report.to_json())
        (run / STATEMENT_FILE).write_text(json.dumps(statement(report, run)))
    capsys.readouterr()
    assert conformance_main(["verify", str(run), *policy]) == 1
    err = capsys.readouterr().err
    assert expected in err, f"{case}: {err}"


def test_signing_refuses_a_run_that_does_not_verify(tmp_path: Path, sigstore: tuple[SigstoreInstance, Path],
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The signing job signs what the run job sealed, or nothing: a file changed in between is refused."""
    instance, _ = sigstore
    wf = Workflow()
    run = _pending_run(tmp_path, wf)
    (run / "summary.md").write_text((run / "summary.md").read_text() + "edited\n")
    monkeypatch.setattr(keyless, "sign", lambda payload: instance.sign_dsse(payload, wf))
    assert conformance_main(["sign", str(run), "--sigstore"]) == 1
    err = capsys.readouterr().err
    assert "summary.md was changed after the run was sealed" in err and "not signing it" in err
    assert not (run / BUNDLE_FILE).exists()
    assert conformance_main(["sign", str(run)]) == 2
    assert "needs --sign-key KEY or --sigstore" in capsys.readouterr().err


def test_the_payload_type_is_in_toto(tmp_path: Path) -> None:
    key = write_key(tmp_path / "k.pem")
    run = certified_run(tmp_path, Signer.with_key(key), "extender")
    bundle = json.loads((run / BUNDLE_FILE).read_text())
    assert bundle["dsseEnvelope"]["payloadType"] == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    stmt = json.loads((run / STATEMENT_FILE).read_text())
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == "https://slsa.dev/provenance/v1"
    assert [b["name"] for b in stmt["predicate"]["runDetails"]["byproducts"]] == [
        "report.json", "results.json", "junit.xml", "summary.md", "report.html"]
    subject = stmt["subject"][0]
    assert subject["name"] == "extender:fakehw reference extender"
    assert len(subject["digest"]["sha256"]) == 64
