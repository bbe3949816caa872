"""The markdown report of one context_eval run: retention tables (issue 10), cost and cache tables (issue 11),
break causes, determinism, and the targets, with the exact command and the run's limits beside the figures."""

from __future__ import annotations

import math

from context_eval.cost import CACHED_PRICE
from context_eval.evaluate import Results
from context_eval.systems import COMPACT_RETENTION, COMPACT_THRESHOLD, SLIDING_SLACK, by_key
from context_eval.targets import LOCOMO_EVIDENCE, Check
from context_eval.workloads import Workload

__all__ = ["render_report"]


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.1f} %"


def _num(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.0f}"


def _frac(num: float, den: int) -> str:
    """A count as `x % (hits/total)`; a sum of per-item shares as `x % (mean of n)`."""
    if not den:
        return "n/a"
    detail = f"{num:,}/{den:,}" if isinstance(num, int) else f"mean of {den:,}"
    return f"{num / den * 100:.1f} % ({detail})"


def _retention_table(w: Workload, window: int, r: Results) -> str:
    cells = [c for key in w.systems if (c := r.cell(w.name, key, window)) is not None]
    if not cells:
        return ""
    metrics = list(cells[0].retention)
    head = ["system", *metrics, "tokens per request (mean)"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in cells:
        vals = [_frac(*c.retention[m]) for m in metrics]
        rows.append(f"| {by_key(c.system).label} | " + " | ".join(vals) + f" | {_num(c.cost.mean_tokens)} |")
    return "\n".join(rows)


def _over(f) -> str:
    return "n/a" if f.over_1pct is None else f"{f.over_1pct} ({f.over_1pct_nothing_added})"


def _cost_table(w: Workload, window: int, r: Results) -> str:
    cells = [c for key in w.systems if (c := r.cell(w.name, key, window)) is not None]
    head = ["system", "calls", "tokens/call", "last fifth", "calls > no plugin", "> no plugin + 1 % (nothing added)",
            "prefix-stable (median of run medians)", "re-processed tokens/run", "cache breaks/run",
            "… before the last message"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in cells:
        f = c.cost
        rows.append(f"| {by_key(c.system).label} | {f.calls:,} | {_num(f.mean_tokens)} | {_num(f.last_fifth_tokens)} | "
                    f"{_pct(f.larger_than_none)} | {_over(f)} | {_pct(f.prefix_median)} | "
                    f"{_num(f.reprocessed_per_run)} | {f.breaks_per_run:.1f} | {f.deep_breaks_per_run:.1f} |")
    causes = [f"- {by_key(c.system).label}: " + "; ".join(f"{k} × {v}" for k, v in c.cost.causes.most_common())
              for c in cells if c.cost.causes]
    last = [f"- {by_key(c.system).label}: {c.cost.last_as_adk[1]:,} of {c.cost.last_as_adk[0]:,} unchanged; "
            f"role and first part ADK's: {c.cost.last_as_adk[2]:,}" for c in cells if c.cost.last_as_adk[0]]
    return "\n".join(rows) + ("\n\nCache-break causes (all runs):\n" + "\n".join(causes) if causes else "") \
        + ("\n\nCalls whose request, as ADK built it, ends with a function response: the last content the model "
           "gets\n" + "\n".join(last) if last else "")


def _chat_cost_table(w: Workload, r: Results) -> str:
    """Issue 39 item 8: what a chat user pays per question beside the evidence it carries, per system and window."""
    head = ["system", *(f"{m} at {win:,}" for win in w.windows for m in ("evidence", "cost per question"))]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in w.systems:
        cells = [r.cell(w.name, key, win) for win in w.windows]
        if all(c is None for c in cells):
            continue
        vals = []
        for c in cells:
            vals += ["n/a", "n/a"] if c is None else [_frac(*c.retention[LOCOMO_EVIDENCE]),
                                                     _num(c.cost.effective_per_call)]
        rows.append(f"| {by_key(key).label} | " + " | ".join(vals) + " |")
    return "\n".join(rows)


def _errors(r: Results) -> str:
    lines = [f"- {c.workload} / {c.system} @ {c.window}: {e}" for c in r.cells.values() for e in c.errors[:3]]
    return "\n".join(dict.fromkeys(lines)) or "none"


def render_report(workloads: list[Workload], r: Results, checks: list[Check], *, date: str, command: str, machine: str,
                  runtime_s: float, limits: str) -> str:
    out = [f"""# Benchmark: what reaches the model, and what it costs (context_eval)

Date: {date}. Command (from the repository root): `.venv/bin/python {command}`.
Machine: {machine}. Runtime {runtime_s:.0f} s ({'; '.join(f'{k} {v:.0f} s' for k, v in r.walls.items())}).
Scope: {limits}.

**Setup.** Every workload is replayed through an unmodified ADK `Runner` with the shared replay library
(`bench/replay_adk.py`: `ReplayLlm`, a subclass of `aether_context.testing.ScriptedLlm`, answers with the recorded
turns; recorded tools return the recorded outputs; sessions have seeded ids and a fixed clock). Every figure is
measured on the `LlmRequest` the model received, after every plugin, with one ruler (`bench/measure.py`: cl100k
tokens over `request_from_llm`). Baselines run in the same process and run: no plugin; a sliding window of the
newest contents that fit W − {SLIDING_SLACK:.0%} (`SlidingWindowPlugin`); ADK `EventsCompactionConfig(token_threshold
={COMPACT_THRESHOLD:.0%} of W, event_retention_size={COMPACT_RETENTION})` with a model-free extractive summarizer; ADK
`PreloadMemoryTool` (memory mode). aether-context: `ContextPackPlugin(profile=…, window_tokens=W, store="memory://…")`,
one packer per pass (one app, many sessions).

**Metrics.** LoCoMo: per question of categories 1–4, the share of its evidence turns whose text (whitespace
normalised) is in the request text (system instruction, tool declarations, every part); mean over questions
(pooled turns beside it). Events are `Name: text` (plus `[shares an image: caption]`), stamped from the session
dates, speaker A as the user, speaker B as the agent; the model answers each question with its gold answer.
tau-bench: an identifier use is a tool-call argument value (≥ 3 characters) seen as a whole token in an earlier user
message or tool result of the episode and not in the system prompt; it counts when the value is in the request of
the model call that made the tool call. mini-swe-agent: files of `info.submission`'s `diff --git` headers named in
the final request; the last five distinct real failure lines of the outputs before the final call (the issue's
definition, read by the benchmark's own `context_eval/failure_lines.py`, not the package's recognizer: traceback
exception lines, pytest `E` lines naming an exception or an assertion, `file.py:N: XError`, `FAILED`/`ERROR` lines,
`Error:` lines; first 200 characters) in the final request; calls over W.
Cost: tokens per call; last fifth = the last ⌈n/5⌉ calls of each run, pooled; calls larger than no plugin's same
call, and more than 1 % larger (in brackets: those whose pack added no Memory or Evidence, from the manifest's
`layer_budgets`, and no failure warning: a "  ! " line of FAILURES SO FAR, the pack's analysis of repeated or
clustered failures, which ADK's request never holds); prefix-stable share = leading tokens identical to the previous request / the current request's tokens (head
= system instruction + tools as one block, then messages by digest), median per run, then the median of the runs;
re-processed tokens = per call, its tokens minus that shared prefix (all of the first call), summed per run; cache
break = a call whose previous request is not a prefix of it ("… before the last message": the break reaches
before the previous request's last message, i.e. more than a closing block was replaced), cause from the aether-context manifest (`compaction`,
`cache_break`) when recorded, else from the requests; determinism = a second identical pass, request checksums
compared call by call (the second pass with fresh packers and `time.time` a day later).
"""]
    for w in workloads:
        out.append(f"## {w.title}\n\n{len(w.jobs)} runs, profile `{w.profile}`.")
        for window in w.windows:
            table = _retention_table(w, window, r)
            if table:
                out.append(f"### {w.name}, W = {window:,}: what reaches the model\n\n{table}")
                out.append(f"### {w.name}, W = {window:,}: cost and cache\n\n{_cost_table(w, window, r)}")
        if w.name.startswith("locomo"):
            out.append(f"### {w.name}: cost per question as users pay it\n\nEffective input tokens per question: "
                       f"uncached + cached × {CACHED_PRICE} (cached = the prefix shared with the previous request)."
                       f"\n\n{_chat_cost_table(w, r)}")
    det = [f"- {w} @ {win:,}: {d.identical_runs}/{d.runs} runs identical; {d.differing_calls} of {d.calls} calls differ"
           + (f" (first: {d.first_difference})" if d.first_difference else "") for (w, win), d in sorted(r.determinism.items())]
    out.append("## Determinism (aether-context, two identical passes)\n\n" + ("\n".join(det) or "not run"))
    out.append("## Targets\n\nAs issues 10 and 11 state them, with two readings made explicit: the best baseline is the best "
               "one whose requests fit the window (a request over W is not one a model of that window accepts), and "
               "re-processed tokens may equal ADK EventsCompaction's (both send the whole session verbatim when it fits)."
               "\n\n" + "\n".join(f"- **{c.verdict}** (issue {c.issue}) {c.name}: {c.detail}" for c in checks))
    out.append(f"Runs that failed: {_errors(r)}")
    return "\n\n".join(out) + "\n"
