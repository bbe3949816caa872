"""The pack store: manifests and content-addressed blobs on any fsspec file system.

Layout under the store URL::

    blobs/<aa>/<sha256>            one message, request head or record, stored once by its hash
    <app>/<user>/<session>/<pack_id>/manifest.json

A long session costs only its new content: every message is a blob named by its digest, so the
hundredth call writes one or two new messages, not the whole history. Writes are atomic (temp file
then move) and, by default, happen on a background thread so a slow store never delays the model.

Usage::

    store = PackStore("memory://packs")          # or a folder, s3://bucket/prefix, gs://...
    uri = store.save(pack)                        # returns the manifest URI at once
    store.flush()                                 # wait for background writes (tests, shutdown)
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from typing import Any

import fsspec

from .content import Message, ModelRequest, canonical_json, sha256_hex
from .errors import ManifestError, StoreError
from .pipeline.build import ContextPack
from .pipeline.collect import PackInputs
from .pipeline.record import Manifest

logger = logging.getLogger(__name__)

__all__ = ["PackStore", "DEFAULT_STORE_URL", "manifest_integrity"]

DEFAULT_STORE_URL = ".aether/packs"


def manifest_integrity(data: dict[str, Any]) -> str:
    """sha256 of the manifest JSON without its own `integrity` field."""
    body = {k: v for k, v in data.items() if k != "integrity"}
    return "sha256:" + sha256_hex(canonical_json(body))


def _safe(segment: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in (segment or "_"))


class PackStore:
    def __init__(self, url: str = DEFAULT_STORE_URL, *, background: bool = True):
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.root = self.root.rstrip("/")
        self._known: set[str] = set()
        self._lock = threading.Lock()
        self._queue: queue.Queue | None = queue.Queue() if background else None
        self._worker: threading.Thread | None = None
        self._errors: list[BaseException] = []

    # ---------------------------------------------------------------- paths and URIs
    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def manifest_rel(self, manifest: Manifest) -> str:
        return "/".join(_safe(s) for s in (manifest.app_name, manifest.user_id, manifest.session_id, manifest.pack_id)) + "/manifest.json"

    def uri(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def rel_from_uri(self, uri: str) -> str:
        """The path inside the store for `uri`; refuses anything outside it."""
        for prefix in (self.url + "/", self.root + "/"):
            if uri.startswith(prefix):
                rel = uri[len(prefix):]
                break
        else:
            raise StoreError(f"{uri!r} is outside the pack store {self.url!r}")
        if ".." in rel.split("/"):
            raise StoreError(f"{uri!r} escapes the pack store")
        return rel

    # ---------------------------------------------------------------- low-level IO
    def _write_atomic(self, rel: str, data: bytes) -> None:
        path = self._path(rel)
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open(tmp, "wb") as f:
            f.write(data)
        self.fs.mv(tmp, path)

    def read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open(self._path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError as e:
            raise ManifestError(f"{self.uri(rel)} not found in the pack store") from e

    def put_blob(self, data: bytes, digest: str | None = None) -> str:
        """Store `data` under its sha256 (once); returns the digest."""
        digest = digest or sha256_hex(data)
        with self._lock:
            if digest in self._known:
                return digest
        rel = f"blobs/{digest[:2]}/{digest}"
        if not self.fs.exists(self._path(rel)):
            self._write_atomic(rel, data)
        with self._lock:
            self._known.add(digest)
        return digest

    def get_blob(self, digest: str) -> bytes:
        data = self.read_bytes(f"blobs/{digest[:2]}/{digest}")
        if sha256_hex(data) != digest:
            raise ManifestError(f"blob {digest} is corrupt: its content no longer matches its hash")
        return data

    def _put_json(self, value: Any) -> str:
        return self.put_blob(canonical_json(value).encode("utf-8"))

    def _get_json(self, digest: str) -> Any:
        return json.loads(self.get_blob(digest))

    # ---------------------------------------------------------------- artifacts (fallback store)
    def _artifact_dir(self, app: str, user: str, session: str, filename: str) -> str:
        return "artifacts/" + "/".join(_safe(s) for s in (app, user, session, filename))

    def put_artifact(self, app: str, user: str, session: str, filename: str, data: bytes) -> int:
        """Save an artifact version when the runner has no artifact service; returns the version."""
        folder = self._artifact_dir(app, user, session, filename)
        version = len(self.fs.glob(self._path(folder) + "/v*")) if self.fs.exists(self._path(folder)) else 0
        self._write_atomic(f"{folder}/v{version}", data)
        return version

    def get_artifact(self, app: str, user: str, session: str, filename: str, version: int | None) -> bytes | None:
        folder = self._artifact_dir(app, user, session, filename)
        if version is None:
            found = self.fs.glob(self._path(folder) + "/v*") if self.fs.exists(self._path(folder)) else []
            if not found:
                return None
            version = max(int(p.rsplit("/v", 1)[1]) for p in found)
        try:
            return self.read_bytes(f"{folder}/v{version}")
        except ManifestError:
            return None

    # ---------------------------------------------------------------- requests and inputs
    def _put_message(self, message: Message) -> str:
        digest = message.digest
        with self._lock:
            if digest in self._known:  # stored before: no need to serialise it again
                return digest
        return self.put_blob(canonical_json(message.to_json()).encode("utf-8"), digest)

    def put_request(self, request: ModelRequest) -> str:
        refs = [self._put_message(m) for m in request.messages]
        return self._put_json({"head": self._put_json(request.head_json()), "messages": refs})

    def get_request(self, ref: str) -> ModelRequest:
        record = self._get_json(ref)
        data = dict(self._get_json(record["head"]))
        data["messages"] = [self._get_json(r) for r in record["messages"]]
        return ModelRequest.from_json(data)

    def put_inputs(self, inputs: PackInputs) -> str:
        data = inputs.to_json_without_request()
        data["request"] = {"ref": self.put_request(inputs.request)}
        return self._put_json(data)

    def get_inputs(self, ref: str) -> PackInputs:
        data = dict(self._get_json(ref))
        data["request"] = self.get_request(data["request"]["ref"]).to_json()
        return PackInputs.from_json(data)

    # ---------------------------------------------------------------- manifests
    def save(self, pack: ContextPack) -> str:
        """Record a pack; returns its manifest URI immediately (the write may finish later)."""
        manifest = pack.manifest
        rel = self.manifest_rel(manifest)
        self._submit(lambda: self._save_now(pack, rel))
        return self.uri(rel)

    def save_manifest(self, manifest: Manifest) -> str:
        """Record a manifest alone (e.g. a fail-open record with no pack)."""
        rel = self.manifest_rel(manifest)
        self._submit(lambda: self._write_manifest(manifest, rel))
        return self.uri(rel)

    def _save_now(self, pack: ContextPack, rel: str) -> None:
        manifest = pack.manifest.model_copy(update={
            "request_ref": self.put_request(pack.request), "inputs_ref": self.put_inputs(pack.inputs)})
        self._write_manifest(manifest, rel)

    def _write_manifest(self, manifest: Manifest, rel: str) -> None:
        data = manifest.model_dump(mode="json")
        data["integrity"] = manifest_integrity(data)
        self._write_atomic(rel, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))

    def save_usage(self, manifest: Manifest, usage: dict) -> None:
        """What the model reported for a call (prompt and cached tokens), beside its manifest."""
        rel = self.manifest_rel(manifest).rsplit("/", 1)[0] + "/usage.json"
        self._submit(lambda: self._write_atomic(rel, json.dumps(usage, sort_keys=True).encode("utf-8")))

    def load_usage(self, manifest_uri: str) -> dict | None:
        rel = self.rel_from_uri(manifest_uri).rsplit("/", 1)[0] + "/usage.json"
        try:
            return json.loads(self.read_bytes(rel))
        except (ManifestError, json.JSONDecodeError):
            return None

    def load_manifest(self, uri: str) -> Manifest:
        """Read and verify a manifest; a truncated, malformed or edited file is a `ManifestError`."""
        raw = self.read_bytes(self.rel_from_uri(uri))
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ManifestError(f"{uri} is not valid JSON (truncated or corrupt): {e}") from e
        integrity = data.pop("integrity", None)
        if integrity is None:
            raise ManifestError(f"{uri} has no integrity field: not written by aether-context, or cut short")
        if manifest_integrity(data) != integrity:
            raise ManifestError(f"{uri} was modified after it was written (integrity check failed)")
        try:
            return Manifest.model_validate(data)
        except Exception as e:
            raise ManifestError(f"{uri} does not match the manifest schema: {e}") from e

    def list_manifests(self, app: str = "", user: str = "", session: str = "") -> list[str]:
        """Manifest URIs under a scope, oldest first (by the pack's creation time)."""
        scope = "/".join(_safe(s) if s else "*" for s in (app, user, session))
        found = sorted(self.fs.glob(self._path(f"{scope}/*/manifest.json")))
        uris = [self.uri(p[len(self.root) + 1:] if p.startswith(self.root) else p.lstrip("/")) for p in found]
        return sorted(uris, key=lambda u: (self.load_manifest(u).created_at, u))

    # ---------------------------------------------------------------- background writer
    def _submit(self, job) -> None:
        if self._queue is None:
            job()
            return
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="aether-context-store", daemon=True)
            self._worker.start()
        self._queue.put(job)

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            job = self._queue.get()
            try:
                job()
            except BaseException as e:  # recorded and re-raised by flush(); the agent run goes on
                logger.error("aether-context: writing to the pack store failed", exc_info=True)
                self._errors.append(e)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every queued write is done; raises the first write error, if any."""
        if self._queue is not None:
            self._queue.join()
        if self._errors:
            err, self._errors = self._errors[0], []
            raise StoreError(f"a background write to {self.url} failed: {err}") from err
