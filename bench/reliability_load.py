"""Reliability under load (issue 13): many users through one plugin, kill -9 during writes, loop stalls.

Scenarios (each a function of the parsed arguments returning its markdown report, registered in
`SCENARIOS`; `bench/reliability.py --scenarios users,kill,stall` runs them; `stall` lives in
`reliability_stall.py`, the agent they all run in `reliability_agent.py`):

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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from reliability_agent import MARK, _agent, _runner, _text, _turn  # noqa: E402
from reliability_stall import stall  # noqa: E402


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


if __name__ == "__main__":  # child processes of the users and kill scenarios
    if sys.argv[1] == "--child":
        asyncio.run(_child_run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    elif sys.argv[1] == "--users-child":
        print(json.dumps(_users_child(int(sys.argv[2]), int(sys.argv[3]))))
