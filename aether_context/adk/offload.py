"""Tool-result offload and recall: originals behind `artifact://` URIs, compact forms in context.

Decision (documented in docs/architecture.md): offload happens **when the tool returns**
(`after_tool_callback`), not at pack time. The session then stores the compact form, so every
later call, ADK's own history building and any other plugin see a small, byte-stable result (the
prompt cache holds), while the original is saved whole and stays retrievable through the recall
tool. Results above `offload.save_min_tokens` are saved even when they are not compacted, so a
later fold or prune can cite their URI.

URIs are `artifact://<app>/<user>/<session>/<filename>#v<version>`. They resolve through ADK's
artifact service when the runner has one (the originals show up in `adk web`), else through the
pack store's `artifacts/` folder. A URI of another app, user or session is refused.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from ..compress import compress_tool_output, render_payload
from ..content import response_digest, sha256_hex
from ..errors import StoreError
from ..profile import OffloadSettings
from ..store import PackStore
from ..tokens import TokenCounting
from .collect import OFFLOAD_PREFIX, URIS_STATE_KEY, artifact_uri

logger = logging.getLogger(__name__)

__all__ = ["ArtifactGateway", "ParsedUri", "parse_artifact_uri", "offload_tool_result", "make_recall_tool",
           "RECALL_TOOL_NAME", "URIS_STATE_KEY", "effective_threshold"]

RECALL_TOOL_NAME = "read_artifact"
_URI = re.compile(r"^artifact://([^/]+)/([^/]+)/([^/]+)/(.+?)(?:#v(\d+))?$")


@dataclass(frozen=True)
class ParsedUri:
    app: str
    user: str
    session: str
    filename: str
    version: int | None


def parse_artifact_uri(uri: str) -> ParsedUri:
    m = _URI.match(uri.strip())
    if not m:
        raise StoreError(f"{uri!r} is not an artifact URI (artifact://<app>/<user>/<session>/<file>[#v<n>])")
    app, user, session, filename, version = m.groups()
    if ".." in filename.split("/"):
        raise StoreError(f"{uri!r} escapes the artifact store")
    return ParsedUri(app, user, session, filename, int(version) if version is not None else None)


class ArtifactGateway:
    """Saves and loads originals for the current session; ADK's artifact service first, the pack store else."""

    def __init__(self, store: PackStore):
        self.store = store

    async def save(self, ctx: CallbackContext, filename: str, data: bytes, mime_type: str) -> str:
        session = ctx.session
        try:
            version = await ctx.save_artifact(filename, types.Part(inline_data=types.Blob(mime_type=mime_type, data=data)))
        except ValueError:  # the runner has no artifact service
            version = self.store.put_artifact(session.app_name, session.user_id, session.id, filename, data)
        return artifact_uri(session.app_name, session.user_id, session.id, filename, version)

    async def load(self, ctx: CallbackContext, uri: str) -> bytes:
        """The original bytes behind `uri`; refuses URIs outside this app, user and session."""
        parsed = parse_artifact_uri(uri)
        session = ctx.session
        if (parsed.app, parsed.user, parsed.session) != (session.app_name, session.user_id, session.id):
            raise StoreError(f"{uri!r} belongs to another app, user or session: refused")
        try:
            part = await ctx.load_artifact(parsed.filename, parsed.version)
        except ValueError:
            part = None
        if part is not None:
            if part.inline_data is not None and part.inline_data.data is not None:
                return part.inline_data.data
            if part.text is not None:
                return part.text.encode("utf-8")
        data = self.store.get_artifact(parsed.app, parsed.user, parsed.session, parsed.filename, parsed.version)
        if data is None:
            raise StoreError(f"{uri!r} not found in the artifact store")
        return data


def effective_threshold(settings: OffloadSettings, free_conversation_tokens: int | None) -> int:
    """The offload threshold, tightened as the conversation budget left shrinks."""
    threshold = settings.threshold_tokens
    if free_conversation_tokens is not None:
        threshold = min(threshold, max(settings.min_threshold_tokens, int(settings.budget_share * free_conversation_tokens)))
    return threshold


async def offload_tool_result(*, tool_name: str, args: dict, result: Any, ctx: ToolContext, gateway: ArtifactGateway,
                              settings: OffloadSettings, counter: TokenCounting,
                              free_conversation_tokens: int | None) -> dict | None:
    """Save a tool result and, when it is large, return the compact replacement (else None)."""
    text = render_payload(result)
    tokens = counter.count_text(text)
    if tokens < settings.save_min_tokens:
        return None
    data = text.encode("utf-8")
    is_json = not isinstance(result, str)
    filename = f"{OFFLOAD_PREFIX}{tool_name}-{sha256_hex(data)[:16]}.{'json' if is_json else 'txt'}"
    uri = await gateway.save(ctx, filename, data, "application/json" if is_json else "text/plain")
    uris = dict(ctx.state.get(URIS_STATE_KEY) or {})
    uris[response_digest(result)] = uri
    threshold = effective_threshold(settings, free_conversation_tokens)
    replacement = None
    if tokens > threshold:
        compact = compress_tool_output(tool_name, result, max_tokens=settings.compact_max_tokens, counter=counter,
                                       uri=uri, args=args)
        replacement = {"summary": compact.text, "artifact_uri": uri, "original_tokens": tokens,
                       "note": f"Output offloaded ({compact.kind}); call {RECALL_TOOL_NAME}(uri=...) to read lines or search it."}
        uris[response_digest(replacement)] = uri
    ctx.state[URIS_STATE_KEY] = uris
    logger.debug("aether-context: saved %s output (%d tokens) as %s%s", tool_name, tokens, uri,
                 " and compacted it" if replacement else "")
    return replacement


def _read(text: str, start_line: int, max_lines: int, search: str) -> dict:
    lines = text.splitlines()
    if search:
        needle = search.lower()
        hits = [f"{i + 1}: {ln}" for i, ln in enumerate(lines) if needle in ln.lower()]
        return {"total_lines": len(lines), "matches": len(hits), "lines": "\n".join(hits[:max_lines]),
                "truncated": len(hits) > max_lines}
    start = max(1, start_line)
    chunk = lines[start - 1: start - 1 + max_lines]
    end = start - 1 + len(chunk)
    return {"total_lines": len(lines), "start_line": start, "end_line": end, "lines": "\n".join(chunk),
            "next_start_line": end + 1 if end < len(lines) else None}


def make_recall_tool(gateway: ArtifactGateway, *, max_lines_cap: int = 400) -> FunctionTool:
    """The tool the agent calls to read an offloaded original back, by line range or by search."""

    async def read_artifact(uri: str, tool_context: ToolContext, start_line: int = 1, max_lines: int = 200,
                            search: str = "") -> dict:
        """Read an original that was offloaded to the artifact store (named by an artifact:// URI in the context).

        Args:
          uri: the artifact:// URI shown in the context.
          start_line: first line to return (1-based).
          max_lines: how many lines to return.
          search: if given, return only the lines containing this text (case-insensitive), with line numbers.
        """
        try:
            data = await gateway.load(tool_context, uri)
        except StoreError as e:
            return {"error": str(e)}
        text = data.decode("utf-8", "replace")
        try:  # pretty-print JSON so line ranges are meaningful
            text = json.dumps(json.loads(text), indent=1, ensure_ascii=False)
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
        out = _read(text, start_line, min(max(1, max_lines), max_lines_cap), search)
        out["uri"] = uri
        return out

    read_artifact.__name__ = RECALL_TOOL_NAME
    return FunctionTool(read_artifact)
