"""The calls of a pack store as plain rows: what the timeline, the report and `list` show.

Reading is forgiving where a listing should be (a corrupt manifest is skipped and reported, the
rest still shows) and strict where a typo would mislead (a store that does not exist is an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ManifestError, StoreError
from ..pipeline.record import Manifest
from ..store import PackStore

__all__ = ["Call", "Listing", "load_calls", "open_store", "manifest_uri", "tokens_without_plugin", "explain",
           "LAYER_ORDER", "layer_used", "compaction_reason"]

LAYER_ORDER = ("system", "task", "tools", "evidence", "memory", "conversation")


def tokens_without_plugin(m: Manifest) -> int:
    """What ADK would have sent (offloaded originals at full size); older manifests: the request as received."""
    return int(getattr(m, "tokens_without_plugin", 0) or m.tokens_before)


def compaction_reason(m: Manifest) -> str:
    """Why this call compacted the conversation ('' when it did not), from the manifest's `compaction`."""
    c = getattr(m, "compaction", None)
    if not c:
        return ""
    if isinstance(c, dict):
        return str(c.get("reason") or c.get("trigger") or c.get("kind") or "compacted")
    return str(c)


def layer_used(m: Manifest) -> dict[str, int]:
    return {k: (m.layer_budgets[k].used if k in m.layer_budgets else 0) for k in LAYER_ORDER}


_VERBS = {"fold": "folded into one-line summaries", "drop": "left out", "compress": "compressed", "cut": "cut short"}


def explain(event: dict[str, Any]) -> str:
    """One truncation in plain words: what was done to how many items, why, and what it saved."""
    n = len(event.get("ids") or ())
    layer, action = event.get("layer", "?"), event.get("action", "?")
    what = f"{n} {layer} item{'s' if n != 1 else ''}" if n else f"the {layer} layer"
    text = f"{what} {_VERBS.get(action, action)}: {event.get('reason', '')}"
    before, after = int(event.get("tokens_before") or 0), int(event.get("tokens_after") or 0)
    if after == 0 and before and action in ("fold", "compress"):  # what they became is counted in another block
        text += f" ({before:,} tokens verbatim)"
    elif after == 0 and before:
        text += f" ({before:,} tokens)"
    elif before > after:
        text += f" ({before:,} → {after:,} tokens, {before - after:,} saved)"
    elif before or after:
        text += f" ({before:,} → {after:,} tokens)"
    return text


@dataclass
class Call:
    """One recorded model call: its manifest, where it lives, and what the model reported for it."""

    uri: str
    manifest: Manifest
    usage: dict[str, Any] | None = None

    @property
    def sent(self) -> int:
        return self.manifest.tokens_after

    @property
    def without(self) -> int:
        return tokens_without_plugin(self.manifest)

    @property
    def reported(self) -> int:
        return int((self.usage or {}).get("reported") or 0)

    @property
    def cached(self) -> int:
        return int((self.usage or {}).get("cached") or 0)

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "uri": self.uri, "pack_id": m.pack_id, "created_at": m.created_at, "app": m.app_name, "user": m.user_id,
            "session": m.session_id, "invocation": m.invocation_id, "agent": m.agent, "model": m.model,
            "profile": m.profile, "window": m.window, "packed_for": m.packed_for, "calibration": m.calibration,
            "tokens_sent": self.sent, "tokens_without_plugin": self.without, "tokens_before": m.tokens_before,
            "prefix_tokens": m.prefix_tokens, "previous_tokens": m.previous_tokens, "reused_payload": m.reused_payload,
            "layers": {k: m.layer_budgets[k].model_dump() for k in m.layer_budgets},
            "truncations": [{**e, "explained": explain(e)} for e in m.truncation_events],
            "compaction": getattr(m, "compaction", None), "cache_break": m.cache_break, "failures": m.failures,
            "error": m.error, "flags": m.flags, "reported": self.reported if self.usage else None,
            "cached": self.cached if self.usage else None,
        }


@dataclass
class Listing:
    store: PackStore
    calls: list[Call] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (uri, why)


def open_store(url: str) -> PackStore:
    """A store that exists; a missing one is a `StoreError` (a typo must not look like an empty store)."""
    store = PackStore(url, background=False)
    if not store.fs.exists(store.root):
        raise StoreError(f"no pack store at {url!r}: check the path (the plugin's default is .aether/packs)")
    return store


def load_calls(url: str, *, app: str = "", user: str = "", session: str = "") -> Listing:
    """Every readable call under the scope, oldest first; unreadable manifests go to `skipped`."""
    store = open_store(url)
    listing = Listing(store)
    errors: list = []
    for uri in store.list_manifests(app, user, session, errors=errors):
        if any(uri == bad for bad, _ in errors):
            continue
        try:
            listing.calls.append(Call(uri, store.load_manifest(uri), store.load_usage(uri)))
        except (ManifestError, StoreError) as e:
            listing.skipped.append((uri, str(e)))
    listing.skipped.extend(errors)
    listing.calls.sort(key=lambda c: (c.manifest.created_at, c.uri))
    return listing


def manifest_uri(target: str) -> str:
    """Accept a manifest URI or the pack folder that holds it."""
    target = target.rstrip("/")
    return target if target.endswith("/manifest.json") else target + "/manifest.json"
