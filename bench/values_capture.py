"""Known values: the share of later tool-call arguments that `compress.values` captured from earlier turns.

An identifier use is a value an agent passes as a tool-call argument (any scalar leaf of the
arguments, two characters or more) that appeared earlier in a user message or a tool result, the
same definition as the pack-level tau-bench benchmark. Per use: was it *captured* (a value, field
name or call argument of an `extract_values` set from an earlier user message or tool result), and
is it in the `KNOWN VALUES:` block (`merge_values` of every earlier source, model texts included,
then `render_values`) at a few token caps. Pure functions on the recording: no model, no ADK.

    .venv/bin/python bench/values_capture.py --data ../shared/datasets        # a few seconds
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_sections import machine, section_main  # noqa: E402
from trajectories import DEFAULT_DATA, Trajectory, load_tau_airline  # noqa: E402

from aether_context import TokenCounter  # noqa: E402
from aether_context.compress.value_merge import merge_values  # noqa: E402
from aether_context.compress.values import ValueSet, extract_values, render_values  # noqa: E402

CAPS = (400, 800, 1200)


def leaves(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v, key)
    else:
        yield key, value


def captured_strings(sets: Sequence[ValueSet]) -> list[str]:
    """Everything an extracted set shows: values, field names and the call's own arguments."""
    out: list[str] = []
    for vs in sets:
        out.append(vs.source)
        out.extend(vs.values())
        out.extend(name for name, _ in vs.fields)
    return out


def contains(strings: Sequence[str], value: str) -> bool:
    word = re.compile(r"(?<!\w)" + re.escape(value) + r"(?!\w)")
    return any(s == value or word.search(s) for s in strings)


def measure(trajectories: Sequence[Trajectory], counter: TokenCounter) -> dict[str, Any]:
    uses = captured = 0
    rendered = collections.Counter()
    missed: collections.Counter[str] = collections.Counter()
    block_tokens: dict[int, list[int]] = {cap: [] for cap in CAPS}
    for traj in trajectories:
        seen: list[str] = []  # raw user messages and tool outputs so far
        heard: list[ValueSet] = []  # extracted from user messages and tool results
        said: list[ValueSet] = []  # extracted from model texts
        turn = 0
        for inv in traj.invocations:
            turn += 1
            seen.append(inv.user)
            heard.extend(v for v in [extract_values(text=inv.user, turn=turn)] if v)
            for model_turn in inv.turns:
                turn += 1
                if model_turn.text:
                    said.extend(v for v in [extract_values(text=model_turn.text, role="model", turn=turn)] if v)
                if not model_turn.calls:
                    continue
                strings = captured_strings(heard)
                merged = merge_values([*heard, *said])
                blocks = {cap: render_values(merged, cap, counter) for cap in CAPS}
                for cap, block in blocks.items():
                    block_tokens[cap].append(counter.count_text(block))
                for call in model_turn.calls:
                    for key, value in leaves(call.args):
                        if value is None or isinstance(value, bool) or len(str(value)) < 2:
                            continue
                        text = str(value)
                        if not any(text in s for s in seen):
                            continue
                        uses += 1
                        if contains(strings, text):
                            captured += 1
                        else:
                            missed[key] += 1
                        for cap, block in blocks.items():
                            rendered[cap] += text in block
                turn += 1
                for call in model_turn.calls:
                    output = call.output.get("result", call.output)
                    seen.append(output if isinstance(output, str) else str(output))
                    heard.append(extract_values(tool=call.name, args=call.args, result=output, turn=turn))
    return {"uses": uses, "captured": captured, "rendered": rendered, "missed": missed, "tokens": block_tokens}


def report(args: argparse.Namespace, argv: Sequence[str] | None) -> str:
    trajectories = load_tau_airline(args.data)
    m = measure(trajectories, TokenCounter())
    uses = m["uses"]
    rows = "\n".join(
        f"| {cap} | {m['rendered'][cap] / uses * 100:.1f} % | {sorted(m['tokens'][cap])[len(m['tokens'][cap]) // 2]} |"
        for cap in CAPS)
    missed = ", ".join(f"`{k}` {n}" for k, n in m["missed"].most_common()) or "none"
    cmd = "`.venv/bin/python bench/values_capture.py" + (" " + shlex.join(argv) if argv else "") + "`"
    return f"""# Benchmark: known values (`compress.values`) on tau-bench airline

Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}. Command (from the repository root): {cmd}.
Machine: {machine()}.

**Setup.** The {len(trajectories)} dev episodes. An identifier use is a scalar tool-call argument (two characters or
more) whose value appeared earlier in a user message or a tool result: **{uses} uses**. *Captured*: the value is a
value, field name or call argument of an `extract_values` set made from an earlier user message or tool result.
*In the block*: the value is in `render_values(merge_values(...), cap)` over every earlier source (model texts too).
These are the extractor and the block alone, not the pack (see the trajectory replay for what reaches the model).

**Captured: {m['captured'] / uses * 100:.2f} %** ({m['captured']} of {uses}); missed by argument: {missed}.

| block cap (tokens) | uses in the block | median block tokens |
| --- | --- | --- |
{rows}
"""


def main(argv: Sequence[str] | None = None) -> int:
    return section_main("values", __doc__.split("\n\n")[0], report, argv, default_data=DEFAULT_DATA)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
