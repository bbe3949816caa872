"""End-to-end context benchmarks: what reaches the model (issue 10) and what it costs (issue 11).

Modules: `locomo`, `identifiers`, `coding` (what each workload must keep), `systems` (the baselines and
aether-context), `capture` (per-call measurement inside the scripted model), `run` / `evaluate`
(replays through `replay_adk`), `cost` (cost and cache figures), `targets`, `report`, `cli`.
Run it with `python bench/context_eval.py --data ../shared/datasets`.
"""
