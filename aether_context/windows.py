"""Context-window sizes of current model families, matched by name prefix.

The allocator is window-proportional, so it must know the window. Names are matched after
stripping provider prefixes (`models/`, `openai/`, `anthropic/`, `gemini/`, `vertex_ai/`); the
longest matching prefix wins, so `gpt-4o-mini` and `gpt-4o` can differ. A profile's
`window_tokens` overrides the registry; an unknown model without an override is an error rather
than a guess, because a wrong guess either wastes the window or overflows it.
"""

from __future__ import annotations

from .errors import WindowError

__all__ = ["CONTEXT_WINDOWS", "context_window", "normalise_model_name"]

CONTEXT_WINDOWS: dict[str, int] = {
    # Google Gemini
    "gemini-3": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
    "gemini-2.5-flash": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-live": 32_768,
    "gemma-3": 131_072,
    # OpenAI
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    # Anthropic Claude
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-opus": 200_000,
}

_PREFIXES = ("models/", "openai/", "anthropic/", "gemini/", "vertex_ai/", "google/")


def normalise_model_name(model: str) -> str:
    name = model.strip().lower()
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix):]
                changed = True
    return name


def context_window(model: str | None, override: int | None = None) -> int:
    """The window in tokens for `model`; `override` (a profile's window_tokens) wins."""
    if override is not None:
        return override
    name = normalise_model_name(model or "")
    best = max((p for p in CONTEXT_WINDOWS if name.startswith(p)), key=len, default=None)
    if best is None:
        raise WindowError(
            f"unknown context window for model {model!r}: set `window_tokens` in the budget profile "
            f"(e.g. `window_tokens: 128000`) or pass window_tokens= to the plugin"
        )
    return CONTEXT_WINDOWS[best]
