"""Latency, memory and embedding throughput of the retrieval index."""

from __future__ import annotations

import re
import statistics
import time

import numpy as np

from aether_context.retrieval import Document, EmbeddingCache, HybridIndex, RetrievalSettings, SentenceTransformerEmbedder
from aether_context.tokens import TokenCounter

from .common import VARIANTS, plain_tokens
from .data import load_scifact

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


def _ms(xs, p) -> float:
    """The p-th percentile of `xs` (seconds) in milliseconds."""
    return 1000 * float(np.percentile(xs, p))


def latency(data, cache_url, log, sizes=(1_000, 10_000, 100_000), n_queries=100, load_workers=1):
    """Search latency and CPU, thread bound on and off, and index memory, under `load_workers` busy processes."""
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
        embed_times = _embed_times(texts, default_threads, embedder)
        rows = {}
        for size in sizes:
            rows[size] = _at_size(size, pool, texts, embedder, counter, rng)
            log(f"latency {size}: {rows[size]}")
    finally:
        for b in burners:
            b.terminate()
            b.join(5)
    embed = {label: (_ms(v, 50), _ms(v, 95)) for label, v in embed_times.items()}
    return {"sizes": rows, "embed": embed, "load_workers": load_workers, "queries": len(texts)}


def _embed_times(texts, default_threads, embedder) -> dict[str, list[float]]:
    """Seconds to embed each of 30 fresh queries, with torch's default threads and with one."""
    embed_times: dict[str, list[float]] = {"1": [], "default": []}
    for q in texts[:30]:  # torch's default threads take up to seconds a query on a loaded machine
        for label, model in (("default", default_threads), ("1", embedder)):
            model.embed(["warm up " + q])
            t = time.perf_counter()
            model.embed([q + " "])  # a fresh text
            embed_times[label].append(time.perf_counter() - t)
    return embed_times


def _at_size(size, pool, texts, embedder, counter, rng) -> dict:
    """One row of the latency table: an index of `size` items, timed and measured."""
    import gc

    from rank_bm25 import BM25Okapi

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
    wall, budget, cpu = _search_times(index, texts, counter)
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
    return {"add_s": add_s, "memory_mb": memory[0], "vectors_mb": memory[1],
            "p50": _ms(wall, 50), "p95": _ms(wall, 95), "budget_p50": _ms(budget, 50),
            "budget_p95": _ms(budget, 95), "cpu_on_p50": _ms(cpu["on"], 50),
            "cpu_off_p50": _ms(cpu["off"], 50), "cpu_on_p95": _ms(cpu["on"], 95),
            "cpu_off_p95": _ms(cpu["off"], 95),
            "rank_bm25_p50": _ms(r_times, 50), "rank_bm25_build_s": build_s}


def _search_times(index, texts, counter) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """Wall seconds of a cold k=10 search and a budgeted one per query; CPU seconds, thread bound on and off."""
    on = RetrievalSettings(embedding_threads=1)
    off = RetrievalSettings(embedding_threads=None)
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
    return wall, budget, cpu


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
