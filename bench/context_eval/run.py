"""Replaying one workload under one system and window: a `Job` per run, a `RunRecord` back.

A job is a recorded run (a `Trajectory`) plus, for seeded conversations, how to prepare the
session and memory services before the questions are asked. Each replay gets fresh plugins; the
aether-context packer is shared by the runs of one pass (one app serving many sessions).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

from aether_context import TokenCounter
from context_eval.capture import Capture, RunRecord
from context_eval.systems import System
from replay_adk import ClockedSessionService, replay
from trajectories import Trajectory

__all__ = ["Job", "Services", "run_job", "run_pass", "APP_NAME", "USER_ID"]

APP_NAME = "bench"
USER_ID = "bench-user"


@dataclass
class Services:
    """Prepared services for one replay: the session to continue (or None: a new one) and the memory."""

    session_service: Any
    session_id: Optional[str] = None
    memory_service: Any = None


@dataclass
class Job:
    trajectory: Trajectory
    want_text: Callable[[int], bool] = field(default=lambda i: False)
    prepare: Optional[Callable[[], Awaitable[Services]]] = None


async def run_job(system: System, profile: str, window: Optional[int], job: Job, packers: dict,
                  counter: TokenCounter, *, deadline_s: Optional[float] = None) -> RunRecord:
    """One replay; an error is recorded on the run (a system that breaks a run is reported, not fatal)."""
    traj = job.trajectory
    setup = system.make(profile, window, packers)
    services = await job.prepare() if job.prepare else Services(ClockedSessionService(traj.id))
    capture = Capture(counter, traj.id, want_text=job.want_text, packer=setup.packer)
    t0 = time.perf_counter()
    try:
        result = await replay(traj, plugins=setup.plugins, app_options=setup.app_options, extra_tools=setup.extra_tools,
                              keep_requests="none", on_request=capture, prompt_tokens=capture.prompt_tokens,
                              deadline_s=deadline_s, session_service=services.session_service,
                              session_id=services.session_id, memory_service=services.memory_service,
                              app_name=APP_NAME, user_id=USER_ID)
        capture.record.truncated = result.truncated
    except Exception as e:  # noqa: BLE001 - reported in the figures
        capture.record.error = f"{type(e).__name__}: {e}"
    record = capture.finish()
    record.wall_s = time.perf_counter() - t0
    return record


async def run_pass(system: System, profile: str, window: Optional[int], jobs: list[Job], counter: TokenCounter,
                   *, deadline_s: Optional[float] = None) -> list[RunRecord]:
    """Every job under one system and window, with fresh packers (a pass is one app process's life)."""
    packers: dict = {}
    out = [await run_job(system, profile, window, job, packers, counter, deadline_s=deadline_s) for job in jobs]
    for packer in packers.values():  # the pass's store goes with it: the next pass starts empty, memory is freed
        packer.store.flush()
        _remove_store(packer.store)
    return out


def _remove_store(store) -> None:
    """Remove a pass's store. fsspec's in-memory `rm` checks each path against every file, quadratic in the
    store's files: a memory store's entries under the root are dropped from its dicts directly."""
    from fsspec.implementations.memory import MemoryFileSystem

    fs, root = store.fs, store.fs._strip_protocol(store.root)
    if isinstance(fs, MemoryFileSystem):
        under = lambda p: p == root or p.startswith(root.rstrip("/") + "/")  # noqa: E731
        for path in [p for p in fs.store if under(p)]:
            del fs.store[path]
        fs.pseudo_dirs[:] = [d for d in fs.pseudo_dirs if not under(d)]
        return
    with contextlib.suppress(FileNotFoundError):  # nothing was stored
        fs.rm(store.root, recursive=True)
