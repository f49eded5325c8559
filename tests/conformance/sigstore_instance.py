"""A Sigstore instance of our own for offline tests: a CA (Fulcio's role), a CT log and a transparency log (Rekor's),
their trusted root, and keyless bundles made the way the public-good instance makes them for a GitHub workflow.

Everything follows the public formats the Sigstore client checks: a leaf certificate with the Fulcio extensions
(OIDC issuer, build signer URI and digest, source repository, run URI) and an embedded precertificate SCT
(RFC 6962 section 3.2), a Rekor ``dsse/0.0.1`` entry with its signed entry timestamp, an RFC 6962 inclusion proof
and a signed checkpoint (transparency-dev's checkpoint note format). The verifying side is the real ``sigstore``
library; only the signing side is ours, so a mistake here fails the test instead of passing it.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conformance.provenance.dsse import PAYLOAD_TYPE, pae

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
OID_SCT_LIST = "1.3.6.1.4.1.11129.2.4.2"
FULCIO = "1.3.6.1.4.1.57264.1."


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _log_id(key: ec.EllipticCurvePrivateKey) -> bytes:
    return hashlib.sha256(_spki(key.public_key())).digest()


def _der_utf8(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 128
    return bytes([0x0C, len(raw)]) + raw


def _der_octets(raw: bytes) -> bytes:
    """A DER OCTET STRING (minimal length encoding)."""
    if len(raw) < 128:
        return bytes([0x04, len(raw)]) + raw
    size = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
    return bytes([0x04, 0x80 | len(size)]) + size + raw


def _canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Workflow:
    """A GitHub Actions job's OIDC identity as Fulcio writes it into the certificate."""

    repository: str = "fakehw/fakehw"
    path: str = ".github/workflows/certify.yml"
    ref: str = "refs/tags/v1"
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    caller: str = "vendor/plugin"

    @property
    def identity(self) -> str:
        return f"https://github.com/{self.repository}/{self.path}@{self.ref}"


@dataclass
class SigstoreInstance:
    now: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.UTC))
    ca_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP384R1()))
    ct_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    log_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    origin: str = "rekor.test - 1"

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fakehw test"),
                          x509.NameAttribute(NameOID.COMMON_NAME, "fakehw test sigstore")])
        ski = x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key())
        self.ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(self.now - datetime.timedelta(days=365))
                   .not_valid_after(self.now + datetime.timedelta(days=365))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
                   .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                  critical=True)
                   .add_extension(ski, critical=False)
                   .sign(self.ca_key, hashes.SHA384()))

    # ------------------------------------------------------------------------------------------ trust root

    def _key_entry(self, key: ec.EllipticCurvePrivateKey, url: str) -> dict[str, Any]:
        start = (self.now - datetime.timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"baseUrl": url, "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": _b64(_spki(key.public_key())), "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                              "validFor": {"start": start}},
                "logId": {"keyId": _b64(_log_id(key))}}

    def trusted_root(self) -> dict[str, Any]:
        start = (self.now - datetime.timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [self._key_entry(self.log_key, "https://rekor.test")],
            "certificateAuthorities": [{
                "subject": {"organization": "fakehw test", "commonName": "fakehw test sigstore"},
                "uri": "https://fulcio.test",
                "certChain": {"certificates": [{"rawBytes": _b64(self.ca.public_bytes(serialization.Encoding.DER))}]},
                "validFor": {"start": start}}],
            "ctlogs": [self._key_entry(self.ct_key, "https://ctfe.test")],
            "timestampAuthorities": [],
        }

    # ------------------------------------------------------------------------------------------ Fulcio

    def _leaf_builder(self, key: ec.EllipticCurvePrivateKey, wf: Workflow, issuer: str) -> x509.CertificateBuilder:
        fulcio = {
            "1": issuer.encode(),  # the legacy issuer extension: raw bytes
            "8": _der_utf8(issuer),
            "9": _der_utf8(wf.identity),
            "10": _der_utf8(wf.sha),
            "12": _der_utf8(f"https://github.com/{wf.caller}"),
            "21": _der_utf8(f"https://github.com/{wf.caller}/actions/runs/1/attempts/1"),
        }
        builder = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(self.ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(self.now - datetime.timedelta(minutes=1))
                   .not_valid_after(self.now + datetime.timedelta(minutes=9))
                   .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                                  critical=False)
                   .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(wf.identity)]),
                                  critical=True))
        for suffix, value in fulcio.items():
            builder = builder.add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier(FULCIO + suffix),
                                                                       value), critical=False)
        return builder

    def _sct(self, tbs: bytes) -> bytes:
        """An RFC 6962 SCT over the precertificate ``tbs``, TLS-encoded as a one-entry SCT list."""
        timestamp = int(self.now.timestamp() * 1000)
        issuer_key_hash = hashlib.sha256(_spki(self.ca_key.public_key())).digest()
        signed = (struct.pack(">BBQH", 0, 0, timestamp, 1) + issuer_key_hash
                  + len(tbs).to_bytes(3, "big") + tbs + struct.pack(">H", 0))
        signature = self.ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        sct = (bytes([0]) + _log_id(self.ct_key) + struct.pack(">QH", timestamp, 0)
               + bytes([4, 3]) + struct.pack(">H", len(signature)) + signature)
        return struct.pack(">HH", len(sct) + 2, len(sct)) + sct

    def issue(self, key: ec.EllipticCurvePrivateKey, wf: Workflow, issuer: str = GITHUB_ISSUER) -> x509.Certificate:
        builder = self._leaf_builder(key, wf, issuer)
        pre = builder.sign(self.ca_key, hashes.SHA384())
        sct_list = self._sct(pre.tbs_certificate_bytes)
        cert = builder.add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier(OID_SCT_LIST),
                                                                _der_octets(sct_list)), critical=False) \
            .sign(self.ca_key, hashes.SHA384())
        assert cert.tbs_precertificate_bytes == pre.tbs_certificate_bytes
        return cert

    # ------------------------------------------------------------------------------------------ Rekor

    def _entry(self, envelope: dict[str, Any], cert: x509.Certificate) -> dict[str, Any]:
        payload = base64.b64decode(envelope["payload"])
        pem = cert.public_bytes(serialization.Encoding.PEM)
        body = _canonical({"apiVersion": "0.0.1", "kind": "dsse", "spec": {
            "envelopeHash": {"algorithm": "sha256", "value": hashlib.sha256(_canonical(envelope)).hexdigest()},
            "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
            "signatures": [{"signature": s["sig"], "verifier": _b64(pem)} for s in envelope["signatures"]]}})
        integrated = int(self.now.timestamp())
        log_id = _log_id(self.log_key)
        promise = _canonical({"body": _b64(body), "integratedTime": integrated, "logID": log_id.hex(),
                              "logIndex": 0})
        root = hashlib.sha256(b"\x00" + body).digest()  # a one-entry tree: the root is the leaf hash
        note = f"{self.origin}\n1\n{_b64(root)}\n"
        note_sig = self.log_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = note + f"\n\u2014 {self.origin.split()[0]} {_b64(log_id[:4] + note_sig)}\n"
        return {
            "logIndex": "0", "logId": {"keyId": _b64(log_id)}, "kindVersion": {"kind": "dsse", "version": "0.0.1"},
            "integratedTime": str(integrated),
            "inclusionPromise": {"signedEntryTimestamp": _b64(self.log_key.sign(promise,
                                                                                ec.ECDSA(hashes.SHA256())))},
            "inclusionProof": {"logIndex": "0", "rootHash": _b64(root), "treeSize": "1", "hashes": [],
                               "checkpoint": {"envelope": checkpoint}},
            "canonicalizedBody": _b64(body),
        }

    def sign_dsse(self, payload: bytes, wf: Workflow, issuer: str = GITHUB_ISSUER) -> str:
        """A keyless bundle (v0.3) over ``payload``, as the certify workflow's signing job would get one."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self.issue(key, wf, issuer)
        signature = key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
        envelope = {"payload": _b64(payload), "payloadType": PAYLOAD_TYPE,
                    "signatures": [{"sig": _b64(signature), "keyid": ""}]}
        return json.dumps({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                                     "tlogEntries": [self._entry(envelope, cert)]},
            "dsseEnvelope": envelope,
        }, indent=2)
