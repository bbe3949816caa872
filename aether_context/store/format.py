"""What the pack store's files hold: a sealed manifest and a blob, each to bytes and back.

- A manifest file is its JSON (keys sorted) with `storage` (the store's notes on the write),
  `signature` (`hmac-sha256:`, when a key is set) and `integrity` (`sha256:` of everything else).
  Reading checks the integrity first, then the signature; either failing is a `ManifestError`.
  The file holds the call's identity and `record`, the node with its other fields (`store.delta`).
- A blob file starting with `PACKED` holds its content zlib-compressed; any other holds it as is.
  The blob's name is always the digest of its content, checked on every read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import zlib
from typing import Any, Callable

from ..content import canonical_json, sha256_hex
from ..errors import ManifestError
from ..pipeline.record import Manifest

__all__ = ["loads_json", "manifest_integrity", "seal_manifest", "open_manifest", "pack_blob", "unpack_blob", "HMAC_ENV", "PACKED"]

HMAC_ENV = "AETHER_CONTEXT_HMAC_KEY"
PACKED = b"\x00acz1"  # a blob file starting with this holds zlib-compressed content; others hold it as is


def manifest_integrity(data: dict[str, Any]) -> str:
    """sha256 of the manifest JSON without its own `integrity` field."""
    body = {k: v for k, v in data.items() if k != "integrity"}
    return "sha256:" + sha256_hex(canonical_json(body))


def _signature(key: bytes, data: dict[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k not in ("integrity", "signature")}
    return "hmac-sha256:" + hmac.new(key, canonical_json(body).encode("utf-8"), hashlib.sha256).hexdigest()


def seal_manifest(data: dict[str, Any], storage: dict[str, Any], hmac_key: bytes | None) -> bytes:
    """The manifest file: `data` with the store's notes, signed when a key is set, then its integrity hash."""
    data = {**data, "storage": storage}
    if hmac_key:
        data["signature"] = _signature(hmac_key, data)
    data["integrity"] = manifest_integrity(data)
    return json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8")


def open_manifest(raw: bytes, uri: str, hmac_key: bytes | None,
                  resolve: Callable[[str], dict[str, Any]] | None = None) -> tuple[Manifest, dict[str, Any]]:
    """A verified manifest from its file, and the store's notes on it; anything else is a `ManifestError`.

    A file with a `record` (layout 3) keeps most fields in the store, by reference: `resolve` reads them.
    A hostile file (nested 100,000 deep, binary, huge, wrong types) is a `ManifestError` too, never a crash."""
    try:
        return _open_manifest(raw, uri, hmac_key, resolve)
    except RecursionError as e:
        raise ManifestError(f"{uri} is nested too deep to be a manifest (corrupt or hostile file)") from e
    except MemoryError as e:
        raise ManifestError(f"{uri} is too large to read as a manifest") from e


def loads_json(raw: bytes | str, what: str) -> Any:
    """JSON from a store file; a corrupt, binary or too deeply nested one is a `ManifestError` naming `what`."""
    try:
        return json.loads(raw)
    except RecursionError as e:
        raise ManifestError(f"{what} is nested too deep (corrupt or hostile file)") from e
    except ValueError as e:  # also UnicodeDecodeError: binary garbage
        raise ManifestError(f"{what} is not valid JSON (truncated or corrupt): {str(e)[:200]}") from e


def _open_manifest(raw: bytes, uri: str, hmac_key: bytes | None,
                   resolve: Callable[[str], dict[str, Any]] | None) -> tuple[Manifest, dict[str, Any]]:
    data = loads_json(raw, uri)
    if not isinstance(data, dict):
        raise ManifestError(f"{uri} is not a manifest (a JSON object was expected)")
    integrity = data.pop("integrity", None)
    if integrity is None:
        raise ManifestError(f"{uri} has no integrity field: not written by aether-context, or cut short")
    if manifest_integrity(data) != integrity:
        raise ManifestError(f"{uri} was modified after it was written (integrity check failed)")
    _verify_signature(uri, data, hmac_key)
    data.pop("signature", None)
    storage = data.pop("storage", None) or {}
    record = data.pop("record", None)
    if record is not None:
        data = {**data, **_resolved(uri, record, resolve)}
    try:
        return Manifest.model_validate(data), storage
    except Exception as e:
        raise ManifestError(f"{uri} does not match the manifest schema: {str(e)[:500]}") from e


def _resolved(uri: str, record: Any, resolve: Callable[[str], dict[str, Any]] | None) -> dict[str, Any]:
    if resolve is None:
        raise ManifestError(f"{uri} keeps its fields in the store (layout 3): read it through a PackStore")
    try:
        fields = resolve(record)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ManifestError(f"{uri} has a malformed record: {type(e).__name__}: {e}") from e
    if not isinstance(fields, dict):
        raise ManifestError(f"{uri} has a malformed record: its fields are not an object")
    return fields


def _verify_signature(uri: str, data: dict[str, Any], hmac_key: bytes | None) -> None:
    if not hmac_key:
        return
    signature = data.get("signature")
    if not signature:
        raise ManifestError(f"{uri} is not signed, but {HMAC_ENV} is set: refused (written without the key, "
                            "or its signature was removed)")
    if not isinstance(signature, str) or not hmac.compare_digest(signature, _signature(hmac_key, data)):
        raise ManifestError(f"{uri} has a signature that does not verify: tampered with, or signed with another "
                            f"key (check {HMAC_ENV})")


def pack_blob(data: bytes) -> bytes:
    """The file content of a blob: compressed when that is smaller (records and chunks of hex
    references about halve), as is otherwise. The digest is always that of the content."""
    if len(data) < 128 and not data.startswith(PACKED):
        return data
    packed = PACKED + zlib.compress(data, 6)
    return packed if len(packed) < len(data) or data.startswith(PACKED) else data


def unpack_blob(data: bytes, digest: str) -> bytes:
    """A blob's content from its file, checked against its digest."""
    if data.startswith(PACKED):
        unpack = zlib.decompressobj()
        try:
            data = unpack.decompress(data[len(PACKED):]) + unpack.flush()
        except zlib.error as e:
            raise ManifestError(f"blob {digest} is corrupt: it does not decompress ({e})") from e
        if unpack.unused_data or not unpack.eof:  # bytes past the stream, or a stream cut short
            raise ManifestError(f"blob {digest} is corrupt: its compressed stream is damaged")
    if sha256_hex(data) != digest:
        raise ManifestError(f"blob {digest} is corrupt: its content no longer matches its hash")
    return data
