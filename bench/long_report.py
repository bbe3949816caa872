"""`pack_overhead.py --long`: what a call costs at 1,000, 5,000 and 10,000 session events (issue 17).

Runs `long_sessions.run_long` for a tool loop and a chat at each size and writes the
'overhead-long' section of docs/benchmarks.md, with what the profiler found and what was removed.
"""

from __future__ import annotations

import datetime as dt
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from google.adk.apps.app import EventsCompactionConfig

from context_eval.systems import COMPACT_RETENTION, COMPACT_THRESHOLD, ExtractiveEventsSummarizer
from long_sessions import SIZES, chat, dialogue_episodes, long_report, run_long, tool_loop
from report_sections import DEFAULT_FILE, write_section

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 8_000


async def main_long(args: Any, runs: Sequence[Any], taus: Sequence[Any], *, t_start: float, machine_info: str,
                    argv: Sequence[str] | None) -> int:
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()] or list(SIZES)
    calls = args.calls or (20 if args.quick else 40)
    window = int(args.windows.split(",")[-1]) if args.windows else WINDOW
    compaction = {"events_compaction_config": EventsCompactionConfig(
        summarizer=ExtractiveEventsSummarizer(), token_threshold=int(COMPACT_THRESHOLD * window),
        event_retention_size=COMPACT_RETENTION)}
    out = []
    with tempfile.TemporaryDirectory(prefix="aether-long-") as tmp:
        for kind, source, make in _shapes(args, runs, taus):
            for n in sizes:
                t0 = time.perf_counter()
                out.append(await run_long(kind, n, source, live_calls=calls, window=window, profile=args.profile,
                                          compaction_options=compaction, tmp=Path(tmp), make=make))
                r = out[-1]
                print(f"  {kind} {n:,} events: {time.perf_counter() - t0:.0f} s, pack p50 "
                      f"{sorted(r.pack_cpu)[len(r.pack_cpu) // 2] * 1000:.1f} ms, cache {r.cache['hits']} hits / "
                      f"{r.cache['misses']} misses", flush=True)
    table, checks = long_report(out, live_calls=calls, window=window, profile=args.profile)
    command = " ".join(["bench/pack_overhead.py", *[shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])]])
    report = REPORT.format(date=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), command=command,
                           machine=machine_info, runtime=time.perf_counter() - t_start, calls=calls, window=window,
                           profile=args.profile, threshold=COMPACT_THRESHOLD, table=table,
                           checks="\n".join(checks))
    print(report)
    if not args.no_write:
        print(f"wrote the 'overhead-long' section of {write_section(ROOT / args.out, 'overhead-long', report)}")
    return 0


def _shapes(args: Any, runs: Sequence[Any], taus: Sequence[Any]) -> list[tuple[str, Sequence[Any], Any]]:
    """The sessions measured: a tool loop of mini-swe-agent turns and a chat of tau-bench episodes and, with
    `--unseen`, two shapes no mechanism was tuned on: a tool loop of tau-bench's JSON tool turns, and a chat
    without tools (LoCoMo's dialogue, each line of one speaker a user turn)."""
    shapes = [("tool loop", runs, tool_loop), ("chat", taus, chat)]
    if args.unseen:
        from context_eval.locomo import load_locomo
        shapes += [("tool loop, tau-bench tools (held out)", taus, tool_loop),
                   ("chat, LoCoMo dialogue (held out)", dialogue_episodes(load_locomo(args.data)), chat)]
    return shapes


# the section's text, with its placeholders (`str.format`): prose, kept beside this module
REPORT = Path(__file__).with_name("long_report_template.md").read_text(encoding="utf-8")
