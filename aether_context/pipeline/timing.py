"""Stage timings: how long each stage of one pack took, for logs and benchmarks.

Kept beside the pack, never in it: durations vary from run to run, and the request, the manifest
and the checksum must not.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

__all__ = ["StageTimes"]


SUBSTAGES = frozenset({"compact"})  # timed inside another stage (compaction runs within select): not added to the total


@dataclass
class StageTimes:
    """Seconds per stage, summed when a stage runs more than once in one pack (pass one to `build_pack`).
    A sub-stage (`SUBSTAGES`) is shown on its own but already counted in the stage around it."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    @property
    def total(self) -> float:
        return sum(v for k, v in self.seconds.items() if k not in SUBSTAGES)

    def to_json(self) -> dict[str, float]:
        return {k: round(v * 1000, 3) for k, v in self.seconds.items()} | {"total": round(self.total * 1000, 3)}

    def __str__(self) -> str:
        return " ".join(f"{k}={v * 1000:.1f}ms" for k, v in self.seconds.items())
