"""The `stall` scenario of `bench/reliability.py`: how late the event loop wakes while many sessions
pack, with and without the plugin, each configuration in a child process of its own (a fresh
process: the plugin's MiniLM loads during the first packs). See `reliability_load.py` for the
other scenarios and the options.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from reliability_agent import _agent, _runner, _text, _turn  # noqa: E402

__all__ = ["stall"]

PROBE_S = 0.002  # the probe sleeps this long; how much later it wakes is the loop's lag


class LagProbe:
    """Sleeps `PROBE_S` in a loop on the event loop and records how late each wake-up is."""

    def __init__(self) -> None:
        self.lags: list[tuple[float, float]] = []  # (time, lag seconds)
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._probe())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _probe(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            now = time.perf_counter()
            self.lags.append((now, now - t0 - PROBE_S))

    def between(self, a: float, b: float) -> dict:
        """Lag in ms between times `a` and `b`: p50, p99 and max (n: how many wake-ups)."""
        xs = sorted(lag * 1000 for t, lag in self.lags if a <= t <= b)
        if not xs:
            return {"n": 0}
        return {"n": len(xs), "p50": round(statistics.median(xs), 1), "p99": round(xs[int(0.99 * (len(xs) - 1))], 1),
                "max": round(xs[-1], 1)}


async def _first_pack_time(plugin) -> float | None:
    """When the plugin recorded its first pack (polled every ms); None without a plugin."""
    while plugin is not None:
        if plugin.packer.recent:
            return time.perf_counter()
        await asyncio.sleep(0.001)
    return None


async def _stall_run(with_plugin: bool, sessions: int, turns: int, stagger: float = 0.0, think: float = 0.0) -> dict:
    """Loop lag while `sessions` run: the first invocation of each (the model loading), then `turns`
    more once the model is ready. Sessions start `stagger` s apart and wait `think` s between
    invocations (0, 0: all at once, a burst)."""
    from aether_context import ContextPackPlugin

    agent, _ = _agent()
    # built at start-up, before serving (the embedding model then loads on its own thread)
    plugin = ContextPackPlugin(store="memory://reliability-stall", window_tokens=16_000) if with_plugin else None
    runner = _runner(agent, [plugin] if plugin else [])
    probe = LagProbe()
    probe.start()
    await asyncio.sleep(0.05)
    start = time.perf_counter()

    async def session(i: int, phase: int, n: int) -> None:
        uid, sid = f"user-{i:02d}", f"s-{i:02d}"
        if phase == 0:
            await runner.session_service.create_session(app_name="reliability", user_id=uid, session_id=sid)
        await asyncio.sleep(i * stagger)
        for t in range(n):
            if t:
                await asyncio.sleep(think)
            await _turn(runner, uid, sid, f"MARK-u{i:02d}-t{phase}{t} " + _text(60, i * 10 + t))

    watcher = asyncio.create_task(_first_pack_time(plugin))
    await asyncio.gather(*(session(i, 0, 1) for i in range(sessions)))  # first packs: the model is loading
    warm_end = time.perf_counter()
    ready_at = None
    if plugin is not None:
        await asyncio.to_thread(plugin.packer.retriever.wait_ready, 120)
        ready_at = time.perf_counter()
    await asyncio.sleep(0.05)
    ordinary_start = time.perf_counter()
    await asyncio.gather(*(session(i, 1, turns) for i in range(sessions)))
    end = time.perf_counter()
    await probe.stop()
    first_done = watcher.result() if watcher.done() else None
    watcher.cancel()
    packs = list(plugin.packer.recent) if plugin is not None else []
    dense_off = sum(any(f.startswith("dense_ranking_off") for f in r.manifest.flags) for r in packs)
    return {"plugin": with_plugin, "first_pack": probe.between(start, first_done or warm_end),
            "first_phase": probe.between(start, warm_end), "ordinary": probe.between(ordinary_start, end),
            "model_ready_s": round(ready_at - start, 1) if ready_at else None,
            "ordinary_calls": sessions * turns, "ordinary_s": round(end - ordinary_start, 1),
            "lexical_packs": dense_off, "packs": len(packs)}


def stall(args: argparse.Namespace) -> str:
    rows = {}
    for mode in ("without", "with"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--stall-child", mode, str(args.sessions), str(args.stall_turns),
               str(args.stall_stagger / 1000), str(args.stall_think / 1000)]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=290,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if not line:
            raise RuntimeError(f"stall child {mode} failed: {out.stderr[-2000:]}")
        rows[mode] = json.loads(line[-1])
    w, wo = rows["with"], rows["without"]

    def cell(s: dict) -> str:
        return f"{s.get('p50', '–')} / {s.get('p99', '–')} / {s.get('max', '–')}" if s.get("n") else "–"

    return "\n".join([
        "## Event-loop stalls",
        "",
        f"{args.sessions} concurrent sessions, each a save-notes tool, a 1.5K-token fetch (offloaded) and an answer per "
        f"invocation, starting {args.stall_stagger} ms apart with {args.stall_think} ms between a session's invocations "
        f"(0 and 0: a burst); a probe task sleeps 2 ms in a loop and records how late it wakes (ms: p50 / p99 / max). First "
        f"phase: one invocation per session from a fresh process (the plugin's MiniLM loads on its warm-up thread: "
        f"ready after {w['model_ready_s']} s; {w['lexical_packs']} of {w['packs']} packs ranked lexically). Ordinary "
        f"phase: {args.stall_turns} more invocations per session once the model is ready.",
        "",
        "| | first pack | first phase (model loading) | ordinary packs | ordinary phase seconds |",
        "| --- | --- | --- | --- | --- |",
        f"| without plugin | – | {cell(wo['first_phase'])} | {cell(wo['ordinary'])} | {wo['ordinary_s']} |",
        f"| with plugin | {cell(w['first_pack'])} | {cell(w['first_phase'])} | {cell(w['ordinary'])} | {w['ordinary_s']} |",
        "",
        f"Stall the plugin adds at p99 in ordinary packs: "
        f"{round(w['ordinary'].get('p99', 0) - wo['ordinary'].get('p99', 0), 1)} ms (target: none above 50 ms).",
    ])


if __name__ == "__main__":  # the child process of each configuration
    if sys.argv[1] == "--stall-child":
        print(json.dumps(asyncio.run(_stall_run(sys.argv[2] == "with", int(sys.argv[3]), int(sys.argv[4]),
                                                float(sys.argv[5]), float(sys.argv[6])))))
