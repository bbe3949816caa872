"""Retrieval benchmark: SciFact nDCG@10, LoCoMo recall as packed, code identifiers, latency, memory, speed.

The command line: runs the sections in order and writes the report into the "retrieval" section.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from report_sections import DEFAULT_FILE, write_section

from .data import describe_scifact
from .facets import eval_facets
from .identifiers import eval_code
from .locomo import eval_locomo
from .report import report
from .scifact import eval_scifact, sweep
from .speed import latency, throughput

ROOT = Path(__file__).resolve().parents[2]

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/datasets", help="folder holding scifact/, locomo/ and trajectories/")
    parser.add_argument("--cache", default=str(ROOT / "bench" / ".cache" / "embeddings"), help="fsspec URL for vectors")
    parser.add_argument("--out", default=str(ROOT / DEFAULT_FILE), help="benchmarks file; its 'retrieval' section gets the report")
    parser.add_argument("--no-latency", action="store_true", help="skip latency, memory and throughput")
    parser.add_argument("--load-workers", type=int, default=1, help="busy processes beside the latency section")
    parser.add_argument("--sweep", action="store_true", help="also run the fusion/MMR sweep")
    parser.add_argument("--facets", action="store_true", help="only compare query facets and the information floor")
    parser.add_argument("--lexical", action="store_true", help="with --facets: BM25 alone (no embedding model)")
    parser.add_argument("--no-write", action="store_true", help="print the report without writing the benchmarks file")
    args = parser.parse_args(argv)
    args.command = "python bench/retrieval_eval.py " + " ".join(argv if argv is not None else sys.argv[1:])
    data = Path(args.data)
    if not data.is_absolute():
        data = (Path.cwd() / data).resolve()
    args.load = os.getloadavg()
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:7.1f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    if args.facets:
        rows = eval_facets(data, args.cache, log, dense=not args.lexical)
        columns = list(next(iter(rows.values())))
        print("| variant | " + " | ".join(columns) + " |\n|" + " --- |" * (len(columns) + 1))
        for label, row in rows.items():
            print(f"| {label} | " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
        return 0
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
