"""Reliability under load (issue 13): many users through one plugin, kill -9 during writes, loop stalls.

Scenarios (each a function of the parsed arguments returning its markdown report, registered in
`SCENARIOS`; `bench/reliability.py --scenarios users,kill,stall` runs them):

- `users`: 64 concurrent users through ONE Runner and plugin; half of them use the session id
  "main". Each user's messages, tool outputs, saved artifact (`notes.txt`, the same name for all)
  and memory carry a marker of that user. Counted: markers of another user in any stored request
  (must be 0) and manifests whose `previous_pack_id` is not the previous pack of the same (app,
  user, session, agent) (must be 0).
- `kill`: a child process packs through ADK with a `file://` store and is killed with SIGKILL after
  N completed calls; then a child runs and exits normally (no `close()`). Counted: corrupt manifests
  in the store (must be 0), completed calls of the normal run without a verified manifest (must be 0).
- `stall`: the event loop's lag, probed every 2 ms, while 64 sessions run with the plugin (real
  MiniLM, loaded in the process) and without it, each in its own process: during the first packs
  (model loading) and during ordinary packs once the model is ready.

Usage::

    python bench/reliability.py --scenarios users,kill,stall --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MARK = re.compile(r"MARK-u(\d+)-")
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu revenue churn latency cache budget").split()


def _text(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3 + i // 5) % len(WORDS)] for i in range(n))


# --------------------------------------------------------------------------- a small agent with tools
def _agent(name: str = "agent"):
    """An LlmAgent whose scripted model saves notes, fetches a page, then answers (decided per request)."""
    from google.adk.agents import LlmAgent
    from google.genai import types

    from aether_context.testing import ScriptedLlm, call

    async def save_notes(marker: str, tool_context) -> dict:
        """Save the user's notes as notes.txt."""
        await tool_context.save_artifact("notes.txt", types.Part(text=f"notes of {marker}: {_text(60, len(marker))}"))
        return {"saved": "notes.txt", "marker": marker}

    def fetch(url: str) -> dict:
        """Fetch a page."""
        marker = url.rsplit("/", 1)[-1]
        return {"url": url, "body": f"{marker} " + _text(1500, len(url))}

    def decide(request) -> Any:
        last = request.contents[-1] if request.contents else None
        responses = [p.function_response.name for c in request.contents for p in c.parts or () if p.function_response]
        texts = [p.text for c in request.contents if c.role == "user" for p in c.parts or () if p.text and "MARK-" in p.text]
        marker = MARK.search(texts[-1]).group(0) + "x" if texts else "MARK-u0-x"
        if last is not None and any(p.function_response for p in last.parts or ()):
            name = [p.function_response.name for p in last.parts if p.function_response][-1]
            return call("fetch", url=f"https://example.com/{marker}") if name == "save_notes" else "done"
        if "save_notes" not in responses:
            return call("save_notes", marker=marker)
        return "noted"

    llm = ScriptedLlm(turns=[decide])
    return LlmAgent(name=name, model=llm, instruction="You keep notes for the user.", tools=[save_notes, fetch]), llm


def _runner(agent, plugins, store_url: str | None = None):
    from google.adk.apps.app import App
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.memory import InMemoryMemoryService
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    return Runner(app=App(name="reliability", root_agent=agent, plugins=plugins),
                  session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService(),
                  memory_service=InMemoryMemoryService())


async def _turn(runner, user: str, session: str, text: str) -> None:
    from google.genai import types

    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=user, session_id=session, new_message=message):
        pass


# --------------------------------------------------------------------------- users
async def _users_run(users: int, turns: int, store_url: str) -> dict:
    from aether_context import ContextPackPlugin
    from aether_context.replay import replay
    from aether_context.retrieval import HashingEmbedder

    agent, llm = _agent()
    plugin = ContextPackPlugin(store=store_url, window_tokens=16_000, embedder=HashingEmbedder(), keep_recent=100_000)
    runner = _runner(agent, [plugin])
    shared = users // 2

    async def user(i: int) -> None:
        uid = f"user-{i:02d}"
        sid = "main" if i < shared else f"s-{i:02d}"
        await runner.session_service.create_session(app_name="reliability", user_id=uid, session_id=sid)
        for t in range(turns):
            await _turn(runner, uid, sid, f"MARK-u{i:02d}-t{t} " + _text(40, i * 10 + t))
            if t == 0:  # the user's own memory: later turns search it
                session = await runner.session_service.get_session(app_name="reliability", user_id=uid, session_id=sid)
                await runner.memory_service.add_session_to_memory(session)

    start = time.perf_counter()
    await asyncio.gather(*(user(i) for i in range(users)))
    seconds = time.perf_counter() - start
    plugin.packer.store.flush()
    records = list(plugin.packer.recent)
    foreign, with_foreign, errors, checked, own_seen = 0, 0, 0, 0, 0
    for r in records:
        if r.manifest.error or not r.uri:
            errors += 1
            continue
        own = int(r.manifest.user_id.split("-")[1])
        seen = {int(m) for m in MARK.findall(json.dumps(replay(r.uri).to_json()))}
        checked += 1
        own_seen += own in seen
        bad = seen - {own}
        foreign += len(bad)
        with_foreign += bool(bad)
    last: dict[tuple, str] = {}
    wrong_previous = 0
    for r in records:
        m = r.manifest
        key = (m.app_name, m.user_id, m.session_id, m.agent)
        if m.error:
            continue
        if m.previous_pack_id != last.get(key, ""):
            wrong_previous += 1
        last[key] = m.pack_id
    return {"users": users, "shared_session_users": shared, "turns": turns, "packs": len(records), "checked": checked,
            "fail_open": errors, "own_seen": own_seen, "foreign_markers": foreign, "packs_with_foreign": with_foreign,
            "wrong_previous": wrong_previous, "seconds": round(seconds, 1), "model_calls": len(llm.requests)}


def _users_in(code: str, users: int, turns: int) -> dict:
    """The users run in a child process importing `aether_context` from the checkout at `code`."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--users-child", str(users), str(turns)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=code, timeout=290,
                         env={**os.environ, "PYTHONPATH": str(Path(code).resolve())})
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not line:
        raise RuntimeError(f"users child failed on {code}: {out.stderr[-2000:]}")
    return json.loads(line[-1])


def _users_child(users: int, turns: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_users_run(users, turns, f"file://{folder}/packs"))


def _users_row(label: str, r: dict) -> str:
    return (f"| {label} | {r['packs']} | {r['checked']} | {r['own_seen']} | {r['fail_open']} | {r['foreign_markers']} | "
            f"{r['packs_with_foreign']} | {r['wrong_previous']} | {r['seconds']} |")


def users(args: argparse.Namespace) -> str:
    rows = [_users_row("this checkout", _users_in(str(ROOT), args.users, args.turns))]
    if args.users_baseline:
        base = _users_in(args.users_baseline, args.users, args.turns)
        rows.append(_users_row(f"baseline `{args.users_baseline}`", base))
    return "\n".join([
        "## Many users through one plugin",
        "",
        f"{args.users} concurrent users, one Runner and one plugin; {args.users // 2} of them use the session "
        f"id \"main\"; {args.turns} invocations each (a tool saving `notes.txt`, a 1.5K-token fetch that is offloaded, "
        "the user's own memory), every text carrying the user's marker. Each stored request was replayed and searched "
        "for other users' markers; each manifest's `previous_pack_id` was checked against the previous pack of the "
        "same (app, user, session, agent). A baseline checkout (`--users-baseline DIR`) runs the same users.",
        "",
        "| code | packs | checked | with the user's own marker | fail-open | foreign markers | packs with foreign "
        "content | wrong previous pack | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ])


# --------------------------------------------------------------------------- kill -9
async def _child_run(store_url: str, calls: int, seed: int) -> None:
    """Pack through ADK until `calls` packs completed, printing each completed call's manifest URI."""
    from aether_context import ContextPackPlugin
    from aether_context.retrieval import HashingEmbedder

    agent, _ = _agent()
    plugin = ContextPackPlugin(store=store_url, window_tokens=16_000, embedder=HashingEmbedder())
    runner = _runner(agent, [plugin])
    done, i = 0, 0
    while done < calls:
        uid, sid = f"user-{seed}-{i % 7}", f"s-{seed}-{i}"
        await runner.session_service.create_session(app_name="reliability", user_id=uid, session_id=sid)
        for t in range(2):
            await _turn(runner, uid, sid, f"MARK-u{i % 7:02d}-t{t} " + _text(40, i + t))
        for r in list(plugin.packer.recent)[done:]:
            print("done", r.uri, flush=True)
        done = len(plugin.packer.recent)
        i += 1
    # a normal exit without close(): the store's exit hook flushes what is queued


def _manifests(folder: Path) -> tuple[list[Path], int]:
    paths = list(folder.rglob("manifest.json"))
    temps = sum(1 for p in folder.rglob("*") if p.is_file() and ".tmp" in p.name)
    return paths, temps


def _verify(store, paths: list[Path]) -> int:
    bad = 0
    for p in paths:
        try:
            store.read_manifest(f"{store.url}/{p.relative_to(Path(store.root)).as_posix()}")
        except Exception:
            bad += 1
    return bad


def _child(store_url: str, calls: int, seed: int, kill_after: int | None) -> tuple[list[str], int]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", store_url, str(calls), str(seed)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    completed = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("done "):
            completed.append(line.split(" ", 1)[1].strip())
            if kill_after is not None and len(completed) >= kill_after:
                os.kill(proc.pid, signal.SIGKILL)
                break
    return completed, proc.wait(timeout=240)


def kill(args: argparse.Namespace) -> str:
    from aether_context.store import PackStore

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "packs"
        url = f"file://{root}"
        killed, code = _child(url, 10_000, 1, args.kill_after)
        store = PackStore(url, background=False)
        paths, temps = _manifests(root)
        corrupt_after_kill = _verify(store, paths)
        present_after_kill = sum(1 for u in killed if Path(u[len("file://"):]).exists())
        normal, normal_code = _child(url, args.normal_calls, 2, None)
        paths, temps_after = _manifests(root)
        corrupt = _verify(store, paths)
        missing = 0
        for u in normal:
            try:
                store.read_manifest(u)
            except Exception:
                missing += 1
    return "\n".join([
        "## kill -9 during writes",
        "",
        f"A child process packs through ADK (background writer, `file://` store) and is killed with SIGKILL after "
        f"{len(killed)} completed calls (exit code {code}); then a child packs {len(normal)} calls and exits normally "
        f"without `close()` (exit code {normal_code}).",
        "",
        "| run | completed calls | manifests present | corrupt manifests | leftover temp files |",
        "| --- | --- | --- | --- | --- |",
        f"| killed | {len(killed)} | {present_after_kill} | {corrupt_after_kill} | {temps} |",
        f"| normal exit | {len(normal)} | {len(normal) - missing} | {corrupt} (whole store, {len(paths)} manifests) | "
        f"{temps_after} |",
        "",
        "A killed process loses the writes still queued (the manifests of its last calls); none is left half-written. "
        "After a normal exit every completed call's manifest is present and verifies.",
    ])


# --------------------------------------------------------------------------- loop stalls
async def _stall_run(with_plugin: bool, sessions: int, turns: int, stagger: float = 0.0, think: float = 0.0) -> dict:
    """Loop lag while `sessions` run: the first invocation of each (the model loading), then `turns`
    more once the model is ready. Sessions start `stagger` s apart and wait `think` s between
    invocations (0, 0: all at once, a burst)."""
    from aether_context import ContextPackPlugin

    agent, _ = _agent()
    lags: list[tuple[float, float]] = []  # (time, lag seconds)
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            lags.append((now, now - t0 - 0.002))

    # built at start-up, before serving (the embedding model then loads on its own thread)
    plugin = ContextPackPlugin(store="memory://reliability-stall", window_tokens=16_000) if with_plugin else None
    runner = _runner(agent, [plugin] if plugin else [])
    probing = asyncio.create_task(probe())
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

    first_done = None

    async def watch_first() -> None:
        nonlocal first_done
        while first_done is None and plugin is not None:
            if plugin.packer.recent:
                first_done = time.perf_counter()
            await asyncio.sleep(0.001)

    watcher = asyncio.create_task(watch_first())
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
    stop.set()
    await probing
    watcher.cancel()

    def window(a: float, b: float) -> list[float]:
        return sorted(lag * 1000 for t, lag in lags if a <= t <= b)

    def stats(xs: list[float]) -> dict:
        if not xs:
            return {"n": 0}
        return {"n": len(xs), "p50": round(statistics.median(xs), 1), "p99": round(xs[int(0.99 * (len(xs) - 1))], 1),
                "max": round(xs[-1], 1)}

    dense_off = 0
    if plugin is not None:
        dense_off = sum(any(f.startswith("dense_ranking_off") for f in r.manifest.flags) for r in plugin.packer.recent)
    return {"plugin": with_plugin, "first_pack": stats(window(start, first_done or warm_end)),
            "first_phase": stats(window(start, warm_end)), "ordinary": stats(window(ordinary_start, end)),
            "model_ready_s": round(ready_at - start, 1) if ready_at else None,
            "ordinary_calls": sessions * turns, "ordinary_s": round(end - ordinary_start, 1),
            "lexical_packs": dense_off, "packs": len(plugin.packer.recent) if plugin else 0}


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


SCENARIOS = {"users": users, "kill": kill, "stall": stall}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This module's options, on the shared `bench/reliability.py` parser."""
    parser.add_argument("--users", type=int, default=64, help="concurrent users (users)")
    parser.add_argument("--turns", type=int, default=3, help="invocations per user (users)")
    parser.add_argument("--users-baseline", default="", help="another checkout to run the users scenario on (users)")
    parser.add_argument("--kill-after", type=int, default=40, help="completed calls before SIGKILL (kill)")
    parser.add_argument("--normal-calls", type=int, default=60, help="calls of the normally exiting run (kill)")
    parser.add_argument("--sessions", type=int, default=64, help="concurrent sessions (stall)")
    parser.add_argument("--stall-turns", type=int, default=3, help="ordinary invocations per session (stall)")
    parser.add_argument("--stall-stagger", type=float, default=20.0, help="ms between session starts (stall)")
    parser.add_argument("--stall-think", type=float, default=200.0, help="ms between a session's invocations (stall)")


if __name__ == "__main__":  # child processes of the kill and stall scenarios
    if sys.argv[1] == "--child":
        asyncio.run(_child_run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    elif sys.argv[1] == "--users-child":
        print(json.dumps(_users_child(int(sys.argv[2]), int(sys.argv[3]))))
    elif sys.argv[1] == "--stall-child":
        print(json.dumps(asyncio.run(_stall_run(sys.argv[2] == "with", int(sys.argv[3]), int(sys.argv[4]),
                                                float(sys.argv[5]), float(sys.argv[6])))))
