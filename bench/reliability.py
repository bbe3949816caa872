"""Reliability scenarios for many users and replicas (issue 13): run by hand, figures in docs/benchmarks.md.

Each scenario is one function registered in `SCENARIOS` under its name; `--scenarios a,b` runs
those (default: all), prints each report and, with `--write`, puts them in the
`<!-- bench:reliability:start/end -->` section of docs/benchmarks.md.

`users`, `kill`, `stall` (`bench/reliability_load.py`): 64 concurrent users through one plugin,
some sharing session ids; kill -9 during writes, then a normal exit; event-loop stalls with and
without the plugin.

`replicas`: recorded sessions (tau-bench airline episodes, mini-swe-agent runs) are replayed
through real ADK Runners in worker PROCESSES over one sqlite `DatabaseSessionService` and one
store folder, each with its own in-memory artifact service, as two `adk api_server` replicas
behind a load balancer would be. The invocations of every session alternate between two
replicas; the same sessions also run in one process. Compared: the checksum of every request the
model received (must be byte-identical), and a closing recall of every original the last request
cites, served by the replica that did not serve the call before (every one must be answered).
With `--services` the replicas share a PostgreSQL database and an S3 bucket (moto's server) instead:
the ones AETHER_TEST_PG_URL and AETHER_TEST_S3_ENDPOINT name, else started here (`.ci/services`).

Usage::

    python bench/reliability.py --scenarios replicas --tau 10 --swe 3 --write
    python bench/reliability.py --scenarios replicas --tau 10 --swe 3 --services
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import reliability_load  # noqa: E402  (users, kill, stall)

SCENARIOS: dict[str, Callable[[argparse.Namespace], str]] = dict(reliability_load.SCENARIOS)


def scenario(name: str) -> Callable[[Callable[[argparse.Namespace], str]], Callable[[argparse.Namespace], str]]:
    """Register a scenario: a function of the parsed arguments returning its markdown report."""
    def register(fn: Callable[[argparse.Namespace], str]) -> Callable[[argparse.Namespace], str]:
        SCENARIOS[name] = fn
        return fn
    return register


# --------------------------------------------------------------------------- replicas: the sessions
SPLIT_EVERY = 8  # a long single-invocation run is cut into invocations of this many model calls
CLOCK_START, CLOCK_STEP = 1_700_000_000.0, 30.0
CONTINUE = "Continue with the task."
RECALLS_PER_SESSION = 8
_WHOLE_URI = re.compile(r"^artifact://[^/…]+/[^/…]+/[^/…]+/[^…]+$")


def _sessions(data: str, tau: int, swe: int, offset: int, swe_offset: int) -> list:
    """The recorded sessions, mini-swe runs cut into invocations (so replicas can take turns in them)."""
    from trajectories import Invocation, ModelTurn, Trajectory, load_mini_swe, load_tau_airline

    out = list(load_tau_airline(data)[offset:offset + tau])
    for run in load_mini_swe(data)[swe_offset:swe_offset + swe]:
        invocations = []
        for inv in run.invocations:
            tools = [t for t in inv.turns if t.calls]
            chunks = [tools[i:i + SPLIT_EVERY] for i in range(0, len(tools), SPLIT_EVERY)] or [[]]
            for k, chunk in enumerate(chunks):
                last = k == len(chunks) - 1
                closing = inv.turns[-1] if last else ModelTurn("Progress so far noted.", synthetic=True)
                invocations.append(Invocation(inv.user if k == 0 else CONTINUE, (*chunk, closing)))
        out.append(Trajectory(run.id, run.source, run.system, run.tools, tuple(invocations), run.meta))
    return out


# --------------------------------------------------------------------------- replicas: the worker process
def _worker(db: str, store: str, data: str, tau: int, swe: int, offset: int, swe_offset: int, window: int) -> None:
    """One replica: reads {"op", "session", "invocation"} lines on stdin, answers one JSON line each."""
    asyncio.run(_serve(db, store, data, tau, swe, offset, swe_offset, window))


async def _serve(db: str, store: str, data: str, tau: int, swe: int, offset: int, swe_offset: int, window: int) -> None:
    from aether_context import ContextPacker
    from aether_context.retrieval import HashingEmbedder

    embedder = HashingEmbedder() if os.environ.get("AETHER_BENCH_EMBEDDER", "hashing") == "hashing" else None
    packer = ContextPacker(store=store, window_tokens=window, embedder=embedder)  # None: the profile's model
    sessions = {t.id: t for t in _sessions(data, tau, swe, offset, swe_offset)}
    replicas: dict[str, Any] = {}
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            break
        ask = json.loads(line)
        try:
            replica = replicas.get(ask["session"]) or replicas.setdefault(
                ask["session"], _Replica(sessions[ask["session"]], packer, db))
            answer = await replica.run(ask["op"], ask.get("invocation", 0))
        except Exception as e:  # reported to the parent, which counts it
            answer = {"error": f"{type(e).__name__}: {e}"[:500]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    packer.store.flush()


class _Replica:
    """One session's Runner in a replica: the app, its tools, a plugin over the process's packer."""

    def __init__(self, trajectory: Any, packer: Any, db: str):
        from google.adk.agents import LlmAgent
        from google.adk.apps.app import App
        from google.adk.artifacts import InMemoryArtifactService
        from google.adk.memory import InMemoryMemoryService
        from google.adk.runners import Runner

        from aether_context import ContextPackPlugin
        from aether_context.adk import request_from_llm
        from aether_context.pipeline.build import request_tokens
        from replay_adk import RecordedTool

        self.trajectory = trajectory
        self.checksums: list[str] = []

        def reported(llm_request: Any) -> int:  # the "model" counts 10 % more than our tokenizer
            request = request_from_llm(llm_request)
            self.checksums.append(request.checksum)
            return int(1.1 * request_tokens(request, packer.counter))

        self.llm = _recalling_llm_class()(turns=list(trajectory.turns), prompt_token_counter=reported)
        system = trajectory.system
        agent = LlmAgent(name="replayed_agent", model=self.llm, instruction=lambda _ctx: system,
                         tools=[RecordedTool(d, self.llm.outputs) for d in trajectory.tools])
        self.runner = Runner(app=App(name="replicas", root_agent=agent, plugins=[ContextPackPlugin(packer=packer)]),
                             session_service=_clocked_db(db), artifact_service=InMemoryArtifactService(),
                             memory_service=InMemoryMemoryService())

    async def run(self, op: str, invocation: int) -> dict:
        from google.genai import types

        service = self.runner.session_service
        if await service.get_session(app_name="replicas", user_id="bench", session_id=self.trajectory.id) is None:
            await service.create_session(app_name="replicas", user_id="bench", session_id=self.trajectory.id)
        invocations = self.trajectory.invocations
        if op == "recall":
            self.llm._cursor = self.llm.recall_at = len(self.trajectory.turns)
            text = "Read back the originals you saved."
        else:
            self.llm._cursor = sum(len(inv.turns) for inv in invocations[:invocation])
            text = invocations[invocation].user
        self.checksums = []
        responses = []
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async with contextlib.aclosing(self.runner.run_async(user_id="bench", session_id=self.trajectory.id,
                                                             new_message=message)) as events:
            async for event in events:
                responses += [r.response for r in event.get_function_responses() if r.name == "read_artifact"]
        session = await service.get_session(app_name="replicas", user_id="bench", session_id=self.trajectory.id)
        return {"checksums": self.checksums, "uris": sorted(set((session.state.get("aether:uris") or {}).values())),
                "recalls": [{"uri": u, "answered": "error" not in r, "error": r.get("error", "")}
                            for u, r in zip(self.llm.recalled, responses)] if op == "recall" else [],
                "cut_short": self.llm.cut_short if op == "recall" else 0}


def _clocked_db(db: str) -> Any:
    """ADK's DatabaseSessionService with event times from a fixed clock (two runs are one session)."""
    from google.adk.sessions import DatabaseSessionService

    class ClockedDatabaseSessionService(DatabaseSessionService):
        async def append_event(self, session: Any, event: Any) -> Any:
            if not event.partial:
                event.timestamp = (session.events[-1].timestamp if session.events else CLOCK_START) + CLOCK_STEP
            return await super().append_event(session, event)

    return ClockedDatabaseSessionService(db_url=db if "://" in db else f"sqlite+aiosqlite:///{db}")


@functools.cache
def _recalling_llm_class() -> type:
    from google.genai import types

    from replay_adk import ReplayLlm

    class RecallingLlm(ReplayLlm):
        """The recorded turns, then (at `recall_at`) one call of read_artifact per original the request cites."""

        recall_at: int = -1
        recalled: list = []
        cut_short: int = 0

        def _next_turn(self, llm_request: Any) -> Any:
            if self._cursor == self.recall_at:
                self._cursor += 1
                text = "\n".join(str(c.model_dump(mode="json", exclude_none=True)) for c in llm_request.contents)
                cited = set(re.findall(r"artifact://[^\s'\"\\,)\]<>]+", text))
                whole = sorted(u for u in cited if _WHOLE_URI.match(u))
                self.cut_short = len(cited) - len(whole)  # cited with an ellipsis or without its file name
                self.recalled = whole[:RECALLS_PER_SESSION]
                if self.recalled:
                    return [types.Part(function_call=types.FunctionCall(name="read_artifact", args={"uri": u}))
                            for u in self.recalled]
            if self._cursor > self.recall_at >= 0:
                self._cursor += 1
                return [types.Part(text="Done reading.")]
            return super()._next_turn(llm_request)

    return RecallingLlm


# --------------------------------------------------------------------------- replicas: the parent
class _Process:
    """A replica process, asked one JSON line at a time."""

    def __init__(self, args: argparse.Namespace, db: Path, store: Path, code: str):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (code or str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(db), str(store), "--data", args.data,
             "--tau", str(args.tau), "--swe", str(args.swe), "--offset", str(args.offset), "--swe-offset",
             str(args.swe_offset), "--window", str(args.window)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=code or str(ROOT), env=env)

    def ask(self, **message: Any) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"replica process ended (exit code {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=120)


def _drive(args: argparse.Namespace, sessions: list, folder: Path, replicas: int, code: str,
           services: tuple[str, str] | None = None) -> dict:
    """Run every session, invocation i on replica i % replicas, then the recall; per session what came back.
    `services`: a database URL and a bucket URL (fresh ones) in place of the sqlite file and the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    db, store = services or (folder / "sessions.db", folder / "store")
    procs = [_Process(args, db, store, code) for _ in range(replicas)]
    out: dict[str, dict] = {}
    saved_by: dict[str, int] = {}
    try:
        for t in sessions:
            got = {"checksums": [], "errors": [], "recalls": [], "cut_short": 0}
            for i in range(len(t.invocations) + 1):
                k = i % replicas
                answer = procs[k].ask(op="run" if i < len(t.invocations) else "recall", session=t.id, invocation=i)
                if "error" in answer:
                    got["errors"].append(answer["error"])
                    continue
                got["checksums"] += answer["checksums"]
                got["cut_short"] += answer.get("cut_short", 0)
                for uri in answer["uris"]:
                    saved_by.setdefault(uri, k)
                got["recalls"] += [{**r, "other_replica": saved_by.get(r["uri"], k) != k} for r in answer["recalls"]]
            out[t.id] = got
    finally:
        for p in procs:
            p.close()
    out["_state_bytes"] = _state_bytes(db, [t.id for t in sessions])
    return out


def _state_bytes(db: "Path | str", ids: list[str]) -> dict:
    """Bytes the plugin's pack records add to the model response events that carry them."""
    from aether_context.adk.session_state import CALIBRATION_STATE_KEY, PACK_STATE_PREFIX, PACK_TEXT_PREFIX

    async def measure() -> dict:
        service = _clocked_db(str(db))
        record, text, calib, events = [], [], 0, 0
        for sid in ids:
            session = await service.get_session(app_name="replicas", user_id="bench", session_id=sid)
            for event in session.events:
                delta = event.actions.state_delta or {}
                events += 1
                record += [len(json.dumps(v)) for k, v in delta.items() if k.startswith(PACK_STATE_PREFIX)]
                text += [len(json.dumps(v)) for k, v in delta.items() if k.startswith(PACK_TEXT_PREFIX)]
                calib += sum(1 for k in delta if k == CALIBRATION_STATE_KEY)
        return {"events": events, "record": record, "text": text, "calibration_writes": calib}

    return asyncio.run(measure())


# --------------------------------------------------------------------------- replicas: PostgreSQL and S3
PG_ENV, S3_ENV = "AETHER_TEST_PG_URL", "AETHER_TEST_S3_ENDPOINT"


@contextlib.contextmanager
def _services():
    """(PostgreSQL URL, S3 endpoint): the running services the environment names, else started for the run."""
    if os.environ.get(PG_ENV) and os.environ.get(S3_ENV):
        yield os.environ[PG_ENV], os.environ[S3_ENV]
        return
    folder = tempfile.mkdtemp(prefix="aether-services-")
    script = ["bash", str(ROOT / ".ci" / "services")]
    try:
        subprocess.run([*script, "start", folder], check=True, env={**os.environ, "VENV": sys.prefix})
        found = dict(re.findall(r"export (\w+)=(\S+)", Path(folder, "env").read_text()))
        yield found[PG_ENV], found[S3_ENV]
    finally:
        subprocess.run([*script, "stop", folder], env={**os.environ, "VENV": sys.prefix})
        shutil.rmtree(folder, ignore_errors=True)


def _service_places(pg_url: str, endpoint: str, name: str) -> tuple[str, str]:
    """A fresh database and a fresh bucket for one run; the replica processes reach the bucket through fsspec's
    environment configuration (FSSPEC_S3_ENDPOINT_URL), which they inherit."""
    import asyncpg
    import s3fs
    from sqlalchemy.engine import make_url

    os.environ.update({"FSSPEC_S3_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench"})
    suffix = f"{name}_{os.getpid()}_{int(time.time())}"
    base = make_url(pg_url)

    async def create() -> None:
        conn = await asyncpg.connect(base.set(drivername="postgresql").render_as_string(hide_password=False))
        try:
            await conn.execute(f'CREATE DATABASE "replicas_{suffix}"')
        finally:
            await conn.close()

    asyncio.run(create())
    bucket = f"replicas-{suffix}".replace("_", "-")
    s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench").mkdir(bucket)
    return base.set(database=f"replicas_{suffix}").render_as_string(hide_password=False), f"s3://{bucket}/store"


@scenario("replicas")
def replicas(args: argparse.Namespace) -> str:
    """Two replica processes alternating the invocations of recorded sessions against one process."""
    from report_sections import machine, pct

    sessions = _sessions(args.data, args.tau, args.swe, args.offset, args.swe_offset)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aether-replicas-") as tmp, \
            (_services() if args.services else contextlib.nullcontext()) as services:
        runs = {mode: _drive(args, sessions, Path(tmp) / mode, n, args.code,
                             _service_places(*services, mode) if services else None)
                for mode, n in (("one", 1), ("two", 2))}
    one, two = runs["one"], runs["two"]
    calls = differ = errors = 0
    for t in sessions:
        a, b = one[t.id], two[t.id]
        calls += len(a["checksums"])
        differ += sum(x != y for x, y in zip(a["checksums"], b["checksums"])) + abs(len(a["checksums"]) - len(b["checksums"]))
        errors += len(a["errors"]) + len(b["errors"])
    recalls = [r for t in sessions for r in two[t.id]["recalls"]]
    other = [r for r in recalls if r["other_replica"]]
    sizes = two["_state_bytes"]
    record, text = sizes["record"], sizes["text"]
    lines = [
        "# Reliability: replicas",
        "",
        f"`python bench/reliability.py --scenarios replicas --tau {args.tau} --swe {args.swe} --offset {args.offset} "
        f"--swe-offset {args.swe_offset} --window {args.window} --embedder {args.embedder}"
        f"{' --services' if args.services else ''}`{' (code: ' + args.code + ')' if args.code else ''}; {machine()}; "
        f"{time.perf_counter() - start:.0f} s.",
        "",
        f"{len(sessions)} recorded sessions ({args.tau} tau-bench airline episodes, {args.swe} mini-swe-agent runs cut "
        f"into invocations of {SPLIT_EVERY} model calls; from index {args.offset} / {args.swe_offset}), window {args.window:,} tokens, the "
        "model reporting 10 % more prompt tokens than our estimate (calibration on). Two replica processes (each its "
        "own Runner, plugin and in-memory artifact service) over one "
        + ("PostgreSQL `DatabaseSessionService` (asyncpg) and one S3 bucket (moto's server, s3fs) " if args.services
           else "sqlite `DatabaseSessionService` and one store folder ")
        + "take turns by invocation; the same sessions run in one process over their own database.",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| model calls compared | {calls:,} |",
        f"| requests that differ from one process | {differ:,} |",
        f"| worker errors | {errors} |",
        f"| recalls of a cited original (served by the replica that did not serve the previous call) | {len(recalls)} |",
        f"| of them, originals saved by the other replica | {len(other)} |",
        f"| recalls answered | {sum(r['answered'] for r in recalls)} of {len(recalls)} |",
        f"| cited URIs cut short in the last request (not recalled) | {sum(two[t.id]['cut_short'] for t in sessions)} |",
        f"| events in the sessions / carrying a pack record | {sizes['events']:,} / {len(record):,} |",
        f"| pack record bytes per carrying event: median, p95, max | {pct(record, 50):,.0f}, {pct(record, 95):,.0f}, "
        f"{max(record, default=0):,} |",
        f"| payload/block text record: events carrying it, median and max bytes | {len(text):,}, {pct(text, 50):,.0f}, "
        f"{max(text, default=0):,} |",
        f"| calibration writes | {sizes['calibration_writes']:,} |",
    ]
    failed = [f"{t.id}: {e}" for t in sessions for e in one[t.id]["errors"] + two[t.id]["errors"]]
    failed += [f"recall of `{r['uri']}`: {r['error']}" for r in recalls if not r["answered"]]
    if failed:
        lines += ["", "Errors:", *[f"- {e}" for e in failed[:10]]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets"))
    parser.add_argument("--tau", type=int, default=10, help="tau-bench airline episodes (replicas)")
    parser.add_argument("--swe", type=int, default=3, help="mini-swe-agent runs (replicas)")
    parser.add_argument("--offset", type=int, default=0, help="first tau-bench episode used (held out: e.g. 50)")
    parser.add_argument("--swe-offset", type=int, default=0, help="first mini-swe-agent run used (held out: e.g. 20)")
    parser.add_argument("--window", type=int, default=8_000, help="context window of the replayed model (replicas)")
    parser.add_argument("--code", default="", help="run the replicas on another checkout's aether_context (a baseline)")
    parser.add_argument("--write", action="store_true", help="write the reports into docs/benchmarks.md")
    parser.add_argument("--services", action="store_true",
                        help="replicas: on PostgreSQL and an S3 server (started unless AETHER_TEST_* name them)")
    parser.add_argument("--worker", nargs=2, metavar=("DB", "STORE"), help=argparse.SUPPRESS)
    parser.add_argument("--embedder", choices=("hashing", "profile"), default="hashing",
                        help="replicas: the hashing embedder (fast) or the profile's model (MiniLM) in every replica")
    reliability_load.add_arguments(parser)
    args = parser.parse_args(argv)
    os.environ["AETHER_BENCH_EMBEDDER"] = args.embedder  # the replica processes inherit it
    if args.worker:
        _worker(args.worker[0], args.worker[1], args.data, args.tau, args.swe, args.offset, args.swe_offset, args.window)
        return 0
    sys.path.insert(1, str(ROOT))  # this checkout's package (the workers get theirs, or --code's, on PYTHONPATH)
    reports = []
    for name in [n.strip() for n in args.scenarios.split(",") if n.strip()]:
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r}: use one of {', '.join(SCENARIOS)}")
        report = SCENARIOS[name](args)
        print(report)
        reports.append(report)
    if args.write:
        from report_sections import write_section
        write_section(ROOT / "docs" / "benchmarks.md", "reliability", "\n\n".join(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
