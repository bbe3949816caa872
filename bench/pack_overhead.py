"""Pack overhead: what the ContextPackPlugin costs per model call, and what it saves, on real runs.

Everything runs through a real ADK 2.13 Runner (see `trajectories.py`): recorded mini-swe-agent
SWE-bench runs and tau-bench airline episodes are replayed by a scripted model, and the plugin
packs every request as it would in production (profile, window, a real on-disk `PackStore` in a
temp dir with its background writer). Reported, in one run:

1. Latency per call of the plugin's before_model work (`ContextPacker.pack`, store write excluded:
   it is queued to the store's background thread) at ~50, 100, 200 and 1000 session events, next
   to ADK's own request building for the same calls: `BaseLlmFlow._preprocess_async`, i.e. all
   of ADK's request processors (instructions, tools, contents from session events), measured in
   the same run with no plugin. No recorded run reaches 1000 events (the longest has 129 steps),
   so the sessions are built by concatenating the tool turns of several runs into ONE invocation
   (one user message, then a ~500-call tool loop): the hard case for context management.
2. Tokens sent: mean prompt tokens per call (aether_context `TokenCounter` over
   `request_from_llm(request)`, `request_tokens`) with and without the plugin.
3. Prefix stability: median over calls of `manifest.prefix_tokens / manifest.previous_tokens`
   and the share of calls whose payload was reused.

Usage::

    .venv/bin/python bench/pack_overhead.py --data ../shared/datasets          # 4-10 min on 2 cores
    .venv/bin/python bench/pack_overhead.py --data ../shared/datasets --quick  # ~2 min (fewer samples)
    .venv/bin/python bench/pack_overhead.py --profile-pack                     # cProfile of pack at 1000 events
    .venv/bin/python bench/pack_overhead.py --long                             # 1K/5K/10K-event sessions (issue 17)
    .venv/bin/python bench/pack_overhead.py --long --quick                     # the same, fewer calls per session

`--long` runs sessions of 1,000, 5,000 and 10,000 events (a tool loop and a chat of short user turns,
seeded by `long_sessions.py`) with no plugin, ADK EventsCompaction and the plugin. It prints the table
with its command, commit and date, and writes it to the 'overhead-long' section (no prose: the method
is written once, by hand, in docs/benchmarks.md).

This module replays and samples; `overhead_report.py` turns the samples into the 'overhead' section.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime as dt
import gc
import io
import logging
import os
import pstats
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from measure import PackCpuClock, RequestShape, prefix_share  # noqa: E402
from overhead_report import Measured, band, in_band, ms, set_quick, short_report  # noqa: E402
from report_sections import DEFAULT_FILE, machine, pct, write_section  # noqa: E402
from trajectories import (DEFAULT_DATA, GatedPlugin, ModelCall, Trajectory, concat_trajectories,  # noqa: E402
                          load_mini_swe, load_tau_airline, replay)


from aether_context import ContextPacker, ContextPackPlugin, PackStore, TokenCounter  # noqa: E402
from aether_context.adk import request_from_llm  # noqa: E402

# --------------------------------------------------------------------------- instrumentation
class TimedStore(PackStore):
    """A real PackStore that also records how long each background write took (writer busy time)."""

    def __init__(self, url: str):
        super().__init__(url, background=True)
        self.write_s: list[float] = []

    def _save_now(self, *args):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        super()._save_now(*args)
        self.write_s.append(time.perf_counter() - t0)


def _stages(timings: dict[str, float]) -> dict[str, float]:
    """The packer's own stage timings (ms, `CallRecord.timings`) as seconds: the edge's inputs, the
    pipeline (every build_pack stage), the request rewrite."""
    edge = timings.get("inputs", 0.0) + timings.get("apply", 0.0)
    return {"inputs": timings.get("inputs", 0.0) / 1000, "pipeline": (timings.get("total", 0.0) - edge) / 1000,
            "apply": timings.get("apply", 0.0) / 1000} if timings else {}


@dataclass
class PackSample:
    events: int
    seconds: float
    manifest: Any
    stages: dict[str, float]
    cpu: float = 0.0  # CPU time of the loop and pack threads (PackCpuClock): not inflated by other processes


class TimedPacker(ContextPacker):
    """The production packer, timed around `pack` (what the plugin's before_model awaits)."""

    def __init__(self, profiler: cProfile.Profile | None = None, profile_from: int = 0, **settings: Any):
        super().__init__(**settings)
        self.samples: list[PackSample] = []
        self.after_tool_s: list[tuple[int, float]] = []  # (events, seconds) of the plugin's tool-result hook
        self._profiler = profiler
        self._profile_from = profile_from
        self._clock = PackCpuClock()

    async def after_tool(self, tool, tool_args, tool_context, result):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = await super().after_tool(tool, tool_args, tool_context, result)
        self.after_tool_s.append((len(tool_context.session.events), time.perf_counter() - t0))
        return out

    async def pack(self, callback_context, llm_request):  # type: ignore[no-untyped-def]
        events = len(callback_context.session.events)
        profiling = self._profiler is not None and events >= self._profile_from
        if profiling:
            self._profiler.enable()
        t0, c0 = time.perf_counter(), self._clock.now()
        record = await super().pack(callback_context, llm_request)
        seconds, cpu = time.perf_counter() - t0, self._clock.now() - c0
        if profiling:
            self._profiler.disable()
        self.samples.append(PackSample(events, seconds, record.manifest, _stages(record.timings), cpu))
        return record


class GcClock:
    """Total time spent in garbage-collection pauses while active (any thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0 = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0

    def __enter__(self) -> "GcClock":
        gc.collect()
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self._callback)


@dataclass
class Metered:
    events: int
    tokens: int
    prefix_ratio: float | None  # leading tokens equal to the previous call / previous call's tokens


class RequestMeter:
    """Tokens and prefix reuse of each request as the model receives it (runs untimed, in the model call)."""

    def __init__(self, counter: TokenCounter, want: Callable[[ModelCall], bool] = lambda call: True):
        self.counter = counter
        self.want = want
        self.rows: list[Metered] = []
        self._prev: tuple[int, RequestShape] | None = None  # (call index, shape) of the last metered call

    def __call__(self, call: ModelCall, llm_request: Any) -> None:
        if not self.want(call):
            return
        shape = RequestShape.of(request_from_llm(llm_request), self.counter)
        ratio = None
        if self._prev is not None and self._prev[0] == call.index - 1:
            ratio = prefix_share(self._prev[1], shape)
        self._prev = (call.index, shape)
        total = shape.total
        self.rows.append(Metered(call.events, total, ratio))


# --------------------------------------------------------------------------- runs
@dataclass
class RunOut:
    label: str
    calls: list[ModelCall] = field(default_factory=list)
    packs: list[PackSample] = field(default_factory=list)
    after_tool: list[tuple[int, float]] = field(default_factory=list)
    metered: list[Metered] = field(default_factory=list)
    gc_s: float = 0.0
    writer_s: float = 0.0
    wall_s: float = 0.0
    truncated: int = 0


async def run_config(label: str, trajectories: Sequence[Trajectory], *, window: int | None, profile: str,
                     store_root: Path, meter_counter: TokenCounter, want: Callable[[ModelCall], bool] = lambda c: True,
                     gate: int | None = None, deadline_s: float | None = None,
                     profiler: cProfile.Profile | None = None, profile_from: int = 0) -> RunOut:
    """Replay `trajectories` one after the other with (window set) or without the plugin.

    One packer (one counter cache, one store) serves all of them, as one app process would.
    """
    out = RunOut(label)
    packer = None
    if window is not None:
        store = TimedStore(str(store_root / label))
        packer = TimedPacker(profile=profile, store=store, window_tokens=window, profiler=profiler,
                             profile_from=profile_from)
    started = time.perf_counter()
    with GcClock() as gclock:
        for traj in trajectories:
            plugins = []
            if packer is not None:
                plugin = ContextPackPlugin(packer=packer)
                plugins = [GatedPlugin(plugin, from_events=gate) if gate else plugin]
            meter = RequestMeter(meter_counter, want)

            def during_model(call: ModelCall, llm_request: Any, meter: RequestMeter = meter) -> None:
                # A real model call lasts long enough for the store's writer to finish: let it, untimed,
                # so its work neither overlaps the next timed section nor counts in it.
                if packer is not None:
                    packer.store.flush()
                meter(call, llm_request)

            left = None if deadline_s is None else max(1.0, deadline_s - (time.perf_counter() - started))
            result = await replay(traj, plugins=plugins, keep_requests="none", on_request=during_model, deadline_s=left)
            out.calls += result.calls
            out.metered += meter.rows
            out.truncated += int(result.truncated)
            if result.truncated:
                break
    out.gc_s, out.wall_s = gclock.seconds, time.perf_counter() - started
    if packer is not None:
        packer.store.flush()
        out.packs = packer.samples
        out.after_tool = packer.after_tool_s
        out.writer_s = sum(packer.store.write_s)  # type: ignore[attr-defined]
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="shared datasets folder (default: %(default)s, from the repo root)")
    ap.add_argument("--quick", action="store_true", help="fewer sessions, runs and samples (~2 min)")
    ap.add_argument("--profile", default="default", help="budget profile (default: %(default)s)")
    ap.add_argument("--windows", default="32000,8000", help="window_tokens to test, comma-separated (default: %(default)s)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds allowed per configuration and phase before the replay stops (default 240, quick 120)")
    ap.add_argument("--out", default=DEFAULT_FILE,
                    help="benchmarks file whose 'overhead' section gets the report, relative to the repo root")
    ap.add_argument("--no-write", action="store_true", help="print only; do not write --out")
    ap.add_argument("--profile-pack", action="store_true",
                    help="instead of the benchmark: cProfile ContextPacker.pack at ~1000 events (first window)")
    ap.add_argument("--long", action="store_true",
                    help="instead: 1,000/5,000/10,000-event sessions, tool loop and chat (section 'overhead-long')")
    ap.add_argument("--sizes", default="1000,5000,10000", help="--long: session sizes in events (default: %(default)s)")
    ap.add_argument("--calls", type=int, default=None, help="--long: live calls per session (default 40, quick 20)")
    ap.add_argument("--unseen", action="store_true",
                    help="--long: also two held-out shapes (a tool loop of tau-bench tool turns, a LoCoMo chat)")
    return ap.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("google_adk.google.adk.telemetry._metrics").setLevel(logging.ERROR)
    t_start = time.perf_counter()
    machine_info = machine()
    os.chdir(ROOT)
    data = Path(args.data)
    windows = [int(w) for w in args.windows.split(",") if w.strip()]
    quick = args.quick
    deadline = args.deadline or (120.0 if quick else 240.0)
    set_quick(quick)

    runs = load_mini_swe(data)
    taus = load_tau_airline(data)
    if args.long:
        return await _main_long(args, runs, taus, t_start=t_start, machine_info=machine_info, argv=argv)
    # Long single-invocation sessions: tool turns of consecutive runs, starting at different runs.
    n_short = 1 if quick else 3
    offsets = [k * len(runs) // n_short for k in range(n_short)]
    short_hi, long_hi = band(200)[1], band(1000)[1]
    short_sessions = [concat_trajectories(runs[o:] + runs[:o], min_model_calls=(short_hi + 1) // 2, ident=f"concat-short-{o}")
                      for o in offsets]
    long_session = concat_trajectories(runs, min_model_calls=(long_hi + 1) // 2, ident="concat-long")
    gate = band(1000)[0] - (2 * 25 if quick else 2 * 50)  # plugin warm-up (25 / 50 calls) before the 1000-event band
    real_swe = runs[:: 4] if quick else runs
    real_tau = taus[:: 4] if quick else taus[:: 2]
    sessions = Sessions(short_sessions, long_session, gate, real_swe, real_tau, runs, taus)

    counter = TokenCounter()
    with tempfile.TemporaryDirectory(prefix="aether-bench-") as tmp:
        return await _run(args, Path(tmp), sessions, windows=windows, deadline=deadline, counter=counter,
                          t_start=t_start, machine_info=machine_info, argv=argv)


@dataclass
class Sessions:
    """The workloads of one benchmark run (see `main`)."""

    short: list[Trajectory]  # long single-invocation sessions up to the 200-event band
    long: Trajectory  # one session through the 1000-event band
    gate: int  # events before the plugin joins the long session (its warm-up before the band)
    real_swe: list[Trajectory]
    real_tau: list[Trajectory]
    all_swe: list[Trajectory]
    all_tau: list[Trajectory]


async def _run(args: argparse.Namespace, tmp: Path, sessions: Sessions, *, windows: list[int], deadline: float,
               counter: TokenCounter, t_start: float, machine_info: str, argv: Sequence[str] | None) -> int:
    if args.profile_pack:
        return await _profile_pack(args, tmp, sessions, window=windows[0], deadline=deadline, counter=counter)
    print(f"# pack overhead benchmark — {machine_info}")
    print(f"sessions: {len(sessions.short)} short ({sessions.short[0].model_calls} calls) + 1 long "
          f"({sessions.long.model_calls} calls, plugin from {sessions.gate} events); real runs: {len(sessions.real_swe)} "
          f"mini-swe-agent, {len(sessions.real_tau)} tau-bench airline; windows {windows}; profile {args.profile!r}; "
          f"deadline {deadline:.0f} s", flush=True)
    measured, loads = await _run_configs(args, tmp, sessions, windows=windows, deadline=deadline, counter=counter)
    command = " ".join(["bench/pack_overhead.py", *[shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])]])
    report = short_report(
        measured, n_swe=len(sessions.real_swe), n_tau=len(sessions.real_tau), deadline=deadline,
        date=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), command=command, machine=machine_info,
        runtime=time.perf_counter() - t_start, profile=args.profile, windows=", ".join(str(w) for w in windows),
        n_short=len(sessions.short), short_calls=sessions.short[0].model_calls, long_calls=sessions.long.model_calls,
        long_runs=len(sessions.long.meta["concatenated"]), gate=sessions.gate, all_swe=len(sessions.all_swe),
        all_tau=len(sessions.all_tau), longest=max(t.model_calls for t in sessions.all_swe), loads="; ".join(loads))
    print(report)
    if not args.no_write:
        out = write_section(ROOT / args.out, "overhead", report)
        print(f"wrote the 'overhead' section of {out}")
    return 0


async def _profile_pack(args: argparse.Namespace, tmp: Path, sessions: Sessions, *, window: int, deadline: float,
                        counter: TokenCounter) -> int:
    """--profile-pack: cProfile of `ContextPacker.pack` over the long session's 1000-event band."""
    prof = cProfile.Profile()
    out = await run_config("profile", [sessions.long], window=window, profile=args.profile, store_root=tmp,
                           meter_counter=counter, want=lambda c: False, gate=sessions.gate, deadline_s=deadline * 2,
                           profiler=prof, profile_from=band(1000)[0])
    band_packs = [p for p in out.packs if in_band(p.events, 1000)]
    print(f"profiled {len(band_packs)} pack calls at {band(1000)} events, window {window}: "
          f"p50 {ms(pct([p.seconds for p in band_packs], 50))} ms (with profiler overhead)")
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).strip_dirs().sort_stats(key).print_stats(25)
        print(s.getvalue())
    return 0


async def _run_configs(args: argparse.Namespace, tmp: Path, sessions: Sessions, *, windows: list[int],
                       deadline: float, counter: TokenCounter) -> tuple[Measured, list[str]]:
    """Every workload under no plugin, then the plugin at each window; with the load when each started."""
    configs: list[tuple[str, int | None]] = [("no plugin", None)] + [(f"plugin@{w // 1000}k", w) for w in windows]
    measured = Measured({}, {}, {}, {}, [label for label, w in configs if w is not None])
    long_want = lambda c: c.events >= band(1000)[0] - 4  # noqa: E731 — meter the band (and the call before it)
    loads: list[str] = []
    for label, window in configs:
        tag = label.replace(" ", "_").replace("@", "_")
        loads.append(f"{label} {os.getloadavg()[0]:.1f}")
        common = dict(window=window, profile=args.profile, store_root=tmp, meter_counter=counter, deadline_s=deadline)
        measured.short[label] = await run_config(f"{tag}-short", sessions.short, **common)
        measured.long[label] = await run_config(f"{tag}-long", [sessions.long], want=long_want,
                                                gate=sessions.gate if window else None, **common)
        measured.swe[label] = await run_config(f"{tag}-swe", sessions.real_swe, **common)
        measured.tau[label] = await run_config(f"{tag}-tau", sessions.real_tau, **common)
        print(f"  {label}: " + ", ".join(f"{name} {d[label].wall_s:.0f} s" for name, d in
                                         (("short", measured.short), ("long", measured.long),
                                          ("mini-swe", measured.swe), ("tau", measured.tau))), flush=True)
    return measured, loads


# --------------------------------------------------------------------------- --long: 1,000 to 10,000 events
LONG_WINDOW = 8_000


async def _main_long(args: argparse.Namespace, runs: Sequence[Any], taus: Sequence[Any], *, t_start: float,
                     machine_info: str, argv: Sequence[str] | None) -> int:
    """Run the long sessions and print (and write) their table and target checks."""
    from google.adk.apps.app import EventsCompactionConfig

    from context_eval.systems import COMPACT_RETENTION, COMPACT_THRESHOLD, ExtractiveEventsSummarizer
    from long_sessions import SIZES, long_report, run_long

    sizes = [int(x) for x in args.sizes.split(",") if x.strip()] or list(SIZES)
    calls = args.calls or (20 if args.quick else 40)
    window = int(args.windows.split(",")[-1]) if args.windows else LONG_WINDOW
    compaction = {"events_compaction_config": EventsCompactionConfig(
        summarizer=ExtractiveEventsSummarizer(), token_threshold=int(COMPACT_THRESHOLD * window),
        event_retention_size=COMPACT_RETENTION)}
    out = []
    with tempfile.TemporaryDirectory(prefix="aether-long-") as tmp:
        for kind, source, make in _long_shapes(args, runs, taus):
            for n in sizes:
                t0 = time.perf_counter()
                out.append(await run_long(kind, n, source, live_calls=calls, window=window, profile=args.profile,
                                          compaction_options=compaction, tmp=Path(tmp), make=make))
                r = out[-1]
                print(f"  {kind} {n:,} events: {time.perf_counter() - t0:.0f} s, pack p50 "
                      f"{pct(r.pack_cpu, 50) * 1000:.1f} ms", flush=True)
    table, checks = long_report(out, live_calls=calls, window=window, profile=args.profile)
    command = " ".join(["bench/pack_overhead.py", *[shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])]])
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = (f"# Long sessions: a call at 1,000 to 10,000 events\n\n"
              f"{date}, commit {_commit()}. Command: `.venv/bin/python {command}`. {machine_info}. "
              f"Runtime {time.perf_counter() - t_start:.0f} s. {calls} live calls per session, window {window:,}, "
              f"profile `{args.profile}`, EventsCompaction at {COMPACT_THRESHOLD:g} of the window.\n\n"
              f"{table}\n\n" + "\n".join(checks) + "\n")
    print(report)
    if not args.no_write:
        print(f"wrote the 'overhead-long' section of {write_section(ROOT / args.out, 'overhead-long', report)}")
    return 0


def _long_shapes(args: argparse.Namespace, runs: Sequence[Any], taus: Sequence[Any]) -> list[tuple[str, Sequence[Any], Any]]:
    """The sessions measured: a tool loop of mini-swe-agent turns and a chat of tau-bench episodes; with
    `--unseen`, two shapes nothing was tuned on (a tool loop of tau-bench's JSON tool turns, LoCoMo's dialogue)."""
    from long_sessions import chat, dialogue_episodes, tool_loop

    shapes = [("tool loop", runs, tool_loop), ("chat", taus, chat)]
    if args.unseen:
        from context_eval.locomo import load_locomo
        shapes += [("tool loop, tau-bench tools (held out)", taus, tool_loop),
                   ("chat, LoCoMo dialogue (held out)", dialogue_episodes(load_locomo(args.data)), chat)]
    return shapes


def _commit() -> str:
    """The short hash of the checked-out commit, with `+` when the tree has changes ("unknown" outside git)."""
    import subprocess
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
