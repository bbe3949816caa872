"""A checksum of every request the model receives, for a few dev sessions through a real ADK Runner.

Replays tau-bench airline episodes, mini-swe-agent runs and a LoCoMo conversation (session and memory
mode) with `ContextPackPlugin` at 8K and 4K and prints one line per model call: workload, window, run,
call and the SHA-256 of the request (contents, system instruction, tools, as ADK hands them to the
model). Run it on two commits and diff the outputs: a refactor that keeps the requests keeps every line.

With `--cold` the packer's memo is emptied before every call: the checksums must be those of a run
with the memo (what the memo keeps is keyed by content, so a hit gives the bytes a miss gives).

Usage (from the repository root; about 3 minutes on 2 cores)::

    .venv/bin/python bench/request_checksums.py --data ../shared/datasets > after.txt
    diff before.txt after.txt | grep -c '^>'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from context_eval.systems import by_key  # noqa: E402
from context_eval.run import APP_NAME, USER_ID, Services  # noqa: E402
from context_eval.workloads import build_workloads  # noqa: E402
from replay_adk import ClockedSessionService, replay  # noqa: E402

WINDOWS = (8000, 4000)


def request_digest(llm_request) -> str:
    """SHA-256 of what the model receives: the contents, then the config (system instruction, tools)."""
    contents = [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
    config = llm_request.config.model_dump(mode="json", exclude_none=True) if llm_request.config else {}
    blob = json.dumps({"contents": contents, "config": config}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


async def run(args: argparse.Namespace) -> None:
    workloads = build_workloads(args.data, ("locomo-session", "locomo-memory", "tau", "mini-swe"), conversations=1,
                                questions=args.questions, runs=args.runs, episodes=args.episodes, profiles={})
    aether = by_key("aether")
    for w in workloads:
        for window in WINDOWS:
            packers: dict = {}
            for job in w.jobs:
                setup = aether.make(w.profile, window, packers)
                setup.packer.pack_timeout = args.pack_timeout  # a slow pack on a busy machine must not fail open
                services = await job.prepare() if job.prepare else Services(ClockedSessionService(job.trajectory.id))
                lines: list[str] = []

                def on_request(call, llm_request, lines=lines, packer=setup.packer) -> None:
                    lines.append(request_digest(llm_request))
                    if args.cold:  # the model answers, then the next call packs with an empty memo
                        packer.cache.clear()

                await replay(job.trajectory, plugins=setup.plugins, keep_requests="none", on_request=on_request,
                             session_service=services.session_service, session_id=services.session_id,
                             memory_service=services.memory_service, app_name=APP_NAME, user_id=USER_ID)
                for i, digest in enumerate(lines):
                    print(f"{w.name} {window} {job.trajectory.id} {i} {digest}", flush=True)
            for packer in packers.values():
                packer.store.flush()
                with contextlib.suppress(FileNotFoundError):
                    packer.store.fs.rm(packer.store.root, recursive=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(HERE.parent.parent / "shared" / "datasets"))
    parser.add_argument("--questions", type=int, default=6, help="LoCoMo questions per mode")
    parser.add_argument("--episodes", type=int, default=4, help="tau-bench episodes")
    parser.add_argument("--runs", type=int, default=2, help="mini-swe-agent runs")
    parser.add_argument("--pack-timeout", type=float, default=600.0,
                        help="seconds before a pack fails open (default 600: checksums must not depend on load)")
    parser.add_argument("--cold", action="store_true", help="empty the packer's memo before every call")
    args = parser.parse_args()
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
