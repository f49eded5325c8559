"""DSSE envelopes signed with a key the user holds (local certification), in a Sigstore bundle.

The signature is over DSSE's pre-authentication encoding (PAE) of the in-toto statement, as every DSSE verifier
computes it: ``"DSSEv1" SP len(type) SP type SP len(body) SP body``. The envelope goes into a Sigstore bundle
(``application/vnd.dev.sigstore.bundle.v0.3+json``) whose verification material is a public-key hint: the key id,
the sha256 of the key's DER SubjectPublicKeyInfo (what ``openssl pkey -pubin -outform DER | sha256sum`` prints).
No transparency log is involved, so it verifies offline against the public key alone.

Keys: PEM (PKCS#8 or traditional) Ed25519, ECDSA P-256/P-384 (signed with SHA-256/SHA-384) or RSA (PSS, SHA-256);
an encrypted key takes its password from ``$FAKEHW_SIGN_KEY_PASSWORD``. Make one with
``openssl genpkey -algorithm ed25519 -out key.pem && openssl pkey -in key.pem -pubout -out key.pub``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PASSWORD_ENV = "FAKEHW_SIGN_KEY_PASSWORD"
MAX_KEY_BYTES = 64 * 1024

PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class SignatureError(ValueError):
    """A key, envelope or signature that cannot be used; the message names what and why."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def keyid(key: PublicKey) -> str:
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def public_pem(key: PublicKey) -> str:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _read(path: Path, what: str) -> bytes:
    try:
        if path.stat().st_size > MAX_KEY_BYTES:
            raise SignatureError(f"{path}: too large for a {what} ({path.stat().st_size} bytes)")
        return path.read_bytes()
    except OSError as exc:
        raise SignatureError(f"cannot read {what} {path}: {exc.strerror}") from None


def _ec_hash(key: ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) -> hashes.HashAlgorithm:
    return hashes.SHA384() if key.curve.key_size >= 384 else hashes.SHA256()


def _load_private(data: bytes, password: str | None, path: Path) -> PrivateKeyTypes:
    """The key in PEM ``data``, decrypted with ``password`` when it is encrypted. A password the key does not need
    is ignored, as ``openssl pkey -passin`` ignores it (``$FAKEHW_SIGN_KEY_PASSWORD`` may be set for every job
    while one of them signs with an unencrypted key); cryptography refuses both mismatches with a TypeError."""
    try:
        return serialization.load_pem_private_key(data, password.encode() if password else None)
    except TypeError:
        if not password:
            raise SignatureError(f"{path}: the key is encrypted: set ${PASSWORD_ENV}") from None
        return _load_private(data, None, path)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SignatureError(f"{path}: not a PEM private key this tool can use ({exc})") from None


@dataclass(frozen=True)
class SigningKey:
    private: PrivateKey

    @classmethod
    def load(cls, path: Path) -> SigningKey:
        data = _read(path, "signing key")
        key = _load_private(data, os.environ.get(PASSWORD_ENV), path)
        if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise SignatureError(f"{path}: {type(key).__name__} keys are not supported (Ed25519, ECDSA or RSA)")
        if isinstance(key, rsa.RSAPrivateKey) and key.key_size < 2048:
            raise SignatureError(f"{path}: RSA keys need at least 2048 bits (this one has {key.key_size})")
        return cls(key)

    @property
    def public(self) -> PublicKey:
        return self.private.public_key()

    def sign(self, data: bytes) -> bytes:
        key = self.private
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return key.sign(data)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return key.sign(data, ec.ECDSA(_ec_hash(key)))
        return key.sign(data, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.DIGEST_LENGTH), hashes.SHA256())


def load_public_key(path: Path) -> PublicKey:
    return parse_public_pem(_read(path, "public key"), str(path))


def parse_public_pem(data: bytes, where: str) -> PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SignatureError(f"{where}: not a PEM public key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        raise SignatureError(f"{where}: {type(key).__name__} keys are not supported")
    return key


def verify_signature(key: PublicKey, signature: bytes, data: bytes) -> bool:
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, data)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, data, ec.ECDSA(_ec_hash(key)))
        else:
            key.verify(signature, data, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.AUTO),
                       hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def sign_bundle(payload: bytes, key: SigningKey) -> dict[str, Any]:
    """A Sigstore bundle holding ``payload`` (an in-toto statement) in a DSSE envelope signed by ``key``."""
    kid = keyid(key.public)
    signature = key.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": kid}, "tlogEntries": []},
        "dsseEnvelope": {"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE,
                         "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": kid}]},
    }


@dataclass(frozen=True)
class Envelope:
    payload: bytes
    payload_type: str
    signatures: tuple[tuple[str, bytes], ...]
    """(keyid, signature) pairs."""


def read_envelope(bundle: dict[str, Any]) -> Envelope:
    """The DSSE envelope of a bundle, checked for shape (not for signatures)."""
    env = bundle.get("dsseEnvelope")
    if not isinstance(env, dict):
        raise SignatureError("the bundle holds no DSSE envelope")
    try:
        payload = base64.b64decode(env["payload"], validate=True)
        sigs = tuple((str(s.get("keyid", "")), base64.b64decode(s["sig"], validate=True)) for s in env["signatures"])
        payload_type = str(env["payloadType"])
    except (KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise SignatureError(f"malformed DSSE envelope ({exc!r})") from None
    if payload_type != PAYLOAD_TYPE:
        raise SignatureError(f"the envelope holds {payload_type!r}, not an in-toto statement")
    return Envelope(payload, payload_type, sigs)


def verify_key_bundle(bundle: dict[str, Any], key: PublicKey) -> bytes:
    """The payload of a key-signed bundle when one of its signatures is ``key``'s; raises otherwise."""
    envelope = read_envelope(bundle)
    if not envelope.signatures:
        raise SignatureError("the envelope carries no signature")
    message = pae(envelope.payload_type, envelope.payload)
    if not any(verify_signature(key, sig, message) for _, sig in envelope.signatures):
        raise SignatureError(f"no signature in the envelope verifies with key {keyid(key)}")
    return envelope.payload
