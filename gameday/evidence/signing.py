"""Ed25519 signatures for journals (``cryptography``).

``gameday audit keygen KEY`` writes a private key (PEM, mode 0600) to ``KEY`` and its
public key to ``KEY.pub``. ``gameday run --sign-key KEY`` then records the public key
in the journal (``gameday.signature``) and writes a detached signature over the
journal's exact bytes next to it (``JOURNAL.sig``). ``gameday audit verify DIR
[--public-key KEY.pub]`` checks every signature; with ``--public-key`` every journal
must be signed by that key, without it the key recorded in each journal is used (which
proves the journal is unedited since signing, not who signed it).
"""

import base64
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from gameday.errors import InvalidInput
from gameday.evidence.journal_shape import SignerJSON

ALGORITHM = "ed25519"
SUFFIX = ".sig"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def generate(path: Path) -> Path:
    """Write a new private key to ``path`` (0600) and its public key to ``path.pub``."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidInput("already exists; not overwriting a key", file=str(path)) from None
    except OSError as exc:
        raise InvalidInput(f"cannot write the key: {exc.strerror}", file=str(path)) from None
    with os.fdopen(fd, "wb") as stream:
        stream.write(pem)
    public = path.with_name(path.name + ".pub")
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return public


def _load_pem(path: Path, what: str, pem: str, load: Callable[[bytes], object]) -> object:
    """The key ``load`` reads from the PEM file ``path``; one line naming the file if not."""
    try:
        return load(path.read_bytes())
    except OSError as exc:
        raise InvalidInput(f"cannot read {what}: {exc.strerror}", file=str(path)) from None
    except (ValueError, TypeError):
        raise InvalidInput(f"not a PEM {pem} key", file=str(path)) from None


def load_private(path: Path) -> Ed25519PrivateKey:
    key = _load_pem(path, "signing key", "private",
                    lambda data: serialization.load_pem_private_key(data, password=None))
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidInput("not an Ed25519 private key", file=str(path))
    return key


def load_public(path: Path) -> Ed25519PublicKey:
    key = _load_pem(path, "public key", "public", serialization.load_pem_public_key)
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidInput("not an Ed25519 public key", file=str(path))
    return key


def raw_public(key: Ed25519PublicKey) -> str:
    return _b64(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def declaration(key: Ed25519PrivateKey) -> SignerJSON:
    """What a signed journal records about its signer (``gameday.signature``)."""
    return {"algorithm": ALGORITHM, "public_key": raw_public(key.public_key())}


def signature_path(journal: Path) -> Path:
    return journal.with_name(journal.name + SUFFIX)


def sign(key: Ed25519PrivateKey, data: bytes) -> bytes:
    """The detached signature file's content for ``data``."""
    document = {"algorithm": ALGORITHM, "public_key": raw_public(key.public_key()),
                "signature": _b64(key.sign(data))}
    return (json.dumps(document, sort_keys=True) + "\n").encode()


def check(data: bytes, signature_file: bytes, declared: Mapping[str, Any] | None,
          trusted: Ed25519PublicKey | None) -> str | None:
    """Why a journal's signature is bad, or None when it verifies."""
    try:
        document = json.loads(signature_file)
        signature = base64.b64decode(document["signature"], validate=True)
        public = base64.b64decode(document["public_key"], validate=True)
    except (ValueError, KeyError, TypeError, RecursionError):
        return "signature file is malformed"
    if document.get("algorithm") != ALGORITHM:
        return f"unknown signature algorithm {document.get('algorithm')!r}"
    if declared is not None and declared.get("public_key") != document["public_key"]:
        return "signature key differs from the key recorded in the journal"
    if trusted is not None:
        if raw_public(trusted) != document["public_key"]:
            return "signed by a key other than the trusted public key"
        key = trusted
    else:
        try:
            key = Ed25519PublicKey.from_public_bytes(public)
        except ValueError:
            return "signature public key is malformed"
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return "signature does not match the journal"
    return None
