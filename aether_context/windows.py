"""Context-window sizes of current model families, matched by name prefix.

The allocator is window-proportional, so it must know the window. A name is reduced to the model
behind it first: provider routes (`azure/`, `bedrock/`, `vertex_ai/`, `openrouter/`, `groq/`, any
`provider/vendor/` path, LiteLLM style), Vertex resource names (`projects/…/models/gemini-2.5-pro`),
Bedrock ids (`us.anthropic.claude-…-v1:0`) and spelling variants (`claude-3.5-sonnet`, `llama3.1`)
all resolve. The longest matching prefix wins, so `gpt-4o-mini` and `gpt-4o` can differ.

A profile's `window_tokens` overrides the registry. An unknown model is not an error inside an
agent run: it is warned about once per model (naming `window_tokens=`), and packed to a
conservative `DEFAULT_WINDOW` that the manifest flags (`window_flag`).
"""

from __future__ import annotations

import logging
import re

from .errors import WindowError

__all__ = ["CONTEXT_WINDOWS", "WINDOW_SOURCES", "DEFAULT_WINDOW", "OLLAMA_DEFAULT_CONTEXT", "context_window",
           "lookup_window", "normalise_model_name", "window_flag"]

logger = logging.getLogger("aether_context")

DEFAULT_WINDOW = 32_768  # unknown models: small enough for any current chat model, flagged in the manifest
OLLAMA_DEFAULT_CONTEXT = 4_096  # what an Ollama server gives a request unless num_ctx is raised

_GEMINI = "ai.google.dev/gemini-api/docs/models (input token limit)"
_OPENAI = "platform.openai.com/docs/models (context window)"
_ANTHROPIC = "docs.anthropic.com/en/docs/about-claude/models (context window)"

# prefix -> (window in tokens, the provider page that states it)
REGISTRY: dict[str, tuple[int, str]] = {
    # Google Gemini and Gemma
    "gemini-3": (1_048_576, _GEMINI),
    "gemini-2.5-pro": (1_048_576, _GEMINI),
    "gemini-2.5-flash": (1_048_576, _GEMINI),
    "gemini-2.0-flash": (1_048_576, _GEMINI),
    "gemini-1.5-pro": (2_097_152, _GEMINI),
    "gemini-1.5-flash": (1_048_576, _GEMINI),
    "gemini-flash-latest": (1_048_576, _GEMINI + ": alias of the latest Flash"),
    "gemini-flash-lite-latest": (1_048_576, _GEMINI + ": alias of the latest Flash-Lite"),
    "gemini-pro-latest": (1_048_576, _GEMINI + ": alias of the latest Pro"),
    "gemini-live": (32_768, "ai.google.dev/gemini-api/docs/live-session (session context window)"),
    "gemma-3": (131_072, "ai.google.dev/gemma/docs/core (Gemma 3: 128K context, 4B and larger)"),
    "gemma-3-1b": (32_768, "ai.google.dev/gemma/docs/core (Gemma 3 1B: 32K context)"),
    "gemma-3n": (32_768, "ai.google.dev/gemma/docs/gemma-3n (32K context)"),
    # OpenAI
    "gpt-5": (400_000, _OPENAI),
    "gpt-5-chat": (128_000, _OPENAI + ": gpt-5-chat-latest"),
    "gpt-4.1": (1_047_576, _OPENAI),
    "gpt-4.5": (128_000, _OPENAI + ": gpt-4.5-preview"),
    "gpt-4o": (128_000, _OPENAI),
    "chatgpt-4o": (128_000, _OPENAI + ": chatgpt-4o-latest"),
    "gpt-4-turbo": (128_000, _OPENAI),
    "gpt-4-1106": (128_000, _OPENAI + ": gpt-4-1106-preview"),
    "gpt-4-0125": (128_000, _OPENAI + ": gpt-4-0125-preview"),
    "gpt-4-32k": (32_768, _OPENAI + ": gpt-4-32k (legacy)"),
    "gpt-4": (8_192, _OPENAI + ": gpt-4, gpt-4-0613"),
    "gpt-3.5-turbo": (16_385, _OPENAI),
    "gpt-3.5-turbo-instruct": (4_096, _OPENAI),
    "gpt-oss": (131_072, _OPENAI + ": gpt-oss-120b, gpt-oss-20b"),
    "o1": (200_000, _OPENAI),
    "o1-mini": (128_000, _OPENAI),
    "o1-preview": (128_000, _OPENAI),
    "o3": (200_000, _OPENAI),
    "o4-mini": (200_000, _OPENAI),
    # Anthropic Claude (also on Bedrock and Vertex under the same names)
    "claude-opus-4": (200_000, _ANTHROPIC),
    "claude-sonnet-4": (200_000, _ANTHROPIC + " (1M only with the long-context beta header)"),
    "claude-haiku-4": (200_000, _ANTHROPIC),
    "claude-3-7-sonnet": (200_000, _ANTHROPIC),
    "claude-3-5-sonnet": (200_000, _ANTHROPIC),
    "claude-3-5-haiku": (200_000, _ANTHROPIC),
    "claude-3-opus": (200_000, _ANTHROPIC),
    "claude-3-sonnet": (200_000, _ANTHROPIC),
    "claude-3-haiku": (200_000, _ANTHROPIC),
    # Others reached through LiteLLM-style routes
    "mistral-large": (131_072, "docs.mistral.ai/getting-started/models (128k)"),
    "mistral-medium": (131_072, "docs.mistral.ai/getting-started/models (128k)"),
    "mistral-small": (32_768, "docs.mistral.ai/getting-started/models (32k: the smallest of its versions)"),
    "open-mistral-nemo": (131_072, "docs.mistral.ai/getting-started/models (128k)"),
    "codestral": (262_144, "docs.mistral.ai/getting-started/models (Codestral 25.01: 256k)"),
    "deepseek-chat": (128_000, "api-docs.deepseek.com/quick_start/pricing (context length 128K)"),
    "deepseek-reasoner": (128_000, "api-docs.deepseek.com/quick_start/pricing (context length 128K)"),
    "llama-3.1": (131_072, "console.groq.com/docs/models (context window 131,072)"),
    "llama-3.3": (131_072, "console.groq.com/docs/models (context window 131,072)"),
    "llama-4": (131_072, "console.groq.com/docs/models (Llama 4 Scout/Maverick: 131,072 served)"),
    "grok-3": (131_072, "docs.x.ai/docs/models (131,072)"),
    "grok-4": (256_000, "docs.x.ai/docs/models (256,000)"),
    "nova-pro": (300_000, "docs.aws.amazon.com/nova (Amazon Nova Pro: 300K)"),
    "nova-lite": (300_000, "docs.aws.amazon.com/nova (Amazon Nova Lite: 300K)"),
    "nova-micro": (128_000, "docs.aws.amazon.com/nova (Amazon Nova Micro: 128K)"),
}

CONTEXT_WINDOWS: dict[str, int] = {k: v[0] for k, v in REGISTRY.items()}
WINDOW_SOURCES: dict[str, str] = {k: v[1] for k, v in REGISTRY.items()}

_OLLAMA = ("ollama/", "ollama_chat/")
_BEDROCK_ID = re.compile(r"^(?:(?:us|eu|apac|global|us-gov)\.)?(?:anthropic|meta|amazon|mistral|cohere|ai21|deepseek|openai|qwen)\.")
_SPELLINGS = (
    (re.compile(r"^claude-(\d)\.(\d)"), r"claude-\1-\2"),  # OpenRouter: claude-3.5-sonnet
    (re.compile(r"^llama-?(\d)[.-](\d)\b"), r"llama-\1.\2"),  # llama3.1, llama3-1 (Bedrock), llama-3.1
    (re.compile(r"^llama-?(\d)\b"), r"llama-\1"),
    (re.compile(r"^gemma-?(\d)"), r"gemma-\1"),
)
_WARNED: set[str] = set()


def normalise_model_name(model: str) -> str:
    """The model behind a provider route, resource name or deployment id, lower case."""
    name = model.strip().lower()
    name = name.rsplit("/", 1)[-1]  # provider/vendor routes and projects/…/models/<name>
    name = _BEDROCK_ID.sub("", name)
    for pattern, repl in _SPELLINGS:
        name = pattern.sub(repl, name)
    return name


def lookup_window(model: str | None) -> int | None:
    """The registry's window for `model`, or None when no entry matches."""
    name = normalise_model_name(model or "")
    best = max((p for p in CONTEXT_WINDOWS if name.startswith(p)), key=len, default=None)
    return None if best is None else CONTEXT_WINDOWS[best]


def _served(model: str | None) -> "tuple[int, str] | None":
    """(window, why) when the window is a guess rather than the model's: Ollama servers and unknown names."""
    raw = (model or "").strip().lower()
    if raw.startswith(_OLLAMA):
        return (OLLAMA_DEFAULT_CONTEXT, f"Ollama serves {OLLAMA_DEFAULT_CONTEXT} tokens unless num_ctx is raised")
    if lookup_window(model) is None:
        return (DEFAULT_WINDOW, f"unknown context window for model {model!r}")
    return None


def window_flag(model: str | None, override: int | None = None) -> str | None:
    """The manifest flag for a guessed window (None when the window is known or overridden)."""
    if override is not None:
        return None
    served = _served(model)
    return None if served is None else f"window_default:{served[0]} ({served[1]}; set window_tokens=)"


def context_window(model: str | None, override: int | None = None, *, strict: bool = False) -> int:
    """The window in tokens for `model`; `override` (a profile's window_tokens) wins.

    Without an override, an unknown model (or an Ollama route) gets a conservative window and one
    warning per model naming the fix; `strict=True` raises `WindowError` instead.
    """
    if override is not None:
        return override
    served = _served(model)
    if served is None:
        return lookup_window(model)  # type: ignore[return-value]
    message = (f"{served[1]}: set `window_tokens` in the budget profile (e.g. `window_tokens: 128000`) "
               f"or pass window_tokens= to the plugin")
    if strict:
        raise WindowError(message)
    key = (model or "").strip().lower()
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning("aether-context: %s; packing to %d tokens until then", message, served[0])
    return served[0]
