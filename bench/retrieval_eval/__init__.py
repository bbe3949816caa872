"""Retrieval benchmark modules (the entry point is bench/retrieval_eval.py): data loaders, shared settings
and metrics, one module per section (SciFact, LoCoMo, code identifiers, speed), the report and the command line."""
