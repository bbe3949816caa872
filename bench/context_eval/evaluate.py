"""Run every workload under its systems and windows, and score each pass right after it ran.

One `Cell` per workload × system × window. Window-independent systems (no plugin, PreloadMemoryTool)
run once and are scored against each window. For aether-context a second, identical pass (fresh
packers, same process, the wall clock `time.time` shifted by a day: the sessions themselves carry
their own fixed clock) gives the determinism check. Request texts are dropped once scored, so a
long run keeps only the per-call shapes.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from aether_context import TokenCounter
from context_eval.capture import RunRecord
from context_eval.cost import CostFigures, Determinism, cost_figures, determinism
from context_eval.run import run_pass
from context_eval.systems import by_key
from context_eval.workloads import Workload, retention

__all__ = ["Cell", "Results", "evaluate", "wall_clock_shifted", "CLOCK_SHIFT_S"]

CLOCK_SHIFT_S = 86_400.0


@contextlib.contextmanager
def wall_clock_shifted(seconds: float):
    """`time.time()` reads `seconds` later while active: a pack that reads the wall clock shows it."""
    real = time.time
    time.time = lambda: real() + seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time = real  # type: ignore[assignment]


@dataclass
class Cell:
    workload: str
    system: str
    window: int
    retention: dict[str, tuple[float, int]]
    cost: CostFigures
    errors: list[str] = field(default_factory=list)
    misses: list[dict] = field(default_factory=list)  # what aether-context missed (run, call, item)
    over_window: int = 0  # calls whose request exceeds the window


@dataclass
class Results:
    cells: dict[tuple[str, str, int], Cell] = field(default_factory=dict)
    determinism: dict[tuple[str, int], Determinism] = field(default_factory=dict)
    walls: dict[str, float] = field(default_factory=dict)  # "workload / system @ W" -> seconds

    def cell(self, workload: str, system: str, window: int) -> Optional[Cell]:
        return self.cells.get((workload, system, window))


async def evaluate(workloads: list[Workload], *, systems: Optional[set[str]] = None, determinism_runs: Optional[int] = None,
                   deadline_s: Optional[float] = None, log: Callable[[str], None] = print) -> Results:
    """Every pass of every workload; `systems` restricts the systems (no plugin always runs)."""
    counter = TokenCounter()
    results = Results()
    for w in workloads:
        none: Optional[list[RunRecord]] = None
        for key in w.systems:
            if systems and key not in systems and key != "none":
                continue
            system = by_key(key)
            for window in (w.windows if system.windowed else (None,)):
                label = f"{w.name} / {system.label}" + (f" @ {window}" if window else "")
                t0 = time.perf_counter()
                records = await run_pass(system, w.profile, window, w.jobs, counter, deadline_s=deadline_s)
                if system.packs and determinism_runs != 0:
                    with wall_clock_shifted(CLOCK_SHIFT_S):
                        again = await run_pass(system, w.profile, window, w.jobs[:determinism_runs], counter,
                                               deadline_s=deadline_s)
                    results.determinism[(w.name, window)] = determinism(records, again)
                results.walls[label] = time.perf_counter() - t0
                log(f"  {label}: {results.walls[label]:.0f} s")
                for scored in (w.windows if window is None else (window,)):
                    misses: list[dict] = []
                    results.cells[(w.name, key, scored)] = Cell(
                        w.name, key, scored, retention(w, records, scored, misses),
                        cost_figures(records, None if key == "none" else none),
                        [f"{r.run_id}: {r.error}" for r in records if r.error], misses if system.packs else [],
                        sum(c.tokens > scored for r in records for c in r.calls))
                for r in records:
                    r.texts.clear()
                    r.final_text = ""
                if key == "none":
                    none = records
    return results
