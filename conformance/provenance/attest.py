"""Writing a run directory: the report files, the seal (the in-toto statement) and its signature.

One function does it for ``conformance run``, ``conformance report --out`` and ``conformance sign``: the report is
rebuilt from ``results.json`` (deterministically: the report's time is the results' time) with the signing mode
declared in it, so ``summary.md`` and ``report.html`` say whether the run is signed; then the statement over every
file is written (``attestation.intoto.json``) and, when signing, the bundle (``attestation.sigstore.json``).
A keyless signature that cannot be made here (no OIDC identity: the certify workflow's run job) is left pending
for ``conformance sign DIR --sigstore`` in a job that has one.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from conformance.provenance import keyless
from conformance.provenance.dsse import SignatureError, SigningKey, keyid, public_pem, sign_bundle
from conformance.provenance.statement import BUNDLE_FILE, STATEMENT_FILE, payload, statement
from conformance.report import report_from_results, write_reports
from conformance.report.model import Report, Signing
from fakehw.render.atomic import atomic_write


@dataclass(frozen=True)
class Signer:
    """How a run gets signed: not at all (said so everywhere), with the user's key, or keyless (Sigstore)."""

    mode: Literal["unsigned", "key", "sigstore"] = "unsigned"
    key: SigningKey | None = None
    defer: bool = False
    """Keyless only: without an OIDC identity, write everything but the signature (signed later)."""

    @classmethod
    def with_key(cls, path: Path) -> Signer:
        return cls("key", SigningKey.load(path))

    def declaration(self) -> Signing:
        if self.mode == "key" and self.key is not None:
            return Signing(mode="key", keyid=keyid(self.key.public), public_key=public_pem(self.key.public))
        return Signing(mode=self.mode)

    def bundle(self, body: bytes) -> str | None:
        """The signature bundle over ``body``; None when unsigned or left pending."""
        if self.mode == "key" and self.key is not None:
            return json.dumps(sign_bundle(body, self.key), indent=2) + "\n"
        if self.mode == "sigstore":
            try:
                return keyless.sign(body)
            except SignatureError:
                if self.defer:
                    return None
                raise
        return None


@dataclass(frozen=True)
class Written:
    report: Report
    signed: bool
    """False for unsigned runs and for keyless signatures left pending."""


def write_run(results: Path, out: Path, signer: Signer) -> Written:
    """Report files, seal and signature for the results file ``results``, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if results.resolve() != (out / "results.json").resolve():
        shutil.copyfile(results, out / "results.json")
    report = report_from_results(out / "results.json", signing=signer.declaration())
    write_reports(report, out)
    stmt = statement(report, out)
    atomic_write(out / STATEMENT_FILE, (json.dumps(stmt, indent=2, sort_keys=True) + "\n").encode())
    (out / BUNDLE_FILE).unlink(missing_ok=True)
    bundle = signer.bundle(payload(stmt))
    if bundle is not None:
        atomic_write(out / BUNDLE_FILE, bundle.encode())
    return Written(report, bundle is not None)
