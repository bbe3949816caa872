"""The pack store: manifests and content-addressed blobs on any fsspec file system.

Layout under the store URL::

    .aether-store                                   marks the store (its absence: the folder was deleted)
    blobs/<aa>/<sha256>                             one message, head, record node or chunk, stored once by its hash
    <app>/<user>/<session>/<agent>/<pack_id>/manifest.json (and usage.json)
    artifacts/<app>/<user>/<session>/<file>/v<n>    originals, when ADK's artifact service is not durable

Ids become path segments reversibly (`store.paths`). A call costs its new content only: messages
are blobs named by their digest, its records nodes of per-session chains of patches (`store.delta`)
whose long lists are shared chunk trees (`store.tree`). Everything is masked for secrets first
(`redact`) and written atomically, owner-private, on a bounded background writer (`store.io`) whose
failures are counted, never raised. Manifests are sealed, and signed when `AETHER_CONTEXT_HMAC_KEY`
is set (`store.format`).

Usage::

    store = PackStore("memory://packs")          # or a folder, s3://bucket/prefix, gs://...
    uri = store.save(pack)                        # returns the manifest URI at once
    store.flush()                                 # wait for background writes (tests, shutdown)
    store.stats()                                 # written / failed / dropped / redacted counts

`storage_options` go to the fsspec file system, e.g. an S3-compatible server for `s3://` (s3fs)::

    PackStore("s3://packs/prod", storage_options={"endpoint_url": "http://127.0.0.1:9000"})

fsspec's own configuration works too, and reaches stores opened from a URL alone (the CLI, `replay`):
`FSSPEC_S3_ENDPOINT_URL=http://127.0.0.1:9000`, or `FSSPEC_S3='{"endpoint_url": ...}'`. The store turns
fsspec's listings cache off (`use_listings_cache: False`) unless told otherwise: replicas share a bucket, and
s3fs answers "not found" for a file another process wrote into a folder this one listed before.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from time import monotonic
from typing import Any

import fsspec

from ..content import Message, ModelRequest, canonical_json, sha256_hex
from ..errors import ManifestError, StoreError
from ..pipeline.build import ContextPack
from ..pipeline.inputs import PackInputs
from ..pipeline.record import Manifest
from ..redact import RedactionSettings, redact_value
from .format import HMAC_ENV, loads_json, manifest_integrity, open_manifest, pack_blob, seal_manifest, unpack_blob
from .io import OBJECT_STORES, BackgroundWriter, Lru, WriteStats, write_atomic
from .paths import encode_segment
from .delta import RecordChain
from .tree import TreeCodec

logger = logging.getLogger(__name__)

__all__ = ["PackStore", "DEFAULT_STORE_URL", "HMAC_ENV", "manifest_integrity"]

DEFAULT_STORE_URL = ".aether/packs"
MARKER = ".aether-store"
LAYOUT = 3  # 3: records as chains of patches (`store.delta`); 2 (whole records) still reads
_SKIP = frozenset({"inline_data"})  # binary parts are never scanned for secrets
BUCKET_WRITERS = 8  # writer threads for an object store (`writers=`); a local disk has one
# an object store's marker is looked at most this often (each look is a request): what is written within a second
# of a wipe of the bucket's store may name blobs the wipe took (a local disk looks at every write)
MARKER_RECHECK_SECONDS = 1.0
# kept in the manifest file itself (listing and finding a call read them); the rest is a record chain node
MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # a manifest file is a few KB; a bigger one is not read
MANIFEST_INLINE = ("schema_version", "pack_id", "created_at", "app_name", "user_id", "session_id", "invocation_id",
                   "agent")


class PackStore:
    """Manifests and blobs under one fsspec URL (see the module docstring)."""

    def __init__(self, url: str = DEFAULT_STORE_URL, *, background: bool = True,
                 redaction: RedactionSettings | None = None, hmac_key: "str | bytes | None" = None,
                 max_queue: int = 256, put_timeout: float = 2.0, on_full: str = "inline", cache_size: int = 65536,
                 storage_options: dict[str, Any] | None = None, writers: int | None = None):
        self.url = url.rstrip("/")
        # no listings cache: a folder listed before another replica wrote into it would hide the new files
        options = {"use_listings_cache": False, **(storage_options or {})}
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, **options)
        except ImportError as e:  # a known protocol whose package is not installed (s3fs, gcsfs, adlfs, ...)
            raise StoreError(f"cannot open the pack store {url!r}: {e}") from e
        except ValueError as e:  # a protocol fsspec does not know
            raise StoreError(f"cannot open the pack store {url!r}: {e} (use a folder, file://, memory://, s3:// "
                             f"with s3fs installed, gs:// with gcsfs, ...)") from e
        self.root = self.root.rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, (tuple, list)) else (self.fs.protocol,)
        # a bucket: each existence check is a request or two, a put of a small blob one (and idempotent)
        self.object_store = bool(OBJECT_STORES.intersection(protocols))
        self.redaction = redaction or RedactionSettings()
        key = os.environ.get(HMAC_ENV, "") if hmac_key is None else hmac_key
        self.hmac_key: bytes | None = (key.encode("utf-8") if isinstance(key, str) else key) or None
        self._stats = WriteStats()
        # a bucket's writes wait on the network, not the interpreter: several run at once
        if writers is not None and (isinstance(writers, bool) or not isinstance(writers, int) or writers < 1):
            raise ValueError(f"writers={writers!r}: use a whole number of threads, at least 1 (or None: "
                             f"{BUCKET_WRITERS} on a bucket, 1 on a local disk)")
        writers = writers or (BUCKET_WRITERS if self.object_store else 1)
        self._writer = BackgroundWriter(self._stats, max_queue=max_queue, put_timeout=put_timeout,
                                        on_full=on_full, background=background, workers=writers)
        self._known = Lru(cache_size)  # message digest -> (stored digest, secrets masked); blob digests -> True
        self._tree = TreeCodec(self._put_piece, self._get_piece, memo_size=4096)
        self._records = RecordChain(self._put_piece, self._get_piece, self._tree.encode, self._tree.decode,
                                    leaf=self._tree.encode_inline)
        # string -> (masked string, count): recorded inputs repeat call after call; at most ~8M characters
        self._scanned = Lru(16384, max_weight=8_000_000, weigh=lambda k, v: len(k) + len(v[0]))
        self._folders = Lru(4096)  # local folders known to exist (`write_atomic`)
        self._lists = Lru(16)  # (kind, app, user, session, agent) -> the last message digests and stored list
        self._marked = False
        self._marker_seen = float("-inf")  # monotonic() of the last look that found the marker
        self._local = threading.local()  # bytes written by the job running on this thread

    def configure_redaction(self, settings: RedactionSettings) -> None:
        """Use the profile's `redaction:` section from now on."""
        self.redaction = settings
        self._known.clear()  # stored digests depend on what is masked
        self._tree.clear()
        self._scanned.clear()
        self._lists.clear()
        self._records.clear()

    # ---------------------------------------------------------------- paths and URIs
    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def manifest_rel(self, manifest: Manifest) -> str:
        ids = (manifest.app_name, manifest.user_id, manifest.session_id, manifest.agent, manifest.pack_id)
        return "/".join(encode_segment(s) for s in ids) + "/manifest.json"

    def uri(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def rel_from_uri(self, uri: str) -> str:
        """The path inside the store for `uri`; refuses anything outside it."""
        if not isinstance(uri, str):
            raise StoreError(f"a manifest URI must be a string, got {type(uri).__name__}")
        for prefix in (self.url + "/", self.root + "/"):
            if uri.startswith(prefix):
                rel = uri[len(prefix):]
                break
        else:
            raise StoreError(f"{uri!r} is outside the pack store {self.url!r}")
        if any(s in ("", ".", "..") for s in rel.split("/")):
            raise StoreError(f"{uri!r} escapes the pack store (empty, '.' or '..' segment)")
        return rel

    # ---------------------------------------------------------------- low-level IO
    def _write(self, rel: str, data: bytes) -> None:
        write_atomic(self.fs, self._path(rel), data, self._folders)
        self._stats.add("files")
        self._stats.add("bytes", len(data))
        self._local.bytes = getattr(self._local, "bytes", 0) + len(data)

    def _ensure_marker(self) -> None:
        """Notice a deleted store: forget what we believe is written, so it is written again."""
        path = self._path(MARKER)
        if self._marked and self.object_store and monotonic() - self._marker_seen < MARKER_RECHECK_SECONDS:
            return
        if self._marked and self.fs.exists(path):
            self._marker_seen = monotonic()  # after the look: other writers look too until one has seen it
            return
        if self._marked:
            logger.warning("aether-context: the pack store %s was removed; writing blobs again", self.url)
            self._stats.add("store_recreated")
        self._known.clear()
        self._folders.clear()
        self._tree.clear()
        self._lists.clear()
        self._records.clear()
        if not self.fs.exists(path):
            self._write(MARKER, json.dumps({"layout": LAYOUT}).encode("utf-8"))
        self._marked = True
        self._marker_seen = monotonic()

    def read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open(self._path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError as e:
            raise ManifestError(f"{self.uri(rel)} not found in the pack store") from e
        except OSError as e:
            raise StoreError(f"{self.uri(rel)} could not be read: {e}") from e

    def put_blob(self, data: bytes, digest: str | None = None) -> str:
        """Store `data` under its sha256 (once); returns the digest."""
        digest = digest or sha256_hex(data)
        if self._known.get(digest) is not None:
            return digest
        rel = f"blobs/{digest[:2]}/{digest}"
        # on a local disk a blob written by another process (or before a restart) is kept as it is; a bucket
        # gets it again (one request, where checking first costs two: a HEAD, then a listing when absent)
        if self.object_store or not self.fs.exists(self._path(rel)):
            self._write(rel, pack_blob(data))
        self._known.put(digest, True)
        return digest

    def get_blob(self, digest: str) -> bytes:
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ManifestError(f"{str(digest)[:80]!r} is not a blob reference")
        return unpack_blob(self.read_bytes(f"blobs/{digest[:2]}/{digest}"), digest)

    def _put_piece(self, value: Any, *, text: bool = False) -> str:
        return self.put_blob((value if text else canonical_json(value)).encode("utf-8", "surrogatepass"))

    def _get_piece(self, ref: str, *, text: bool = False) -> Any:
        data = self.get_blob(ref)
        try:
            decoded = data.decode("utf-8", "surrogatepass")
        except ValueError as e:
            raise ManifestError(f"blob {ref} is not a valid record: {e}") from e
        return decoded if text else loads_json(decoded, f"blob {ref}")

    def put_record(self, value: Any) -> tuple[str, Any]:
        """Store a JSON value (masked) as shared, content-addressed pieces; returns its reference and the value
        as stored. What session state points at: a long map or list writes only the chunks that changed."""
        self._ensure_marker()
        value, _ = self._redacted(value)
        return self._put_piece(self._tree.encode(value)), value

    def get_record(self, ref: str) -> Any:
        """The JSON value `put_record` stored under `ref`."""
        return self._tree.decode(self._get_piece(ref))

    def _redacted(self, value: Any) -> tuple[Any, int]:
        value, n = redact_value(value, self.redaction, skip=_SKIP, memo=self._scanned)
        if n:
            self._stats.add("redacted", n)
        return value, n

    # ---------------------------------------------------------------- artifacts (fallback store)
    def _artifact_dir(self, app: str, user: str, session: str, filename: str) -> str:
        parts = [encode_segment(s) for s in (app, user, session)] + [encode_segment(c) for c in filename.split("/")]
        return "artifacts/" + "/".join(parts)

    def put_artifact(self, app: str, user: str, session: str, filename: str, data: bytes) -> int:
        """Save an artifact version (when ADK's artifact service is absent or not durable); returns it."""
        folder = self._artifact_dir(app, user, session, filename)
        version = len(self._versions(folder))
        self._write(f"{folder}/v{version}", data)
        return version

    def _versions(self, folder: str) -> list[int]:
        path = self._path(folder)
        if not self.fs.exists(path):
            return []
        found = [p.rsplit("/v", 1)[-1] for p in self.fs.glob(path + "/v*")]
        return sorted(int(v) for v in found if v.isdigit())

    def get_artifact(self, app: str, user: str, session: str, filename: str, version: int | None) -> bytes | None:
        folder = self._artifact_dir(app, user, session, filename)
        if version is None:
            versions = self._versions(folder)
            if not versions:
                return None
            version = versions[-1]
        try:
            return self.read_bytes(f"{folder}/v{version}")
        except ManifestError:
            return None

    # ---------------------------------------------------------------- requests and inputs
    def _put_message(self, message: Message) -> tuple[str, int]:
        """Store one message (masked); returns its stored digest and the secrets masked in it."""
        digest = message.digest
        known = self._known.get(("m", digest))
        if known is not None:
            return known
        data, n = self._redacted(message.to_json())
        stored = digest if n == 0 else None
        stored = self.put_blob(canonical_json(data).encode("utf-8", "surrogatepass"), stored)
        self._known.put(("m", digest), (stored, n))
        return stored, n

    def _put_messages(self, messages: tuple[Message, ...], scope: tuple | None) -> list[tuple[str, int]]:
        """Stored digests of `messages`; a prefix shared with the scope's previous list is not looked
        at again (a long session's history is the previous call's plus a few messages)."""
        digests = [m.digest for m in messages]  # cached per message: cheap when messages are reused
        last = self._lists.get(scope) if scope is not None else None
        reused: list[tuple[str, int]] = []
        if last is not None:
            prev_digests, prev_stored = last
            if len(digests) >= len(prev_digests) and digests[:len(prev_digests)] == prev_digests:
                reused = prev_stored
        stored = reused + [self._put_message(m) for m in messages[len(reused):]]
        if scope is not None:
            self._lists.put(scope, (digests, stored))  # digests, not messages: no session content held
        return stored

    def _put_request_counted(self, request: ModelRequest, scope: tuple | None = None) -> tuple[str, int, str]:
        """Store a request; returns its record reference, the secrets masked and its stored checksum."""
        stored = self._put_messages(request.messages, scope)
        head, n_head = self._redacted(request.head_json())
        refs = [s for s, _ in stored]
        record = {"head": self._put_piece(head), "messages": refs}
        masked = n_head + sum(n for _, n in stored)
        # nothing masked: what is stored is the request itself, whose checksum is already known
        checksum = request.checksum if not masked else "sha256:" + sha256_hex(
            canonical_json({"head": head, "messages": refs}))
        return self._records.put(record, scope, v=LAYOUT), masked, checksum

    def get_request(self, ref: str) -> ModelRequest:
        try:
            record = self._get_piece(ref)
            if isinstance(record, dict) and record.get("v") == 3:  # a node of a record chain
                record = self._records.get(ref, record)
            data = dict(self._get_piece(record["head"]))
            messages = record["messages"]
            refs = messages if isinstance(messages, list) else self._tree.get_list(messages)
            data["messages"] = [self._get_piece(r) for r in refs]
            return ModelRequest.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
            raise ManifestError(f"request record {ref} is malformed: {type(e).__name__}: {str(e)[:200]}") from e

    def put_inputs(self, inputs: PackInputs) -> str:
        data, _ = self._redacted(inputs.to_json_without_request())
        scope = ("inputs", inputs.app_name, inputs.user_id, inputs.session_id, inputs.agent)
        record = {"fields": data, "request": self._put_request_counted(inputs.request, scope)[0]}
        return self._records.put(record, ("fields",) + scope[1:], v=LAYOUT)

    def get_inputs(self, ref: str) -> PackInputs:
        try:
            record = self._get_piece(ref)
            if isinstance(record, dict) and record.get("v") == 3:  # a node of a record chain
                record = self._records.get(ref, record)
                data, request_ref = dict(record["fields"]), record["request"]
            else:
                data = dict(self._tree.decode(record["fields"])) if "fields" in record else dict(record)
                request_ref = record["request"]["ref"]
            data["request"] = self.get_request(request_ref).to_json()
            return PackInputs.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
            raise ManifestError(f"inputs record {ref} is malformed: {type(e).__name__}: {str(e)[:200]}") from e

    # ---------------------------------------------------------------- manifests
    def save(self, pack: ContextPack) -> str:
        """Record a pack; returns its manifest URI immediately (the write may finish later). Never raises."""
        rel = self.manifest_rel(pack.manifest)
        self._writer.submit(rel, lambda: self._save_now(pack, rel))
        return self.uri(rel)

    def save_manifest(self, manifest: Manifest) -> str:
        """Record a manifest alone (e.g. a fail-open record with no pack). Never raises."""
        rel = self.manifest_rel(manifest)
        self._writer.submit(rel, lambda: self._save_now(None, rel, manifest))
        return self.uri(rel)

    def _save_now(self, pack: ContextPack | None, rel: str, manifest: Manifest | None = None) -> None:
        self._local.bytes = 0
        self._ensure_marker()
        storage: dict[str, Any] = {"layout": LAYOUT, "redacted": 0}
        if pack is not None:
            manifest = pack.manifest
            ids = (pack.inputs.app_name, pack.inputs.user_id, pack.inputs.session_id, pack.inputs.agent)
            request_ref, n, stored_checksum = self._put_request_counted(pack.request, ("sent",) + ids)
            manifest = manifest.model_copy(update={"request_ref": request_ref, "inputs_ref": self.put_inputs(pack.inputs)})
            storage["redacted"] = n
            if stored_checksum != manifest.checksum:
                storage["stored_checksum"] = stored_checksum
        assert manifest is not None
        data, n = self._redacted(manifest.model_dump(mode="json"))
        storage["redacted"] += n
        storage["new_bytes"] = self._local.bytes  # blobs this call added (the manifest itself not counted)
        self._write_manifest(data, storage, rel)
        self._stats.add("manifests")

    def _write_manifest(self, data: dict[str, Any], storage: dict[str, Any], rel: str) -> None:
        """The file: the call's identity inline, the rest a node of the session's record chain (`store.delta`)."""
        inline = {k: data[k] for k in MANIFEST_INLINE if k in data}
        scope = ("manifest",) + tuple(str(data.get(k, "")) for k in ("app_name", "user_id", "session_id", "agent"))
        record = self._records.put({k: v for k, v in data.items() if k not in inline}, scope, v=LAYOUT)
        self._write(rel, seal_manifest({**inline, "record": record}, storage, self.hmac_key))

    def save_usage(self, manifest: Manifest, usage: dict) -> None:
        """What the model reported for a call (prompt and cached tokens), beside its manifest. Never raises."""
        rel = self.manifest_rel(manifest).rsplit("/", 1)[0] + "/usage.json"
        self._writer.submit(rel, lambda: self._write(rel, json.dumps(usage, sort_keys=True).encode("utf-8")))

    def load_usage(self, manifest_uri: str) -> dict | None:
        rel = self.rel_from_uri(manifest_uri).rsplit("/", 1)[0] + "/usage.json"
        try:
            usage = loads_json(self.read_bytes(rel), self.uri(rel))
        except (ManifestError, StoreError):
            return None
        return usage if isinstance(usage, dict) else None

    def read_manifest(self, uri: str) -> tuple[Manifest, dict[str, Any]]:
        """A verified manifest and the store's notes on it (`redacted`, `new_bytes`, `stored_checksum`).
        A corrupt or hostile file (or record) is a `ManifestError` naming it, whatever is wrong with it."""
        rel = self.rel_from_uri(uri)
        try:
            size = self.fs.size(self._path(rel))
        except (OSError, ValueError):
            size = None  # not found: read_bytes says so
        if size is not None and size > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{uri} is {size:,} bytes: too large for a manifest (at most {MAX_MANIFEST_BYTES:,})")
        try:
            return open_manifest(self.read_bytes(rel), uri, self.hmac_key, self._records.get)
        except (ManifestError, StoreError):
            raise
        except RecursionError as e:
            raise ManifestError(f"{uri} has a record nested too deep (corrupt or hostile)") from e
        except Exception as e:  # a hostile record in the store: name it, never crash a reader
            raise ManifestError(f"{uri} could not be read: {type(e).__name__}: {str(e)[:200]}") from e

    def load_manifest(self, uri: str) -> Manifest:
        """Read and verify a manifest; a truncated, malformed, edited or badly signed file is a `ManifestError`."""
        return self.read_manifest(uri)[0]

    def list_manifests(self, app: str = "", user: str = "", session: str = "", *,
                       errors: list | None = None) -> list[str]:
        """Manifest URIs under a scope, oldest first. An unreadable manifest is listed last (and, with
        `errors`, its `(uri, message)` appended there) instead of stopping the listing."""
        scope = "/".join(encode_segment(s) if s else "*" for s in (app, user, session))
        found = sorted(self.fs.glob(self._path(f"{scope}/*/*/manifest.json")))
        uris = [self.uri(p[len(self.root) + 1:] if p.startswith(self.root) else p.lstrip("/")) for p in found]

        def created(uri: str) -> tuple[float, str]:
            try:
                return self.load_manifest(uri).created_at, uri
            except (ManifestError, StoreError) as e:
                if errors is not None:
                    errors.append((uri, str(e)))
                return float("inf"), uri

        return sorted(uris, key=created)

    # ---------------------------------------------------------------- writer
    async def room(self) -> None:
        """Await before `save`, `save_manifest` or `save_usage` on an event loop: when the write queue is full,
        the task waits for room, not the loop (`BackgroundWriter.room`)."""
        await self._writer.room()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for queued writes (at most `timeout` s); True when all are done. Never raises:
        failures are in `stats()`."""
        return self._writer.flush(timeout)

    def close(self, timeout: float | None = 30.0) -> bool:
        return self.flush(timeout)

    def stats(self) -> dict[str, Any]:
        """Counts: `manifests`, `files`, `bytes`, `failed`, `dropped`, `inline`, `redacted`,
        `store_recreated`, `pending`, and `recent_failures` (what, error, time)."""
        return {**self._stats.snapshot(), "pending": self._writer.pending()}

    @property
    def failures(self) -> list[dict[str, Any]]:
        return self._stats.snapshot()["recent_failures"]
