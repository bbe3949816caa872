"""Command line of the context benchmarks: parse, run, print, write the `context_eval` section."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import shlex
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Optional, Sequence, get_args

from aether_context.profile import load_profile
from aether_context.loop.recitation import StatusPlacement

from context_eval.evaluate import evaluate
from context_eval.report import render_report
from context_eval.targets import check_targets
from context_eval.workloads import WORKLOAD_NAMES, build_workloads
from report_sections import DEFAULT_FILE, machine, write_section
from trajectories import DEFAULT_DATA

__all__ = ["main", "SECTION"]

SECTION = "context_eval"
ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=DEFAULT_DATA, help="shared datasets folder (default: %(default)s)")
    ap.add_argument("--workloads", default=",".join(WORKLOAD_NAMES), help="comma list of %(default)s")
    ap.add_argument("--systems", default="", help="comma list of systems to run (no plugin always runs)")
    ap.add_argument("--conversations", type=int, default=None, help="LoCoMo: first N conversations")
    ap.add_argument("--questions", type=int, default=None, help="LoCoMo: N questions per conversation, evenly spread")
    ap.add_argument("--episodes", type=int, default=None, help="tau-bench: first N episodes")
    ap.add_argument("--runs", type=int, default=None, help="mini-swe-agent: first N runs")
    ap.add_argument("--determinism-runs", type=int, default=None,
                    help="runs replayed a second time for the determinism check (default all; 0 skips it)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds per replay before it is cut (off by default)")
    ap.add_argument("--out", default=DEFAULT_FILE, help="benchmarks file, relative to the repo root (default: %(default)s)")
    ap.add_argument("--no-write", action="store_true", help="print the report only")
    ap.add_argument("--recitation-placement", default=None, choices=get_args(StatusPlacement),
                    help="run aether-context with this recitation.placement (each workload's profile, that key changed)")
    ap.add_argument("--misses", default="", help="write what aether-context missed (one JSON object a line) to this file")
    return ap.parse_args(argv)


def _with_placement(workloads: list, placement: str, folder: Path) -> None:
    """Each workload's profile with `recitation.placement` changed, written as a profile file the packer loads."""
    for w in workloads:
        profile = load_profile(w.profile)
        changed = profile.override(name=f"{profile.name}+{placement}", recitation={"placement": placement})
        path = folder / f"{changed.name}.yaml"
        path.write_text(json.dumps(changed.model_dump(mode="json")), encoding="utf-8")  # JSON is YAML
        w.profile = str(path)


def _full_estimate(args: argparse.Namespace, workloads: list, walls: dict[str, float]) -> str:
    """Seconds a full run would take: each workload's wall scaled by its full / measured model calls."""
    full = build_workloads(args.data, tuple(w.name for w in workloads), conversations=None, questions=None, runs=None,
                           episodes=None, profiles={})
    total = 0.0
    for w, f in zip(workloads, full):
        measured = sum(j.trajectory.model_calls for j in w.jobs)
        wall = sum(v for k, v in walls.items() if k.startswith(w.name + " / "))
        total += wall * sum(j.trajectory.model_calls for j in f.jobs) / max(1, measured)
    return f"; a full run would take about {total / 60:.0f} min on this machine (scaled by model calls)"


def _limits(args: argparse.Namespace) -> str:
    parts = [f"{k} {v}" for k, v in (("conversations", args.conversations), ("questions per conversation", args.questions),
                                      ("episodes", args.episodes), ("runs", args.runs),
                                      ("determinism runs", args.determinism_runs)) if v is not None]
    return ("SMOKE RUN, limited to " + ", ".join(parts)) if parts else "all dev data (full run)"


def _write_misses(path: Path, results) -> None:
    """One JSON line per miss: workload, window, run, call and the item (evidence turn, value, file, failure line)."""
    with path.open("w", encoding="utf-8") as f:
        for cell in results.cells.values():
            for miss in cell.misses:
                f.write(json.dumps({"workload": cell.workload, "window": cell.window, **miss}, ensure_ascii=False) + "\n")
    print(f"wrote {sum(len(c.misses) for c in results.cells.values())} misses to {path}")


def _limited(args: argparse.Namespace) -> bool:
    return any(v is not None for v in (args.conversations, args.questions, args.episodes, args.runs))


async def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    info = machine()
    names = tuple(n.strip() for n in args.workloads.split(",") if n.strip())
    unknown = set(names) - set(WORKLOAD_NAMES)
    if unknown:
        raise SystemExit(f"--workloads: unknown {sorted(unknown)}; choose from {', '.join(WORKLOAD_NAMES)}")
    workloads = build_workloads(args.data, names, conversations=args.conversations, questions=args.questions,
                                runs=args.runs, episodes=args.episodes, profiles={})
    if args.recitation_placement:
        _with_placement(workloads, args.recitation_placement, Path(tempfile.mkdtemp(prefix="aether-placement-")))
    for w in workloads:
        print(f"{w.title}: {len(w.jobs)} runs, {sum(j.trajectory.model_calls for j in w.jobs)} model calls", flush=True)
    systems = {s.strip() for s in args.systems.split(",") if s.strip()} or None
    results = await evaluate(workloads, systems=systems, determinism_runs=args.determinism_runs, deadline_s=args.deadline,
                             log=lambda s: print(s, flush=True))
    checks = check_targets(results)
    argv_list = list(argv) if argv is not None else sys.argv[1:]
    report = render_report(workloads, results, checks, date=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                           command="bench/context_eval.py " + " ".join(shlex.quote(a) for a in argv_list),
                           machine=info, runtime_s=time.perf_counter() - t0,
                           limits=_limits(args) + (_full_estimate(args, workloads, results.walls) if _limited(args) else ""))
    print(report)
    if args.misses:
        _write_misses(Path(args.misses), results)
    if not args.no_write:
        path = write_section(ROOT / args.out, SECTION, report)
        print(f"wrote the {SECTION!r} section of {path}")
    return 0


def run(argv: Optional[Sequence[str]] = None) -> int:
    return asyncio.run(main(argv))
