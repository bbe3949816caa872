"""What a production ADK server feels (issue 38), each figure beside no plugin in the same run.

Scenarios, each in fresh child processes (real Runner, scripted model, loopback only):

- `state`: the session-state delta the plugin writes per model call, and the session's event bytes,
  after 10, 100 and 1,000 user turns (a chat with a tool call every third turn).
- `load`: 1, 8, 32 and 64 concurrent sessions, each 3 turns of 2 tool calls and an answer, the model
  answering after 50 ms: wall time, model calls per second, time before the model call (p50 / p99),
  process CPU per model call.
- `cold`: a fresh process: the first model call's time before the model, and the CPU the plugin adds.
- `hostile`: see bench/hostile.py (loop stalls for huge inputs).

With `--bucket` the load scenario's store is a fresh bucket on an S3-compatible server instead (the one
AETHER_TEST_S3_ENDPOINT names, else moto's server started here on 127.0.0.1), reached through s3fs as a
server's bucket would be; `--bucket-latency S` adds S seconds before each of its requests, as a bucket in
another building would (moto answers on loopback in about a millisecond).

Each run's store is a fresh folder under `--store-dir` (default `.aether/bench` in the checkout). On the 2-core
benchmark VM the cost of making files depends on the folder: the store thread's system CPU was 6.7-8.3 ms a call
under a `--store-dir` reused for many runs and 0.3-2.1 ms under a fresh one on the same disk (user CPU the same).
Start a series from an empty `--store-dir`, and compare with and without the plugin in the same run.

"Before the model call" is timed per session (a context variable set by the session's task and inherited by the
tasks ADK starts for it): from the turn's start, or from the previous model response, to the next model call.

    python bench/production.py --scenarios state,load,cold
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
APP = "prod"
STORE_DIR_ENV = "AETHER_BENCH_STORE_DIR"
S3_ENV = "AETHER_TEST_S3_ENDPOINT"
BUCKET_ENV = "AETHER_BENCH_BUCKET"  # set for the children: their stores go to a fresh bucket there
LATENCY_ENV = "AETHER_BENCH_BUCKET_LATENCY"  # seconds added before each request to the bucket
VERBATIM = "USER REQUEST (VERBATIM; answer it):"
SESSION: contextvars.ContextVar[int] = contextvars.ContextVar("session", default=-1)


def _light_llm_class():
    """A scripted model that keeps no copy of its requests (ScriptedLlm deep-copies each one, a cost that grows
    with the session and is not ADK's), answers after `delay` seconds and reports our own token count."""
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class LightLlm(BaseLlm):
        model: str = "scripted-model"
        decide: Any = None
        delay: float = 0.0

        async def generate_content_async(self, llm_request, stream=False):
            if self.delay:
                await asyncio.sleep(self.delay)
            turn = self.decide(llm_request)
            parts = [types.Part(text=turn)] if isinstance(turn, str) else [turn]
            yield LlmResponse(content=types.Content(role="model", parts=parts),
                              usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=0))

    return LightLlm


def _agent(model_delay: float = 0.0):
    """An agent whose scripted model calls `lookup` on every third user turn (twice when asked to), else answers."""
    from google.adk.agents import LlmAgent
    from google.genai import types

    from aether_context.testing import call

    def lookup(key: str) -> dict:
        """Look a record up."""
        return {"key": key, "status": "ok", "detail": " ".join(f"field{i}={key}-{i}" for i in range(60))}

    def decide(request):
        last = request.contents[-1]
        done = sum(1 for p in last.parts or () if p.function_response)
        user = [p.text for c in request.contents if c.role == "user" for p in c.parts or () if p.text]
        text = user[-1] if user else ""
        text = text.rsplit(VERBATIM, 1)[-1]  # the pack quotes the request after its Memory, which holds older ones
        calls = 2 if "twice" in text else (1 if "lookup" in text else 0)
        results = 0
        for c in reversed(request.contents):
            if c.role == "user" and any(p.text for p in c.parts or ()):
                break
            results += sum(1 for p in c.parts or () if p.function_response)
        if results < calls:
            return call("lookup", key=f"K{len(request.contents)}")
        return f"Answer {len(request.contents)}: " + " ".join(text.split()[:20])

    llm = _light_llm_class()(decide=decide, delay=model_delay)
    return LlmAgent(name="agent", model=llm, instruction="You answer questions about records.", tools=[lookup])


def _runner(agent, plugin, db_url: str | None = None):
    from google.adk.apps.app import App
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.memory import InMemoryMemoryService
    from google.adk.runners import Runner
    from google.adk.sessions import DatabaseSessionService, InMemorySessionService

    sessions = DatabaseSessionService(db_url) if db_url else InMemorySessionService()
    return Runner(app=App(name=APP, root_agent=agent, plugins=[plugin] if plugin else []),
                  session_service=sessions, artifact_service=InMemoryArtifactService(),
                  memory_service=InMemoryMemoryService())


def _plugin(store: str):
    from aether_context import ContextPackPlugin

    return ContextPackPlugin(store=store, window_tokens=16_000)


async def _turn(runner, user: str, session: str, text: str, marks: list | None = None) -> None:
    from google.genai import types

    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=user, session_id=session, new_message=message):
        pass


def _question(i: int) -> str:
    topics = ["billing", "shipping", "returns", "accounts", "orders", "refunds", "warranty", "delivery"]
    extra = " please lookup" if i % 3 == 2 else ""
    return f"Question {i} about {topics[i % len(topics)]} and record R{i * 7 % 101}{extra}."


# --------------------------------------------------------------------------- state
async def _state_run(with_plugin: bool, turns: int, checkpoints: list[int], store: str) -> dict:
    runner = _runner(_agent(), _plugin(store) if with_plugin else None)
    await runner.session_service.create_session(app_name=APP, user_id="u", session_id="s")
    out = {}
    for t in range(1, turns + 1):
        await _turn(runner, "u", "s", _question(t))
        if t in checkpoints:
            session = await runner.session_service.get_session(app_name=APP, user_id="u", session_id="s")
            events = session.events
            window = [e for e in events if e.author != "user"][-20:]  # the model calls of the last turns
            deltas = [len(json.dumps({k: v for k, v in (e.actions.state_delta or {}).items()
                                      if k.startswith("aether:")}, default=str)) for e in window]
            out[t] = {"delta_mean": round(statistics.mean(deltas)), "delta_max": max(deltas),
                      "events_kb": round(sum(len(e.model_dump_json()) for e in events) / 1024),
                      "state_kb": round(len(json.dumps(session.state, default=str)) / 1024, 1)}
    return out


def state(args: argparse.Namespace) -> str:
    checkpoints = [int(x) for x in args.turns.split(",")]
    rows = {mode: _child("state", mode, json.dumps({"turns": max(checkpoints), "checkpoints": checkpoints}),
                         timeout=args.timeout) for mode in ("without", "with")}
    lines = ["| user turns | plugin state delta per model call, mean / max (bytes) | session events without / with (KB) "
             "| session state with (KB) |", "| --- | --- | --- | --- |"]
    for t in checkpoints:
        w, wo = rows["with"][str(t)], rows["without"][str(t)]
        lines.append(f"| {t} | {w['delta_mean']} / {w['delta_max']} | {wo['events_kb']} / {w['events_kb']} | "
                     f"{w['state_kb']} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- load
async def _load_run(with_plugin: bool, sessions: int, delay: float, store: str, executor: str = "pack") -> dict:
    import resource

    if executor == "default":  # builds on the loop's default executor instead of the one pack thread (issue 38)
        from aether_context.adk import worker

        worker.pack_worker = lambda: None

    agent = _agent(model_delay=delay)
    plugin = _plugin(store) if with_plugin else None
    runner = _runner(agent, plugin)
    if plugin is not None:
        await asyncio.to_thread(plugin.packer.retriever.wait_ready, 120)
    before: list[float] = []
    llm = agent.model
    original = type(llm).generate_content_async
    started: dict[int, float] = {}  # per session: when its turn started, or its last model response ended

    async def timed(self, llm_request, stream=False):
        # ADK runs the agent in tasks of its own, which inherit the session's context variable from `one`
        i = SESSION.get()
        before.append(time.perf_counter() - started[i])
        async for r in original(self, llm_request, stream):
            yield r
        started[i] = time.perf_counter()

    type(llm).generate_content_async = timed
    for i in range(sessions):
        await runner.session_service.create_session(app_name=APP, user_id=f"u{i}", session_id=f"s{i}")
    SESSION.set(-1)
    started[-1] = time.perf_counter()
    await _turn(runner, "u0", "s0", "warm up")  # the first call's one-time work is the cold scenario's
    before.clear()
    cpu0, t0 = time.process_time(), time.perf_counter()

    async def one(i: int) -> None:
        SESSION.set(i)
        for t in range(3):
            started[i] = time.perf_counter()
            await _turn(runner, f"u{i}", f"s{i}", f"Session {i} turn {t}: lookup twice the record R{i}-{t}.")

    threads0 = _thread_cpu()
    await asyncio.gather(*(one(i) for i in range(sessions)))
    wall = time.perf_counter() - t0
    if plugin is not None:  # the store's background writes for these calls are their CPU too
        await asyncio.to_thread(plugin.packer.store.flush)
    drain, cpu = time.perf_counter() - t0 - wall, time.process_time() - cpu0
    xs = sorted(before)
    threads = {k: round((v - threads0.get(k, 0)) / len(xs), 1) for k, v in _thread_cpu().items()}
    return {"sessions": sessions, "wall_s": round(wall, 2), "calls": len(xs), "calls_per_s": round(len(xs) / wall, 1),
            "before_p50_ms": round(xs[len(xs) // 2] * 1000, 1), "before_p99_ms": round(xs[int(0.99 * (len(xs) - 1))] * 1000, 1),
            "cpu_per_call_ms": round(cpu / len(xs) * 1000, 1), "threads_ms": threads, "drain_s": round(drain, 2),
            "store_inline": plugin.packer.store.stats().get("inline", 0) if plugin else 0,
            "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def _thread_cpu() -> dict[str, float]:
    """CPU ms so far per group of this process's live threads (Linux /proc): the loop, the pack thread, the store
    writer, the loop's default executor, the rest."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    groups = (("MainThread", "loop"), ("aether-pack", "pack"), ("aether-context-store", "store"),
              ("asyncio", "executor"))
    out: dict[str, float] = {}
    tick = 1000 / os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "")
        group = next((g for prefix, g in groups if name.startswith(prefix)), "other")
        out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) * tick
    return out


def load(args: argparse.Namespace) -> str:
    lines = ["| sessions | wall without / with (s) | ratio | model calls per s without / with | before the model call "
             "p50 / p99 with (ms) | CPU per call without / with (ms) | with: loop / pack / store / executor / other (ms) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for n in [int(x) for x in args.sessions.split(",")]:
        r = {mode: _child("load", mode, json.dumps({"sessions": n, "delay": args.delay, "executor": args.executor}),
                          timeout=args.timeout) for mode in ("without", "with")}
        w, wo = r["with"], r["without"]
        lines.append(f"| {n} | {wo['wall_s']} / {w['wall_s']} | {w['wall_s'] / wo['wall_s']:.2f}× | "
                     f"{wo['calls_per_s']} / {w['calls_per_s']} | {w['before_p50_ms']} / {w['before_p99_ms']} | "
                     f"{wo['cpu_per_call_ms']} / {w['cpu_per_call_ms']} | "
                     + " / ".join(str(w["threads_ms"].get(k, 0)) for k in ("loop", "pack", "store", "executor", "other"))
                     + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- cold
async def _cold_run(with_plugin: bool, store: str) -> dict:
    cpu0, t0 = time.process_time(), time.perf_counter()
    agent = _agent()
    runner = _runner(agent, _plugin(store) if with_plugin else None)
    await runner.session_service.create_session(app_name=APP, user_id="u", session_id="s")
    calls: list[float] = []
    original = type(agent.model).generate_content_async

    async def timed(self, llm_request, stream=False):
        calls.append(time.perf_counter())
        async for r in original(self, llm_request, stream):
            yield r

    type(agent.model).generate_content_async = timed
    built = time.perf_counter()
    await _turn(runner, "u", "s", "Hello, can you lookup record R1?")
    end = time.perf_counter()
    return {"build_s": round(built - t0, 2), "first_call_s": round(calls[0] - built, 2),
            "first_turn_s": round(end - built, 2), "cpu_s": round(time.process_time() - cpu0, 2)}


def cold(args: argparse.Namespace) -> str:
    r = {mode: _child("cold", mode, "{}", timeout=args.timeout) for mode in ("without", "with")}
    w, wo = r["with"], r["without"]
    return "\n".join([
        "| | runner built (s) | to the first model call (s) | first turn (s) | process CPU to the first answer (s) |",
        "| --- | --- | --- | --- | --- |",
        f"| without plugin | {wo['build_s']} | {wo['first_call_s']} | {wo['first_turn_s']} | {wo['cpu_s']} |",
        f"| with plugin | {w['build_s']} | {w['first_call_s']} | {w['first_turn_s']} | {w['cpu_s']} |",
        f"", f"Added to the first call: {w['first_call_s'] - wo['first_call_s']:.2f} s, to the first turn: "
        f"{w['first_turn_s'] - wo['first_turn_s']:.2f} s (target: at most 1 s)."])


# --------------------------------------------------------------------------- children
RUNS = {"state": _state_run, "load": _load_run, "cold": _cold_run}


def _child(scenario: str, mode: str, params: str, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", scenario, mode, params]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                              "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{scenario} {mode} failed: {out.stderr[-3000:]}")
    print(f"{scenario} {mode} {params}: {lines[-1]}", file=sys.stderr)
    return json.loads(lines[-1])


SCENARIOS = {"state": state, "load": load, "cold": cold}


@contextlib.contextmanager
def _s3_endpoint():
    """The S3-compatible server AETHER_TEST_S3_ENDPOINT names, else moto's server started for the run."""
    if os.environ.get(S3_ENV):
        yield os.environ[S3_ENV]
        return
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"moto_server did not answer on 127.0.0.1:{port} in 30 s (is it in the venv?)")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


def _bucket_store(endpoint: str) -> str:
    """A fresh bucket for one child run, reached through fsspec's environment configuration (read at import:
    the parent sets it for its children)."""
    import uuid

    import s3fs

    latency = float(os.environ.get(LATENCY_ENV) or 0)
    if latency:
        call = s3fs.S3FileSystem._call_s3

        async def _call_s3(self, *args, **kwargs):  # on s3fs's own loop: a request in flight holds no thread
            await asyncio.sleep(latency)
            return await call(self, *args, **kwargs)

        s3fs.S3FileSystem._call_s3 = _call_s3
    bucket = f"load-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench").mkdir(bucket)
    return f"s3://{bucket}/store"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="state,load,cold")
    parser.add_argument("--turns", default="10,100,1000", help="state: user turns at which the delta is read")
    parser.add_argument("--sessions", default="1,8,32,64", help="load: concurrent sessions")
    parser.add_argument("--delay", type=float, default=0.05, help="load: seconds the model takes")
    parser.add_argument("--executor", default="pack", choices=("pack", "default"),
                        help="load: where packs are built: the one pack thread, or the loop's default executor")
    parser.add_argument("--store-dir", default=str(ROOT / ".aether" / "bench"),
                        help="where each run's store folder is made: a server's disk, not /tmp (see the module doc)")
    parser.add_argument("--bucket", action="store_true",
                        help="load: the store on an S3 bucket (moto's server, or AETHER_TEST_S3_ENDPOINT), not a folder")
    parser.add_argument("--bucket-latency", type=float, default=0.0,
                        help="load with --bucket: seconds added before each request to the bucket")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    os.environ[STORE_DIR_ENV] = args.store_dir
    os.environ[LATENCY_ENV] = str(args.bucket_latency)
    with _s3_endpoint() if args.bucket else contextlib.nullcontext() as endpoint:
        if endpoint:
            os.environ.update({BUCKET_ENV: endpoint, "FSSPEC_S3_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                               "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
        for name in args.scenarios.split(","):
            print(f"\n### {name}\n\n{SCENARIOS[name](args)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        import tempfile

        params = json.loads(sys.argv[4])
        where = os.environ.get(STORE_DIR_ENV) or None
        if where:
            os.makedirs(where, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=where) as folder:
            store = _bucket_store(os.environ[BUCKET_ENV]) if os.environ.get(BUCKET_ENV) else f"file://{folder}/packs"
            print(json.dumps(asyncio.run(RUNS[sys.argv[2]](sys.argv[3] == "with", store=store, **params))))
    else:
        sys.exit(main())
