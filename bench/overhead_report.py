"""The short-session report of `pack_overhead.py`: latency, CPU, side effects, tokens, prefix, targets.

Why a module of its own: the run loop (`pack_overhead.py`) replays sessions and collects samples;
this turns those samples into the 'overhead' section of docs/benchmarks.md. The bands of session
events each latency point stands for are defined here, since both sides read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from report_sections import mean, pct

if TYPE_CHECKING:
    from pack_overhead import Metered, RunOut

__all__ = ["POINTS", "TARGET_P50_MS", "TARGET_GROWTH", "band", "in_band", "set_quick", "ms", "p50p95", "fmt_delta",
           "Measured", "short_report", "REPORT"]

POINTS = (50, 100, 200, 1000)
TARGET_P50_MS = 15.0
TARGET_GROWTH = 3.0
_MAX_HALF_BAND = 50  # --quick: 25


def set_quick(quick: bool) -> None:
    """--quick narrows the bands (fewer samples per point)."""
    global _MAX_HALF_BAND
    _MAX_HALF_BAND = 25 if quick else 50


def band(point: int) -> tuple[int, int]:
    """Calls whose session holds this many events (±10 %, at least ±5, at most ±50) count for a point."""
    half = max(5, min(round(0.1 * point), _MAX_HALF_BAND))
    return point - half, point + half


def in_band(events: int, point: int) -> bool:
    lo, hi = band(point)
    return lo <= events <= hi


def ms(x: float) -> str:
    """Seconds as milliseconds; a second or more is written in seconds, with its unit."""
    return "n/a" if math.isnan(x) else (f"{x * 1000:.1f}" if x < 1 else f"{x:.2f} s")


def p50p95(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"{ms(pct(values, 50))} / {ms(pct(values, 95))}"


def fmt_delta(base: float, other: float) -> str:
    if math.isnan(base) or math.isnan(other) or not base:
        return "n/a"
    return f"{other:,.0f} ({(other - base) / base * 100:+.0f} %)"


@dataclass
class Measured:
    """Every configuration's runs, by workload (label -> run), and the plugin configurations' labels."""

    short: "dict[str, RunOut]"
    long: "dict[str, RunOut]"
    swe: "dict[str, RunOut]"
    tau: "dict[str, RunOut]"
    plugin_labels: list[str]

    def for_point(self, point: int) -> "dict[str, RunOut]":
        return self.long if point >= 500 else self.short


def _latency(m: Measured) -> tuple[str, dict[str, dict[int, float]]]:
    """The wall-clock latency table, and the pack p50 per configuration and point."""
    rows = []
    p50: dict[str, dict[int, float]] = {label: {} for label in m.plugin_labels}
    head = "| events (band) | ADK request build, no plugin: p50 / p95 ms (n) |"
    sep = "| --- | --- |"
    for label in m.plugin_labels:
        head += f" pack {label}: p50 / p95 ms (n) | pack ÷ ADK (p50) |"
        sep += " --- | --- |"
    for point in POINTS:
        src = m.for_point(point)
        adk = [c.adk_build_s for c in src["no plugin"].calls if in_band(c.events, point) and c.adk_build_s is not None]
        lo, hi = band(point)
        row = f"| {point} ({lo}–{hi}) | {p50p95(adk)} ({len(adk)}) |"
        for label in m.plugin_labels:
            packs = [p.seconds for p in src[label].packs if in_band(p.events, point)]
            p50[label][point] = pct(packs, 50)
            ratio = pct(packs, 50) / pct(adk, 50) if packs and adk else math.nan
            row += f" {p50p95(packs)} ({len(packs)}) | {ratio:.1f}× |"
        rows.append(row)
    for name, src in (("mini-swe-agent runs as recorded, every call", m.swe), ("tau-bench airline, every call", m.tau)):
        adk = [c.adk_build_s for c in src["no plugin"].calls if c.adk_build_s is not None]
        events = [c.events for c in src["no plugin"].calls]
        row = f"| {name} (events {min(events)}–{max(events)}) | {p50p95(adk)} ({len(adk)}) |"
        for label in m.plugin_labels:
            packs = [p.seconds for p in src[label].packs]
            row += f" {p50p95(packs)} ({len(packs)}) | {pct(packs, 50) / pct(adk, 50):.1f}× |"
        rows.append(row)
    return "\n".join([head, sep, *rows]), p50


def _cpu(m: Measured) -> tuple[str, dict[str, dict[int, float]]]:
    """The same in CPU time (robust to other processes on a shared machine), and its p50s."""
    cpu_p50: dict[str, dict[int, float]] = {label: {} for label in m.plugin_labels}
    rows = ["| events (band) | ADK request build, no plugin: CPU p50 / p95 ms |"
            + "".join(f" pack {lb}: CPU p50 / p95 ms |" for lb in m.plugin_labels),
            "| --- | --- |" + " --- |" * len(m.plugin_labels)]
    for point in POINTS:
        src = m.for_point(point)
        adk = [c.adk_build_cpu_s for c in src["no plugin"].calls if in_band(c.events, point) and c.adk_build_cpu_s is not None]
        row = f"| {point} | {p50p95(adk)} |"
        for label in m.plugin_labels:
            cpus = [p.cpu for p in src[label].packs if in_band(p.events, point)]
            cpu_p50[label][point] = pct(cpus, 50)
            row += f" {p50p95(cpus)} |"
        rows.append(row)
    return "\n".join(rows), cpu_p50


def _side(m: Measured) -> str:
    """Side effects and the time breakdown at 1000 events."""
    rows = ["| window | ADK build p50 ms (no-plugin run → this run) | full builds (not reused) in band "
            "| pack p50 ms: inputs / pipeline / apply | full-build pack p50 / max | after_tool hook p50 / p95 ms "
            "| GC pauses (s, whole long run) | store writer busy (s) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    long = m.long
    adk_no = pct([c.adk_build_s for c in long["no plugin"].calls if in_band(c.events, 1000) and c.adk_build_s], 50)
    for label in m.plugin_labels:
        run = long[label]
        adk_with = pct([c.adk_build_s for c in run.calls if in_band(c.events, 1000) and c.adk_build_s], 50)
        bp = [p for p in run.packs if in_band(p.events, 1000)]
        full = [p for p in bp if not p.manifest.reused_payload]
        stage = " / ".join(ms(pct([p.stages.get(k, math.nan) for p in bp if k in p.stages], 50))
                           for k in ("inputs", "pipeline", "apply"))
        full_s = f"{ms(pct([p.seconds for p in full], 50))} / {ms(max((p.seconds for p in full), default=math.nan))}"
        hook = p50p95([s for e, s in run.after_tool if in_band(e, 1000)])
        rows.append(f"| {label} | {ms(adk_no)} → {ms(adk_with)} | {len(full)} of {len(bp)} | {stage} | {full_s} "
                    f"| {hook} | {long['no plugin'].gc_s:.1f} → {run.gc_s:.1f} | {run.writer_s:.1f} |")
    return "\n".join(rows)


def _tokens(m: Measured, n_swe: int, n_tau: int) -> str:
    """Mean prompt tokens per call, with and without the plugin."""
    head = "| workload | calls | no plugin: mean prompt tokens / call |" + "".join(f" {lb} (vs no plugin) |" for lb in m.plugin_labels)
    rows = [head, "| --- | --- | --- |" + " --- |" * len(m.plugin_labels)]

    def row(name: str, src: "dict[str, RunOut]", keep: "Callable[[Metered], bool]" = lambda m: True) -> str:
        base = [x.tokens for x in src["no plugin"].metered if keep(x)]
        out = f"| {name} | {len(base)} | {mean(base):,.0f} |"
        for label in m.plugin_labels:
            out += f" {fmt_delta(mean(base), mean([x.tokens for x in src[label].metered if keep(x)]))} |"
        return out

    rows.append(row(f"mini-swe-agent runs as recorded ({n_swe} runs, 1 invocation each)", m.swe))
    rows.append(row(f"tau-bench airline episodes ({n_tau}, a user turn per invocation)", m.tau))
    rows.append(row("long session, 200-event band", m.short, lambda x: in_band(x.events, 200)))
    rows.append(row("long session, 1000-event band", m.long, lambda x: in_band(x.events, 1000)))
    return "\n".join(rows)


def _below(xs: Sequence[float]) -> str:
    return f"{sum(x < 0.9 for x in xs) / len(xs) * 100:.0f} %" if xs else "n/a"


def _prefix(m: Measured) -> str:
    """Prefix stability, from the manifests and as the model received the requests."""
    rows = ["| workload | config | median prefix_tokens / previous_tokens (manifest) | calls below 0.9 | payload reused "
            "| as received by the model: median (below 0.9) |", "| --- | --- | --- | --- | --- | --- |"]

    def add(name: str, src: "dict[str, RunOut]", keep: Callable[[int], bool] = lambda e: True) -> None:
        base = [x.prefix_ratio for x in src["no plugin"].metered if x.prefix_ratio is not None and keep(x.events)]
        rows.append(f"| {name} | no plugin | – | – | – | {pct(base, 50):.3f} ({_below(base)}, n={len(base)}) |")
        for label in m.plugin_labels:
            ms_ = [p.manifest for p in src[label].packs if keep(p.events) and p.manifest.previous_tokens > 0]
            ratios = [x.prefix_tokens / x.previous_tokens for x in ms_]
            reused = sum(x.reused_payload for x in ms_) / len(ms_) if ms_ else math.nan
            own = [x.prefix_ratio for x in src[label].metered if x.prefix_ratio is not None and keep(x.events)]
            rows.append(f"| {name} | {label} | {pct(ratios, 50):.3f} (n={len(ratios)}) | {_below(ratios)} "
                        f"| {reused * 100:.0f} % | {pct(own, 50):.3f} ({_below(own)}) |")

    add("mini-swe-agent runs", m.swe)
    add("tau-bench airline", m.tau)
    add("long session, 1000-event band", m.long, lambda e: in_band(e, 1000))
    return "\n".join(rows)


def _checks(m: Measured, p50: dict[str, dict[int, float]], cpu_p50: dict[str, dict[int, float]], deadline: float) -> str:
    """The latency targets, PASS or FAIL per configuration, and runs cut short by the deadline."""
    checks = []
    for label in m.plugin_labels:
        at1000, at100 = p50[label][1000], p50[label][100]
        c1000, c100 = cpu_p50[label][1000], cpu_p50[label][100]
        ok1 = at1000 <= TARGET_P50_MS / 1000
        checks.append(f"- {'PASS' if ok1 else 'FAIL'} {label}: p50 pack at 1000 events = {ms(at1000)} ms "
                      f"(target ≤ {TARGET_P50_MS:.0f} ms; CPU time p50 {ms(c1000)} ms)")
        growth = at1000 / at100 if at100 else math.nan
        ok2 = growth <= TARGET_GROWTH
        checks.append(f"- {'PASS' if ok2 else 'FAIL'} {label}: p50 at 1000 events / p50 at 100 events = {growth:.1f}× "
                      f"(target ≤ {TARGET_GROWTH:.0f}×; {ms(at1000)} vs {ms(at100)} ms; in CPU time "
                      f"{c1000 / c100 if c100 else math.nan:.1f}×)")
    truncated = [f"{k} {run.label}" for d in (m.short, m.long, m.swe, m.tau) for k, run in d.items() if run.truncated]
    if truncated:
        checks.append(f"- NOTE: stopped at the {deadline:.0f} s deadline (fewer samples): {', '.join(truncated)}")
    return "\n".join(checks)


def short_report(m: Measured, *, n_swe: int, n_tau: int, deadline: float, **header: object) -> str:
    """The 'overhead' section: `header` fills the setup text (date, command, machine, sessions, ...)."""
    latency, p50 = _latency(m)
    cpu, cpu_p50 = _cpu(m)
    return REPORT.format(**header, n_swe=n_swe, n_tau=n_tau, latency=latency, cpu=cpu, side=_side(m),
                         tokens=_tokens(m, n_swe, n_tau), prefix=_prefix(m), checks=_checks(m, p50, cpu_p50, deadline))


REPORT = """\
# Benchmark: pack overhead (ContextPackPlugin in ADK's before_model)

Date: {date}. Command (from the repository root): `.venv/bin/python {command}`.
Machine: {machine}. Shared and noisy (1-minute load average when each configuration started: {loads}): figures
are medians (p50) with p95 beside them. Runtime {runtime:.0f} s.

**Setup.** Real trajectories replayed through an unmodified ADK 2.13 `Runner` by `bench/trajectories.py`: a
scripted `BaseLlm` returns the recorded assistant turns, recorded tools return the recorded outputs (mini-swe-agent:
`bash(command=...)` returning `{{"output": ...}}`; tau-bench airline: its tools with declarations inferred from the
recorded calls). Plugin: `ContextPackPlugin(profile="{profile}", window_tokens=W)` for W in {windows}, with a real
`PackStore` in a temp directory (background writer); all the plugin's hooks are installed, so its after_tool offload
(on in the profile) stores large tool results as artifacts and keeps a compact form in the session, as in production.
The model ignores what it is sent, so every configuration replays the same recorded turns.

**Long sessions.** No recorded run reaches 1000 events (longest: {longest} steps), so long sessions are built
by concatenating the tool turns of consecutive mini-swe-agent runs into ONE invocation (the first run's system prompt
and task, then a tool loop of several runs' turns; final answers dropped): {n_short} sessions of {short_calls} model
calls (to ~220 events, starting at different runs) for the 50/100/200 points, and one of {long_calls} calls ({long_runs}
runs, ~1050 events) for the 1000 point. A session at call *k* holds 1 + 2*k* events (user message, then a model
event and a tool event per step). To bound the runtime, in the long session the plugin joins at {gate} events
(earlier calls get ADK's request unchanged) so its state is warm before the measured band.

**What is timed.** *pack*: `ContextPacker.pack`, the whole before_model work of the plugin (collect inputs, build the
pack, rewrite the request, queue the store write), and, before a new user turn's first call, the plugin's
`on_user_message` hook (it reads the message and the task, and queues the question's embedding on the work-ahead
thread), added to that call. The write itself runs on the store's background thread and the work ahead on its own; the
replayed model answers at once, so the benchmark waits for both inside each model call (untimed), as a real model call's
latency would let them finish: their work neither overlaps nor counts in the timed sections (the writer's total busy
time is reported below). The plugin's after_tool hook (`ContextPacker.after_tool`, the offload) is timed separately.
*ADK request build* (the baseline): `BaseLlmFlow._preprocess_async` for the same call, i.e. all of ADK's request
processors (instructions, tool declarations, contents rebuilt from session events), measured in the no-plugin run of
the same benchmark process. Tokens: `TokenCounter` (cl100k) over `request_from_llm(request)` with `request_tokens`, for
the request the model received. Real runs: {n_swe} of the {all_swe} mini-swe-agent runs and {n_tau} of the {all_tau} tau-bench airline episodes as
recorded.

## Pack latency per model call

{latency}

The same calls in CPU time of the event-loop and pack threads (`bench/measure.PackCpuClock`), which other processes on this shared
machine do not inflate (garbage-collection pauses still count):

{cpu}

## At 1000 events: where the time goes, and side effects on ADK

{side}

The second column compares ADK's request build for the same calls without and with the plugin. Two effects move it:
the offload keeps large tool results compact in the session, so ADK rebuilds smaller contents (faster), and
garbage-collection pauses, as the plugin keeps more objects alive (pack states, manifests, converted messages) and
allocates more per call (slower). The inputs / pipeline / apply split is the packer's own stage record
(`CallRecord.timings`: the edge's input collection, every `build_pack` stage, the request rewrite).

## Tokens sent

{tokens}

## Prefix stability

Per call with a previous call in the same session: manifest `prefix_tokens / previous_tokens` and the share of calls
that reused the previous payload (`reused_payload`); the last column measures the same thing on the requests the
model received (leading messages identical to the previous request, with an identical system instruction and tools).

{prefix}

## Targets

{checks}
"""
