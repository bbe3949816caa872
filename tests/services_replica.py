"""One replica process of `test_services.py`: a Runner and plugin over PostgreSQL and an S3 bucket.

Run as `python tests/services_replica.py DB_URL STORE_URL OPTIONS_JSON START` (PYTHONPATH = the checkout).
It serves the user turns of `test_replicas` (the same agent, tools and scripted model) one JSON line at a
time on stdin: {"session", "text", "cursor", "mark"} runs the turn with the script at `cursor` and answers
one line: the checksums of the turn's requests, the script's cursor after it, the manifest URIs of its
calls, the artifact URIs its requests cite, the recalls (URI and response) and the store's failures.
With "mark": N it prints "MARK" at the turn's N-th model call (the parent kills it then). The plugin is
durable (`ContextPackPlugin(durable=True)`). The session's clock is shared with the parent: `CLOCK0`
plus a tenth of the real time since START.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from google.adk.platform.time import set_time_provider

from aether_context.adk.convert import request_from_llm
from aether_context.store import PackStore

from conftest import run_turn
from test_replicas import CLOCK0, _llm, _replica


def _cited(llm_request) -> list[str]:
    return [part.function_response.response["artifact_uri"] for content in llm_request.contents
            for part in content.parts or []
            if part.function_response and "artifact_uri" in (part.function_response.response or {})]


def _recalls(events) -> list[dict]:
    """Each `read_artifact` call of the turn: the URI asked for and the response."""
    asked = {c.id: c.args.get("uri") for ev in events for c in ev.get_function_calls() if c.name == "read_artifact"}
    return [{"uri": asked.get(r.id), "response": r.response} for ev in events for r in ev.get_function_responses()
            if r.name == "read_artifact"]


async def serve(db_url: str, store_url: str, options: dict, start: float) -> None:
    set_time_provider(lambda: CLOCK0 + (time.time() - start) / 10)
    llm = _llm()
    counter = llm.prompt_token_counter
    mark = {"at": 0, "seen": 0}

    def counted(llm_request) -> int:  # the model's token count, called once per model call
        mark["seen"] += 1
        if mark["at"] and mark["seen"] == mark["at"]:
            print("MARK", flush=True)
        return counter(llm_request)

    llm.prompt_token_counter = counted
    store = PackStore(store_url, storage_options=options)
    runner, plugin = _replica(llm, db_url, store)
    plugin.durable = True  # a call's records are in the bucket before its answer is in the session
    loop = asyncio.get_running_loop()
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        ask = json.loads(line)
        llm._cursor, mark["at"], mark["seen"] = ask["cursor"], ask.get("mark", 0), 0
        first, done = len(llm.requests), len(plugin.packer.recent)
        events = await run_turn(runner, ask["session"], ask["text"])
        requests = llm.requests[first:]
        answer = {
            "checksums": [request_from_llm(r).checksum for r in requests],
            "cursor": llm._cursor,
            "manifests": [r.uri for r in list(plugin.packer.recent)[done:]],
            "cited": [_cited(r) for r in requests],
            "events": [ev.id for ev in events],
            "recalls": _recalls(events),
            "failed": store.stats().get("failed", 0),
        }
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    await runner.close()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])))
