"""What prompt caching saved, estimated from the usage the model reported for each call.

Providers bill cached prompt tokens at a discount: Gemini 75 % off, Anthropic 90 % off (cache
reads), OpenAI 50 % off. Tokens saved = cached tokens × the provider's discount, a count in
full-price input tokens; with a price per million input tokens it becomes money.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .calls import Call

__all__ = ["DEFAULT_DISCOUNTS", "provider_of", "parse_discounts", "CacheSavings", "cache_savings"]

DEFAULT_DISCOUNTS = {"gemini": 0.75, "anthropic": 0.90, "openai": 0.50}


def provider_of(model: str) -> str:
    """The provider a model name belongs to ('' when unknown)."""
    name = model.lower()
    if "gemini" in name or "gemma" in name:
        return "gemini"
    if "claude" in name or "anthropic" in name:
        return "anthropic"
    if name.startswith(("gpt", "o1", "o3", "o4", "openai")) or "/gpt" in name:
        return "openai"
    return ""


def parse_discounts(pairs: Iterable[str]) -> dict[str, float]:
    """`["gemini=0.75", "default=0.5"]` over the defaults; `default` covers models of unknown providers."""
    out = dict(DEFAULT_DISCOUNTS)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not sep or not name or not 0.0 <= share <= 1.0:
            raise ValueError(f"--discount {pair!r}: expected PROVIDER=FRACTION with a fraction in [0, 1], e.g. gemini=0.75")
        out[name.strip().lower()] = share
    return out


@dataclass(frozen=True)
class CacheSavings:
    calls_with_usage: int
    reported: int  # prompt tokens the model reported
    cached: int  # of which served from its cache
    saved_tokens: float  # cached × discount: full-price input tokens not paid for
    cost_saved: float | None  # saved_tokens × price, when a price was given
    unpriced_models: tuple[str, ...]  # models whose provider is unknown and had no `default` discount

    @property
    def cached_share(self) -> float:
        return self.cached / self.reported if self.reported else 0.0

    def to_json(self) -> dict:
        return {"calls_with_usage": self.calls_with_usage, "reported": self.reported, "cached": self.cached,
                "cached_share": round(self.cached_share, 4), "saved_tokens": round(self.saved_tokens),
                "cost_saved": self.cost_saved, "unpriced_models": list(self.unpriced_models)}


def call_discount(call: Call, discounts: dict[str, float]) -> float | None:
    provider = provider_of(call.manifest.model)
    return discounts.get(provider) if provider else discounts.get("default")


def cache_savings(calls: Iterable[Call], discounts: dict[str, float] | None = None,
                  price_per_mtok: float | None = None) -> CacheSavings:
    discounts = DEFAULT_DISCOUNTS if discounts is None else discounts
    n = reported = cached = 0
    saved = 0.0
    unpriced: set[str] = set()
    for call in calls:
        if not call.usage:
            continue
        n += 1
        reported += call.reported
        cached += call.cached
        share = call_discount(call, discounts)
        if share is None:
            if call.cached:
                unpriced.add(call.manifest.model)
            continue
        saved += call.cached * share
    cost = saved * price_per_mtok / 1e6 if price_per_mtok is not None else None
    return CacheSavings(n, reported, cached, saved, cost, tuple(sorted(unpriced)))
