"""Replay and re-pack recorded model calls.

`replay(uri)` rebuilds the exact request a call sent (its checksum is verified against the
manifest); `repack(uri, profile)` runs the pipeline again on the recorded inputs under another
profile and says what changed, which is how profiles are tuned on real sessions.

Usage::

    request = replay("file:///tmp/packs/app/u/s/pk_…/manifest.json")
    result = repack(uri, "research")
    print(result.diff)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .content import ModelRequest, sha256_hex
from .errors import ManifestError
from .pipeline.build import ContextPack, build_pack
from .pipeline.record import Manifest
from .profile import BudgetProfile, load_profile
from .store import PackStore
from .tokens import TokenCounter, TokenCounting

__all__ = ["replay", "repack", "RepackResult", "store_for_uri"]


MANIFEST_DEPTH = 6  # <app>/<user>/<session>/<agent>/<pack_id>/manifest.json


def store_for_uri(uri: str) -> PackStore:
    """The store a manifest URI lives in (everything before `<app>/<user>/<session>/<agent>/<pack>/manifest.json`)."""
    if not isinstance(uri, str):
        raise ManifestError(f"a manifest URI must be a string, got {type(uri).__name__}")
    parts = uri.rstrip("/").split("/")
    if len(parts) < MANIFEST_DEPTH + 1 or parts[-1] != "manifest.json":
        raise ManifestError(f"{uri!r} is not a manifest URI (…/<app>/<user>/<session>/<agent>/<pack_id>/manifest.json)")
    return PackStore("/".join(parts[:-MANIFEST_DEPTH]), background=False)


def _load(uri: str, store: PackStore | None) -> tuple[PackStore, Manifest, dict]:
    store = store or store_for_uri(uri)
    manifest, storage = store.read_manifest(uri)
    return store, manifest, storage


def replay(uri: str, *, store: PackStore | None = None) -> ModelRequest:
    """The request the call sent, rebuilt from the store; raises `ManifestError` if anything was altered.

    Byte for byte the sent request, unless secrets were masked when it was stored: then the same
    request with `[REDACTED:...]` in their place, verified against the checksum of what was stored.
    """
    store, manifest, storage = _load(uri, store)
    if not manifest.request_ref:
        raise ManifestError(f"{uri} records no request (packing failed: {manifest.error})")
    request = store.get_request(manifest.request_ref)
    expected = storage.get("stored_checksum") or manifest.checksum
    if request.checksum != expected:
        raise ManifestError(f"{uri}: the stored request's checksum {request.checksum} differs from the manifest's {expected}")
    return request


@dataclass(frozen=True)
class RepackResult:
    pack: ContextPack
    original: Manifest
    diff: dict[str, Any]


def repack(uri: str, profile: "str | BudgetProfile", *, store: PackStore | None = None,
           counter: TokenCounting | None = None, window_tokens: int | None = None) -> RepackResult:
    """Build the call's pack again from its recorded inputs under `profile`, and compare."""
    store, manifest, _ = _load(uri, store)
    if not manifest.inputs_ref:
        raise ManifestError(f"{uri} records no inputs (packing failed: {manifest.error})")
    inputs = store.get_inputs(manifest.inputs_ref)
    prof = load_profile(profile)
    if "sha256:" + sha256_hex(prof.model_dump_json()) != manifest.profile_digest:
        # The frozen payload of the previous call was built under the old profile: start fresh.
        inputs = replace(inputs, previous=None)
    window = window_tokens if window_tokens is not None else (prof.window_tokens or manifest.window)
    pack = build_pack(inputs, prof, counter=counter or TokenCounter(), window=window)
    new = pack.manifest
    diff = {
        "profile": [manifest.profile, new.profile],
        "checksum_changed": new.checksum != manifest.checksum,
        "tokens_after": [manifest.tokens_after, new.tokens_after],
        "truncation_events": [len(manifest.truncation_events), len(new.truncation_events)],
        "tools": {"added": sorted(set(new.tools) - set(manifest.tools)),
                  "removed": sorted(set(manifest.tools) - set(new.tools))},
        "layers": {
            k: {"budget": [manifest.layer_budgets[k].budget, v.budget], "used": [manifest.layer_budgets[k].used, v.used]}
            for k, v in new.layer_budgets.items() if k in manifest.layer_budgets
        },
    }
    return RepackResult(pack=pack, original=manifest, diff=diff)
