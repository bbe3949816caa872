"""Retrieval benchmark: SciFact nDCG@10, LoCoMo evidence recall, latency and embedding speed.

Not part of the test suite. Embeddings persist under bench/.cache/ (git-ignored) between runs,
so only the first run pays for embedding the corpora on CPU.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/retrieval_eval.py --data ../shared/datasets

Writes the tables to the "retrieval" section of docs/benchmarks.md (and prints them); the rest of
that file is left as it was (`report_sections.py`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from aether_context.retrieval import (  # noqa: E402
    Document, EmbeddingCache, HybridIndex, RetrievalSettings, SentenceTransformerEmbedder,
)
from aether_context.tokens import TokenCounter  # noqa: E402
from report_sections import DEFAULT_FILE, write_section  # noqa: E402

EVAL = RetrievalSettings(mmr_lambda=1.0, dedup_threshold=1.0, freshness_weight=0.0, candidate_pool=100)
VARIANTS = {  # label -> embedder options; the first is the library default
    "MiniLM fp32, 256 tokens (default)": {},
    "MiniLM fp32, 128 tokens": {"max_seq_length": 128},
    "MiniLM int8, 128 tokens": {"quantize": True, "max_seq_length": 128},
}


# ---------------------------------------------------------------- data

def load_scifact(data: Path):
    root = data / "scifact"
    docs = [json.loads(line) for line in open(root / "corpus.jsonl", encoding="utf-8")]
    queries = {q["_id"]: q["text"] for q in map(json.loads, open(root / "queries.jsonl", encoding="utf-8"))}
    qrels: dict[str, set[str]] = defaultdict(set)
    for line in list(open(root / "qrels" / "test.tsv", encoding="utf-8"))[1:]:
        qid, did, score = line.split()
        if int(score) > 0:
            qrels[qid].add(did)
    corpus = [Document(d["_id"], (d["title"] + " " + d["text"]).strip(), "scifact") for d in docs]
    return corpus, {q: queries[q] for q in sorted(qrels, key=int)}, qrels


def turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    return text


def load_locomo(data: Path, *, context: bool = True):
    """Turns as documents; with `context`, each carries its session date and the previous turn."""
    samples = json.load(open(data / "locomo" / "locomo_dev.json", encoding="utf-8"))
    out = []
    for sample in samples:
        conv, turns, n = sample["conversation"], [], 1
        while f"session_{n}" in conv:
            session, date = conv[f"session_{n}"], conv.get(f"session_{n}_date_time", "")
            for i, t in enumerate(session):
                extra = f"{date}. {session[i - 1]['text'] if i else ''}".strip() if context else ""
                turns.append(Document(t["dia_id"], turn_text(t), sample["sample_id"], context=extra))
            n += 1
        qas = []
        for qa in sample["qa"]:
            evidence = {e for item in qa.get("evidence", []) for e in re.split(r"[;\s]+", item) if e}
            qas.append((qa["question"], int(qa["category"]), evidence))
        out.append((sample["sample_id"], turns, qas))
    return out


# ---------------------------------------------------------------- metrics

def ndcg_at_10(ranked: list[str], relevant: set[str]) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    return dcg / ideal if ideal else 0.0


def plain_tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class QueryMemo:
    """Query vectors through the on-disk cache, so reruns and settings variants embed each query once.

    Bench only: the library embeds queries fresh (with a small in-memory LRU); the latency section
    times that path.
    """

    def __init__(self, embedder, cache_url):
        self.inner = embedder
        self.cache = EmbeddingCache(embedder, url=cache_url)

    @property
    def name(self):
        return self.inner.name

    def embed(self, texts):
        return self.cache.embed(texts)


def make_index(settings, embedder, cache_url):
    return HybridIndex(settings, cache=EmbeddingCache(embedder, url=cache_url))


def method_settings(tuned: RetrievalSettings) -> dict[str, RetrievalSettings]:
    return {
        "BM25 (analyzer, no stemming)": None,  # built separately: needs its own analyzer
        "BM25": EVAL.model_copy(update={"dense_weight": 0.0}),
        "dense": EVAL.model_copy(update={"lexical_weight": 0.0}),
        "hybrid RRF (k=60)": EVAL.model_copy(update={"fusion": "rrf", "rrf_k": 60}),
        "hybrid weighted min-max": EVAL.model_copy(update={"fusion": "weighted", "normalization": "minmax"}),
        "hybrid weighted z-score": EVAL.model_copy(update={"fusion": "weighted", "normalization": "zscore"}),
        "hybrid (defaults) + MMR": tuned,
    }


# ---------------------------------------------------------------- SciFact

def eval_scifact(data, cache_url, log):
    corpus, queries, qrels = load_scifact(data)
    rows = {}
    from rank_bm25 import BM25Okapi
    bm = BM25Okapi([plain_tokens(d.text) for d in corpus])
    ids = [d.id for d in corpus]
    scores = []
    for qid, text in queries.items():
        s = bm.get_scores(plain_tokens(text))
        top = sorted(range(len(ids)), key=lambda i: (-s[i], ids[i]))[:10]
        scores.append(ndcg_at_10([ids[i] for i in top], qrels[qid]))
    rows["rank_bm25, plain lower-cased tokens"] = statistics.fmean(scores)
    log(f"scifact plain rank_bm25 {rows['rank_bm25, plain lower-cased tokens']:.4f}")
    variants = {}
    for label, options in VARIANTS.items():
        embedder = QueryMemo(SentenceTransformerEmbedder(**options), cache_url)
        index = make_index(EVAL, embedder, cache_url)
        t = time.perf_counter()
        index.add(corpus)
        log(f"scifact index ({label}) built in {time.perf_counter() - t:.1f}s")
        methods = method_settings(RetrievalSettings())
        if label != next(iter(VARIANTS)):
            methods = {m: methods[m] for m in ("dense", "hybrid weighted z-score")}
        for method, settings in methods.items():
            if settings is None:
                unstemmed = make_index(EVAL.model_copy(update={"stem": False, "dense_weight": 0.0}), embedder, cache_url)
                unstemmed.add(corpus)
                idx, settings = unstemmed, None
            else:
                idx = index
            value = statistics.fmean(ndcg_at_10(idx.search(text, k=10, settings=settings).ids, qrels[qid])
                                     for qid, text in queries.items())
            (rows if label == next(iter(VARIANTS)) else variants)[f"{method}" if label == next(iter(VARIANTS))
                                                                  else f"{method} [{label}]"] = value
            log(f"scifact {label} {method}: {value:.4f}")
        if label == next(iter(VARIANTS)):
            variants[f"dense [{label}]"] = rows["dense"]
            variants[f"hybrid weighted z-score [{label}]"] = rows["hybrid weighted z-score"]
    return rows, variants


def sweep(data, cache_url, log):
    """Fusion and MMR variants on both collections: the evidence for the defaults."""
    corpus, queries, qrels = load_scifact(data)
    embedder = QueryMemo(SentenceTransformerEmbedder(), cache_url)
    index = make_index(EVAL, embedder, cache_url)
    index.add(corpus)
    conversations = [(turns, qas, None) for _, turns, qas in load_locomo(data)]
    for i, (turns, qas, _) in enumerate(conversations):
        idx = make_index(EVAL, embedder, cache_url)
        idx.add(turns)
        conversations[i] = (turns, qas, idx)
    grid = {"rrf k=20": {"fusion": "rrf", "rrf_k": 20}, "rrf k=60": {"fusion": "rrf", "rrf_k": 60}}
    for norm in ("zscore", "minmax"):
        for lw, dw in ((1.0, 1.0), (1.0, 1.5), (1.5, 1.0)):
            grid[f"{norm} {lw:g}:{dw:g}"] = {"fusion": "weighted", "normalization": norm,
                                             "lexical_weight": lw, "dense_weight": dw}
    for pool in (50, 200):
        grid[f"zscore 1:1 pool={pool}"] = {"fusion": "weighted", "candidate_pool": pool}
    for lam in (0.95, 0.9, 0.8, 0.7, 0.5):
        grid[f"zscore 1:1 mmr={lam}"] = {"fusion": "weighted", "mmr_lambda": lam, "dedup_threshold": 0.95}
    counter = TokenCounter()
    out = {}
    for name, update in grid.items():
        s = EVAL.model_copy(update=update)
        nd = statistics.fmean(ndcg_at_10(index.search(t, k=10, settings=s).ids, qrels[q]) for q, t in queries.items())
        r10, rb = [], []
        for turns, qas, idx in conversations:
            for question, category, evidence in qas:
                if category == 5 or not evidence:
                    continue
                got = idx.search(question, k=10, settings=s).ids
                r10.append(len(evidence & set(got)) / len(evidence))
                got = idx.search(question, budget_tokens=1000, count_tokens=counter.count_text, settings=s).ids
                rb.append(len(evidence & set(got)) / len(evidence))
        out[name] = (nd, statistics.fmean(r10), statistics.fmean(rb))
        log(f"sweep {name}: scifact {nd:.4f} locomo R@10 {out[name][1]:.4f} R@1k {out[name][2]:.4f}")
    return out


# ---------------------------------------------------------------- LoCoMo

def eval_locomo(data, cache_url, log):
    conversations = load_locomo(data)
    bare = {sample_id: turns for sample_id, turns, _ in load_locomo(data, context=False)}
    counter = TokenCounter()
    embedder = QueryMemo(SentenceTransformerEmbedder(), cache_url)
    methods = {k: v for k, v in method_settings(RetrievalSettings()).items() if v is not None}
    bare_methods = {"BM25, no turn context": methods["BM25"], "hybrid z-score, no turn context":
                    methods["hybrid weighted z-score"]}
    cuts = ("R@5", "R@10", "R@25", "R@1k tok", "R@2k tok")
    results: dict[str, dict[str, list[float]]] = {
        m: defaultdict(list) for m in ["rank_bm25, plain tokens", *bare_methods, *methods]}
    counts = defaultdict(int)
    missing_evidence = 0
    for sample_id, turns, qas in conversations:
        index = make_index(EVAL, embedder, cache_url)
        index.add(turns)
        bare_index = make_index(EVAL, embedder, cache_url)
        bare_index.add(bare[sample_id])
        known = {t.id for t in turns}
        from rank_bm25 import BM25Okapi
        bm = BM25Okapi([plain_tokens(t.text) for t in turns])
        for question, category, evidence in qas:
            if category == 5 or not evidence:
                continue
            missing_evidence += len(evidence - known)
            counts[category] += 1
            s = bm.get_scores(plain_tokens(question))
            order = [turns[i].id for i in sorted(range(len(turns)), key=lambda i: (-s[i], turns[i].id))]
            plain_budget = []
            for cap in (1000, 2000):
                used, picked = 0, []
                for doc_id in order:
                    tokens = counter.count_text(index.get(doc_id).text)
                    if used + tokens <= cap:
                        picked.append(doc_id)
                        used += tokens
                plain_budget.append(picked)
            lists = {"rank_bm25, plain tokens": [order[:5], order[:10], order[:25], *plain_budget]}
            for method, settings in [*bare_methods.items(), *methods.items()]:
                idx = bare_index if method in bare_methods else index
                ranked = idx.search(question, k=25, settings=settings).ids
                budgeted = [idx.search(question, budget_tokens=cap, count_tokens=counter.count_text,
                                       settings=settings).ids for cap in (1000, 2000)]
                lists[method] = [ranked[:5], ranked[:10], ranked[:25], *budgeted]
            for method, got in lists.items():
                for cut, ids in zip(cuts, got):
                    r = len(evidence & set(ids)) / len(evidence)
                    results[method][cut].append(r)
                    results[method][f"{cut} c{category}"].append(r)
        log(f"locomo {sample_id}: {len(turns)} turns")
    return results, counts, missing_evidence, cuts


# ---------------------------------------------------------------- latency and throughput

def sentences(corpus: list[Document]) -> list[str]:
    out = []
    for d in corpus:
        out += [s.strip() for s in re.split(r"(?<=[.!?])\s+", d.text) if len(s.strip()) > 20]
    return out


def latency(data, cache_url, log, sizes=(1_000, 10_000, 100_000), n_queries=200):
    corpus, queries, _ = load_scifact(data)
    pool = sentences(corpus)
    texts = list(queries.values())[:n_queries]
    counter = TokenCounter()
    rng = np.random.default_rng(0)
    import torch

    default_threads = SentenceTransformerEmbedder(threads=torch.get_num_threads())
    embedder = SentenceTransformerEmbedder(threads=1)  # queries: one thread, steady on a shared CPU
    rows = {}
    from rank_bm25 import BM25Okapi
    for size in sizes:
        docs = [Document(f"s{i}", pool[i % len(pool)] + ("" if i < len(pool) else f" (copy {i // len(pool)})"),
                         "synthetic", timestamp=1.7e9 + i) for i in range(size)]
        cache = EmbeddingCache(embedder)  # in memory: random unit vectors stand in for MiniLM's
        vectors = rng.standard_normal((size, 384)).astype(np.float32)
        cache.put([d.text for d in docs], vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        index = HybridIndex(RetrievalSettings(), cache=cache)
        t = time.perf_counter()
        index.add(docs)
        add_s = time.perf_counter() - t
        k_times, b_times, q_times, q2_times = [], [], [], []
        for q in texts:
            for timer, model in ((q2_times, default_threads), (q_times, embedder)):
                model.embed(["warm up " + q])
                t = time.perf_counter()
                model.embed([q + " "])  # query-embedding share, on a fresh text
                timer.append(time.perf_counter() - t)
            t = time.perf_counter()
            index.search(q, k=10)
            k_times.append(time.perf_counter() - t)
            t = time.perf_counter()
            index.search(q, budget_tokens=2000, count_tokens=counter.count_text)  # query vector now memoised
            b_times.append(time.perf_counter() - t)
        tokenized = [plain_tokens(d.text) for d in docs]
        t = time.perf_counter()
        bm = BM25Okapi(tokenized)
        build_s = time.perf_counter() - t
        r_times = []
        for q in texts[: 20 if size >= 100_000 else 50]:
            t = time.perf_counter()
            bm.get_scores(plain_tokens(q))
            r_times.append(time.perf_counter() - t)
        pct = lambda xs, p: 1000 * float(np.percentile(xs, p))  # noqa: E731
        rows[size] = {"add_s": add_s, "p50": pct(k_times, 50), "p95": pct(k_times, 95),
                      "budget_p50": pct(b_times, 50), "budget_p95": pct(b_times, 95), "query_embed_p50": pct(q_times, 50),
                      "query_embed_p95": pct(q_times, 95), "query_embed2_p50": pct(q2_times, 50),
                      "query_embed2_p95": pct(q2_times, 95),
                      "rank_bm25_p50": pct(r_times, 50), "rank_bm25_build_s": build_s}
        log(f"latency {size}: {rows[size]}")
    return rows


def throughput(data, log, n=128, repeats=3):
    """Median items/s over `repeats` passes of `n` abstracts (a shared CPU makes single runs noisy)."""
    corpus, _, _ = load_scifact(data)
    out = {}
    for label, options in VARIANTS.items():
        embedder = SentenceTransformerEmbedder(**options)
        embedder.embed(["warm up"])
        rates = []
        for r in range(repeats):
            texts = [d.text for d in corpus[-(r + 1) * n: len(corpus) - r * n]]
            t = time.perf_counter()
            embedder.embed(texts)
            rates.append(n / (time.perf_counter() - t))
        out[label] = statistics.median(rates)
        log(f"throughput {label}: {out[label]:.1f} items/s ({', '.join(f'{x:.1f}' for x in rates)})")
    return out


# ---------------------------------------------------------------- report

def report(args, scifact, variants, locomo, lat, speed, sweep_rows, elapsed) -> str:
    lines = ["# Retrieval benchmarks (aether_context.retrieval)", "",
             f"Produced by `{args.command}` on {datetime.date.today().isoformat()} "
             f"({platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, no GPU; "
             f"Python {platform.python_version()}); {elapsed / 60:.1f} min with a warm embedding cache. "
             f"The 2 cores are shared with other work: 1-minute load average {args.load[0]:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end; timings above ~2 are inflated by contention.", ""]
    lines += ["## SciFact (BEIR test split, 300 queries, 5,183 abstracts): nDCG@10", "",
              "Documents are title + text; candidate pool 100 per retriever; MiniLM = all-MiniLM-L6-v2, "
              "fp32, inputs truncated at 256 tokens. Rows other than the last use MMR lambda 1 "
              "(pure relevance) and exact-text dedup only.", "",
              "| method | nDCG@10 |", "| --- | ---: |"]
    lines += [f"| {m} | {v:.3f} |" for m, v in scifact.items()]
    lines += ["", "### Embedding options: speed and quality", "",
              f"Throughput = SciFact abstracts embedded per second (median of 3 passes over 128 abstracts, "
              f"length-sorted batches of 32, {os.cpu_count()} threads).", "",
              "| embedding | items/s | dense nDCG@10 | hybrid nDCG@10 |", "| --- | ---: | ---: | ---: |"]
    for label in VARIANTS:
        lines.append(f"| {label} | {speed.get(label, float('nan')):.1f} | {variants[f'dense [{label}]']:.3f} | "
                     f"{variants[f'hybrid weighted z-score [{label}]']:.3f} |")
    results, counts, missing, cuts = locomo
    total = sum(counts.values())
    lines += ["", "## LoCoMo (6 dev conversations): evidence recall", "",
              f"One index per conversation over its turns. A turn's `text` (what is returned and counted "
              f"against budgets) is `speaker: text`, plus `[image: caption]` where the turn shares a photo; "
              f"its `context` (searched, never returned) is the session date and the previous turn's text. "
              f"\"no turn context\" rows index the text alone; rank_bm25 uses the text alone. No timestamps "
              f"(questions are about the past, so freshness would only hurt). Query = question. "
              f"{total} questions of categories 1-4 scored "
              f"({', '.join(f'c{c}: {n}' for c, n in sorted(counts.items()))}); category 5 (adversarial, "
              f"no answer) and questions without evidence are excluded. Evidence strings are split on `;` and "
              f"whitespace; {missing} evidence ids name no turn and count as misses. Recall = share of a "
              f"question's evidence turns retrieved, averaged over questions. Budgets count tokens with "
              f"`TokenCounter().count_text` (cl100k).", "",
              "| method | " + " | ".join(cuts) + " |", "| --- |" + " ---: |" * len(cuts)]
    for method, r in results.items():
        lines.append(f"| {method} | " + " | ".join(f"{statistics.fmean(r[c]):.3f}" for c in cuts) + " |")
    names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
    lines += ["", "Per category (R@10 / R within 2,000 tokens):", "",
              "| method | " + " | ".join(f"c{c} {names[c]}" for c in sorted(counts)) + " |",
              "| --- |" + " ---: |" * len(counts)]
    for method, r in results.items():
        lines.append(f"| {method} | " + " | ".join(
            f"{statistics.fmean(r[f'R@10 c{c}']):.3f} / {statistics.fmean(r[f'R@2k tok c{c}']):.3f}"
            for c in sorted(counts)) + " |")
    if lat:
        lines += ["", "## Latency of one search (ms; 200 SciFact queries, median p50 and p95)", "",
                  "Items are SciFact sentences (cycled with a `(copy n)` suffix past 47K), timestamped. Their "
                  "vectors are random unit vectors put into the cache (embedding 100K sentences on this CPU "
                  "would take over an hour; the search cost does not depend on the values). Each query is "
                  "embedded by the real MiniLM (`embedding_threads=1`) inside the timed `k=10` call (warm "
                  "model, cold query); the "
                  "budget call (2,000 tokens, MMR over up to 200 candidates) repeats the query, so its vector "
                  "comes from the index's query LRU and it times the search alone. Default settings (weighted "
                  "z-score, MMR 0.9, dedup at 0.95). rank_bm25 columns: `BM25Okapi.get_scores` alone (no "
                  "fusion) and a rebuild, for comparison. `index add` = analysing and inserting all items "
                  "(vectors already cached).", "",
                  "| items | index add (s) | p50 k=10 incl. query embedding | p95 k=10 | p50 budget, search only "
                  "| p95 budget | query embed p50 / p95, 1 thread | same, torch default (2 threads) "
                  "| rank_bm25 get_scores p50 | rank_bm25 build (s) |",
                  "| ---: |" + " ---: |" * 9]
        for size, r in lat.items():
            lines.append(f"| {size:,} | {r['add_s']:.1f} | {r['p50']:.1f} | {r['p95']:.1f} | {r['budget_p50']:.1f} | "
                         f"{r['budget_p95']:.1f} | {r['query_embed_p50']:.1f} / {r['query_embed_p95']:.1f} | "
                         f"{r['query_embed2_p50']:.1f} / {r['query_embed2_p95']:.1f} | {r['rank_bm25_p50']:.1f} | "
                         f"{r['rank_bm25_build_s']:.1f} |")
    if sweep_rows:
        lines += ["", "## Fusion and MMR sweep (evidence for the defaults)", "",
                  "Same setup as above; LoCoMo R@10 and recall within 1,000 tokens over categories 1-4.", "",
                  "| variant | SciFact nDCG@10 | LoCoMo R@10 | LoCoMo R@1k tok |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {n} | {a:.3f} | {b:.3f} | {c:.3f} |" for n, (a, b, c) in sweep_rows.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/datasets", help="folder holding scifact/ and locomo/")
    parser.add_argument("--cache", default=str(ROOT / "bench" / ".cache" / "embeddings"), help="fsspec URL for vectors")
    parser.add_argument("--out", default=str(ROOT / DEFAULT_FILE), help="benchmarks file; its 'retrieval' section gets the report")
    parser.add_argument("--no-latency", action="store_true", help="skip latency and throughput")
    parser.add_argument("--sweep", action="store_true", help="also run the fusion/MMR sweep")
    args = parser.parse_args(argv)
    args.command = "python bench/retrieval_eval.py " + " ".join(argv if argv is not None else sys.argv[1:])
    data = Path(args.data)
    if not data.is_absolute():
        data = (Path.cwd() / data).resolve()
    args.load = os.getloadavg()
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:7.1f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    speed = {} if args.no_latency else throughput(data, log)
    scifact, variants = eval_scifact(data, args.cache, log)
    locomo = eval_locomo(data, args.cache, log)
    lat = {} if args.no_latency else latency(data, args.cache, log)
    sweep_rows = sweep(data, args.cache, log) if args.sweep else {}
    text = report(args, scifact, variants, locomo, lat, speed, sweep_rows, time.perf_counter() - start)
    print(text)
    write_section(args.out, "retrieval", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
