"""Hostile inputs through a real Runner: how long the event loop stalls, with and without the plugin.

Each (input, configuration) runs in a fresh child process: one ordinary turn first (the process is
warm), then the hostile turn while a probe task sleeps 2 ms in a loop and records how late it wakes.
Reported: the largest loop stall, the hostile turn's wall time and the peak resident memory.

    python bench/hostile.py              # every input, printed as a markdown table
    python bench/hostile.py --only words50k
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PROBE_S = 0.002
INPUTS = {
    "words50k": "a 430 KB message of 50,000 distinct words",
    "msg2mb": "a 2 MB pasted log",
    "ids100k": "a message of 100,000 distinct ids",
    "result50mb": "a 50 MB tool result (a log in one field)",
    "rows5mb": "a 5 MB tool result (25,000 JSON rows)",
}


def _message(kind: str) -> str:
    if kind == "words50k":
        return " ".join(f"w{i:05d}x{chr(97 + i % 26)}" for i in range(50_000))
    if kind == "msg2mb":
        line = "2026-12-07T02:29:46Z INFO worker-{n} handled request id={n} path=/api/v1/items status=200 bytes={b}\n"
        return "Why does this log slow down?\n" + "".join(line.format(n=i, b=i * 7 % 9973) for i in range(20_000))
    if kind == "ids100k":
        return "Check these orders: " + ", ".join(f"ORD-{i:06d}" for i in range(100_000))
    return "Fetch the export and tell me how many rows it has."


def _result(kind: str) -> dict:
    """About 50 MB of log text in one field, or 5 MB of JSON rows."""
    if kind == "rows5mb":
        return {"rows": [{"id": f"ROW-{i:07d}", "name": f"customer {i}", "email": f"user{i}@example.com",
                          "city": "Lisbon", "amount": i * 3 % 1000, "note": "x" * 120} for i in range(25_000)]}
    line = "2026-12-07T02:29:46Z INFO worker-{n} exported row id={n} status=ok bytes={b}\n"
    return {"status": "ok", "log": "".join(line.format(n=i, b=i * 7 % 9973) for i in range(660_000))}


async def _run(kind: str, with_plugin: bool) -> dict:
    from google.adk.agents import LlmAgent
    from google.adk.apps.app import App
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.memory import InMemoryMemoryService
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from aether_context import ContextPackPlugin
    from aether_context.testing import ScriptedLlm, call

    def export() -> dict:
        """Export every row."""
        return _result(kind)

    def decide(request):
        last = request.contents[-1] if request.contents else None
        if last is not None and any(p.function_response for p in last.parts or ()):
            return "The export has many rows."
        text = "".join(p.text or "" for p in (last.parts or ()) if last is not None) if last else ""
        return call("export") if text.startswith("Fetch the export") else "ok"

    agent = LlmAgent(name="agent", model=ScriptedLlm(turns=[decide]), instruction="Help the user.", tools=[export])
    plugin = ContextPackPlugin(store="memory://hostile", window_tokens=32_000) if with_plugin else None
    runner = Runner(app=App(name="hostile", root_agent=agent, plugins=[plugin] if plugin else []),
                    session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService(),
                    memory_service=InMemoryMemoryService())
    await runner.session_service.create_session(app_name="hostile", user_id="u", session_id="s")

    async def turn(text: str) -> None:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(user_id="u", session_id="s", new_message=message):
            pass

    await turn("Hello, what can you do?")
    if plugin is not None:
        await asyncio.to_thread(plugin.packer.retriever.wait_ready, 120)
    text = _message(kind)
    lags: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            lags.append(time.perf_counter() - t0 - PROBE_S)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    await turn(text)
    wall = time.perf_counter() - start
    stop.set()
    await task
    failed = [r for r in plugin.packer.recent if r.manifest.error] if plugin else []
    return {"kind": kind, "plugin": with_plugin, "stall_ms": round(max(lags) * 1000, 1), "wall_s": round(wall, 2),
            "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "failed_open": len(failed)}


def _child(kind: str, with_plugin: bool, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "with" if with_plugin else "without"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    except subprocess.TimeoutExpired:
        return {"kind": kind, "plugin": with_plugin, "timeout": timeout}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"child {kind} {with_plugin} failed: {out.stderr[-3000:]}")
    return json.loads(lines[-1])


def table(rows: list[dict]) -> str:
    out = ["| input | stall without / with (ms) | wall without / with (s) | peak RSS without / with (MB) | failed open |",
           "| --- | --- | --- | --- | --- |"]
    by = {(r["kind"], r["plugin"]): r for r in rows}
    for kind, what in INPUTS.items():
        a, b = by.get((kind, False)), by.get((kind, True))
        if a is None or b is None:
            continue
        if "timeout" in b:
            out.append(f"| {what} | {a['stall_ms']} / timed out | {a['wall_s']} / > {b['timeout']} | – | – |")
            continue
        out.append(f"| {what} | {a['stall_ms']} / {b['stall_ms']} | {a['wall_s']} / {b['wall_s']} | "
                   f"{a['rss_mb']} / {b['rss_mb']} | {b['failed_open']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(INPUTS), help=f"comma-separated: {', '.join(INPUTS)}")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a child may take")
    args = parser.parse_args(argv)
    rows = []
    for kind in [k.strip() for k in args.only.split(",") if k.strip()]:
        for with_plugin in (False, True):
            rows.append(_child(kind, with_plugin, args.timeout))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print(table(rows))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(asyncio.run(_run(sys.argv[2], sys.argv[3] == "with"))))
    else:
        sys.exit(main())
