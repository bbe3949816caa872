"""`aether-context` command line: look inside recorded packs, chart them, compact a stored session.

    aether-context list STORE [--session S] [--json]          recorded calls, oldest first
    aether-context timeline STORE [--session S] [--json]      per call: tokens against ADK's, layers, cache, failures
    aether-context inspect MANIFEST|PACK_DIR [--json]         one call: budgets, use, truncations in plain words
    aether-context replay MANIFEST|PACK_DIR [--json]          the exact request the call sent (checksum verified)
    aether-context replay MANIFEST|PACK_DIR --profile P       re-pack under profile P: layer table + unified diff
    aether-context report STORE [--session S] -o report.html  a self-contained HTML report with plots
    aether-context compact --db URL APP USER SESSION          compact that session at its next model call
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Sequence, TextIO

import click
from rich.console import Console

from ..errors import AetherContextError, ManifestError, StoreError
from ..replay import repack, replay, store_for_uri
from ..store import MARKER, PackStore
from ..report import load_calls, parse_discounts, render_report
from ..report.calls import manifest_uri, tokens_without_plugin, explain
from ..report.savings import cache_savings
from .render import format_request, list_table, manifest_view, repack_view, request_diff, timeline_view

__all__ = ["main", "cli", "format_request"]

DEBUG_ENV = "AETHER_CONTEXT_DEBUG"
_STORE_HELP = "Pack store URL: a folder (the plugin's default is .aether/packs), file://, memory://, s3://..."
_TARGET_HELP = "A manifest URI (…/<pack_id>/manifest.json) or the pack folder that holds it."


def _console(out: TextIO | None) -> Console:
    """Rich output to `out`; off a terminal, wide enough that ids and URIs are never wrapped."""
    stream = out or sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=stream, width=None if tty else 1000, highlight=False, soft_wrap=not tty)


def _emit_json(ctx: click.Context, value) -> None:
    ctx.obj.file.write(json.dumps(value, indent=1, ensure_ascii=False, default=str) + "\n")


def _scope(f):
    f = click.option("--session", default="", help="Only this session id.")(f)
    f = click.option("--user", default="", help="Only this user id.")(f)
    f = click.option("--app", default="", help="Only this app name.")(f)
    return f


def _json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON instead of tables.")(f)


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _listing(store: str, app: str, user: str, session: str):
    listing = load_calls(store, app=app, user=user, session=session)
    for uri, why in listing.skipped:
        click.echo(f"aether-context: skipped an unreadable manifest: {_one_line(why)}", err=True)
    if not listing.calls and not listing.skipped and not _is_store(store):
        raise StoreError(f"{store!r} is not a pack store (no {MARKER} file and no manifests): point at the folder "
                         "the plugin writes (its default is .aether/packs)")
    scope = [f"--{k} {v!r}" for k, v in (("app", app), ("user", user), ("session", session)) if v]
    if not listing.calls and scope:
        click.echo(f"aether-context: no recorded calls for {' '.join(scope)}: ids are matched whole "
                   f"(`list {store} --json` shows them)", err=True)
    return listing


def _is_store(url: str) -> bool:
    """Whether `url` holds a pack store's marker (nothing is created to find out)."""
    try:
        store = PackStore(url, background=False)
        return bool(store.fs.exists(f"{store.root}/{MARKER}"))
    except (AetherContextError, OSError):
        return False


def _target(target: str) -> str:
    """The manifest URI of a call; a store or a folder above a call is an error that points at `list`."""
    uri = manifest_uri(target)
    if not target.rstrip("/").endswith("/manifest.json") and _is_store(target.rstrip("/")):
        raise StoreError(f"{target!r} is a pack store, not one call: run `aether-context list {target}` and pass "
                         "one of the manifest URIs it prints")
    hint = "run `aether-context list STORE` to see the calls and their URIs"
    try:
        store = store_for_uri(uri)
        exists = store.fs.exists(store._path(store.rel_from_uri(uri)))
    except AetherContextError as e:
        raise type(e)(f"{e}; {hint}") from e
    if not exists:
        raise ManifestError(f"no recorded call at {uri}: {hint}")
    return uri


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Inspect, replay and chart the Context Packs recorded by aether-context."""


@cli.command("list")
@click.argument("store")
@_scope
@_json_option
@click.pass_context
def list_cmd(ctx, store: str, app: str, user: str, session: str, as_json: bool) -> None:
    """List the recorded calls of STORE, oldest first."""
    listing = _listing(store, app, user, session)
    if as_json:
        _emit_json(ctx, {"calls": [c.to_json() for c in listing.calls],
                         "skipped": [{"uri": u, "error": e} for u, e in listing.skipped]})
    elif listing.calls:
        ctx.obj.print(list_table(listing.calls, ctx.obj.width))


@cli.command()
@click.argument("store")
@_scope
@_json_option
@click.option("--discount", "discounts", multiple=True, metavar="PROVIDER=FRACTION",
              help="Share of the price a cached token saves (defaults gemini=0.75, anthropic=0.9, openai=0.5; "
                   "default=F for models of other providers). Repeatable.")
@click.option("--price", type=float, default=None, metavar="USD",
              help="Price of one million input tokens, to turn tokens saved by the cache into money.")
@click.pass_context
def timeline(ctx, store: str, app: str, user: str, session: str, as_json: bool, discounts, price) -> None:
    """Per call: tokens sent against what ADK would have sent, by layer, truncations, cache and failures."""
    listing = _listing(store, app, user, session)
    savings = cache_savings(listing.calls, _discounts(discounts), price)
    if as_json:
        _emit_json(ctx, {"calls": [c.to_json() for c in listing.calls], "savings": savings.to_json(),
                         "skipped": [{"uri": u, "error": e} for u, e in listing.skipped]})
    else:
        ctx.obj.print(timeline_view(listing.calls, savings, ctx.obj.width))


def _discounts(pairs) -> dict[str, float]:
    try:
        return parse_discounts(pairs)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--discount") from e


@cli.command()
@click.argument("target", metavar="MANIFEST")
@_json_option
@click.pass_context
def inspect(ctx, target: str, as_json: bool) -> None:
    """Show one call: layer budgets and use, calibration, cache, truncations in plain words.

    MANIFEST is a manifest URI or the pack folder that holds it.
    """
    uri = _target(target)
    store = store_for_uri(uri)
    m = store.load_manifest(uri)
    usage = store.load_usage(uri)
    if as_json:
        data = m.model_dump(mode="json")
        data.update(uri=uri, usage=usage, tokens_without_plugin=tokens_without_plugin(m),
                    truncations_explained=[explain(e) for e in m.truncation_events])
        _emit_json(ctx, data)
    else:
        ctx.obj.print(manifest_view(m, usage, uri))


@cli.command("replay")
@click.argument("target", metavar="MANIFEST")
@click.option("--profile", default=None, metavar="NAME|YAML",
              help="Re-pack the call's recorded inputs under this profile (built-in name or YAML path) and show what changed.")
@_json_option
@click.pass_context
def replay_cmd(ctx, target: str, profile: str | None, as_json: bool) -> None:
    """Rebuild the exact request a call sent (checksum verified), or re-pack it under another profile.

    MANIFEST is a manifest URI or the pack folder that holds it.
    """
    uri = _target(target)
    if not profile:
        request = replay(uri)
        if as_json:
            _emit_json(ctx, request.to_json())
        else:
            ctx.obj.file.write(format_request(request) + "\n")
        return
    result = repack(uri, profile)
    if as_json:
        _emit_json(ctx, {"diff": result.diff, "request": result.pack.request.to_json(),
                         "manifest": result.pack.manifest.model_dump(mode="json")})
        return
    ctx.obj.print(repack_view(result.original, result.pack.manifest))
    ctx.obj.print(request_diff(replay(uri), result.pack.request, f"recorded ({result.original.profile})",
                               f"re-packed ({result.pack.manifest.profile})"))


@cli.command()
@click.argument("store")
@click.option("--session", default="", help="Only this session id (default: every session in the store).")
@click.option("--app", default="", help="Only this app name.")
@click.option("--user", default="", help="Only this user id.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default="report.html", show_default=True,
              help="Where to write the HTML file.")
@click.option("--discount", "discounts", multiple=True, metavar="PROVIDER=FRACTION",
              help="Cache discount per provider, as for `timeline`. Repeatable.")
@click.option("--price", type=float, default=None, metavar="USD", help="Price of one million input tokens.")
@click.option("--title", default="aether-context report", show_default=True, help="The page title.")
@click.pass_context
def report(ctx, store: str, session: str, app: str, user: str, output: str, discounts, price, title: str) -> None:
    """Write a self-contained HTML report (plots and an inspectable table of calls) for STORE."""
    folder = Path(output).resolve().parent
    if not folder.is_dir():
        raise StoreError(f"cannot write {output!r}: the folder {str(folder)!r} does not exist (create it or choose "
                         "another -o/--output)")
    listing = _listing(store, app, user, session)
    page = render_report(listing, session=session, discounts=_discounts(discounts), price_per_mtok=price, title=title)
    try:
        Path(output).write_text(page, encoding="utf-8")
    except OSError as e:
        raise StoreError(f"cannot write {output!r}: {e.strerror or e}: choose another -o/--output") from e
    ctx.obj.print(f"wrote {output}: {len(listing.calls)} calls, {len(page) / 1024:.0f} KiB")


@cli.command()
@click.option("--db", required=True, metavar="URL",
              help="The session service URI, as given to `adk web --session_service_uri` (e.g. sqlite:///sessions.db, "
                   "postgresql+asyncpg://...); other SQLAlchemy URLs (sqlite+aiosqlite:///...) open ADK's DatabaseSessionService.")
@click.argument("app")
@click.argument("user")
@click.argument("session")
@click.pass_context
def compact(ctx, db: str, app: str, user: str, session: str) -> None:
    """Compact SESSION of APP/USER at its next model call (like /compact in coding agents).

    Appends an event whose state delta sets the compaction request; the plugin acts on it at the
    session's next model call and records the compaction in that call's manifest.
    """
    from .compact import request_compaction

    event_id = request_compaction(db, app, user, session)
    ctx.obj.print(f"compaction requested for {app}/{user}/{session} (event {event_id}); it happens at the next model call")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code (2 for a usage error or a bad store, manifest or profile)."""
    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name="aether-context",
                          standalone_mode=False, obj=_console(out))
    except click.UsageError as e:
        e.show()
        raise SystemExit(2) from e
    except click.exceptions.Exit as e:  # --help
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except AetherContextError as e:
        sys.stderr.write(f"aether-context: {_one_line(e, 1000)}\n")
        return 2
    except (OSError, ImportError, ValueError, RecursionError) as e:
        sys.stderr.write(f"aether-context: {type(e).__name__}: {_one_line(e, 1000)} "
                         f"(set {DEBUG_ENV}=1 for the traceback)\n")
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
