"""Retrieval benchmark: SciFact nDCG@10, LoCoMo recall as packed, code identifiers, latency, memory, speed.

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

from aether_context.profile import load_profile  # noqa: E402
from aether_context.retrieval import (  # noqa: E402
    Analyzer, Document, EmbeddingCache, HybridIndex, RetrievalSettings, SentenceTransformerEmbedder,
)
from aether_context.retrieval.turns import neighbours, turn_context  # noqa: E402
from aether_context.tokens import TokenCounter  # noqa: E402
from code_identifiers import load_code_identifiers  # noqa: E402
from report_sections import DEFAULT_FILE, write_section  # noqa: E402

EVAL = RetrievalSettings(mmr_lambda=1.0, dedup_threshold=1.0, freshness_weight=0.0, candidate_pool=100)
# What a pack ranks with: the default profile's retrieval settings (int8 MiniLM, 128 tokens, one thread).
PACK = load_profile("default").retrieval
PACK_EVAL = PACK.model_copy(update={k: getattr(EVAL, k) for k in ("mmr_lambda", "dedup_threshold", "freshness_weight")})
# The tokenisation before identifier splitting, accent folding and CJK bigrams (same stems and stop words).
PLAIN_ANALYZER = Analyzer(split_identifiers=False, fold_accents=False, cjk_bigrams=False)
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


CONTEXTS = ("packed", "previous", "bare")


def load_locomo(data: Path, *, context: str = "packed"):
    """Turns as documents, one list per conversation. `context`: "packed" is what the pack indexes
    (`turn_context`: the session date, two turns before and one after, within 192 tokens);
    "previous" the session date and the previous turn only (96 tokens); "bare" the text alone."""
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    counter = TokenCounter()
    samples = json.load(open(data / "locomo" / "locomo_dev.json", encoding="utf-8"))
    out = []
    for sample in samples:
        conv, turns, n = sample["conversation"], [], 1
        while f"session_{n}" in conv:
            session, date = conv[f"session_{n}"], conv.get(f"session_{n}_date_time", "")
            texts = [turn_text(t) for t in session]
            for i, t in enumerate(session):
                extra = ""
                if context == "packed":
                    before, after = neighbours(texts, i)
                    extra = turn_context(date=date, previous=before, next=after, count_tokens=counter.count_text)
                elif context == "previous":
                    extra = turn_context(date=date, previous=texts[i - 1] if i else "", max_tokens=96,
                                         count_tokens=counter.count_text)
                turns.append(Document(t["dia_id"], texts[i], sample["sample_id"], context=extra))
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


PLAIN_ROW = "BM25, tokens before identifier split, accent folding, CJK bigrams"


def lexical_index(corpus, analyzer, settings=EVAL):
    """A BM25-only index with its own analyzer (nothing embedded)."""
    from aether_context.retrieval import HashingEmbedder

    index = HybridIndex(settings.model_copy(update={"dense_weight": 0.0}), embedder=HashingEmbedder(),
                        analyzer=analyzer)
    index.add(corpus, embed=False)
    return index


def method_settings(tuned: RetrievalSettings) -> dict[str, RetrievalSettings]:
    return {
        "BM25 (analyzer, no stemming)": None,  # built separately: needs its own analyzer
        PLAIN_ROW: None,  # likewise
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
                analyzer = PLAIN_ANALYZER if method == PLAIN_ROW else Analyzer(stem=False)
                idx = lexical_index(corpus, analyzer)
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
    """Fusion and MMR variants on both collections, with the pack's embedder: the evidence for the defaults."""
    corpus, queries, qrels = load_scifact(data)
    embedder = QueryMemo(SentenceTransformerEmbedder.from_settings(PACK), cache_url)
    cache = EmbeddingCache(embedder, url=cache_url)
    index = HybridIndex(PACK_EVAL, cache=cache)
    index.add(corpus)
    conversations = []
    for _, turns, qas in load_locomo(data):
        idx = HybridIndex(PACK_EVAL, cache=cache)
        idx.add(turns)
        conversations.append((turns, qas, idx))
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
        s = PACK_EVAL.model_copy(update=update)
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

def locomo_methods() -> dict[str, tuple[str, RetrievalSettings | None]]:
    """Row label -> (which turn documents, settings); settings None = BM25 with the plain analyzer."""
    return {
        "BM25, no turn context": ("bare", PACK_EVAL.model_copy(update={"dense_weight": 0.0})),
        "hybrid z-score, no turn context": ("bare", PACK_EVAL),
        "hybrid z-score, date + previous turn only": ("previous", PACK_EVAL),
        PLAIN_ROW: ("packed", None),
        "BM25": ("packed", PACK_EVAL.model_copy(update={"dense_weight": 0.0})),
        "dense": ("packed", PACK_EVAL.model_copy(update={"lexical_weight": 0.0})),
        "hybrid RRF (k=60)": ("packed", PACK_EVAL.model_copy(update={"fusion": "rrf", "rrf_k": 60})),
        "hybrid weighted min-max": ("packed", PACK_EVAL.model_copy(update={"normalization": "minmax"})),
        "hybrid weighted z-score": ("packed", PACK_EVAL),
        "as packed (the pack's settings, MMR and dedup)": ("packed", PACK),
    }


def eval_locomo(data, cache_url, log):
    docs = {context: load_locomo(data, context=context) for context in CONTEXTS}
    counter = TokenCounter()
    cache = EmbeddingCache(QueryMemo(SentenceTransformerEmbedder.from_settings(PACK), cache_url), url=cache_url)
    methods = locomo_methods()
    cuts = ("R@5", "R@10", "R@25", "R@1k tok", "R@2k tok")
    results: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in ["rank_bm25, plain tokens", *methods]}
    counts = defaultdict(int)
    missing_evidence = 0
    from rank_bm25 import BM25Okapi
    for c, (sample_id, turns, qas) in enumerate(docs["packed"]):
        indexes = {}
        for context in CONTEXTS:
            indexes[context] = HybridIndex(PACK, cache=cache)
            indexes[context].add(docs[context][c][1])
        plain = lexical_index(turns, PLAIN_ANALYZER, PACK_EVAL)
        known = {t.id for t in turns}
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
                    tokens = counter.count_text(plain.get(doc_id).text)
                    if used + tokens <= cap:
                        picked.append(doc_id)
                        used += tokens
                plain_budget.append(picked)
            lists = {"rank_bm25, plain tokens": [order[:5], order[:10], order[:25], *plain_budget]}
            for method, (context, settings) in methods.items():
                idx = plain if settings is None else indexes[context]
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
    described = {"conversations": len(docs["packed"]), "turns": sum(len(t) for _, t, _ in docs["packed"]),
                 "sessions": sum(len({d.id.split(":")[0] for d in t}) for _, t, _ in docs["packed"])}
    return results, counts, missing_evidence, cuts, described


# ---------------------------------------------------------------- code identifiers

def eval_code(data, cache_url, log):
    """nDCG@10 on the code-identifier set: BM25 and hybrid, with the analyzer before and after."""
    items, queries, qrels, stats = load_code_identifiers(data)
    cache = EmbeddingCache(QueryMemo(SentenceTransformerEmbedder.from_settings(PACK), cache_url), url=cache_url)
    camel = {q for q, rel in qrels.items() if any(re.search(r"[a-z][A-Z]|[A-Z]{2}[a-z]", r.split("::")[1])
                                                 for r in rel)}
    rows = {}
    for label, analyzer in (("before (no identifier split)", PLAIN_ANALYZER), ("after (this analyzer)", Analyzer())):
        index = HybridIndex(PACK_EVAL, cache=cache, analyzer=analyzer)
        index.add(items)
        for method, settings in (("BM25", PACK_EVAL.model_copy(update={"dense_weight": 0.0})),
                                 ("hybrid z-score", PACK_EVAL)):
            scores = {q: ndcg_at_10(index.search(text, k=10, settings=settings).ids, qrels[q])
                      for q, text in queries.items()}
            rows[f"{method}, {label}"] = (statistics.fmean(scores.values()),
                                          statistics.fmean(scores[q] for q in camel) if camel else float("nan"),
                                          statistics.fmean(scores[q] for q in queries if q not in camel))
            log(f"code {method} {label}: {rows[f'{method}, {label}']}")
    stats["camel_queries"] = len(camel)
    return rows, stats


# ---------------------------------------------------------------- latency and throughput

def sentences(corpus: list[Document]) -> list[str]:
    out = []
    for d in corpus:
        out += [s.strip() for s in re.split(r"(?<=[.!?])\s+", d.text) if len(s.strip()) > 20]
    return out


def index_memory(docs: list[Document], vectors: np.ndarray) -> tuple[float, float]:
    """MB allocated (tracemalloc, numpy included) by a cache receiving `vectors` and an index adding
    `docs`, still held once both are built; and the vector matrix's share. The documents themselves
    are the caller's and not counted."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        cache = EmbeddingCache(SentenceTransformerEmbedder())
        cache.put([d.text for d in docs], vectors)
        index = HybridIndex(RetrievalSettings(), cache=cache)
        index.add(docs)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return held / 2**20, cache.matrix.nbytes / 2**20


def _burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def latency(data, cache_url, log, sizes=(1_000, 10_000, 100_000), n_queries=100, load_workers=1):
    """Search latency and CPU, thread bound on and off, and index memory, under `load_workers` busy processes."""
    import gc
    import multiprocessing

    corpus, queries, _ = load_scifact(data)
    pool = sentences(corpus)
    texts = list(queries.values())[:n_queries]
    counter = TokenCounter()
    rng = np.random.default_rng(0)
    import torch

    burners = [multiprocessing.Process(target=_burn, args=(3600.0,), daemon=True) for _ in range(load_workers)]
    for b in burners:
        b.start()
    try:
        default_threads = SentenceTransformerEmbedder(threads=torch.get_num_threads())
        embedder = SentenceTransformerEmbedder(threads=1)  # queries: one thread, steady on a shared CPU
        embed_times: dict[str, list[float]] = {"1": [], "default": []}
        for q in texts[:30]:  # torch's default threads take up to seconds a query on a loaded machine
            for label, model in (("default", default_threads), ("1", embedder)):
                model.embed(["warm up " + q])
                t = time.perf_counter()
                model.embed([q + " "])  # a fresh text
                embed_times[label].append(time.perf_counter() - t)
        rows = {}
        from rank_bm25 import BM25Okapi
        on = RetrievalSettings(embedding_threads=1)
        off = RetrievalSettings(embedding_threads=None)
        for size in sizes:
            gc.collect()
            docs = [Document(f"s{i}", pool[i % len(pool)] + ("" if i < len(pool) else f" (copy {i // len(pool)})"),
                             "synthetic", timestamp=1.7e9 + i) for i in range(size)]
            cache = EmbeddingCache(embedder)  # in memory: random unit vectors stand in for MiniLM's
            vectors = rng.standard_normal((size, 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            cache.put([d.text for d in docs], vectors)
            index = HybridIndex(RetrievalSettings(), cache=cache)
            t = time.perf_counter()
            index.add(docs)
            add_s = time.perf_counter() - t
            wall, budget, cpu = [], [], {"on": [], "off": []}
            for q in texts:
                t = time.perf_counter()
                index.search(q, k=10)  # cold query: its embedding (1 thread) included
                wall.append(time.perf_counter() - t)
                t = time.perf_counter()
                index.search(q, budget_tokens=2000, count_tokens=counter.count_text)  # query vector memoised
                budget.append(time.perf_counter() - t)
            # Each setting over all queries in a row: BLAS workers spin for a while after an unbounded
            # product, and alternating would bill that spin to the next (bounded) search.
            for label, settings in (("on", on), ("off", off), ("on", on), ("off", off)):
                for q in texts:
                    c = time.process_time()
                    index.search(q, k=10, settings=settings)
                    cpu[label].append(time.process_time() - c)
            del index, cache
            memory = index_memory(docs, vectors)
            del vectors
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
            rows[size] = {"add_s": add_s, "memory_mb": memory[0], "vectors_mb": memory[1],
                          "p50": pct(wall, 50), "p95": pct(wall, 95), "budget_p50": pct(budget, 50),
                          "budget_p95": pct(budget, 95), "cpu_on_p50": pct(cpu["on"], 50),
                          "cpu_off_p50": pct(cpu["off"], 50), "cpu_on_p95": pct(cpu["on"], 95),
                          "cpu_off_p95": pct(cpu["off"], 95),
                          "rank_bm25_p50": pct(r_times, 50), "rank_bm25_build_s": build_s}
            log(f"latency {size}: {rows[size]}")
            del docs, bm, tokenized
    finally:
        for b in burners:
            b.terminate()
            b.join(5)
    pct = lambda xs, p: 1000 * float(np.percentile(xs, p))  # noqa: E731
    embed = {label: (pct(v, 50), pct(v, 95)) for label, v in embed_times.items()}
    return {"sizes": rows, "embed": embed, "load_workers": load_workers, "queries": len(texts)}


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

def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1),
            *("| " + " | ".join(r) + " |" for r in rows)]


def report(args, scifact, variants, locomo, code, lat, speed, sweep_rows, described, elapsed) -> str:
    lines = ["# Retrieval benchmarks (aether_context.retrieval)", "",
             f"Produced by `{args.command}` on {datetime.date.today().isoformat()} "
             f"({platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, no GPU; "
             f"Python {platform.python_version()}) in {elapsed / 60:.1f} min. "
             f"The cores are shared with other work: 1-minute load average {args.load[0]:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end; wall-clock timings are inflated by contention. "
             f"\"The pack's settings\" are the default profile's retrieval settings: MiniLM int8, inputs cut at "
             f"{PACK.embedding_max_seq_length} tokens, {PACK.embedding_threads} thread, MMR {PACK.mmr_lambda}, "
             f"dedup at {PACK.dedup_threshold}, BM25 context weight {PACK.context_weight}.", ""]
    sf = described["scifact"]
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
              f"length-sorted batches of 32, {os.cpu_count()} threads); empty where `--no-latency` skipped it.", ""]
    lines += _table(["embedding", "items/s", "dense nDCG@10", "hybrid nDCG@10"], [
        [label, f"{speed[label]:.1f}" if label in speed else "", f"{variants[f'dense [{label}]']:.3f}",
         f"{variants[f'hybrid weighted z-score [{label}]']:.3f}"] for label in VARIANTS])
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
    if lat:
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
    if sweep_rows:
        lines += ["", "## Fusion and MMR sweep (evidence for the defaults)", "",
                  "The pack's embedder on both sets; LoCoMo R@10 and recall within 1,000 tokens over categories "
                  "1-4, turns with the pack's context.", ""]
        lines += _table(["variant", "SciFact nDCG@10", "LoCoMo R@10", "LoCoMo R@1k tok"],
                        [[n, f"{a:.3f}", f"{b:.3f}", f"{c:.3f}"] for n, (a, b, c) in sweep_rows.items()])
    return "\n".join(lines) + "\n"


def describe_scifact(data: Path) -> dict:
    corpus, queries, qrels = load_scifact(data)
    return {"split": "BEIR test", "docs": len(corpus), "queries": len(queries),
            "judgements": sum(len(r) for r in qrels.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/datasets", help="folder holding scifact/, locomo/ and trajectories/")
    parser.add_argument("--cache", default=str(ROOT / "bench" / ".cache" / "embeddings"), help="fsspec URL for vectors")
    parser.add_argument("--out", default=str(ROOT / DEFAULT_FILE), help="benchmarks file; its 'retrieval' section gets the report")
    parser.add_argument("--no-latency", action="store_true", help="skip latency, memory and throughput")
    parser.add_argument("--load-workers", type=int, default=1, help="busy processes beside the latency section")
    parser.add_argument("--sweep", action="store_true", help="also run the fusion/MMR sweep")
    parser.add_argument("--no-write", action="store_true", help="print the report without writing the benchmarks file")
    args = parser.parse_args(argv)
    args.command = "python bench/retrieval_eval.py " + " ".join(argv if argv is not None else sys.argv[1:])
    data = Path(args.data)
    if not data.is_absolute():
        data = (Path.cwd() / data).resolve()
    args.load = os.getloadavg()
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:7.1f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    described = {"scifact": describe_scifact(data)}
    code = eval_code(data, args.cache, log)
    locomo = eval_locomo(data, args.cache, log)
    speed = {} if args.no_latency else throughput(data, log)
    scifact, variants = eval_scifact(data, args.cache, log)
    lat = {} if args.no_latency else latency(data, args.cache, log, load_workers=args.load_workers)
    sweep_rows = sweep(data, args.cache, log) if args.sweep else {}
    text = report(args, scifact, variants, locomo, code, lat, speed, sweep_rows, described,
                  time.perf_counter() - start)
    print(text)
    if not args.no_write:
        write_section(args.out, "retrieval", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
