"""Agents whose history lives on the model's server: left as ADK builds their requests.

With `Gemini(use_interactions_api=True)` the server keeps the conversation and ADK links each call to the previous
one by `LlmRequest.previous_interaction_id`; the request then carries only the current turn
(`flows/llm_flows/context/_contents.py`, `models/interactions_utils.py`). A pack cannot bound a history it never
sees, and rewriting the turn it does see would put a second, packed copy of the session beside the server's. So
for such an agent the plugin steps aside: no pack, no offload of tool results (their pointer would name a recall
tool the request does not declare), no repack on a too-long error. One warning per agent says so.
"""

from __future__ import annotations

import logging
from google.adk.agents.context import Context
from google.adk.models.google_llm import Gemini
from google.adk.models.llm_request import LlmRequest

from .convert import agent_model

logger = logging.getLogger("aether_context")

__all__ = ["history_on_server"]

_WARNED: set[str] = set()


def _uses_interactions_api(context: Context) -> bool:
    try:
        model = agent_model(context)
    except (AttributeError, ValueError):  # not an LlmAgent, or no model it can resolve: ADK reports that itself
        return False
    return isinstance(model, Gemini) and model.use_interactions_api


def history_on_server(context: Context, llm_request: LlmRequest | None = None) -> bool:
    """True when this call's history is kept by the model's server (interactions API), so it is not packed.

    `context` is a callback or tool context; `llm_request`, when given, is checked for ADK's link to the
    previous interaction as well (set by ADK for any model that chains calls that way).
    """
    linked = llm_request is not None and bool(llm_request.previous_interaction_id)
    if not (linked or _uses_interactions_api(context)):
        return False
    name = context.agent_name
    if name not in _WARNED:
        _WARNED.add(name)
        logger.warning("aether-context: agent %s keeps its history on the model's server (interactions API): "
                       "its requests are sent as ADK builds them, not packed", name)
    return True
