"""The targets of issues 10, 11 and 39, checked against one run's cells (PASS / FAIL, with the figures).

A target whose cells were not run (a workload or system left out) is reported as "not run".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from context_eval.evaluate import Cell, Results

__all__ = ["Check", "check_targets", "ratio"]

LOCOMO_EVIDENCE = "evidence (mean per question)"
TAU_USES = "identifier uses in the request"
SWE_FILES = "final-diff files in the final request"
SWE_FAILURES = "last five failure lines in the final request"
SWE_OVER = "calls over the window"


@dataclass(frozen=True)
class Check:
    issue: int
    name: str
    ok: Optional[bool]  # None: not run
    detail: str

    @property
    def verdict(self) -> str:
        return "not run" if self.ok is None else "PASS" if self.ok else "FAIL"


def ratio(cell: Optional[Cell], metric: str) -> float:
    if cell is None or metric not in cell.retention:
        return math.nan
    num, den = cell.retention[metric]
    return num / den if den else math.nan


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x * 100:.1f} %"


def _at_least(issue: int, name: str, value: float, floor: float) -> Check:
    ok = None if math.isnan(value) else value >= floor
    return Check(issue, name, ok, f"{_pct(value)} (target ≥ {_pct(floor)})")


def _locomo(r: Results) -> list[Check]:
    out = []
    for mode, floors, baselines in (("locomo-session", {8000: 0.65, 32000: 0.98}, ("none", "sliding", "adk_compact")),
                                    ("locomo-memory", {8000: 0.60, 32000: 0.60}, ("none", "preload"))):
        for window, floor in floors.items():
            value = ratio(r.cell(mode, "aether", window), LOCOMO_EVIDENCE)
            out.append(_at_least(10, f"{mode} evidence at {window:,}", value, floor))
            cells = [c for b in baselines if (c := r.cell(mode, b, window)) is not None]
            fitting = [c for c in cells if not c.over_window]  # a request over the window is no valid baseline
            best = max((ratio(c, LOCOMO_EVIDENCE) for c in fitting), default=math.nan,
                       key=lambda x: -1 if math.isnan(x) else x)
            ok = None if math.isnan(value) or math.isnan(best) else value >= best
            left_out = ", ".join(f"{c.system} ({c.over_window} calls over W)" for c in cells if c.over_window)
            out.append(Check(10, f"{mode} at {window:,} not below the best baseline that fits the window", ok,
                             f"{_pct(value)} vs best baseline {_pct(best)}" + (f"; left out: {left_out}" if left_out else "")))
    return out


def _tau(r: Results) -> list[Check]:
    return [_at_least(10, f"tau-bench identifier uses at {w:,}", ratio(r.cell("tau", "aether", w), TAU_USES), floor)
            for w, floor in ((8000, 0.995), (4000, 0.95))]


def _swe(r: Results) -> list[Check]:
    cell, compact = r.cell("mini-swe", "aether", 8000), r.cell("mini-swe", "adk_compact", 8000)
    over = cell.retention[SWE_OVER][0] if cell else math.nan
    out = [_at_least(10, "mini-swe-agent files of the final diff at 8,000", ratio(cell, SWE_FILES), 1.0),
           _at_least(10, "mini-swe-agent last five failure lines at 8,000", ratio(cell, SWE_FAILURES), 0.95),
           Check(10, "mini-swe-agent calls over the window at 8,000", None if cell is None else over == 0, f"{over}")]
    out.append(_not_above(11, "mini-swe-agent last-fifth tokens at 8,000 ≤ ADK EventsCompaction", cell, compact,
                          lambda c: c.cost.last_fifth_tokens))
    return out


def _not_above(issue: int, name: str, cell: Optional[Cell], other: Optional[Cell], figure: Callable[[Cell], float]) -> Check:
    if cell is None or other is None:
        return Check(issue, name, None, "")
    a, b = figure(cell), figure(other)
    return Check(issue, name, a <= b, f"{a:,.0f} vs {b:,.0f}")


def _cost(r: Results) -> list[Check]:
    out = []
    aether, none = r.cell("tau", "aether", 8000), r.cell("tau", "none", 8000)
    out.append(_not_above(11, "tau-bench at 8,000: mean tokens per call ≤ no plugin", aether, none, lambda c: c.cost.mean_tokens))
    if aether is not None:
        f = aether.cost
        out.append(Check(11, "tau-bench at 8,000: no call more than 1 % above no plugin's unless the pack added Memory, "
                         "Evidence or a failure warning", f.over_1pct_nothing_added == 0,
                         f"{f.over_1pct_nothing_added} such calls ({f.over_1pct} of {f.calls} calls more than 1 % above)"))
    for w, window in (("tau", 8000), ("tau", 4000), ("locomo-session", 8000), ("locomo-session", 32000)):
        a, n = r.cell(w, "aether", window), r.cell(w, "none", window)
        ok = None if a is None or n is None else a.cost.prefix_median >= n.cost.prefix_median - 0.02
        out.append(Check(11, f"{w} at {window:,}: prefix-stable median ≥ no plugin's − 2 points", ok,
                         "" if ok is None else f"{_pct(a.cost.prefix_median)} vs {_pct(n.cost.prefix_median)}"))
    for (w, _, window), cell in sorted(r.cells.items()):
        if cell.system == "aether":
            other = r.cell(w, "adk_compact", window)
            if other is not None:
                out.append(_not_above(11, f"{w} at {window:,}: re-processed tokens per run ≤ ADK EventsCompaction",
                                      cell, other, lambda c: c.cost.reprocessed_per_run))
    for (w, window), d in sorted(r.determinism.items()):
        out.append(Check(11, f"{w} at {window:,}: two identical replays byte-identical", d.differing_calls == 0,
                         f"{d.identical_runs}/{d.runs} runs identical, {d.differing_calls} of {d.calls} calls differ"
                         + (f" (first: {d.first_difference})" if d.first_difference else "")))
    return out


def _chat_cost(r: Results) -> list[Check]:
    """Issue 39 item 8: no baseline both cheaper per question and carrying more evidence; at 32K, cost ≤ no plugin's."""
    out = []
    for mode in ("locomo-session", "locomo-memory"):
        for window in (8000, 32000):
            a = r.cell(mode, "aether", window)
            if a is None:
                continue
            ours = (a.cost.effective_per_call, ratio(a, LOCOMO_EVIDENCE))
            better = [c.system for c in r.cells.values() if c.workload == mode and c.window == window
                      and c.system != "aether" and not c.over_window
                      and c.cost.effective_per_call < ours[0] and ratio(c, LOCOMO_EVIDENCE) > ours[1]]
            out.append(Check(39, f"{mode} at {window:,}: no baseline both cheaper per question and with more evidence",
                             not better, f"{ours[0]:,.0f} tokens, {_pct(ours[1])}" + (f"; beaten by {better}" if better else "")))
            n = r.cell(mode, "none", window)
            if window == 32000 and n is not None and mode == "locomo-session":
                out.append(_not_above(39, f"{mode} at 32,000: cost per question ≤ no plugin's", a, n,
                                      lambda c: c.cost.effective_per_call))
    return out


def _issue39(r: Results) -> list[Check]:
    """Issue 39's raised floors, beside issue 10's."""
    out = []
    for mode, window, floor in (("locomo-session", 8000, 0.90), ("locomo-session", 32000, 1.0),
                                ("locomo-memory", 8000, 0.80)):
        out.append(_at_least(39, f"{mode} evidence at {window:,}", ratio(r.cell(mode, "aether", window), LOCOMO_EVIDENCE),
                             floor))
    out.append(_at_least(39, "tau-bench identifier uses at 8,000", ratio(r.cell("tau", "aether", 8000), TAU_USES), 1.0))
    out.append(_at_least(39, "tau-bench identifier uses at 4,000", ratio(r.cell("tau", "aether", 4000), TAU_USES), 0.97))
    return out


def check_targets(r: Results) -> list[Check]:
    return _locomo(r) + _tau(r) + _swe(r) + _cost(r) + _chat_cost(r) + _issue39(r)
