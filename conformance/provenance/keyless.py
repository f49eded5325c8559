"""Keyless signing with Sigstore (GitHub Actions' OIDC identity) and offline verification of such bundles.

Signing runs where an OIDC identity is available (the certify workflow's signing job, ``id-token: write``): the
Sigstore client gets a short-lived certificate for the workflow's identity from Fulcio and logs the signature in
Rekor; the bundle carries the certificate and the log entry with its inclusion proof. Verification needs no
network: the bundle is checked against a trusted root (Sigstore's public-good root shipped with the ``sigstore``
package, or ``--trust-root FILE`` in the ``trusted_root.json`` format) by the Sigstore client library itself:
chain to the CA at the logged time, the certificate's SCT, the log's signed checkpoint, inclusion proof and
promise, and the DSSE signature.

The identity of a GitHub workflow is its certificate's SAN, ``https://github.com/OWNER/REPO/.github/workflows/
certify.yml@REF``, issued by ``https://token.actions.githubusercontent.com``; for a reusable workflow it is the
*called* workflow, which is what makes the signature say "fakehw's certify workflow ran this", not the caller.
The certificate also records the commit of that workflow (Build Signer Digest), which verify compares with the
harness commit the report records.

``sigstore`` is an optional dependency (``pip install fakehw[sign]``); without it keyless bundles cannot be made
or checked and the message says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.provenance.dsse import PAYLOAD_TYPE, SignatureError

OID_ISSUER_V1 = "1.3.6.1.4.1.57264.1.1"
OID_ISSUER_V2 = "1.3.6.1.4.1.57264.1.8"
OID_BUILD_SIGNER_URI = "1.3.6.1.4.1.57264.1.9"
OID_BUILD_SIGNER_DIGEST = "1.3.6.1.4.1.57264.1.10"
OID_SOURCE_REPOSITORY = "1.3.6.1.4.1.57264.1.12"
OID_RUN_INVOCATION = "1.3.6.1.4.1.57264.1.21"
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


@dataclass(frozen=True, slots=True)
class SignerIdentity:
    """What a Fulcio certificate says about who signed."""

    identity: str
    issuer: str
    build_signer_digest: str | None
    source_repository: str | None
    run: str | None


@dataclass(frozen=True, slots=True)
class KeylessResult:
    payload: bytes
    signer: SignerIdentity


def _require_sigstore() -> None:
    try:
        import sigstore  # noqa: F401
    except ImportError:
        raise SignatureError("keyless (Sigstore) bundles need the sigstore package: pip install 'fakehw[sign]'") \
            from None


def _der_utf8(raw: bytes) -> str:
    """The text of a DER UTF8String (Fulcio's extensions from .8 on); raw bytes for the legacy ones."""
    if len(raw) >= 2 and raw[0] == 0x0C:
        length, start = raw[1], 2
        if length & 0x80:
            count = length & 0x7F
            length, start = int.from_bytes(raw[2:2 + count], "big"), 2 + count
        return raw[start:start + length].decode(errors="replace")
    return raw.decode(errors="replace")


def signer_identity(cert: Any) -> SignerIdentity:
    from cryptography import x509

    def ext(oid: str) -> str | None:
        try:
            value = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value
        except x509.ExtensionNotFound:
            return None
        return _der_utf8(value.value) if isinstance(value, x509.UnrecognizedExtension) else None

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(v) for v in san.get_values_for_type(x509.UniformResourceIdentifier)] + \
                [str(v) for v in san.get_values_for_type(x509.RFC822Name)]
    except x509.ExtensionNotFound:
        names = []
    return SignerIdentity(names[0] if names else "?", ext(OID_ISSUER_V2) or ext(OID_ISSUER_V1) or "?",
                          ext(OID_BUILD_SIGNER_DIGEST), ext(OID_SOURCE_REPOSITORY), ext(OID_RUN_INVOCATION))


def _trusted_root(path: Path | None) -> Any:
    from sigstore.models import ClientTrustConfig, TrustedRoot

    if path is None:
        return ClientTrustConfig.production(offline=True).trusted_root
    try:
        return TrustedRoot.from_file(str(path))
    except Exception as exc:  # the library raises several types for a bad file
        raise SignatureError(f"{path}: not a Sigstore trusted root ({exc})") from None


def verify(bundle_json: str, identity: str | None, issuer: str | None, trust_root: Path | None) -> KeylessResult:
    """Verify a keyless bundle offline; with ``identity`` (and ``issuer``) the certificate must name them."""
    _require_sigstore()
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle
    from sigstore.verify import Verifier, policy

    try:
        bundle = Bundle.from_json(bundle_json)
    except Exception as exc:  # InvalidBundle, JSON and model errors
        raise SignatureError(f"not a valid Sigstore bundle ({exc})") from None
    signer = signer_identity(bundle.signing_certificate)
    if identity:
        rule: Any = policy.Identity(identity=identity, issuer=issuer)
    elif issuer:
        rule = policy.OIDCIssuerV2(issuer)
    else:
        rule = policy.UnsafeNoOp()
    try:
        payload_type, payload = Verifier(trusted_root=_trusted_root(trust_root)).verify_dsse(bundle, rule)
    except SigstoreError as exc:
        raise SignatureError(f"the Sigstore bundle does not verify: {exc}") from None
    if payload_type != PAYLOAD_TYPE:
        raise SignatureError(f"the bundle signs {payload_type!r}, not an in-toto statement")
    return KeylessResult(payload, signer)


def sign(payload: bytes) -> str:
    """A keyless bundle over ``payload`` with the ambient OIDC identity (GitHub Actions' ``id-token: write``)."""
    _require_sigstore()
    from sigstore.dsse import Statement
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken, detect_credential
    from sigstore.sign import SigningContext

    try:
        token = detect_credential()
    except SigstoreError as exc:
        raise SignatureError(f"no OIDC identity for keyless signing: {exc}") from None
    if not token:
        raise SignatureError("no OIDC identity for keyless signing: run it in GitHub Actions with "
                             "'permissions: id-token: write' (or sign with --sign-key)")
    try:
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        with context.signer(IdentityToken(token)) as signer:
            bundle = signer.sign_dsse(Statement(payload))
    except SigstoreError as exc:
        raise SignatureError(f"keyless signing failed: {exc}") from None
    return str(bundle.to_json())
