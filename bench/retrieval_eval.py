"""Retrieval benchmark: SciFact nDCG@10, LoCoMo recall as packed, code identifiers, latency, memory, speed.

Not part of the test suite. Embeddings persist under bench/.cache/ (git-ignored) between runs,
so only the first run pays for embedding the corpora on CPU.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/retrieval_eval.py --data ../shared/datasets

Writes the tables to the "retrieval" section of docs/benchmarks.md (and prints them); the rest of
that file is left as it was (`report_sections.py`). The modules live in `bench/retrieval_eval/`
(this file only sets the environment and the import path and calls `cli.main`).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from retrieval_eval.cli import main  # noqa: E402  (the package bench/retrieval_eval/, not this file)

if __name__ == "__main__":
    raise SystemExit(main())
