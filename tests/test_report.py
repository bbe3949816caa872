"""`aether-context report`: one self-contained HTML file from a real session, rendered in headless Chromium."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from aether_context import ContextPackPlugin
from aether_context.cli import main
from aether_context.retrieval import HashingEmbedder
from aether_context.testing import ScriptedLlm, call

from conftest import fetch_page, make_runner, new_session, run_turn

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
async def store_url(tmp_path):
    from google.adk.agents import LlmAgent

    llm = ScriptedLlm(model="scripted-gemini", turns=[call("fetch_page", url=f"https://x/{i}") for i in range(5)] + ["done"],
                      cached_tokens=50)  # below the first prompt (70 tokens: ScriptedLlm reports our count)
    agent = LlmAgent(name="researcher", model=llm, instruction="Research.", tools=[fetch_page])
    url = str(tmp_path / "packs")
    # compacts: five pages reach 1,500 tokens (our count, which ScriptedLlm reports: calibration 1.0)
    plugin = ContextPackPlugin(store=url, window_tokens=1_000, embedder=HashingEmbedder())
    runner = make_runner(agent, plugins=[plugin])
    await run_turn(runner, await new_session(runner), "read the pages")
    plugin.packer.store.flush()
    return url


def _data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="aether-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def test_report_is_one_self_contained_file(store_url, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", store_url, "-o", str(out), "--price", "0.3"]) == 0
    page = out.read_text()
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page), "no external resources"
    data = _data(page)
    calls = data["calls"]
    assert len(calls) == 6 and [c["n"] for c in calls] == list(range(1, 7))
    assert all(c["tokens_sent"] > 0 and c["tokens_without_plugin"] > 0 and c["layers"] for c in calls)
    assert all(c["cached"] == 50 and c["reported"] > 50 for c in calls)
    assert data["savings"]["saved_tokens"] == round(6 * 50 * 0.75)  # scripted-gemini: Gemini's 75 % discount
    assert any(t["explained"] for c in calls for t in c["truncations"])
    assert any(c["compaction"] and c["compaction"]["reason"] for c in calls)  # drawn as a red marker
    assert len(data["sessions"]) == 1
    session = data["sessions"][0]
    assert main(["report", store_url, "--session", session, "-o", str(out)]) == 0
    assert len(_data(out.read_text())["calls"]) == 6
    assert main(["report", store_url, "--session", "other", "-o", str(out)]) == 0
    assert _data(out.read_text())["calls"] == []


def test_report_renders_in_headless_chromium_without_errors(store_url, tmp_path):
    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        pytest.skip("no Chromium installed (apt-get install -y chromium)")
    spec = importlib.util.spec_from_file_location("check_report", ROOT / "scripts" / "check_report.py")
    check_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_report)
    out = tmp_path / "r.html"
    assert main(["report", store_url, "-o", str(out)]) == 0
    assert check_report.asyncio.run(check_report.check(out, tmp_path / "shot.png")) == []
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_script_error_is_caught(store_url, tmp_path):
    """The checker itself: a report whose script throws must fail."""
    if not shutil.which("chromium"):
        pytest.skip("no Chromium installed")
    spec = importlib.util.spec_from_file_location("check_report", ROOT / "scripts" / "check_report.py")
    check_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_report)
    out = tmp_path / "r.html"
    main(["report", store_url, "-o", str(out)])
    out.write_text(out.read_text().replace("legend();\n  drawAll();", "legend();\n  undefinedFunction();"))
    errors = check_report.asyncio.run(check_report.check(out))
    assert any("undefinedFunction" in e for e in errors)


def test_truncations_in_plain_words():
    from aether_context.report import explain

    fold = {"layer": "conversation", "action": "fold", "reason": "older than the verbatim tail", "ids": ["t1", "t2"],
            "tokens_before": 634, "tokens_after": 0}
    assert explain(fold) == ("2 conversation items folded into one-line summaries: older than the verbatim tail "
                             "(634 tokens verbatim)")
    cut = {"layer": "memory", "action": "compress", "reason": "overflow", "ids": ["m1"], "tokens_before": 900,
           "tokens_after": 300}
    assert explain(cut) == "1 memory item compressed: overflow (900 → 300 tokens, 600 saved)"
    empty = {"layer": "conversation", "action": "compress", "reason": "fold zone over its cap", "ids": [],
             "tokens_before": 0, "tokens_after": 0}
    assert explain(empty) == "the conversation layer compressed: fold zone over its cap"  # no "0 -> 0 tokens"
