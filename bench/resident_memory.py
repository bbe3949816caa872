"""Resident memory of one process: ADK alone, + the plugin (light: no embedding model), + MiniLM.

Each configuration runs in its own fresh Python process: import ADK, replay one recorded
mini-swe-agent run through a real `Runner` (with or without `ContextPackPlugin`), then report the
process's resident set (VmRSS) and its peak (VmHWM). The light configuration makes the embedder
report itself unavailable, as on an install without the `embeddings` extra (torch is never
imported). A second plugin instance in the same process shows the model is loaded once per process.

Usage::

    PYTHONPATH=. .venv/bin/python bench/resident_memory.py --data ../shared/datasets
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIGS = ("adk", "light", "minilm", "minilm-two-plugins")


def _status() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


async def _child(config: str, data: str) -> dict:
    sys.path[:0] = [str(ROOT), str(HERE)]
    import tempfile

    from trajectories import load_mini_swe
    from replay_adk import replay

    traj = load_mini_swe(data)[0]
    plugins = []
    if config != "adk":
        from aether_context import ContextPackPlugin
        if config == "light":
            from aether_context.retrieval import embeddings
            embeddings._AVAILABLE.update({"default": False, "named": False})  # as without the extra
        tmp = tempfile.mkdtemp(prefix="aether-rss-")
        count = 2 if config == "minilm-two-plugins" else 1
        for k in range(count):
            plugin = ContextPackPlugin(name=f"aether_{k}", window_tokens=8_000, store=f"{tmp}/p{k}")
            if config != "light":
                plugin.packer.retriever.wait_ready()
            plugins.append(plugin)
        plugins = plugins[:1]  # one packs the run; the other only holds its own retriever
    await replay(traj, plugins=plugins, keep_requests="none")
    return {}


def child(config: str, data: str) -> None:
    asyncio.run(_child(config, data))
    status = _status()
    status["torch_imported"] = "torch" in sys.modules
    print(json.dumps(status))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/datasets")
    ap.add_argument("--child", choices=CONFIGS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.data)
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    results = {}
    for config in CONFIGS:
        out = subprocess.run([sys.executable, __file__, "--child", config, "--data", args.data], env=env,
                             capture_output=True, text=True, check=True)
        results[config] = json.loads(out.stdout.strip().splitlines()[-1])
    base = results["adk"]["VmRSS"]
    print("| process | RSS MB (peak) | vs ADK alone | torch imported |")
    print("| --- | --- | --- | --- |")
    names = {"adk": "ADK alone, one recorded run", "light": "+ ContextPackPlugin, light (no embedding model)",
             "minilm": "+ ContextPackPlugin with MiniLM", "minilm-two-plugins": "+ two ContextPackPlugins with MiniLM"}
    for config, r in results.items():
        print(f"| {names[config]} | {r['VmRSS']:.0f} ({r['VmHWM']:.0f}) | {r['VmRSS'] - base:+.0f} MB "
              f"| {'yes' if r['torch_imported'] else 'no'} |")


if __name__ == "__main__":
    main()
