"""Cost and cache figures from the captured requests themselves (issue 11), per system and window.

- tokens per call (mean) and over the last fifth (the last ⌈n/5⌉ calls of each run, pooled);
- calls larger than no plugin's same call (paired by run and call index), and more than 1 % larger;
- per-run median prefix-stable share: per call after the first, the leading tokens identical to the
  previous request over the current request's tokens; the median within each run, then the median
  over runs;
- re-processed tokens per run: per call, its tokens minus the prefix shared with the previous request
  (all of the first call), summed per run;
- cache breaks per run: calls whose previous request is not a prefix of theirs, with a cause: the
  manifest's `compaction` or `cache_break` fields when aether-context recorded them, else what the
  requests show (ADK compaction event, system/tools changed, history changed at a new invocation or
  within one);
- effective input cost per call (issue 39 item 8): uncached tokens + cached tokens × `CACHED_PRICE`, where the
  cached tokens are the prefix shared with the previous request of the run;
- determinism: two identical replays compared call by call on request checksums.
"""

from __future__ import annotations

import collections
import math
import statistics
from dataclasses import dataclass, field
from typing import Optional

from context_eval.capture import CallRecord, RunRecord

CACHED_PRICE = 0.25  # a cached input token costs a quarter of an uncached one

__all__ = ["CACHED_PRICE", "CostFigures", "cost_figures", "break_cause", "Determinism", "determinism"]


@dataclass
class CostFigures:
    calls: int
    mean_tokens: float
    last_fifth_tokens: float
    larger_than_none: Optional[float]  # share of calls larger than no plugin's same call
    over_1pct: Optional[int]  # calls more than 1 % above no plugin's same call
    over_1pct_nothing_added: Optional[int]  # ... of them, calls whose pack added no Memory, Evidence or failure warning
    prefix_median: float  # median over runs of the per-run median prefix-stable share
    reprocessed_per_run: float  # mean over runs
    breaks_per_run: float  # mean over runs
    deep_breaks_per_run: float  # breaks reaching before the previous request's last message, mean over runs
    effective_per_call: float  # uncached + CACHED_PRICE × cached tokens, mean over calls
    causes: collections.Counter = field(default_factory=collections.Counter)
    # calls ending with a function response in ADK's request (no plugin's same call): compared, whose last
    # content goes out unchanged, whose last content's role and first part are ADK's
    last_as_adk: tuple[int, int, int] = (0, 0, 0)


def break_cause(prev: Optional[CallRecord], rec: CallRecord) -> str:
    """Why `rec` does not extend the previous request (manifest fields first)."""
    if rec.compaction:
        reason = rec.compaction.get("reason") if isinstance(rec.compaction, dict) else rec.compaction
        return f"compaction ({reason})" if reason else "compaction"
    if rec.cache_break:
        kind = rec.cache_break.get("kind")
        block = str(rec.cache_break.get("block", "?"))
        block = "messages" if block.startswith("messages") else block
        cause = rec.cache_break.get("cause")
        return f"{block} ({kind})" if kind else (f"{block}: {cause}" if cause else block)
    if not rec.broke_before_last:
        return "only the previous request's last message replaced"
    if prev is not None and rec.compactions > prev.compactions:
        return "ADK compaction event"
    if rec.head_changed:
        return "system instruction or tools changed"
    where = "at a new invocation" if rec.new_invocation else "within an invocation"
    unexplained = " (the manifest names no cause)" if rec.packed and rec.pack_error is None else ""
    return f"earlier messages changed {where}{unexplained}"


def _last_fifth(calls: list[CallRecord]) -> list[int]:
    k = max(1, math.ceil(len(calls) / 5)) if calls else 0
    return [c.tokens for c in calls[len(calls) - k:]]


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else math.nan


def cost_figures(records: list[RunRecord], none: Optional[list[RunRecord]]) -> CostFigures:
    runs = [r for r in records if r.calls]
    tokens = [c.tokens for r in runs for c in r.calls]
    larger = over = bare = paired = responses = same_last = same_first = 0
    if none is not None:
        base = {r.run_id: r.calls for r in none}
        for r in runs:
            for c, b in zip(r.calls, base.get(r.run_id, [])):
                paired += 1
                larger += c.tokens > b.tokens
                over += c.tokens > 1.01 * b.tokens
                bare += c.tokens > 1.01 * b.tokens and not (c.added or c.warned)
                if b.last_is_response:
                    responses += 1
                    same_last += c.last_digest == b.last_digest
                    same_first += c.last_first_part == b.last_first_part
    per_run_prefix, reprocessed, breaks, deep = [], [], [], []
    causes: collections.Counter = collections.Counter()
    for r in runs:
        shares = [c.shared / c.tokens for c in r.calls[1:] if c.tokens]
        per_run_prefix.append(_median(shares))
        reprocessed.append(sum(c.tokens - c.shared for c in r.calls))
        n = 0
        for prev, c in zip([None, *r.calls], r.calls):
            if c.broke:
                n += 1
                causes[break_cause(prev, c)] += 1
        breaks.append(n)
        deep.append(sum(c.broke_before_last for c in r.calls))
    return CostFigures(
        calls=len(tokens), mean_tokens=_mean(tokens), last_fifth_tokens=_mean([t for r in runs for t in _last_fifth(r.calls)]),
        larger_than_none=larger / paired if paired else None, over_1pct=over if paired else None,
        over_1pct_nothing_added=bare if paired else None,
        prefix_median=_median([x for x in per_run_prefix if not math.isnan(x)]),
        reprocessed_per_run=_mean(reprocessed), breaks_per_run=_mean(breaks),
        deep_breaks_per_run=_mean(deep), causes=causes,
        effective_per_call=_mean([c.tokens - c.shared + CACHED_PRICE * c.shared for r in runs for c in r.calls]),
        last_as_adk=(responses, same_last, same_first))


@dataclass
class Determinism:
    runs: int
    identical_runs: int
    calls: int
    differing_calls: int
    first_difference: str = ""  # "run id, call i" of the first differing call


def determinism(first: list[RunRecord], second: list[RunRecord]) -> Determinism:
    """Compare two replays of the same runs call by call (request checksums)."""
    again = {r.run_id: r for r in second}
    runs = identical = calls = differing = 0
    first_diff = ""
    for r in first:
        other = again.get(r.run_id)
        if other is None:
            continue
        runs += 1
        a, b = [c.checksum for c in r.calls], [c.checksum for c in other.calls]
        diff = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
        calls += max(len(a), len(b))
        differing += diff
        identical += diff == 0
        if diff and not first_diff:
            i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            first_diff = f"{r.run_id}, call {i}"
    return Determinism(runs, identical, calls, differing, first_diff)
