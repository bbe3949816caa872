"""Property fuzzing of request shapes: generated sessions through a real ADK Runner with the plugin.

Each session is drawn from its seed: an agent tree (a root, sometimes with sub-agents that transfer
back and forth), a step tool scope or none, a built-in tool or none, a window from tight to roomy,
user turns with images, files and video clips, and a scripted Gemini-like model whose turns mix
every part kind: text, thought-signed text, thoughts, single and parallel calls (thought-signed in
at least a third of its model turns), executable code with its result. A plugin registered before
ours records ADK's request, one after it records what the pack sends, and every call is checked
(`fuzz_checks.py`): no orphaned call or response, no part lost or reordered against ADK's request,
framework tools present, and each recorded pack re-packed from the store under its profile has the
same checksum.

    .venv/bin/python bench/fuzz_requests.py --sessions 2000 --write
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import re
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps.app import App  # noqa: E402
from google.adk.artifacts import InMemoryArtifactService  # noqa: E402
from google.adk.memory import InMemoryMemoryService  # noqa: E402
from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.tools.google_search_tool import GoogleSearchTool  # noqa: E402
from google.genai import types  # noqa: E402

from aether_context import ContextPackPlugin, load_profile, repack, set_task  # noqa: E402
from aether_context.adk import request_from_llm
from aether_context.adk.offload import parse_artifact_uri  # noqa: E402
from aether_context.content import canonical_json, ModelRequest  # noqa: E402
from aether_context.pipeline.retrieve import use_default_embedder  # noqa: E402
from aether_context.retrieval import HashingEmbedder  # noqa: E402
from aether_context.testing import ScriptedLlm  # noqa: E402
from fuzz_checks import check_call, orphans  # noqa: E402,F401  (orphans: for tests)
from report_sections import machine, write_section  # noqa: E402

# Shapes do not depend on ranking: a model-free embedder keeps each session's packer cheap to build.
use_default_embedder(HashingEmbedder())

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
ROOMY = 1_000_000  # a window in which only the profile's own policy (history past the tail) folds
WINDOWS = (6_000, 12_000, 32_000, ROOMY)

# ------------------------------------------------------------------------------------------------ tools


def lookup(key: str) -> dict:
    """Look up a small fact."""
    return {"key": key, "value": f"value-of-{key}"}


def search(query: str, limit: int, include_archived: bool = False) -> dict:
    """Search the knowledge base (arguments deliberately not in sorted order)."""
    return {"query": query, "hits": [f"hit {i} for {query}: " + "lorem ipsum dolor " * 12 for i in range(limit)]}


def fetch_page(url: str) -> dict:
    """Fetch a long page."""
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    return {"url": url, "body": " ".join(words[(i * 7 + len(url)) % len(words)] for i in range(1_500))}


def run_check(name: str) -> dict:
    """Run a named check; some fail."""
    return {"error": f"check {name} failed: AssertionError"} if len(name) % 2 else {"status": "ok", "check": name}


TOOLS = {"lookup": lookup, "search": search, "fetch_page": fetch_page, "run_check": run_check}


# ------------------------------------------------------------------------------------------------ the model


@dataclass
class Budget:
    """Model calls left in the current invocation (reset per user turn), shared by the agent tree."""

    calls: int = 0
    thought_signed: int = 0
    model_turns: int = 0


def _args(rng: random.Random, name: str) -> dict:
    if name == "lookup":
        return {"key": f"k{rng.randrange(100)}"}
    if name == "search":
        return {"query": f"topic {rng.randrange(50)}", "limit": rng.randint(1, 4)}  # call order: not sorted
    if name == "fetch_page":
        return {"url": f"https://example.com/{rng.randrange(1000)}"}
    return {"name": f"check_{'x' * rng.randint(1, 6)}"}


def _signature(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(4, 24)))


def _answer(rng: random.Random, budget: Budget) -> list[types.Part]:
    """A final model turn: text with, at random, a thought, a signature, executable code."""
    parts: list[types.Part] = []
    if rng.random() < 0.3:
        parts.append(types.Part(text="thinking about it", thought=True,
                                thought_signature=_signature(rng) if rng.random() < 0.5 else None))
    if rng.random() < 0.25:
        parts.append(types.Part(executable_code=types.ExecutableCode(code=f"print({rng.randrange(99)})",
                                                                      language=types.Language.PYTHON)))
        parts.append(types.Part(code_execution_result=types.CodeExecutionResult(outcome=types.Outcome.OUTCOME_OK,
                                                                                 output="42\n")))
    signed = rng.random() < 0.4
    parts.append(types.Part(text=f"answer {rng.randrange(10_000)}", thought_signature=_signature(rng) if signed else None))
    budget.thought_signed += any(p.thought_signature for p in parts)
    return parts


def model_turn(rng: random.Random, budget: Budget, llm_request: Any, agent: str, peers: list[str]) -> list[types.Part]:
    """The next model turn for `agent`, decided by the seed (and what the request declares)."""
    budget.model_turns += 1
    declared = set(llm_request.tools_dict)
    budget.calls -= 1
    if budget.calls < 0:
        return _answer(rng, budget)
    if peers and "transfer_to_agent" in declared and rng.random() < 0.2:
        part = types.Part(function_call=types.FunctionCall(name="transfer_to_agent", args={"agent_name": rng.choice(peers)}))
        if rng.random() < 0.5:
            part.thought_signature = _signature(rng)
            budget.thought_signed += 1
        return [part]
    usable = sorted(n for n in declared if n in TOOLS)
    if not usable or rng.random() < 0.3:
        return _answer(rng, budget)
    n = 1 if rng.random() < 0.6 else rng.randint(2, 3)  # parallel calls
    parts = []
    if rng.random() < 0.2:
        parts.append(types.Part(text="let me check", thought=True, thought_signature=_signature(rng)))
    for k in range(n):
        name = rng.choice(usable)
        part = types.Part(function_call=types.FunctionCall(name=name, args=_args(rng, name)))
        if k == 0 and rng.random() < 0.5:  # Gemini signs the first call of a turn
            part.thought_signature = _signature(rng)
        parts.append(part)
    budget.thought_signed += any(p.thought_signature for p in parts)
    return parts


def user_message(rng: random.Random, turn: int) -> types.Content:
    parts = [types.Part(text=f"request {turn}: please look into topic {rng.randrange(50)}")]
    roll = rng.random()
    if roll < 0.2:
        parts.append(types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG + bytes([turn]))))
    elif roll < 0.35:
        parts.append(types.Part(file_data=types.FileData(file_uri=f"gs://bucket/clip{turn}.mp4", mime_type="video/mp4"),
                                video_metadata=types.VideoMetadata(start_offset="1s", end_offset="4s")))
    elif roll < 0.45:
        parts.append(types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG, display_name=f"shot{turn}.png")))
    return types.Content(role="user", parts=parts)


# ------------------------------------------------------------------------------------------------ a session


class Capture(BasePlugin):
    """Records each request as it stands when this plugin's before_model runs."""

    def __init__(self, name: str):
        super().__init__(name)
        self.requests: list[tuple[ModelRequest, set[str]]] = []

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> None:
        self.requests.append((request_from_llm(llm_request.model_copy(deep=True)), set(llm_request.tools_dict)))
        return None


@dataclass
class Spec:
    seed: int
    turns: int
    window: int
    sub_agents: int
    scope: "tuple[str, ...] | None"
    builtin: bool
    offload: bool


def draw_spec(seed: int, max_turns: int) -> Spec:
    rng = random.Random(seed)
    scope = tuple(sorted(rng.sample(sorted(TOOLS), rng.randint(1, 2)))) if rng.random() < 0.4 else None
    return Spec(seed=seed, turns=rng.randint(1, max_turns), window=rng.choice(WINDOWS), sub_agents=rng.choice((0, 0, 1, 2)),
                scope=scope, builtin=rng.random() < 0.2, offload=rng.random() < 0.5)


@dataclass
class Result:
    spec: Spec
    calls: int = 0
    model_turns: int = 0
    thought_signed: int = 0
    failures: list[str] = field(default_factory=list)
    pack_errors: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)


def _build(spec: Spec, rng: random.Random, budget: Budget) -> tuple[LlmAgent, list[str]]:
    names = ["root"] + [f"helper{i}" for i in range(spec.sub_agents)]

    def script(agent: str):
        return lambda req: model_turn(rng, budget, req, agent, [n for n in names if n != agent])

    def agent(name: str, subs: list) -> LlmAgent:
        tools: list[Any] = list(TOOLS.values()) if name == "root" else [lookup, search]
        if spec.builtin and name == "root":
            tools.append(GoogleSearchTool(bypass_multi_tools_limit=True))
        return LlmAgent(name=name, model=ScriptedLlm(model="gemini-2.5-flash", turns=[script(name)]),
                        instruction=f"You are {name}.", description=f"the {name} agent", tools=tools, sub_agents=subs)

    helpers = [agent(n, []) for n in names[1:]]
    return agent("root", helpers), names


_URI = re.compile(r"artifact://[A-Za-z0-9_./:%-]+(?:#v\d+)?")


def _uris(request: ModelRequest) -> set[str]:
    return set(_URI.findall(canonical_json([m.to_json() for m in request.messages])))


async def _loads(runner: Runner, plugin: ContextPackPlugin, uri: str) -> bool:
    try:
        u = parse_artifact_uri(uri)
    except Exception:
        return False
    part = await runner.artifact_service.load_artifact(app_name=u.app, user_id=u.user, session_id=u.session,
                                                       filename=u.filename, version=u.version)
    return part is not None or plugin.packer.store.get_artifact(u.app, u.user, u.session, u.filename, u.version) is not None


async def run_session(spec: Spec) -> Result:
    rng = random.Random(spec.seed * 7919 + 1)
    budget = Budget()
    root, _ = _build(spec, rng, budget)
    before, after = Capture("fuzz_before"), Capture("fuzz_after")
    profile = load_profile("default").override(offload={"enabled": spec.offload})
    plugin = ContextPackPlugin(store=f"memory://fuzz/{uuid.uuid4().hex}", window_tokens=spec.window, profile=profile)
    runner = Runner(app=App(name="fuzz", root_agent=root, plugins=[before, plugin, after]),
                    session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService(),
                    memory_service=InMemoryMemoryService())
    state: dict = {}
    if spec.scope is not None:
        set_task(state, goal="answer the user's requests", step="look things up", tools=list(spec.scope))
    session = await runner.session_service.create_session(app_name="fuzz", user_id="u", state=state)
    result = Result(spec)
    try:
        for turn in range(spec.turns):
            budget.calls = rng.randint(1, 4)
            async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=user_message(rng, turn)):
                pass
    except Exception as e:  # the run itself broke: a failure of the property "apps keep working"
        result.failures.append(f"run: {type(e).__name__}: {str(e)[:200]}")
    plugin.packer.store.flush()
    result.calls, result.model_turns, result.thought_signed = len(after.requests), budget.model_turns, budget.thought_signed
    records = list(plugin.packer.recent)
    known: set[str] = set()  # every URI ADK's own requests held so far: what the session saved
    for i, ((orig, orig_tools), (sent, sent_tools)) in enumerate(zip(before.requests, after.requests)):
        known |= _uris(orig)
        for uri in sorted(_uris(sent) - known):  # the plugin's own (a decayed image): it must load
            if await _loads(runner, plugin, uri):
                known.add(uri)
            else:  # a URI cut short, or invented: the model could not recall it
                result.failures.append(f"call {i}: artifact URI that does not load: {uri[:120]}")
        record = records[i] if i < len(records) else None
        if record is not None and record.manifest.error:
            result.pack_errors.append(record.manifest.error[:120])
            continue
        for problem in check_call(orig, orig_tools, sent, sent_tools):
            result.failures.append(f"call {i}: {problem}")
        if record is not None:
            result.counts["repacked"] += 1
            try:
                again = repack(record.uri, plugin.packer.profile, store=plugin.packer.store)
                if again.diff["checksum_changed"]:
                    result.failures.append(f"call {i}: re-pack checksum changed")
            except Exception as e:
                result.failures.append(f"call {i}: re-pack failed: {type(e).__name__}: {str(e)[:120]}")
    fs = plugin.packer.store.fs
    root_path = plugin.packer.store.root if hasattr(plugin.packer.store, "root") else None
    if root_path:
        try:
            fs.rm(root_path, recursive=True)
        except Exception:
            pass
    return result


# ------------------------------------------------------------------------------------------------ driver


@dataclass
class Summary:
    sessions: int = 0
    calls: int = 0
    model_turns: int = 0
    thought_signed: int = 0
    repacked: int = 0
    pack_errors: Counter = field(default_factory=Counter)
    failing: list[Result] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def add(self, r: Result) -> None:
        self.sessions += 1
        self.calls += r.calls
        self.model_turns += r.model_turns
        self.thought_signed += r.thought_signed
        self.repacked += r.counts["repacked"]
        self.pack_errors.update(e.split(":")[0] for e in r.pack_errors)
        if r.failures:
            self.failing.append(r)
            self.kinds.update(f.split(": ", 2)[1].split(":")[0] if f.startswith("call") else f.split(":")[0] for f in r.failures)


async def run_many(seeds: "list[int]", max_turns: int, progress: bool = False) -> Summary:
    loggers = [logging.getLogger(n) for n in ("aether_context", "google_adk")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)  # fail-open logs are counted, not printed
    summary = Summary()
    start = time.perf_counter()
    try:
        for k, seed in enumerate(seeds):
            summary.add(await run_session(draw_spec(seed, max_turns)))
            if progress and (k + 1) % 100 == 0:
                print(f"  {k + 1} sessions, {len(summary.failing)} failing, {time.perf_counter() - start:.0f} s", flush=True)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    summary.seconds = time.perf_counter() - start
    return summary


def report(summary: Summary, command: str, max_turns: int, host: str = "") -> str:
    s = summary
    share = s.thought_signed / max(1, s.model_turns)
    lines = [
        "# Benchmark: request-shape fuzzing (thought signatures, every part kind, sub-agents, step scopes)",
        "",
        f"Command: `{command}` ({s.seconds:.0f} s; {host or machine()}).",
        "",
        "Generated sessions through a real ADK Runner (App + ContextPackPlugin, in-memory services), each "
        f"drawn from its seed: 1-{max_turns} user turns (images, files, video clips), a root agent with 0-2 "
        "sub-agents transferring back and forth, a step tool scope in ~40%, google_search in ~20%, offload on "
        "in ~50%, windows of 6K, 12K, 32K and 1M tokens, and a scripted gemini-2.5-flash whose turns mix text, "
        "thoughts, thought-signed text and calls, parallel calls, executable code and its result. Every call "
        "is checked against ADK's own request (the checks: `bench/fuzz_checks.py`).",
        "",
        "| sessions | model calls | model turns thought-signed | re-packed | orphaned calls/responses | parts lost or reordered | framework tools missing | re-pack checksum changed | sessions failing |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {s.sessions:,} | {s.calls:,} | {share:.0%} | {s.repacked:,} | {s.kinds['orphan']} | "
        f"{s.kinds['lost'] + s.kinds['payload']} | "
        f"{s.kinds['framework tool missing']} | {s.kinds['re-pack checksum changed']} | {len(s.failing)} |",
        "",
    ]
    if s.pack_errors:
        lines.append("Calls the plugin did not pack (it failed open and sent ADK's request; not checked): "
                     + ", ".join(f"{k} × {v}" for k, v in s.pack_errors.most_common()) + ".")
        lines.append("")
    if s.failing:
        lines.append("Failing seeds (first 10): " + ", ".join(
            f"{r.spec.seed} ({r.failures[0][:100]})" for r in s.failing[:10]))
        lines.append("")
    return "\n".join(lines)


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--turns", type=int, default=3, help="most user turns per session")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--write", action="store_true", help="write the report into docs/benchmarks.md")
    args = ap.parse_args(argv)
    seeds = list(range(args.seed, args.seed + args.sessions))
    host = machine()  # the load as the run starts
    summary = asyncio.run(run_many(seeds, args.turns, progress=True))
    command = "python bench/fuzz_requests.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    text = report(summary, command.strip(), args.turns, host)
    print(text)
    for r in summary.failing[:20]:
        print(r.spec, *r.failures[:5], sep="\n  ")
    if args.write:
        write_section(ROOT / "docs/benchmarks.md", "fuzz_requests", text)
    return 1 if summary.failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
