"""aether-context: budgeted, replayable Context Packs for Google ADK agents.

Usage::

    from aether_context import ContextPackPlugin
    app = App(name="app", root_agent=agent, plugins=[ContextPackPlugin(profile="default")])
"""

from .adk import (CallRecord, ContextPacker, ContextPackPlugin, StateKeys, add_evidence, add_note,
                  context_pack_callback, install_context_pack, llm_request_from, set_task)
from .content import Message, ModelRequest, ToolSpec
from .errors import AetherContextError, BudgetError, ManifestError, ProfileError, StoreError, WindowError
from .pipeline import (ContextPack, EvidenceItem, Manifest, MemoryItem, PackInputs, PackState, Signals, TaskSpec,
                       TruncationEvent, build_pack)
from .profile import BudgetProfile, builtin_profiles, load_profile
from .providers import CodeContextProvider, EvidenceProvider, EvidenceRequest
from .replay import RepackResult, repack, replay
from .store import PackStore
from .tokens import TokenCounter, TokenCounting
from .windows import context_window

__version__ = "0.1.0"

__all__ = [
    "ContextPackPlugin", "context_pack_callback", "install_context_pack", "ContextPacker", "CallRecord", "StateKeys", "set_task",
    "add_evidence", "add_note", "llm_request_from", "Message", "ModelRequest", "ToolSpec",
    "AetherContextError", "BudgetError", "ManifestError", "ProfileError", "StoreError", "WindowError",
    "ContextPack", "EvidenceItem", "Manifest", "MemoryItem", "PackInputs", "PackState", "Signals", "TaskSpec",
    "TruncationEvent", "build_pack", "BudgetProfile", "builtin_profiles", "load_profile", "RepackResult",
    "repack", "replay", "PackStore", "TokenCounter", "TokenCounting", "context_window",
    "CodeContextProvider", "EvidenceProvider", "EvidenceRequest",
]
