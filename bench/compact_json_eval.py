"""Compact JSON: the tokens `variation.compact_json` saves on real tool results, and that it loses nothing.

The tau-bench airline tools answer with JSON documents (users, reservations, flight searches) that
the recording keeps as strings; a Python tool returning the same data returns it as a dict or list,
which is what the plugin's `after_tool` sees. Every recorded result that parses as a JSON object or
array is taken as that value and measured exactly as the plugin decides: tokens of the result as
the session would hold it (`render_payload`, canonical JSON) against `compact_json`'s form, kept
only when fewer tokens. `expand_compact_json` must give the value back for every kept form.
mini-swe-agent's shell outputs are text, not JSON, so the feature does nothing there (counted).

    .venv/bin/python bench/compact_json_eval.py --data ../shared/datasets        # a few seconds
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_sections import machine, pct, section_main  # noqa: E402
from trajectories import DEFAULT_DATA, load_mini_swe, load_tau_airline  # noqa: E402

from aether_context import TokenCounter  # noqa: E402
from aether_context.compress import render_payload  # noqa: E402
from aether_context.compress.compact_json import compact_json, expand_compact_json  # noqa: E402



def as_tool_result(text: str) -> Any | None:
    """The dict a tool would return for a recorded JSON answer (ADK wraps a list as {"result": ...})."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return None
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return {"result": value}
    return None


def measure(results: Sequence[tuple[str, Any]], counter: TokenCounter) -> dict[str, Any]:
    per_tool: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])  # n, compacted, before, after
    savings: list[float] = []
    unfaithful = 0
    for tool, result in results:
        before = counter.count_text(render_payload(result))
        compact = compact_json(result, counter)
        after = counter.count_text(compact)
        row = per_tool[tool]
        row[0] += 1
        row[2] += before
        if after < before:  # the plugin keeps the compact form
            if expand_compact_json(compact) != result:
                unfaithful += 1
            row[1] += 1
            savings.append(1 - after / before)
        row[3] += min(after, before)
    return {"per_tool": dict(per_tool), "savings": savings, "unfaithful": unfaithful}


def report(args: argparse.Namespace, argv: Sequence[str] | None) -> str:
    counter = TokenCounter()
    data = Path(args.data)
    tau = load_tau_airline(data)
    tau_results: list[tuple[str, Any]] = []
    tau_text = 0
    for t in tau:
        for inv in t.invocations:
            for turn in inv.turns:
                for c in turn.calls:
                    value = as_tool_result(c.output.get("result", ""))
                    if value is None:
                        tau_text += 1
                    else:
                        tau_results.append((c.name, value))
    swe = load_mini_swe(data)
    swe_outputs = [c.output for t in swe for inv in t.invocations for turn in inv.turns for c in turn.calls]
    swe_json = sum(1 for o in swe_outputs if as_tool_result(o.get("output", "")) is not None)

    m = measure(tau_results, counter)
    rows = []
    tot = [0, 0, 0, 0]
    for tool, (n, k, before, after) in sorted(m["per_tool"].items(), key=lambda kv: -kv[1][2]):
        rows.append(f"| {tool} | {n} | {k} | {before:,} | {after:,} | {(1 - after / before) * 100 if before else 0:.1f} % |")
        tot = [a + b for a, b in zip(tot, (n, k, before, after))]
    rows.append(f"| **all** | {tot[0]} | {tot[1]} | {tot[2]:,} | {tot[3]:,} | {(1 - tot[3] / tot[2]) * 100:.1f} % |")
    s = m["savings"]
    cmd = "`.venv/bin/python bench/compact_json_eval.py" + (" " + shlex.join(argv) if argv else "") + "`"
    return f"""# Benchmark: compact JSON tool results (`variation.compact_json`)

Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}. Command (from the repository root): {cmd}.
Machine: {machine()}.

**Setup.** The recorded tool answers of the {len(tau)} tau-bench airline episodes that parse as a JSON object or array
({len(tau_results)} results; {tau_text} plain-text answers such as `Error: …` left out) are taken as the value a Python tool
would return. Per result, tokens (`TokenCounter`, cl100k) of the result as the session would hold it (canonical JSON,
what is sent without the option) and of `compact_json`'s form, which the plugin keeps only when it is fewer tokens
(otherwise the result is unchanged). Every kept form is expanded back with `expand_compact_json` and compared with
the original value: **{m['unfaithful']} of {tot[1]} differ**. mini-swe-agent: {swe_json} of {len(swe_outputs)} shell
outputs are JSON, so the option changes nothing there.

| tool | results | compacted | tokens without | tokens with | saved |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

Per compacted result, the share of tokens saved: median {pct(s, 50) * 100:.1f} %, p10 {pct(s, 10) * 100:.1f} %,
p90 {pct(s, 90) * 100:.1f} %. The saving applies once per result kept in the conversation and again whenever the
result is re-sent, so it compounds over a session; results that are offloaded anyway save it in their kept part.
"""


def main(argv: Sequence[str] | None = None) -> int:
    return section_main("compact_json", __doc__.split("\n\n")[0], report, argv, default_data=DEFAULT_DATA)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
