"""The ADK edge: everything that touches ADK or google-genai types lives in this package."""

from .collect import artifact_uri, find_request_index
from .convert import apply_request, llm_request_from, request_from_llm, to_content, to_message
from .packer import CallRecord, ContextPacker
from .plugin import ContextPackPlugin, context_pack_callback, install_context_pack
from .task import StateKeys, add_evidence, add_note, set_task

__all__ = [
    "ContextPackPlugin", "context_pack_callback", "install_context_pack", "ContextPacker", "CallRecord", "StateKeys", "set_task",
    "add_evidence", "add_note", "artifact_uri", "find_request_index", "apply_request", "llm_request_from",
    "request_from_llm", "to_content", "to_message",
]
