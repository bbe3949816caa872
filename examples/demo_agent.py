"""aether-context demo: an ADK agent investigating a production incident, packed on every call.

Runs offline by default: a scripted model (aether_context.testing.ScriptedLlm) plays the agent's
turns while real Python tools read real files from a generated workspace and return large outputs.
The scripted model reports usage like Gemini: it counts 10 % more tokens than our tokenizer (so the
plugin's calibration shows) and serves an unchanged request prefix of 1,024+ tokens from its cache.
Each model call is printed (tokens sent against what ADK would have sent, layer use, cache, each
truncation in plain words) above what the model answered: its text or its tool calls, and what each
tool returned. Its manifest is written to a pack store. The session's totals follow (and the same
without its largest call when that one call dominates them), then the timeline and an HTML report;
the last call is replayed and inspected.

    python examples/demo_agent.py                 # offline
    GOOGLE_API_KEY=... python examples/demo_agent.py --gemini   # the same agent on Gemini
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps.app import App  # noqa: E402
from google.adk.artifacts import InMemoryArtifactService  # noqa: E402
from google.adk.memory import InMemoryMemoryService  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

from aether_context import ContextPackPlugin, TokenCounter, replay, set_task  # noqa: E402
from aether_context.adk import request_from_llm  # noqa: E402
from aether_context.cli import main as cli_main  # noqa: E402
from aether_context.pipeline import request_tokens  # noqa: E402
from aether_context.report.calls import explain, tokens_without_plugin  # noqa: E402
from aether_context.testing import ScriptedLlm, call  # noqa: E402

APP = "incident_demo"
USER = "oncall"
WORKSPACE = Path(".")  # set to a temporary folder (removed at the end) by run()
MODEL_TOKEN_RATIO = 1.1  # the demo model counts 10 % more tokens than our tokenizer
MIN_CACHED_PREFIX = 1024  # like Gemini's implicit cache: shorter prefixes are not cached


class DemoLlm(ScriptedLlm):
    """The scripted model, reporting usage as a provider with an implicit prompt cache would."""

    def model_post_init(self, context) -> None:
        super().model_post_init(context)
        counter, previous = TokenCounter(), {"request": None}

        def count(llm_request) -> int:
            request = request_from_llm(llm_request)
            tokens = request_tokens(request, counter)
            self.cached_tokens = round(_shared_prefix_tokens(previous["request"], request, counter) * MODEL_TOKEN_RATIO)
            previous["request"] = request
            return round(tokens * MODEL_TOKEN_RATIO)

        self.prompt_token_counter = count


def _shared_prefix_tokens(old, new, counter) -> int:
    """Tokens of the leading part two requests share (system, tools, then whole messages)."""
    if old is None or old.head_json() != new.head_json():
        return 0
    shared = request_tokens(new, counter) - sum(counter.count_message(m) for m in new.messages)
    for a, b in zip(old.messages, new.messages):
        if a != b:
            break
        shared += counter.count_message(b)
    return shared if shared >= MIN_CACHED_PREFIX else 0


def _make_workspace(root: Path) -> None:
    """A small service with a long log: the tools read these real files."""
    rng = random.Random(7)
    (root / "service").mkdir(parents=True, exist_ok=True)
    (root / "service" / "checkout.py").write_text(
        '"""Checkout service."""\nimport gateway\n\nTIMEOUT_S = float(CONFIG["gateway_timeout"])\n\n'
        + "\n".join(f"def step_{i}(order):\n    return gateway.charge(order, timeout=TIMEOUT_S)  # step {i}\n" for i in range(60))
    )
    (root / "service" / "config.yaml").write_text("gateway_timeout: 0.8\nretries: 0\nregion: eu-west-1\n")
    lines = []
    for i in range(4000):
        cid = rng.randint(1000, 9999)
        if i % 97 == 13:
            lines.append(f"2026-11-20T10:{i % 60:02d}:00Z ERROR checkout customer_id={cid} GatewayTimeout: charge exceeded 0.8s")
        else:
            lines.append(f"2026-11-20T10:{i % 60:02d}:00Z INFO checkout customer_id={cid} order ok latency_ms={rng.randint(80, 700)}")
    (root / "service" / "app.log").write_text("\n".join(lines) + "\n")


def list_files(directory: str) -> dict:
    """List the files in a directory of the workspace."""
    base = WORKSPACE / directory
    return {"files": sorted(str(p.relative_to(WORKSPACE)) for p in base.rglob("*") if p.is_file())}


def read_file(path: str) -> dict:
    """Read a whole file of the workspace."""
    if not (WORKSPACE / path).is_file():
        return {"error": f"FileNotFoundError: no such file in the workspace: {path}"}
    text = (WORKSPACE / path).read_text()
    return {"path": path, "size": len(text), "content": text}


def grep(pattern: str, path: str) -> dict:
    """Lines of a file that contain a pattern."""
    hits = [ln for ln in (WORKSPACE / path).read_text().splitlines() if pattern in ln]
    return {"pattern": pattern, "matches": len(hits), "lines": hits}


async def save_report(title: str, text: str, tool_context: ToolContext) -> dict:
    """Save a report as an artifact."""
    version = await tool_context.save_artifact(f"{title}.md", types.Part(text=text))
    return {"saved": f"{title}.md", "version": version}


SCRIPT = [
    # invocation 1: find the cause
    [types.Part(text="Let me look at the service."), call("list_files", directory="service")],
    call("read_file", path="service/checkout.py"),
    call("grep", pattern="ERROR", path="service/app.log"),
    call("read_file", path="service/settings.yaml"),  # a wrong guess: the failure is recorded and shown
    call("read_file", path="service/config.yaml"),
    "Root cause: the payment gateway timeout is 0.8 s with no retries (service/config.yaml), so slow charges fail "
    "with GatewayTimeout (42 errors in app.log).",
    # invocation 2: affected customers and a report
    call("grep", pattern="GatewayTimeout", path="service/app.log"),
    call("save_report", title="incident-report", text="GatewayTimeout at 0.8s; 42 failed charges; raise timeout to 3s, retries 2."),
    "42 customers were affected; the report is saved as incident-report.md.",
    # invocation 3: recall
    call("read_file", path="service/app.log"),
    "The cause was the 0.8 s gateway timeout without retries; change gateway_timeout to 3 and retries to 2.",
]

QUESTIONS = [
    "The checkout service is failing in production. Find out why.",
    "Which customers were affected? Save a short incident report.",
    "Remind me of the root cause and what exactly to change.",
]


def build_app(model, store_url: str, window_tokens: int | None) -> tuple[App, ContextPackPlugin]:
    agent = LlmAgent(
        name="investigator", model=model,
        instruction="You investigate production incidents using the workspace tools. Be precise and cite files.",
        tools=[list_files, read_file, grep, save_report],
    )
    plugin = ContextPackPlugin(profile="default", store=store_url, window_tokens=window_tokens)
    return App(name=APP, root_agent=agent, plugins=[plugin]), plugin


async def _seed_memory(memory: InMemoryMemoryService, sessions: InMemorySessionService) -> None:
    """An earlier incident, so the Memory layer has something relevant to find."""
    from google.adk.events import Event
    old = await sessions.create_session(app_name=APP, user_id=USER)
    event = Event(author="investigator", content=types.Content(role="model", parts=[types.Part(
        text="Past incident (October): checkout failed because the gateway timeout was set too low after a config change.")]))
    await sessions.append_event(old, event)
    await memory.add_session_to_memory(await sessions.get_session(app_name=APP, user_id=USER, session_id=old.id))


LEGEND = """\
How to read a call line (all counts in tokens):
  sent            what the model received
  ADK would send  the same call without the plugin (offloaded tool results at full size), and the change:
                  -60% is 60 % fewer tokens; + is the pack's own additions (task, memory, tool notes)
  same            leading tokens equal to the previous call: the part a prompt cache can serve
  reused          the pack's context block was kept from the previous call (only new turns appended)
  calib           the model's token count per token of our estimate, learnt from its reported usage
  layers          used/budget per layer: sys(tem), task, tools, evid(ence), mem(ory), conv(ersation);
                  a budget of 0: nothing of that kind was selected (none there, or none relevant)
Below a call: why the pack sent more than ADK (early calls: the task and memory the pack adds to a
short history), any flag, and what each truncation did, in plain words. Then the model's answer
or its tool calls, and what each tool returned (> marks a result the plugin offloaded)."""


def _print_call(n: int, record) -> None:
    m = record.manifest
    if m.error:
        print(f"{n:>3}  packing failed, original request sent: {m.error}")
        return
    lb = m.layer_budgets
    without = tokens_without_plugin(m)
    change = f"{m.tokens_after / without - 1:>+5.0%}" if without else "    -"
    layers = "  ".join(f"{short} {lb[k].used}" + (f"/{lb[k].budget}" if k in ("evidence", "memory", "conversation") else "")
                       for k, short in (("system", "sys"), ("task", "task"), ("tools", "tools"), ("evidence", "evid"),
                                        ("memory", "mem"), ("conversation", "conv")))
    print(f"{n:>3}  sent {m.tokens_after:>5,}  ADK would send {without:>6,} ({change})  same {m.prefix_tokens:>5,}"
          f"{'  reused' if m.reused_payload else '        '}  calib {m.calibration:.2f}  {layers}")
    if without and m.tokens_after > without:
        added = {k: lb[k].used for k in ("task", "memory", "evidence") if lb[k].used}
        print(f"       - {m.tokens_after - without:+,} tokens: the pack adds its "
              + " and ".join(f"{k} ({v:,})" for k, v in added.items()) + " to a history that is still short")
    for flag in m.flags:
        print(f"       - flag {flag}")
    for e in m.truncation_events:
        print(f"       - {explain(e)}")


def _print_event(event, counter: TokenCounter) -> None:
    """The model's text and tool calls, and each tool's result (its size in the session, offloaded or not)."""
    for part in (event.content.parts if event.content else []) or []:
        if part.function_call:
            args = ", ".join(f"{k}={v!r}" if len(repr(v)) < 40 else f"{k}=<{len(str(v))} chars>"
                             for k, v in (part.function_call.args or {}).items())
            print(f"  {event.author} calls {part.function_call.name}({args})")
        elif part.function_response:
            response = part.function_response.response or {}
            size = counter.count_text(json.dumps(response, default=str))
            if "error" in response:
                print(f"    {part.function_response.name} failed: {str(response['error'])[:120]}")
            elif "artifact_uri" in response:
                print(f"  > {part.function_response.name} returned a large result: saved whole as "
                      f"{response['artifact_uri']}; the session keeps a {size:,}-token compact form")
            else:
                print(f"    {part.function_response.name} returned {size:,} tokens")
        elif part.text and event.author != "user" and not part.thought:
            print(f"  {event.author}: {part.text[:160]}")


def _print_session(records, window: int | None) -> None:
    """The session's totals, and the same without its largest call when that one call dominates them."""
    ms = [r.manifest for r in records if not r.manifest.error]
    sent, without = sum(m.tokens_after for m in ms), sum(tokens_without_plugin(m) for m in ms)
    print(f"\nsession: {len(ms)} calls, sent {sent:,} tokens; ADK would have sent {without:,} ({sent / without - 1:+.0%})")
    if window:
        over = [i for i, m in enumerate(ms, 1) if tokens_without_plugin(m) > window]
        if over:
            print(f"  ADK's own request would exceed the {window:,}-token window at calls {', '.join(map(str, over))}")
    top = max(range(len(ms)), key=lambda i: tokens_without_plugin(ms[i]))
    big = tokens_without_plugin(ms[top])
    if big > (without - big):
        rest_sent, rest_without = sent - ms[top].tokens_after, without - big
        print(f"  call {top + 1} alone is {big:,} of those: ADK would resend every tool result whole, here a log "
              f"read in full; without call {top + 1}: sent {rest_sent:,}, ADK {rest_without:,} "
              f"({rest_sent / rest_without - 1:+.0%})")


async def run(use_gemini: bool, store_url: str, window_tokens: int | None, report: str) -> int:
    global WORKSPACE
    with tempfile.TemporaryDirectory(prefix="aether-demo-") as folder:
        WORKSPACE = Path(folder)
        return await _run(use_gemini, store_url, window_tokens, report)


async def _run(use_gemini: bool, store_url: str, window_tokens: int | None, report: str) -> int:
    _make_workspace(WORKSPACE)
    model = "gemini-2.5-flash" if use_gemini else DemoLlm(model="scripted-gemini", turns=SCRIPT)
    app, plugin = build_app(model, store_url, None if use_gemini else window_tokens)
    sessions, memory = InMemorySessionService(), InMemoryMemoryService()
    runner = Runner(app=app, session_service=sessions, artifact_service=InMemoryArtifactService(), memory_service=memory)
    await _seed_memory(memory, sessions)
    session = await sessions.create_session(app_name=APP, user_id=USER)
    state: dict = {}
    set_task(state, goal="Find the root cause of the checkout failures and say what to change",
             step="Investigate logs and config", acceptance=["root cause named with file", "affected customers counted", "fix proposed"],
             constraints=["read-only: do not edit files"])
    session = await sessions.create_session(app_name=APP, user_id=USER, state=state)

    print(f"workspace {WORKSPACE} (temporary)\npack store {store_url}\nwindow {window_tokens or 'the model’s'} tokens")
    retriever = plugin.packer.retriever
    if retriever.available():  # as a server would at start-up: dense ranking from the first call
        print("embedding model " + ("loaded" if retriever.wait_ready(timeout=120) else "still loading: lexical ranking"))
    else:
        print("embedding model not installed: Memory and Evidence are ranked lexically (BM25)")
    print()
    print(LEGEND)
    seen, counter = 0, TokenCounter()
    for question in QUESTIONS:
        print(f"\nuser: {question}")
        async for event in runner.run_async(user_id=USER, session_id=session.id,
                                            new_message=types.Content(role="user", parts=[types.Part(text=question)])):
            while seen < len(plugin.packer.recent):  # the call that produced this event, before the event
                seen += 1
                _print_call(seen, plugin.packer.recent[seen - 1])
            _print_event(event, counter)
    plugin.packer.store.flush()
    _print_session(plugin.packer.recent, None if use_gemini else window_tokens)
    last = plugin.packer.recent[-1]
    print(f"\n$ aether-context timeline {store_url} --session {session.id}")
    cli_main(["timeline", store_url, "--session", session.id])
    print(f"\n$ aether-context report {store_url} --session {session.id} -o {report}")
    cli_main(["report", store_url, "--session", session.id, "-o", report, "--title", "aether-context demo: incident investigation"])
    request = replay(last.uri)
    print(f"\nreplayed the last call from {last.uri}\n  checksum {request.checksum} "
          f"{'matches' if request.checksum == last.manifest.checksum else 'DIFFERS'}\n")
    print("$ aether-context inspect", last.uri.rsplit("/", 1)[0])
    cli_main(["inspect", last.uri.rsplit("/", 1)[0]])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemini", action="store_true", help="run on Gemini (needs GOOGLE_API_KEY)")
    parser.add_argument("--store", default=".aether/demo-packs", help="pack store URL (folder, memory://, s3://...)")
    parser.add_argument("--window", type=int, default=3000,
                        help="context window for the offline model (small, so a compaction shows within three questions)")
    parser.add_argument("--report", default=".aether/demo-report.html", help="where to write the HTML report")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the plugin's log line per call")
    args = parser.parse_args()
    if args.gemini and not os.environ.get("GOOGLE_API_KEY"):
        print("--gemini needs GOOGLE_API_KEY", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return asyncio.run(run(args.gemini, args.store, args.window, args.report))


if __name__ == "__main__":
    sys.exit(main())
