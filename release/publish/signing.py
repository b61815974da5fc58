"""The release manifest's signature: Ed25519 over the manifest's exact bytes, with a local key.

Publish signs the manifest it writes (:func:`release.publish.manifest.write`) and puts the
signature beside it: ``<project>-<version>.release.json.sig``, JSON::

    {"version": 1, "algorithm": "ed25519", "manifest": "<name>", "manifest_sha256": "<hex>",
     "key_id": "<first 16 hex of the sha256 of the raw public key>", "signature": "<base64>"}

``verify`` checks it (:func:`check_manifest`) **before** it trusts one digest of the manifest,
against a public key it is given, never the one the signature names: ``--public-key FILE``, else
``$WHEELWRIGHT_SIGNING_PUBLIC_KEY``, else the public half of this user's own signing key (the key
holder checking their own release). A manifest without a signature, or whose bytes are not the
ones signed, is refused (``[rule: signed-manifest]``, exit 1) unless ``--allow-unsigned``.

The key (:func:`signing_key`): ``$WHEELWRIGHT_SIGNING_KEY`` (a PEM PKCS#8 Ed25519 private key),
else ``$XDG_CONFIG_HOME/wheelwright/release-signing-key.pem`` (``~/.config/...``), made on first
use with mode 0600 in a 0700 folder, its public half beside it (``.pub``) to hand to verifiers.
It lives outside ``dist/`` and the cache: whoever can write ``dist/`` cannot re-sign an edited
manifest. Sigstore (keyless signing tied to an identity) needs the network; this does not.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from release.core.errors import CheckFailed, InputError, StepFailed
from release.core.files import write_atomic

VERSION = 1
ALGORITHM = "ed25519"
SUFFIX = ".sig"
KEY_VAR = "WHEELWRIGHT_SIGNING_KEY"
PUBLIC_KEY_VAR = "WHEELWRIGHT_SIGNING_PUBLIC_KEY"
KEY_NAME = "release-signing-key.pem"
RULE = "[rule: signed-manifest]"
KEYS = ("algorithm", "key_id", "manifest", "manifest_sha256", "signature", "version")


def signature_path(manifest: Path) -> Path:
    """Where a manifest's signature lies: beside it, ``<name>.sig`` (pure)."""
    return manifest.with_name(manifest.name + SUFFIX)


def default_key_path(env: Mapping[str, str]) -> Path:
    """``$WHEELWRIGHT_SIGNING_KEY``, else ``$XDG_CONFIG_HOME/wheelwright/<KEY_NAME>``, else ``~/.config/...`` (pure)."""
    if env.get(KEY_VAR):
        return Path(env[KEY_VAR])
    base = (
        Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path(env.get("HOME", "~")) / ".config"
    )
    return base.expanduser() / "wheelwright" / KEY_NAME


def key_id(public: Ed25519PublicKey) -> str:
    """A short name for a public key: the first 16 hex digits of the sha256 of its raw bytes (pure)."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def _load_private(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise InputError(
            f"{path}: not a readable PEM private key ({exc}); set {KEY_VAR} to an Ed25519 key"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"{path}: the release signing key must be Ed25519, not {type(key).__name__}")
    return key


def load_public(path: Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file (or the public half of a PEM private key); InputError otherwise."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the public key: {exc.strerror}") from None
    if b"PRIVATE KEY" in data:
        return _load_private(path).public_key()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"{path}: the release signing key must be Ed25519, not {type(key).__name__}")
    return key


def _create(path: Path) -> None:
    """Make a new key at ``path`` (mode 0600, folder 0700) unless one is there; another process may race."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    tmp = write_atomic(
        path.with_name(f".{path.name}.new-{os.getpid()}"), pem, what="the signing key", mode=0o600
    )
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    pub = path.with_name(path.name.removesuffix(".pem") + ".pub")
    with contextlib.suppress(StepFailed):
        write_atomic(pub, public_pem(_load_private(path).public_key()), what="the public key", mode=0o644)


def _checked(path: Path) -> Ed25519PrivateKey:
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise InputError(
            f"{path}: the release signing key is readable or writable by others (mode {mode:04o}); chmod 600 it"
        )
    return _load_private(path)


def signing_key(env: Mapping[str, str]) -> tuple[Ed25519PrivateKey, Path, bool]:
    """(the release signing key, its file, whether it was made now).

    A key named by ``$WHEELWRIGHT_SIGNING_KEY`` must exist; the default one is made on first use.
    A key file other users can read or write is refused: it would sign for anyone."""
    path = default_key_path(env)
    made = False
    if not path.exists():
        if env.get(KEY_VAR):
            raise InputError(f"{KEY_VAR}={path}: no such key file")
        _create(path)
        made = True
    return _checked(path), path, made


def own_key(env: Mapping[str, str]) -> tuple[Ed25519PrivateKey, Path] | None:
    """This user's signing key and its file, when there is one (nothing is made)."""
    path = default_key_path(env)
    return (_checked(path), path) if path.exists() else None


def sign(manifest_text: str, name: str, key: Ed25519PrivateKey) -> str:
    """The signature file's text for a manifest's exact text (pure but for the signing itself)."""
    data = manifest_text.encode()
    doc = {
        "version": VERSION,
        "algorithm": ALGORITHM,
        "manifest": name,
        "manifest_sha256": hashlib.sha256(data).hexdigest(),
        "key_id": key_id(key.public_key()),
        "signature": base64.b64encode(key.sign(data)).decode(),
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class Trusted:
    """The public key a verifier trusts, and where it came from (for messages)."""

    key: Ed25519PublicKey
    source: str

    @property
    def key_id(self) -> str:
        return key_id(self.key)


def trusted_key(given: str | None, env: Mapping[str, str]) -> Trusted | None:
    """The key to check a signature with: ``given``, ``$WHEELWRIGHT_SIGNING_PUBLIC_KEY``, this user's own key."""
    if given:
        return Trusted(load_public(Path(given)), f"--public-key {given}")
    if env.get(PUBLIC_KEY_VAR):
        return Trusted(load_public(Path(env[PUBLIC_KEY_VAR])), f"{PUBLIC_KEY_VAR}={env[PUBLIC_KEY_VAR]}")
    own = own_key(env)
    if own is None:
        return None
    return Trusted(own[0].public_key(), f"this user's signing key {own[1]}")


def signature_problem(data: bytes, sig_text: str | None, name: str, trusted: Trusted) -> str | None:
    """Why the signature text does not vouch for ``data`` (the manifest's bytes) under ``trusted``;
    None when it does (pure)."""
    if sig_text is None:
        return "it has no signature"
    try:
        doc = json.loads(sig_text)
    except ValueError:
        return "its signature file is not JSON"
    if not isinstance(doc, dict) or sorted(doc) != sorted(KEYS) or doc["version"] != VERSION:
        return f"its signature file is not a version {VERSION} signature (keys {sorted(KEYS)})"
    if doc["algorithm"] != ALGORITHM:
        return f"its signature is {doc['algorithm']!r}, not {ALGORITHM}"
    if doc["key_id"] != trusted.key_id:
        return (
            f"it is signed by key {doc['key_id']}, not by the trusted key {trusted.key_id} ({trusted.source})"
        )
    if doc["manifest"] != name:
        return f"its signature is for {doc['manifest']!r}"
    try:
        trusted.key.verify(base64.b64decode(doc["signature"], validate=True), data)
    except (InvalidSignature, ValueError, TypeError):
        now = hashlib.sha256(data).hexdigest()
        return (
            f"its bytes are not the ones signed (sha256 now {now}, signed {doc['manifest_sha256']}): "
            "the manifest was edited after it was signed"
        )
    return None


def check_manifest(path: Path, data: bytes, trusted: Trusted | None, *, allow_unsigned: bool = False) -> str:
    """Check the manifest at ``path`` (whose bytes are ``data``) before trusting one of its digests.

    A line saying what was checked; CheckFailed (exit 1, ``[rule: signed-manifest]``) naming the
    manifest when the signature is missing or does not match; InputError (2) when there is no key
    to check it with. ``allow_unsigned`` skips the check, and the line says so."""
    if allow_unsigned:
        return f"{path.name}: signature NOT checked (--allow-unsigned): its digests are taken on trust"
    if trusted is None:
        raise InputError(
            f"{path}: no public key to check the release manifest's signature with: pass --public-key FILE "
            f"(the release key's .pub), or set {PUBLIC_KEY_VAR} {RULE}"
        )
    sig = signature_path(path)
    try:
        sig_text: str | None = sig.read_text(encoding="utf-8")
    except FileNotFoundError:
        sig_text = None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{sig}: cannot read the manifest's signature: {exc}") from None
    problem = signature_problem(data, sig_text, path.name, trusted)
    if problem is not None:
        raise CheckFailed(
            f"{path}: the release manifest is not trusted: {problem} ({sig}); verify trusts a manifest's "
            f"digests only when the release key signed its exact bytes {RULE}"
        )
    return f"{path.name}: signed by the trusted key {trusted.key_id} ({trusted.source})"
