"""Real certification runs for the report tests: a suite of one test per catalogue requirement of a target, run by
pytest with the conformance plugin (so results.json is the harness's own), then written, sealed and signed by the
same code ``conformance run`` uses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from conformance.provenance.attest import Signer, write_run
from conformance.requirements import catalogue


def write_suite(where: Path, target: str, failing: frozenset[str] = frozenset(),
                inapplicable: frozenset[str] = frozenset()) -> Path:
    """A test file with one test per live requirement of ``target``; those in ``failing`` fail, those in
    ``inapplicable`` say they do not apply."""
    where.mkdir(parents=True, exist_ok=True)
    lines = ["import pytest", "from conformance import not_applicable", ""]
    for req in catalogue().for_target(target):
        name = req.id.lower().replace("-", "_")
        body = "pass"
        if req.id in failing:
            body = f"assert False, 'the component broke {req.id}'"
        elif req.id in inapplicable:
            body = f"not_applicable('the profile has nothing {req.id} could check')"
        lines += [f"@pytest.mark.requirement({req.id!r})", f"def test_{name}():", f"    {body}", ""]
    (where / "test_suite.py").write_text("\n".join(lines))
    return where


def run_suite(suite: Path, results: Path, target: str, spec: str = "reference",
              env: dict[str, str] | None = None) -> Path:
    """Run ``suite`` with the conformance plugin, as ``conformance run`` does, writing ``results``."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(suite),
            "--profile", "dgx-h100", "--target", f"{target}={spec}", "--conformance-results", str(results)]
    subprocess.run(argv, cwd=suite, env={**os.environ, **(env or {})}, capture_output=True, timeout=300,
                   check=False)
    assert results.is_file(), f"the suite wrote no results: {' '.join(argv)}"
    return results


def certified_run(root: Path, signer: Signer, target: str = "device-plugin",
                  failing: frozenset[str] = frozenset(), inapplicable: frozenset[str] = frozenset()) -> Path:
    """A run directory of ``target`` (every requirement passing but ``failing`` and ``inapplicable``), written and
    signed."""
    suite = write_suite(root / "suite", target, failing, inapplicable)
    out = root / "run"
    out.mkdir(parents=True, exist_ok=True)
    run_suite(suite, out / "results.json", target)
    write_run(out / "results.json", out, signer)
    return out


def write_key(path: Path, kind: str = "ed25519") -> Path:
    """A PEM private key (and ``path.pub``, its public key)."""
    key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif kind == "p256":
        key = ec.generate_private_key(ec.SECP256R1())
    elif kind == "p384":
        key = ec.generate_private_key(ec.SECP384R1())
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.with_suffix(".pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


