"""The retrieval section of docs/benchmarks.md, from the figures the sections measured."""

from __future__ import annotations

import datetime
import os
import platform
import statistics

from .common import PACK, PLAIN_ROW, VARIANTS

# ---------------------------------------------------------------- report

def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1),
            *("| " + " | ".join(r) + " |" for r in rows)]


def report(args, scifact, variants, locomo, code, lat, speed, sweep_rows, described, elapsed) -> str:
    lines = _header(args, elapsed)
    lines += _scifact(scifact, variants, speed, described["scifact"])
    lines += _locomo(locomo)
    lines += _code(code)
    if lat:
        lines += _latency(lat)
    if sweep_rows:
        lines += _sweep(sweep_rows)
    return "\n".join(lines) + "\n"


def _header(args, elapsed) -> list[str]:
    return ["# Retrieval benchmarks (aether_context.retrieval)", "",
            f"Produced by `{args.command}` on {datetime.date.today().isoformat()} "
            f"({platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, no GPU; "
            f"Python {platform.python_version()}) in {elapsed / 60:.1f} min. "
            f"The cores are shared with other work: 1-minute load average {args.load[0]:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end; wall-clock timings are inflated by contention. "
            f"\"The pack's settings\" are the default profile's retrieval settings: MiniLM fp32, inputs cut at "
            f"{PACK.embedding_max_seq_length} tokens, {PACK.embedding_threads} thread, MMR {PACK.mmr_lambda}, "
            f"dedup at {PACK.dedup_threshold}, BM25 context weight {PACK.context_weight}.", ""]


def _scifact(scifact, variants, speed, sf) -> list[str]:
    """SciFact nDCG@10 per method, then the embedding options' speed and quality."""
    lines: list[str] = []
    lines += [f"## SciFact ({sf['split']} split, {sf['queries']:,} queries, {sf['docs']:,} abstracts, "
              f"{sf['judgements']:,} relevance judgements): nDCG@10", "",
              "Documents are title + text; candidate pool 100 per retriever; MiniLM = all-MiniLM-L6-v2, "
              "fp32, inputs truncated at 256 tokens (the library default). Rows other than the last use MMR "
              f"lambda 1 (pure relevance) and exact-text dedup only. \"{PLAIN_ROW}\" is the analyzer with those "
              "three stages off (same Snowball stems and stop words): the cost or gain of the code- and "
              "language-aware stages on English prose.", ""]
    lines += _table(["method", "nDCG@10"], [[m, f"{v:.3f}"] for m, v in scifact.items()])
    lines += ["", "### Embedding options: speed and quality", "",
              f"Throughput = SciFact abstracts embedded per second (median of 3 passes over 128 abstracts, "
              f"one text per encode call, {os.cpu_count()} threads); "
              "empty where `--no-latency` skipped it.", ""]
    lines += _table(["embedding", "items/s", "dense nDCG@10", "hybrid nDCG@10"], [
        [label, f"{speed[label]:.1f}" if label in speed else "", f"{variants[f'dense [{label}]']:.3f}",
         f"{variants[f'hybrid weighted z-score [{label}]']:.3f}"] for label in VARIANTS])
    return lines


def _locomo(locomo) -> list[str]:
    """LoCoMo evidence recall, overall and per category."""
    lines: list[str] = []
    results, counts, missing, cuts, conv = locomo
    total = sum(counts.values())
    lines += ["", f"## LoCoMo ({conv['conversations']} conversations, {conv['sessions']} sessions, "
              f"{conv['turns']:,} turns): evidence recall with the pack's settings", "",
              "One index per conversation over its turns, ranked with the pack's settings (rows other than "
              "\"as packed\" use MMR lambda 1 and exact-text dedup). A turn's `text` (what is returned and "
              "counted against budgets) is `speaker: text`, plus `[image: caption]` where the turn shares a "
              "photo; its `context` (searched, never returned) is what the pack indexes with an older turn: "
              "`turn_context` with the session date, the two turns before it and the one after "
              "(`neighbours`), within 192 tokens (cl100k). \"date + previous turn only\" is the earlier "
              "context (96 tokens); \"no turn context\" rows index the text alone; rank_bm25 uses the text "
              "alone. No timestamps (questions are about the past). Query = question. "
              f"{total} questions of categories 1-4 scored "
              f"({', '.join(f'c{c}: {n}' for c, n in sorted(counts.items()))}); category 5 (adversarial, "
              f"no answer) and questions without evidence are excluded. Evidence strings are split on `;` and "
              f"whitespace; {missing} evidence ids name no turn and count as misses. Recall = share of a "
              f"question's evidence turns retrieved, averaged over questions. Budgets count tokens with "
              f"`TokenCounter().count_text` (cl100k).", ""]
    lines += _table(["method", *cuts], [[m, *(f"{statistics.fmean(r[c]):.3f}" for c in cuts)]
                                        for m, r in results.items()])
    names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
    lines += ["", "Per category (R@10 / R within 2,000 tokens):", ""]
    lines += _table(["method", *(f"c{c} {names[c]}" for c in sorted(counts))], [
        [m, *(f"{statistics.fmean(r[f'R@10 c{c}']):.3f} / {statistics.fmean(r[f'R@2k tok c{c}']):.3f}"
              for c in sorted(counts))] for m, r in results.items()])
    return lines


def _code(code) -> list[str]:
    """Code identifiers: nDCG@10 per method and analyzer."""
    lines: list[str] = []
    rows, stats = code
    lines += ["", f"## Code identifiers ({stats['queries']} queries over {stats['items']:,} definitions from "
              f"{stats['runs']} mini-swe-agent runs): nDCG@10", "",
              "Built by `bench/code_identifiers.py` from the dev trajectories: the items are the function and "
              "class definitions the agent saw in its tool outputs (grep hits, file listings), each as its "
              "`def`/`class` line and file path; a query is one definition's name in plain lower-case words "
              "(`BaseCrossValidator` -> \"base cross validator\", `next_page_number` -> \"next page number\"); "
              "the relevant items are all definitions whose name has exactly those words "
              f"({stats['relevant']} in all; {stats['camel_queries']} queries name a CamelCase identifier, the "
              "rest snake_case). Pack settings with MMR 1 and exact dedup; \"before\" = the analyzer without "
              "identifier splitting, accent folding and CJK bigrams.", ""]
    lines += _table(["method, analyzer", "nDCG@10", "CamelCase queries", "snake_case queries"],
                    [[m, *(f"{v:.3f}" for v in vals)] for m, vals in rows.items()])
    return lines


def _latency(lat) -> list[str]:
    """Search latency, CPU and index memory per index size."""
    lines: list[str] = []
    sizes = lat["sizes"]
    e1, e2 = lat["embed"]["1"], lat["embed"]["default"]
    lines += ["", f"## Search latency, CPU and index memory ({lat['queries']} SciFact queries; ms)", "",
              f"Measured with {lat['load_workers']} extra busy process(es) running beside the benchmark (load). "
              "Items are SciFact sentences (cycled with a `(copy n)` suffix past the corpus' sentence count), "
              "timestamped; their vectors are random unit vectors put into the cache (the search cost does "
              "not depend on the values). \"k=10 wall\": one search with a cold query, its real MiniLM "
              "embedding (1 thread) included. \"budget\": 2,000 tokens, MMR over up to 200 candidates, "
              "query vector memoised (search alone). \"CPU, bound on / off\": process CPU time "
              "(`time.process_time`, every thread) of one search-only `k=10` call with "
              "`embedding_threads=1` (BLAS and torch bounded to one thread during the search, "
              "`bounded_threads`) and with no bound (the libraries' default threads). \"memory\": growth of "
              "what the cache and the index hold once built (tracemalloc, numpy arrays included; the "
              "Document objects are the caller's and not counted), of which the vector matrix (each vector "
              "held once) is given. CPU figures take each setting over all queries in a row, twice. rank_bm25: `BM25Okapi.get_scores` alone and a rebuild, for scale.",
              "", f"Query embedding alone (30 queries), p50 / p95: {e1[0]:.1f} / {e1[1]:.1f} ms with 1 thread, "
              f"{e2[0]:.1f} / {e2[1]:.1f} ms with torch's default threads.", ""]
    lines += _table(["items", "index add (s)", "memory MB (vectors)", "k=10 wall p50 / p95",
                     "budget p50 / p95", "CPU bound on p50 / p95", "CPU bound off p50 / p95",
                     "rank_bm25 get_scores p50", "rank_bm25 build (s)"], [
        [f"{n:,}", f"{r['add_s']:.1f}", f"{r['memory_mb']:.0f} ({r['vectors_mb']:.0f})",
         f"{r['p50']:.1f} / {r['p95']:.1f}", f"{r['budget_p50']:.1f} / {r['budget_p95']:.1f}",
         f"{r['cpu_on_p50']:.1f} / {r['cpu_on_p95']:.1f}", f"{r['cpu_off_p50']:.1f} / {r['cpu_off_p95']:.1f}",
         f"{r['rank_bm25_p50']:.1f}", f"{r['rank_bm25_build_s']:.1f}"] for n, r in sizes.items()])
    return lines


def _sweep(sweep_rows) -> list[str]:
    """The fusion and MMR sweep behind the defaults."""
    lines: list[str] = []
    lines += ["", "## Fusion and MMR sweep (evidence for the defaults)", "",
              "The pack's embedder on both sets; LoCoMo R@10 and recall within 1,000 tokens over categories "
              "1-4, turns with the pack's context.", ""]
    lines += _table(["variant", "SciFact nDCG@10", "LoCoMo R@10", "LoCoMo R@1k tok"],
                    [[n, f"{a:.3f}", f"{b:.3f}", f"{c:.3f}"] for n, (a, b, c) in sweep_rows.items()])
    return lines
