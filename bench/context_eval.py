"""End-to-end context benchmarks (issues 10 and 11): what reaches the model, and what it costs.

Usage (from the repository root)::

    .venv/bin/python bench/context_eval.py --data ../shared/datasets                  # everything
    .venv/bin/python bench/context_eval.py --conversations 1 --questions 10 --episodes 5 --runs 3 --no-write  # smoke
    .venv/bin/python bench/context_eval.py --workloads tau --systems aether --episodes 20

The modules live in `bench/context_eval/` (this file only sets the import path and calls `cli.run`).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedding model comes from a package: never download
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from context_eval.cli import run  # noqa: E402  (the package bench/context_eval/, not this file)

if __name__ == "__main__":
    sys.exit(run())
