"""Tool-result offload and recall: originals behind `artifact://` URIs, compact forms in context.

Offload happens when the tool returns (`after_tool_callback`), not at pack time: the session stores
the compact form, so every later call sees a small, byte-stable result, while the original is saved
whole for the recall tool. Results above `offload.save_min_tokens` are saved even when not compacted,
so a later fold or prune can cite their URI.

URIs are `artifact://<app>/<user>/<session>/<filename>#v<version>`. Where originals go
(`originals=`): "auto" uses ADK's artifact service when it is at least as durable as the session,
else the pack store's `artifacts/` folder; "adk" always ADK's service, "store" always the pack store.
A URI of another app, user or session is refused. Text originals are saved masked while the store's
redaction is on, unless the profile says `redaction: {originals: false}`.

`read_artifact` never raises: a bad argument, a missing original or a failing store is an
`{"error": ...}` result naming the argument and the fix. It returns the stored text exactly
(lines split on "\n" only, so "\r\n", "\u2028" and JSON text come back unchanged) and bounds a
reply by characters as well as lines (`next_start_line` / `next_start_char` continue it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from google.adk.agents.callback_context import CallbackContext
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from ..compress import compress_tool_output, render_payload
from ..content import json_text, response_digest, sha256_hex
from ..errors import AetherContextError, StoreError
from ..profile import OffloadSettings
from ..redact import RedactionSettings, redact
from ..store import PackStore
from ..tokens import TokenCounting
from .collect import OFFLOAD_PREFIX, artifact_uri
from .session_state import URIS_STATE_KEY, StateRecords

logger = logging.getLogger(__name__)

__all__ = ["ArtifactGateway", "ParsedUri", "parse_artifact_uri", "offload_tool_result", "make_recall_tool",
           "RECALL_TOOL_NAME", "effective_threshold"]

RECALL_TOOL_NAME = "read_artifact"
MAX_URI_CHARS = 2048  # a longer uri argument is refused (error results stay small)
MAX_COMPACT_SHARE = 0.8  # a result is replaced only by a compact form that saves at least a fifth of it
_URI = re.compile(r"^artifact://([^/]+)/([^/]+)/([^/]+)/(.+?)(?:#v(\d+))?$")


@dataclass(frozen=True)
class ParsedUri:
    app: str
    user: str
    session: str
    filename: str
    version: int | None


def parse_artifact_uri(uri: str) -> ParsedUri:
    if not isinstance(uri, str) or not uri.strip():
        raise StoreError(f"uri must be an artifact:// URI string, got {str(uri)[:80]!r} ({type(uri).__name__})")
    m = _URI.match(uri.strip())
    if not m:
        raise StoreError(f"{uri!r} is not an artifact URI (artifact://<app>/<user>/<session>/<file>[#v<n>])")
    app, user, session, filename, version = m.groups()
    if ".." in filename.split("/"):
        raise StoreError(f"{uri!r} escapes the artifact store")
    return ParsedUri(app, user, session, filename, int(version) if version is not None else None)


ORIGINALS = ("auto", "adk", "store")
_TEXT_MIME = ("text/", "application/json")


class ArtifactGateway:
    """Saves and loads originals for the current session, where they are as durable as the session."""

    def __init__(self, store: PackStore, *, originals: str = "auto"):
        if originals not in ORIGINALS:
            raise ValueError(f"originals={originals!r}: use one of {ORIGINALS}")
        self.store = store
        self.originals = originals

    def _use_store(self, ctx: CallbackContext) -> bool:
        """True when originals must go to the pack store (see the module docstring)."""
        if self.originals != "auto":
            return self.originals == "store"
        inv = ctx.get_invocation_context()
        artifacts, sessions = inv.artifact_service, inv.session_service
        if artifacts is None:
            return True
        in_memory = type(artifacts).__name__.startswith("InMemory")
        return in_memory and not type(sessions).__name__.startswith("InMemory")

    def masked(self, data: bytes, mime_type: str, text: str | None = None) -> bytes:
        """`data` as it is saved: a text original with its secrets masked (when redaction is on). `text`, when
        the caller has it, is `data` decoded (a huge original is not decoded again)."""
        if not self.store.redaction.enabled or not self.store.redaction.originals or not mime_type.startswith(_TEXT_MIME):
            return data
        if text is None:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return data
        masked, n = redact(text, self.store.redaction)
        return masked.encode("utf-8") if n else data

    async def save(self, ctx: CallbackContext, filename: str, data: bytes, mime_type: str, *,
                   masked: bool = False) -> str:
        """Save an original; `masked`: `data` already went through `masked` (e.g. off the event loop)."""
        session = ctx.session
        data = data if masked else self.masked(data, mime_type)
        version = None
        if not self._use_store(ctx):
            try:
                version = await ctx.save_artifact(filename, types.Part(inline_data=types.Blob(mime_type=mime_type, data=data)))
            except ValueError:  # the runner has no artifact service
                version = None
        if version is None:
            version = await asyncio.to_thread(self.store.put_artifact, session.app_name, session.user_id, session.id,
                                              filename, data)  # a large original's write never stalls the loop
        return artifact_uri(session.app_name, session.user_id, session.id, filename, version)

    async def load(self, ctx: CallbackContext, uri: str) -> bytes:
        """The original bytes behind `uri`; refuses URIs outside this app, user and session."""
        parsed = parse_artifact_uri(uri)
        session = ctx.session
        if (parsed.app, parsed.user, parsed.session) != (session.app_name, session.user_id, session.id):
            raise StoreError(f"{uri!r} belongs to another app, user or session: refused")
        if self.originals != "store":
            part = None
            try:
                part = await ctx.load_artifact(parsed.filename, parsed.version)
            except (ValueError, KeyError, FileNotFoundError):
                part = None
            if part is not None:
                if part.inline_data is not None and part.inline_data.data is not None:
                    return part.inline_data.data
                if part.text is not None:
                    return part.text.encode("utf-8")
        try:
            data = await asyncio.to_thread(self.store.get_artifact, parsed.app, parsed.user, parsed.session,
                                           parsed.filename, parsed.version)
        except OSError as e:
            raise StoreError(f"the artifact store could not be read for {uri!r}: {e}") from e
        if data is None:
            raise StoreError(f"{uri!r} not found in the artifact store (check the URI and its #v version)")
        return data


def effective_threshold(settings: OffloadSettings, free_conversation_tokens: int | None) -> int:
    """The offload threshold, tightened as the conversation budget left shrinks."""
    threshold = settings.threshold_tokens
    if free_conversation_tokens is not None:
        threshold = min(threshold, max(settings.min_threshold_tokens, int(settings.budget_share * free_conversation_tokens)))
    return threshold


async def run_inline(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


@dataclass(frozen=True)
class _Original:
    """A result ready to save: its text, size, saved bytes (masked) and name."""

    tokens: int
    data: bytes
    filename: str
    mime_type: str
    digest: str


def _original(tool_name: str, result: Any, counter: TokenCounting, save_min_tokens: int,
              gateway: ArtifactGateway) -> _Original | None:
    text = render_payload(result)
    tokens = counter.count_text(text)
    if tokens < save_min_tokens:
        return None
    is_json = not isinstance(result, str)
    # JSON is saved indented, so the recall tool's line ranges and search mean something; it reads
    # back exactly this text.
    saved = json_text(result, indent=1) if is_json else text
    data = saved.encode("utf-8")  # the packer repaired lone surrogates first (`repair_unicode`)
    mime_type = "application/json" if is_json else "text/plain"
    filename = f"{OFFLOAD_PREFIX}{tool_name}-{sha256_hex(data)[:16]}.{'json' if is_json else 'txt'}"
    digest = response_digest(result, text)  # `text` is a dict's canonical JSON already
    return _Original(tokens, gateway.masked(data, mime_type, saved), filename, mime_type, digest)


def _compact_form(tool_name: str, result: Any, args: dict, uri: str, tokens: int, settings: OffloadSettings,
                  counter: TokenCounting, redaction: RedactionSettings) -> dict:
    """The replacement for a large result, or None when it would not save a fifth of it (a threshold
    tightened under pressure can fall below the compact form's own cap: a bigger "compact" form
    would cost tokens and declare the recall tool for nothing)."""
    compact = compress_tool_output(tool_name, result, max_tokens=settings.compact_max_tokens, counter=counter,
                                   uri=uri, args=args)
    summary, _ = redact(compact.text, redaction)
    replacement = {"summary": summary, "artifact_uri": uri, "original_tokens": tokens,
                   "note": f"Output offloaded ({compact.kind}); call {RECALL_TOOL_NAME}(uri=...) to read lines or search it."}
    if counter.count_text(render_payload(replacement)) >= tokens * MAX_COMPACT_SHARE:
        return None
    return {"replacement": replacement, "digest": response_digest(replacement)}


async def offload_tool_result(*, tool_name: str, args: dict, result: Any, ctx: ToolContext, gateway: ArtifactGateway,
                              settings: OffloadSettings, counter: TokenCounting,
                              free_conversation_tokens: int | None,
                              records: StateRecords, redaction: RedactionSettings | None = None,
                              run: Callable[..., Awaitable[Any]] = run_inline) -> dict | None:
    """Save a tool result and, when it is large, return the compact replacement (else None).

    The compact form is the pack's own rendering of the result: its secrets are masked per
    `redaction` (the profile's; default: the store's settings), like everything the pack quotes.
    `run(fn, *args)` runs the CPU work (counting, masking, compacting) -- for a large result the packer
    passes a worker thread beside the packs (`worker.beside_packs`), so the event loop only waits for the save."""
    original = await run(_original, tool_name, result, counter, settings.save_min_tokens, gateway)
    if original is None:
        return None
    uri = await gateway.save(ctx, original.filename, original.data, original.mime_type, masked=True)
    uris = dict(await records.get_or_empty(ctx.state, URIS_STATE_KEY, {}, "offload URIs"))
    uris[original.digest] = uri
    threshold = effective_threshold(settings, free_conversation_tokens)
    replacement = None
    compact = await run(_compact_form, tool_name, result, args, uri, original.tokens, settings, counter,
                        redaction or gateway.store.redaction) if original.tokens > threshold else None
    if compact is not None:
        replacement = compact["replacement"]
        uris[compact["digest"]] = uri
    await records.set(ctx.state, URIS_STATE_KEY, uris, n=len(uris))
    logger.debug("aether-context: saved %s output (%d tokens) as %s%s", tool_name, original.tokens, uri,
                 " and compacted it" if replacement else "")
    return replacement


def _int_arg(name: str, value: Any, minimum: int) -> int:
    """An integer argument from the model: ints and digit strings; anything else is a clear error."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {str(value)[:40]!r}")
    if isinstance(value, str):
        if not value.strip().lstrip("-").isdigit():
            raise ValueError(f"{name} must be a whole number >= {minimum}, got {value[:40]!r}")
        value = int(value.strip())
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{name} must be a whole number >= {minimum}, got {value}")
        value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _read(text: str, start_line: int, max_lines: int, search: str, max_chars: int, start_char: int = 0) -> dict:
    """Lines of `text` (split on "\n" only) from `start_line`, or those containing `search`,
    bounded by `max_lines` and `max_chars`."""
    lines = text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()  # a final newline ends the last line, it does not start a new one
    total = len(lines)
    if search:
        needle = search.lower()
        hits, size, cut = [], 0, False
        for i, ln in enumerate(lines):
            if needle in ln.lower():
                entry = f"{i + 1}: {ln}"
                if len(hits) >= max_lines or size + len(entry) > max_chars:
                    cut = True
                    break
                hits.append(entry)
                size += len(entry) + 1
        matches = sum(needle in ln.lower() for ln in lines)
        return {"total_lines": total, "matches": matches, "lines": "\n".join(hits), "truncated": cut}
    if start_line > total:
        return {"total_lines": total, "start_line": start_line, "end_line": start_line - 1, "lines": "",
                "next_start_line": None, "note": f"the original has {total} lines"}
    first = lines[start_line - 1]
    if start_char or len(first) > max_chars:  # one long line: return a slice of it
        piece = first[start_char:start_char + max_chars]
        end = start_char + len(piece)
        out = {"total_lines": total, "start_line": start_line, "end_line": start_line, "lines": piece,
               "line_chars": len(first), "start_char": start_char}
        if end < len(first):
            out["next_start_line"], out["next_start_char"] = start_line, end
        else:
            out["next_start_line"] = start_line + 1 if start_line < total else None
        return out
    chunk, size = [], 0
    for ln in lines[start_line - 1: start_line - 1 + max_lines]:
        if chunk and size + len(ln) + 1 > max_chars:
            break
        chunk.append(ln)
        size += len(ln) + 1
    end = start_line - 1 + len(chunk)
    return {"total_lines": total, "start_line": start_line, "end_line": end, "lines": "\n".join(chunk),
            "next_start_line": end + 1 if end < total else None}


def make_recall_tool(gateway: ArtifactGateway, *, max_lines_cap: int = 400, max_chars: int = 16_000) -> FunctionTool:
    """The tool the agent calls to read an offloaded original back, by line range or by search."""

    async def read_artifact(uri: str, tool_context: ToolContext, start_line: int = 1, max_lines: int = 200,
                            search: str = "", start_char: int = 0) -> dict:
        """Read an original that was offloaded to the artifact store (named by an artifact:// URI in the context).

        Args:
          uri: the artifact:// URI shown in the context.
          start_line: first line to return (1-based).
          max_lines: how many lines to return.
          search: if given, return only the lines containing this text (case-insensitive), with line numbers.
          start_char: for a very long line, the character to continue from (see next_start_char).
        """
        try:
            if not isinstance(uri, str) or not uri.strip() or len(uri) > MAX_URI_CHARS:
                raise ValueError(f"uri must be the artifact:// URI shown in the context, got {str(uri)[:80]!r}"
                                 + (f" ({len(uri)} characters)" if isinstance(uri, str) and len(uri) > MAX_URI_CHARS else ""))
            first = _int_arg("start_line", start_line, 1)
            count = min(_int_arg("max_lines", max_lines, 1), max_lines_cap)
            offset = _int_arg("start_char", start_char, 0)
            if search is None:
                search = ""
            if not isinstance(search, str):
                raise ValueError(f"search must be text, got {str(search)[:40]!r}")
        except ValueError as e:
            return {"error": f"{e}: fix the argument and call {RECALL_TOOL_NAME} again", "uri": str(uri)[:200]}
        try:
            data = await gateway.load(tool_context, uri)
            text = data.decode("utf-8", "replace")
            out = _read(text, first, count, search, max_chars, offset)
        except AetherContextError as e:
            return {"error": str(e), "uri": uri}
        except Exception as e:  # a failing store or service: an answer for the model, never an exception in the run
            logger.error("aether-context: %s failed for %s", RECALL_TOOL_NAME, uri, exc_info=True)
            return {"error": f"the original could not be read ({type(e).__name__}: {str(e)[:200]}); try again later",
                    "uri": uri}
        out["uri"] = uri
        return out

    read_artifact.__name__ = RECALL_TOOL_NAME
    return _RecallTool(read_artifact)


class _RecallTool(FunctionTool):
    """The recall tool with a short declaration: every request that has it pays for it."""

    def _get_declaration(self) -> types.FunctionDeclaration:
        integer = {"type": "integer"}
        return types.FunctionDeclaration(
            name=RECALL_TOOL_NAME,
            description="Read an offloaded original by its artifact:// URI: lines from start_line, or the lines "
                        "containing search; start_char continues a long line.",
            parameters_json_schema={"type": "object", "required": ["uri"], "properties": {
                "uri": {"type": "string"}, "start_line": integer, "max_lines": integer,
                "search": {"type": "string"}, "start_char": integer}})
