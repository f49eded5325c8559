"""Verifying a run directory the way a stranger would: what it says about itself, and who vouches for it.

In order, each failure named:

1. ``report.json`` loads and is intact (:func:`conformance.report.model.verify`: seal present and matching,
   verdicts and counts following from the results, every requirement of the recorded catalogue version there
   with the catalogue's level and required flag).
2. The seal (``attestation.intoto.json``) is present, not empty, and equal to the statement recomputed from the
   files: a file edited after sealing shows as its digest in ``byproducts``, a swapped component as a subject.
3. The signature (``attestation.sigstore.json``) matches the mode the report declares, signs exactly that
   statement, and comes from what the user trusts: ``--key`` (the key id must be the report's) or ``--identity``
   / ``--issuer`` (a Sigstore certificate naming them; the workflow commit in it must be the harness commit).

Without ``--key``/``--identity``/``--issuer``/``--require-signature`` an unsigned run verifies as "UNSIGNED" (its
files agree with each other, but anyone could have written them) and a signed one as signed by whoever signed
it, said so; with one of them, anything not signed by what was asked for is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.provenance import keyless
from conformance.provenance.dsse import (
    PublicKey,
    SignatureError,
    keyid,
    parse_public_pem,
    verify_key_bundle,
)
from conformance.provenance.statement import (
    BUNDLE_FILE,
    RUN_FILES,
    STATEMENT_FILE,
    StatementError,
    differences,
    statement,
)
from conformance.report.model import Report, ReportError, load_report
from conformance.report.model import verify as verify_report

MAX_FILE_BYTES = 64 << 20
MAX_LISTED_DIFFERENCES = 20
"""Differences listed per comparison (seal against run, signed statement against run); the rest are counted, so a
forged seal cannot flood the output and a long list is never mistaken for all of them (docs/certification.md)."""
_BYPRODUCTS = "predicate.runDetails.byproducts."
"""Where a difference in the run's files shows (:func:`conformance.provenance.statement.differences` paths)."""


@dataclass(frozen=True)
class TrustPolicy:
    """What the person verifying trusts; any of these makes a signature required."""

    key: PublicKey | None = None
    identity: str | None = None
    issuer: str | None = None
    trust_root: Path | None = None
    require_signature: bool = False

    @property
    def signature_required(self) -> bool:
        return bool(self.require_signature or self.key is not None or self.identity or self.issuer)


@dataclass
class RunVerification:
    run_dir: Path
    problems: list[str] = field(default_factory=list)
    signer: str = "UNSIGNED"
    """Who signed, in words: ``UNSIGNED``, ``key sha256:...``, ``sigstore <identity> (issuer ...)``."""
    trusted: bool = False
    """The signature was checked against a key or identity the user gave."""
    report: Report | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _read_json(path: Path) -> Any:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
    return json.loads(path.read_text())


def _load(run_dir: Path, result: RunVerification) -> Report | None:
    path = run_dir / "report.json"
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            result.problems.append(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB, not a report")
            return None
        return load_report(path.read_text(), str(path))
    except OSError as exc:
        result.problems.append(f"cannot read {path}: {exc.strerror}")
    except ReportError as exc:
        result.problems.append(str(exc))
    return None


def _check_seal(run_dir: Path, report: Report, result: RunVerification) -> dict[str, Any] | None:
    """The recomputed statement when the seal matches it (problems recorded otherwise)."""
    try:
        actual = statement(report, run_dir)
    except StatementError as exc:
        result.problems.append(str(exc))
        return None
    path = run_dir / STATEMENT_FILE
    if not path.is_file():
        result.problems.append(f"no seal: {STATEMENT_FILE} is missing (a run is sealed when it is written)")
        return actual
    try:
        sealed = _read_json(path)
    except (OSError, ValueError) as exc:
        result.problems.append(f"{STATEMENT_FILE}: unreadable seal ({exc})")
        return actual
    if not isinstance(sealed, dict) or not sealed.get("subject") or not sealed.get("predicate"):
        result.problems.append(f"{STATEMENT_FILE}: the seal is empty (no subject or predicate)")
        return actual
    result.problems += _listed(differences(sealed, actual), "seal mismatch")
    return actual


def _listed(diffs: list[str], what: str) -> list[str]:
    """The first :data:`MAX_LISTED_DIFFERENCES` of ``diffs`` explained, then how many more there are."""
    shown = [f"{what}: {_explain(d)}" for d in diffs[:MAX_LISTED_DIFFERENCES]]
    if len(diffs) > MAX_LISTED_DIFFERENCES:
        shown.append(f"{what}: {len(diffs) - MAX_LISTED_DIFFERENCES} more not listed")
    return shown


def _explain(diff: str) -> str:
    """A difference in words: a file of the run whose digest differs was changed; anything else is quoted as it is
    (a byproduct only the seal lists is no file of the run, whatever its name holds)."""
    for name in RUN_FILES:
        if diff.startswith(f"{_BYPRODUCTS}{name}.digest."):
            return f"{name} was changed after the run was sealed ({diff})"
    if diff.startswith("subject"):
        return f"the component under test differs from the sealed one ({diff})"
    return diff


def _signed_payload(run_dir: Path, report: Report, policy: TrustPolicy, result: RunVerification) -> bytes | None:
    """Check the signature against the declared mode and the policy; the signed statement bytes, or None."""
    mode = report.manifest.signing.mode
    path = run_dir / BUNDLE_FILE
    if mode == "unsigned":
        if path.exists():
            result.problems.append(f"the report declares itself unsigned but {BUNDLE_FILE} is present")
        if policy.signature_required:
            result.problems.append("the run is UNSIGNED: a signature is required (--key/--identity/--issuer given), "
                                   "and an unsigned report could have been written by anyone")
        return None
    if not path.is_file():
        result.problems.append(f"the report declares a {mode} signature but {BUNDLE_FILE} is missing "
                               f"(unsigned, or the signature is still pending: conformance sign {run_dir})")
        return None
    try:
        text = path.read_text()
        bundle = json.loads(text)
        if not isinstance(bundle, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        result.problems.append(f"{BUNDLE_FILE}: unreadable ({exc})")
        return None
    try:
        return _check_key(bundle, report, policy, result) if mode == "key" else _check_keyless(text, report,
                                                                                                 policy, result)
    except SignatureError as exc:
        result.problems.append(f"signature: {exc}")
        return None


def _check_key(bundle: dict[str, Any], report: Report, policy: TrustPolicy, result: RunVerification) -> bytes:
    declared = report.manifest.signing
    if policy.identity or policy.issuer:
        raise SignatureError(f"the run is signed with a key ({declared.keyid}), not by a Sigstore identity")
    if not declared.public_key or not declared.keyid:
        raise SignatureError("the report declares a key signature but records no public key")
    embedded = parse_public_pem(declared.public_key.encode(), "report.json manifest.signing.public_key")
    if keyid(embedded) != declared.keyid:
        raise SignatureError(f"the recorded public key is {keyid(embedded)}, the recorded key id {declared.keyid}")
    if policy.key is not None and keyid(policy.key) != declared.keyid:
        raise SignatureError(f"signed with key {declared.keyid}, not with the key you trust ({keyid(policy.key)})")
    payload = verify_key_bundle(bundle, policy.key or embedded)
    result.signer = f"key {declared.keyid}"
    result.trusted = policy.key is not None
    return payload


def _check_keyless(text: str, report: Report, policy: TrustPolicy, result: RunVerification) -> bytes:
    if policy.key is not None:
        raise SignatureError("the run is signed keyless (Sigstore), not with a key: give --identity and --issuer")
    checked = keyless.verify(text, policy.identity, policy.issuer, policy.trust_root)
    signer = checked.signer
    result.signer = f"sigstore {signer.identity} (issuer {signer.issuer})"
    result.trusted = bool(policy.identity or policy.issuer)
    harness = report.manifest.harness
    commit = harness.commit if harness is not None else None
    if signer.build_signer_digest and commit != signer.build_signer_digest:
        raise SignatureError(f"the signing workflow ran at commit {signer.build_signer_digest} but the report's "
                             f"harness commit is {commit or 'not recorded'}")
    return checked.payload


def verify_run(run_dir: Path, policy: TrustPolicy) -> RunVerification:
    result = RunVerification(run_dir)
    report = _load(run_dir, result)
    if report is None:
        return result
    result.report = report
    result.problems += verify_report(report)
    actual = _check_seal(run_dir, report, result)
    signed = _signed_payload(run_dir, report, policy, result)
    if signed is not None and actual is not None:
        try:
            signed_statement = json.loads(signed)
        except ValueError:
            signed_statement = None
        if signed_statement != actual:
            diffs = differences(signed_statement, actual) if isinstance(signed_statement, dict) else ["not JSON"]
            result.problems += _listed(diffs, "the signed statement differs from the run")
    return result

