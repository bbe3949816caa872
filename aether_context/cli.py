"""`aether-context` command line: look inside recorded packs.

    aether-context inspect URI              layers: budget, used, items, dropped; truncations
    aether-context replay URI [--json]      the exact request the call sent (checksum verified)
    aether-context replay URI --profile P   re-pack the call's inputs under profile P and show the diff
    aether-context list STORE_URL           manifests in a store, oldest first
    aether-context timeline STORE_URL [--session S]   per call: tokens by layer, compactions, cache hits
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence, TextIO

from .content import FunctionCall, FunctionResponse, ModelRequest, TextPart, canonical_json
from .errors import AetherContextError
from .pipeline.allocate import LAYERS
from .pipeline.record import Manifest
from .replay import repack, replay, store_for_uri
from .store import PackStore

__all__ = ["main", "format_manifest", "format_request", "format_timeline"]


def format_manifest(m: Manifest) -> str:
    lines = [
        f"pack {m.pack_id}  model {m.model}  window {m.window}  profile {m.profile}",
        f"agent {m.agent}  session {m.session_id}  invocation {m.invocation_id}",
        f"tokens {m.tokens_before} -> {m.tokens_after}  prefix-stable {m.prefix_tokens}/{m.previous_tokens}"
        + ("  (payload reused)" if m.reused_payload else ""),
        f"checksum {m.checksum}",
    ]
    if m.error:
        lines.append(f"PACKING FAILED (original request sent): {m.error}")
    lines.append("")
    lines.append(f"{'layer':<13}{'budget':>9}{'used':>9}{'items':>7}{'dropped':>9}")
    for name in sorted(m.layer_budgets, key=lambda k: LAYERS.index(k) if k in LAYERS else len(LAYERS)):
        u = m.layer_budgets[name]
        lines.append(f"{name:<13}{u.budget:>9}{u.used:>9}{u.items:>7}{u.dropped:>9}")
    if m.flags:
        lines.append(f"\nflags: {', '.join(m.flags)}")
    if m.truncation_events:
        lines.append("\ntruncations:")
        for e in m.truncation_events:
            ids = ", ".join(e["ids"][:6]) + (f" (+{len(e['ids']) - 6})" if len(e["ids"]) > 6 else "")
            lines.append(f"- {e['layer']}: {e['action']} ({e['reason']}) {e['tokens_before']} -> {e['tokens_after']} tokens: {ids}")
    if m.artifact_uris:
        lines.append("\nartifacts:\n" + "\n".join(f"- {u}" for u in m.artifact_uris))
    return "\n".join(lines)


def _clip(text: str, n: int = 400) -> str:
    return text if len(text) <= n else text[:n] + f"… [{len(text) - n} more chars]"


def format_request(r: ModelRequest) -> str:
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
            out.append(f"[{i}] {m.role}: {body}")
    out.append(f"\nchecksum {r.checksum}")
    return "\n".join(out)


def _inspect(args, out: TextIO) -> int:
    store = store_for_uri(args.uri)
    out.write(format_manifest(store.load_manifest(args.uri)) + "\n")
    return 0


def _replay(args, out: TextIO) -> int:
    if args.profile:
        result = repack(args.uri, args.profile)
        if args.json:
            out.write(json.dumps({"diff": result.diff, "request": result.pack.request.to_json(),
                                  "manifest": result.pack.manifest.model_dump(mode="json")}, indent=1) + "\n")
        else:
            out.write(format_manifest(result.pack.manifest) + "\n\nchanges:\n" + json.dumps(result.diff, indent=1) + "\n")
        return 0
    request = replay(args.uri)
    out.write((json.dumps(request.to_json(), indent=1, ensure_ascii=False) if args.json else format_request(request)) + "\n")
    return 0


def _list(args, out: TextIO) -> int:
    store = PackStore(args.store, background=False)
    for uri in store.list_manifests(args.app or "", args.user or "", args.session or ""):
        m = store.load_manifest(uri)
        out.write(f"{m.pack_id}  {m.agent:<12} {m.tokens_before:>7} -> {m.tokens_after:<7} {uri}\n")
    return 0


def format_timeline(store: PackStore, uris: "list[str]") -> str:
    """Per call: tokens by layer, compactions, cache breaks, the model's reported and cached tokens."""
    head = (f"{'#':>3} {'pack':<27} {'agent':<12} {'before':>7} {'after':>6} {'sys':>5} {'task':>5} {'tools':>5} "
            f"{'evid':>5} {'mem':>5} {'conv':>6} {'trunc':>5} {'fail':>4} {'reported':>8} {'cached':>7}  cache break")
    lines = [head]
    reported_total = cached_total = 0
    for i, uri in enumerate(uris, 1):
        m = store.load_manifest(uri)
        usage = store.load_usage(uri) or {}
        lb = m.layer_budgets
        used = {k: (lb[k].used if k in lb else 0) for k in ("system", "task", "tools", "evidence", "memory", "conversation")}
        reported, cached = usage.get("reported") or 0, usage.get("cached") or 0
        reported_total += reported
        cached_total += cached
        brk = m.cache_break or {}
        brk_text = f"{brk.get('block')} ({brk.get('kind', '')}, {brk.get('tokens')} tok)" if brk else ""
        lines.append(f"{i:>3} {m.pack_id:<27} {m.agent[:12]:<12} {m.tokens_before:>7} {m.tokens_after:>6} "
                     f"{used['system']:>5} {used['task']:>5} {used['tools']:>5} {used['evidence']:>5} {used['memory']:>5} "
                     f"{used['conversation']:>6} {len(m.truncation_events):>5} {m.failures:>4} {reported or '-':>8} "
                     f"{cached if reported else '-':>7}  {brk_text}" + (f"  ERROR {m.error}" if m.error else ""))
    share = f"{cached_total / reported_total:.1%}" if reported_total else "n/a"
    lines.append(f"\n{len(uris)} calls; model-reported prompt tokens {reported_total}, cached {cached_total} (cache hit share {share})")
    return "\n".join(lines)


def _timeline(args, out: TextIO) -> int:
    store = PackStore(args.store, background=False)
    uris = store.list_manifests(args.app or "", args.user or "", args.session or "")
    out.write(format_timeline(store, uris) + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aether-context", description="Inspect and replay recorded Context Packs.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="show a manifest: layer budgets, use, truncations")
    p.add_argument("uri", help="manifest URI (a path, file://, memory://, s3://...)")
    p.set_defaults(func=_inspect)
    p = sub.add_parser("replay", help="rebuild the exact request, or re-pack it under another profile")
    p.add_argument("uri")
    p.add_argument("--profile", help="re-pack under this profile (name or YAML path) and show what changed")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_replay)
    p = sub.add_parser("list", help="list manifests in a store")
    p.add_argument("store", help="store URL, e.g. .aether/packs")
    p.add_argument("--app")
    p.add_argument("--user")
    p.add_argument("--session")
    p.set_defaults(func=_list)
    p = sub.add_parser("timeline", help="usage per call of a session: tokens by layer, compactions, cache hits")
    p.add_argument("store", help="store URL, e.g. .aether/packs")
    p.add_argument("--app")
    p.add_argument("--user")
    p.add_argument("--session")
    p.set_defaults(func=_timeline)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return args.func(args, out)
    except AetherContextError as e:
        sys.stderr.write(f"aether-context: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
