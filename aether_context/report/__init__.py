"""A self-contained HTML report of a pack store: per-call plots and an inspectable table.

One file, no network: the call data is embedded as JSON, the plots are inline SVG drawn by a small
script of ours (report.js), so the report opens offline, from a mail attachment or a CI artifact.

Usage::

    aether-context report .aether/packs --session S -o report.html
    html = render_report(load_calls(".aether/packs"))
"""

from __future__ import annotations

import html
import json
import time
from importlib import resources

from .calls import LAYER_ORDER, Call, Listing, explain, load_calls, open_store, tokens_without_plugin
from .savings import DEFAULT_DISCOUNTS, CacheSavings, cache_savings, parse_discounts, provider_of

__all__ = ["render_report", "load_calls", "open_store", "Call", "Listing", "explain", "tokens_without_plugin",
           "cache_savings", "CacheSavings", "parse_discounts", "provider_of", "DEFAULT_DISCOUNTS", "LAYER_ORDER"]


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{html.escape(value)}</b><span>{html.escape(label)}</span></div>'


def _cards(calls: list[Call], savings: CacheSavings) -> str:
    sent = sum(c.sent for c in calls)
    without = sum(c.without for c in calls)
    cal = [c.manifest.calibration for c in calls]
    cards = [
        _card(f"{len(calls):,}", "model calls"),
        _card(f"{sent:,}", "tokens sent"),
        _card(f"{without:,}", "tokens ADK would have sent"),
        _card(f"{sent / without - 1:+.0%}" if without else "–", "sent against ADK's (negative: fewer)"),
        _card(f"{savings.cached_share:.0%}" if savings.reported else "–", "prompt tokens served from cache"),
        _card(f"{round(savings.saved_tokens):,}" if savings.reported else "–",
              "full-price tokens saved by the cache" + (f" (${savings.cost_saved:,.4f})" if savings.cost_saved is not None else "")),
        _card(f"{sum(len(c.manifest.truncation_events) for c in calls):,}", "truncations"),
        _card(f"{max((c.manifest.failures for c in calls), default=0):,}", "tool failures (max recorded)"),
        _card((f"{min(cal):.2f}" if max(cal) - min(cal) < 0.005 else f"{min(cal):.2f}–{max(cal):.2f}") if cal else "–",
              "calibration (model tokens per token of ours)"),
    ]
    return "".join(cards)


def render_report(listing: Listing, *, session: str = "", discounts: dict[str, float] | None = None,
                  price_per_mtok: float | None = None, title: str = "aether-context report") -> str:
    """The report as one HTML string (calls of `session` only when given)."""
    calls = [c for c in listing.calls if not session or c.manifest.session_id == session]
    savings = cache_savings(calls, discounts, price_per_mtok)
    rows = []
    for n, call in enumerate(calls, 1):
        row = call.to_json()
        row["n"] = n
        rows.append(row)
    data = {"layers": list(LAYER_ORDER), "calls": rows, "savings": savings.to_json(),
            "sessions": sorted({c.manifest.session_id for c in calls})}
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    skipped = "".join(f"<li><code>{html.escape(u)}</code>: {html.escape(why)}</li>" for u, why in listing.skipped)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_asset("report.css")}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="sub">store <code>{html.escape(listing.store.url)}</code>{" · session " + html.escape(session) if session else ""}
 · {len(calls)} calls · generated {when}</p>
<div class="cards">{_cards(calls, savings)}</div>
{f'<p class="err">{len(listing.skipped)} unreadable manifest(s) skipped:</p><ul>{skipped}</ul>' if skipped else ""}
<div class="controls"><label>session <select id="session"><option value="">all</option></select></label>
<div class="legend" id="legend"></div></div>
<h2>Tokens per call, by layer</h2>
<p class="note">Bars: what each layer took in the request sent. Circles: what ADK would have sent without the plugin
(offloaded tool results at full size). Triangles above a bar: truncations (grey), a compaction (red) or a prompt-cache
break (orange); hover for what was done. Click anything to open the call below.</p>
<p class="note" id="window-note"></p>
<svg id="tokens" role="img" aria-label="tokens per call by layer"></svg>
<h2>Prompt cache</h2>
<p class="note">Bars: share of the request equal to the previous call's (a cacheable prefix). Green dots: share the
model reported as served from its cache.</p>
<svg id="cache" role="img" aria-label="cache prefix share per call"></svg>
<h2>Failures</h2>
<p class="note">Tool failures the session had recorded at each call; ✕ marks a call whose packing failed (the original
request was sent).</p>
<svg id="failures" role="img" aria-label="failures per call"></svg>
<h2>Calls</h2>
<p class="note">Click a row for its manifest: layer budgets, truncations in plain words, cache break, flags.
A link to one call: <code>report.html#call-7</code>.</p>
<table><thead><tr><th>#</th><th>time</th><th>session</th><th>agent</th><th>sent</th><th>without plugin</th><th>vs ADK</th>
<th>window</th><th>trunc</th><th>compaction</th><th>prefix</th><th>cached / reported</th><th>failures</th></tr></thead>
<tbody id="rows"></tbody></table>
<div id="tip"></div>
<script type="application/json" id="aether-data">{payload}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
