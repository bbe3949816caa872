"""What the CLI prints: rich tables for a manifest, a listing, a timeline, and a re-pack's changes."""

from __future__ import annotations

import datetime
import difflib
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..content import FunctionCall, FunctionResponse, ModelRequest, TextPart, canonical_json
from ..pipeline.allocate import LAYERS
from ..pipeline.record import Manifest
from ..report.calls import Call, compaction_reason, explain, layer_used, tokens_without_plugin
from ..report.savings import CacheSavings

__all__ = ["manifest_view", "format_request", "list_table", "timeline_view", "repack_view", "request_diff", "LEGEND"]

LEGEND = ("sent: tokens in the request the model got · without plugin: what ADK would have sent (offloaded tool "
          "results at full size) · vs ADK: the difference (negative: fewer) · prefix: leading tokens equal to the "
          "previous call (cacheable) · reported, cached: prompt tokens the model reported, and served from its cache · "
          "calib: model tokens per token of ours · cache break: first block that changed, tokens re-processed · "
          "gate: acceptance items met by the answer, and whether a repair pass ran (`acceptance.gate`)")


def _n(value: Any) -> str:
    return "–" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _change(sent: int, without: int) -> str:
    """Sent against what ADK would have sent: -40% is 40 % fewer tokens, +10% is the pack's own overhead."""
    return f"{sent / without - 1:+.0%}" if without else "–"


def _time(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%H:%M:%S") if ts else "–"


def manifest_view(m: Manifest, usage: dict | None = None, uri: str = "") -> Group:
    """A manifest, readable without the source: every number says what it counts."""
    without = tokens_without_plugin(m)
    head = [
        f"pack {m.pack_id}  model {m.model}  profile {m.profile}",
        f"agent {m.agent}  session {m.session_id}  invocation {m.invocation_id}",
        f"window {m.window:,} tokens (the model's); packed for {m.packed_for:,} of our tokens after calibration "
        f"{m.calibration:.2f} (the model counts {m.calibration:.2f}× our estimate)",
        f"sent {m.tokens_after:,} tokens; ADK would have sent {without:,} ({_change(m.tokens_after, without)})",
        f"prompt cache: {m.prefix_tokens:,} leading tokens equal to the previous call's {m.previous_tokens:,}"
        + (" (payload reused)" if m.reused_payload else ""),
    ]
    if usage:
        head.append(f"model reported {usage.get('reported') or 0:,} prompt tokens, {usage.get('cached') or 0:,} cached")
    if m.cache_break:
        b = m.cache_break
        head.append(f"cache break at {b.get('block')} ({b.get('cause') or b.get('kind', '')}): {b.get('tokens', 0):,} tokens re-processed")
    if compaction_reason(m):
        head.append(f"compaction: {compaction_reason(m)}")
    head.append(f"checksum {m.checksum}")
    if uri:
        head.append(f"manifest {uri}")
    parts: list[Any] = [Text("\n".join(head))]
    if m.error:
        parts.append(Text(f"PACKING FAILED (original request sent): {m.error}", style="bold red"))
    table = Table(title="layers (tokens in our tokenizer)", title_justify="left")
    for col in ("layer", "budget", "used", "items", "dropped"):
        table.add_column(col, justify="left" if col == "layer" else "right")
    order = sorted(m.layer_budgets, key=lambda k: LAYERS.index(k) if k in LAYERS else len(LAYERS))
    for name in order:
        u = m.layer_budgets[name]
        table.add_row(name, _n(u.budget), _n(u.used), _n(u.items), _n(u.dropped))
    if order:
        table.add_row("total", _n(sum(m.layer_budgets[k].budget for k in order)),
                      _n(sum(m.layer_budgets[k].used for k in order)), "", "", style="bold")
        parts.append(table)
    if m.flags:
        parts.append(Text("flags: " + "; ".join(m.flags)))
    if m.truncation_events:
        parts.append(Text("truncations:\n" + "\n".join(f"- {e.get('layer')}: {e.get('action')}, {explain(e)}"
                                                       for e in m.truncation_events)))
    if m.artifact_uris:
        parts.append(Text("artifacts:\n" + "\n".join(f"- {u}" for u in m.artifact_uris)))
    return Group(*parts)


def _clip(text: str, n: int = 400) -> str:
    return text if len(text) <= n else text[:n] + f"… [{len(text) - n} more chars]"


def format_request(r: ModelRequest, numbered: bool = True) -> str:
    """A request as plain text: model, tools, system instruction, one line per part (numbered by message)."""
    out = [f"model: {r.model}", f"tools: {', '.join(t.name for t in r.tools) or '-'}", "system_instruction:",
           _clip(r.system_instruction, 2000), ""]
    for i, m in enumerate(r.messages):
        for p in m.parts:
            if isinstance(p, TextPart):
                body = _clip(p.text, 4000)
            elif isinstance(p, FunctionCall):
                body = f"call {p.name}({_clip(canonical_json(p.args), 300)})"
            elif isinstance(p, FunctionResponse):
                body = f"response {p.name}: {_clip(canonical_json(p.response))}"
            else:
                body = f"[{type(p).__name__}]"
            out.append(f"[{i}] {m.role}: {body}" if numbered else f"{m.role}: {body}")
    out.append(f"\nchecksum {r.checksum}")
    return "\n".join(out)


def list_table(calls: list[Call], width: int = 1000) -> Table:
    """One row per call; on a narrow terminal the session and pack columns go (both are in the manifest URI)."""
    wide = width >= WIDE
    table = Table(caption=LEGEND if wide else None, caption_justify="left")
    cols = [("time", "right"), ("session", "left"), ("agent", "left"), ("pack", "left"), ("sent", "right"),
            ("without plugin", "right")]
    cols = [c for c in cols if wide or c[0] not in ("session", "pack")]
    for col, just in cols:
        table.add_column(col if wide or col != "without plugin" else "ADK", justify=just, no_wrap=True)
    table.add_column("manifest", overflow="fold")  # a narrow terminal folds the URI rather than cutting it
    for c in calls:
        m = c.manifest
        row = {"time": _time(m.created_at), "session": m.session_id, "agent": m.agent, "pack": m.pack_id,
               "sent": _n(c.sent), "without plugin": _n(c.without)}
        table.add_row(*(row[col] for col, _ in cols), c.uri)
    return table


_SHORT = {"without plugin": "ADK", "vs ADK": "Δ", "calib": "cal", "trunc": "tr", "compaction": "cmp"}
NARROW_LEGEND = ("sent: tokens the model got · ADK: what ADK would have sent (offloaded results at full size) · Δ: the "
                 "difference · evid/mem/conv: layer use · cal: calibration · tr: truncations · cmp: compaction · "
                 "prefix: tokens equal to the previous call · cached: reported by the model · a wider terminal or "
                 "--json shows every column")
# Left out on a terminal narrower than WIDE (all of them are in --json).
_WIDE_ONLY = ("pack", "sys", "task", "tools", "reported", "cache break")
WIDE = 200


def _gate(m: Manifest) -> str:
    """The acceptance check of the call's answer, short: "1 of 2 met (rules), repaired"."""
    head = next((f.split(": ", 1)[1].split(";")[0] for f in m.flags if f.startswith("acceptance: ")), "")
    repaired = any(f.startswith("acceptance_repair: 1 pass") for f in m.flags)
    return head + (", repaired" if repaired else "")


def timeline_view(calls: list[Call], savings: CacheSavings, width: int = 1000) -> Group:
    """Per call: tokens against what ADK would have sent, by layer, cache and failures; then the totals."""
    wide = width >= WIDE
    sessions, agents = len({c.manifest.session_id for c in calls}) > 1, len({c.manifest.agent for c in calls}) > 1
    table = Table(caption=LEGEND if wide else NARROW_LEGEND, caption_justify="left",
                  box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD, pad_edge=wide)
    cols = ["#", "session", "agent", "pack", "sent", "without plugin", "vs ADK", "sys", "task", "tools", "evid", "mem",
            "conv", "calib", "trunc", "compaction", "prefix", "reported", "cached", "fail", "cache break", "gate"]
    gated = any(_gate(c.manifest) for c in calls)
    keep = [(col != "gate" or gated) and (wide or not (col in _WIDE_ONLY or (col == "session" and not sessions)
                                                       or (col == "agent" and not agents))) for col in cols]
    for col, kept in zip(cols, keep):
        if kept:
            table.add_column(col if wide else _SHORT.get(col, col), no_wrap=True,
                             justify="left" if col in ("session", "agent", "pack", "compaction", "cache break") else "right")
    for i, c in enumerate(calls, 1):
        m = c.manifest
        used = layer_used(m)
        brk = m.cache_break or {}
        compaction = compaction_reason(m)
        row = [
            str(i), m.session_id[:8], m.agent[:14] if wide else m.agent[:10], m.pack_id, _n(c.sent), _n(c.without),
            _change(c.sent, c.without), *(_n(used[k]) for k in ("system", "task", "tools", "evidence", "memory", "conversation")),
            f"{m.calibration:.2f}", _n(len(m.truncation_events)), compaction[:30] if wide else ("yes" if compaction else ""),
            _n(m.prefix_tokens), _n(c.reported) if c.usage else "–", _n(c.cached) if c.usage else "–", _n(m.failures),
            (f"{brk.get('block')} {brk.get('tokens', 0):,}" if brk else "") + (f" ERROR {m.error}" if m.error else ""),
            _gate(m),
        ]
        table.add_row(*(v for v, kept in zip(row, keep) if kept), style="red" if m.error else None)
    sent, without = sum(c.sent for c in calls), sum(c.without for c in calls)
    share = f"{savings.cached_share:.1%}" if savings.reported else "n/a"
    lines = [
        f"{len(calls)} calls; sent {sent:,} tokens, ADK would have sent {without:,} ({_change(sent, without)})",
        f"model-reported prompt tokens {savings.reported}, cached {savings.cached} (cache hit share {share})",
    ]
    if savings.reported:
        cost = f" ≈ ${savings.cost_saved:,.4f}" if savings.cost_saved is not None else " (add --price to see money)"
        lines.append(f"cache savings: ≈ {round(savings.saved_tokens):,} full-price input tokens{cost}"
                     + (f"; no discount known for {', '.join(savings.unpriced_models)} (use --discount default=F)"
                        if savings.unpriced_models else ""))
    return Group(table, Text("\n".join(lines)))


def repack_view(old: Manifest, new: Manifest) -> Table:
    """Before and after a re-pack under another profile, layer by layer."""
    table = Table(title=f"profile {old.profile} -> profile {new.profile}", title_justify="left")
    for col in ("", "budget before", "budget after", "used before", "used after", "change"):
        table.add_column(col, justify="left" if not col else "right")
    for k in sorted(set(old.layer_budgets) | set(new.layer_budgets), key=lambda k: LAYERS.index(k) if k in LAYERS else 99):
        a, b = old.layer_budgets.get(k), new.layer_budgets.get(k)
        ua, ub = (a.used if a else 0), (b.used if b else 0)
        table.add_row(k, _n(a.budget if a else None), _n(b.budget if b else None), _n(ua), _n(ub), f"{ub - ua:+,}")
    table.add_row("tokens sent", "", "", _n(old.tokens_after), _n(new.tokens_after),
                  f"{new.tokens_after - old.tokens_after:+,}", style="bold")
    table.add_row("truncations", "", "", _n(len(old.truncation_events)), _n(len(new.truncation_events)),
                  f"{len(new.truncation_events) - len(old.truncation_events):+,}")
    table.add_row("tools declared", "", "", _n(len(old.tools)), _n(len(new.tools)), f"{len(new.tools) - len(old.tools):+,}")
    return table


def request_diff(old: ModelRequest, new: ModelRequest, old_name: str, new_name: str) -> Text:
    """A unified diff of the two requests as text, coloured like `git diff`."""
    # unnumbered: a message dropped at the front must not show every later one as changed
    lines = difflib.unified_diff(format_request(old, False).splitlines(), format_request(new, False).splitlines(),
                                 fromfile=old_name, tofile=new_name, lineterm="", n=2)
    out = Text()
    for line in lines:
        style = ("bold" if line.startswith(("+++", "---")) else "cyan" if line.startswith("@@")
                 else "green" if line.startswith("+") else "red" if line.startswith("-") else None)
        out.append(line + "\n", style=style)
    return out if out.plain else Text("the requests are identical\n")
