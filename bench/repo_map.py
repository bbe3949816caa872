"""The repo map on the dev mini-swe-agent runs: are the files of the final diff named in the map of the
first request, and how many tokens does the map take?

The repositories are not on disk. Each SWE-bench project is a Python package, so the map is built over
the project's release at the instance's SWE-bench version, fetched with pip into a cache outside the
repository: the sdist when pip can fetch it, else a wheel (compiled projects, whose sdists need a build
to fetch). The task is the PR description alone (the first request, before any tool output).

    PYTHONPATH=. python bench/repo_map.py [--runs DIR] [--cache /tmp/aether-repomap] [--budgets 4000 8000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_context import CodeContextProvider, ContextPackPlugin, load_profile
from aether_context.adk import request_from_llm
from aether_context.providers.code import CodeContextSettings, RepoIndex, repo_map
from aether_context.testing import ScriptedLlm
from aether_context.tokens import TokenCounter

RUNS = Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "trajectories" / "mini-swe-agent"
# SWE-bench's `version` of each dev instance, mapped to the release pip installs; typed in from SWE-bench
# Verified's metadata (not on disk here). A `.dev` version is the branch before that release.
RELEASE = {
    "astropy__astropy-12907": "astropy==4.3", "astropy__astropy-14508": "astropy==5.1",
    **{f"django__django-{n}": "django==3.0" for n in (9296, 10880, 11149, 11433)},
    **{f"django__django-{n}": "django==3.1" for n in (11790, 12143, 12663)},
    **{f"django__django-{n}": "django==3.2" for n in (13089, 13344, 13568, 13821)},
    **{f"django__django-{n}": "django==4.0" for n in (14140, 14493)},
    **{f"django__django-{n}": "django==4.1" for n in (14771, 15128, 15467)},
    **{f"django__django-{n}": "django==4.2" for n in (15732, 16100)},
    **{f"django__django-{n}": "django==5.0" for n in (16485, 16667)},
    "matplotlib__matplotlib-23314": "matplotlib==3.5.0", "matplotlib__matplotlib-25287": "matplotlib==3.7.0",
    "mwaskom__seaborn-3187": "seaborn==0.12.0", "pydata__xarray-3151": "xarray==0.12.0",
    "pydata__xarray-6599": "xarray==2022.03.0", "pylint-dev__pylint-6386": "pylint==2.14.0",
    "pytest-dev__pytest-5809": "pytest==4.6.0", "pytest-dev__pytest-8399": "pytest==7.0.0",  # 6.3 never shipped
    "scikit-learn__scikit-learn-13142": "scikit-learn==0.21.1", "scikit-learn__scikit-learn-14983": "scikit-learn==0.22",
    "sphinx-doc__sphinx-7889": "sphinx==3.3.0", "sphinx-doc__sphinx-8593": "sphinx==3.5.0",
    "sphinx-doc__sphinx-9591": "sphinx==4.2.0", "sphinx-doc__sphinx-10449": "sphinx==5.1.0",
    "sympy__sympy-13091": "sympy==1.1", "sympy__sympy-14248": "sympy==1.1", "sympy__sympy-16597": "sympy==1.5",
    "sympy__sympy-18763": "sympy==1.6", "sympy__sympy-20916": "sympy==1.7", "sympy__sympy-23534": "sympy==1.11",
}


COMPILED = ("astropy", "matplotlib", "scikit-learn")  # pip would build these sdists (a compiler) to fetch them


def fetch(spec: str, cache: Path) -> tuple[Path, str] | None:
    """The extracted source tree of `spec` and its kind ("sdist" or "wheel"), fetched once into `cache`."""
    name, version = spec.split("==")
    tree = cache / "src" / spec
    if tree.is_dir():
        return tree, (tree / ".kind").read_text()
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d"]
    sdist = () if name in COMPILED else (("sdist", ["--no-binary", ":all:"]),)
    for kind, extra in (*sdist,
                        *(("wheel", ["--only-binary", ":all:", "--platform", "manylinux2014_x86_64", "--python-version",
                                     py]) for py in ("3.9", "3.7"))):
        into = cache / kind / spec
        if not any(into.glob("*")):
            subprocess.run([*pip, str(into), *extra, spec], capture_output=True, timeout=300)
        archive = next(iter(sorted(into.glob("*"))), None)
        if archive is None:
            continue
        tree.mkdir(parents=True)
        if kind == "sdist":
            with tarfile.open(archive) as tar:
                tar.extractall(tree, filter="data")
            tops = list(tree.iterdir())
            tops[0].rename(tree / "_t")
            for p in (tree / "_t").iterdir():
                p.rename(tree / p.name)
            (tree / "_t").rmdir()
        else:
            with zipfile.ZipFile(archive) as z:
                z.extractall(tree)
        (tree / ".kind").write_text(kind)
        return tree, kind
    print(f"{spec}: pip found neither an sdist nor a wheel", file=sys.stderr)
    return None


def task_text(run: dict) -> str:
    m = re.search(r"<pr_description>(.*?)</pr_description>", run["messages"][1]["content"], re.DOTALL)
    return (m.group(1) if m else run["messages"][1]["content"]).replace("Consider the following PR description:", "")


async def first_request(index: RepoIndex, task: str, window: int) -> str:
    """The payload of the first request a coding agent sends with the provider, through a real Runner."""
    provider = CodeContextProvider(index.root, index.settings)
    provider._index = index  # the index built above: the provider would build the same one
    llm = ScriptedLlm(turns=["done"])
    plugin = ContextPackPlugin(store="memory://repo-map", window_tokens=window, profile=load_profile("coding_agent"),
                               evidence_providers=[provider])
    plugin.packer.pack_timeout = 600  # a slow pack on a busy machine must not fail open
    agent = LlmAgent(name="coder", model=llm, instruction="Fix the issue in the repository.")
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text=task)])):
        pass
    return request_from_llm(llm.requests[0]).messages[-1].text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/aether-repomap"))
    ap.add_argument("--budgets", type=int, nargs="+", default=[2000, 4000, 8000])
    ap.add_argument("--file-caps", type=int, nargs="+", default=[128, 256, 512], help="file_max_tokens values")
    ap.add_argument("--window", type=int, default=32_000, help="the Runner pass: window, with 8,000 / 256 map tokens")
    ap.add_argument("--json", type=Path, help="write the per-run rows here")
    args = ap.parse_args()
    count = TokenCounter().count_text
    rows, indexes = [], {}
    for path in sorted(args.runs.glob("*.traj.json")):
        run = json.loads(path.read_text())
        iid = run["instance_id"]
        diff = list(dict.fromkeys(re.findall(r"^diff --git a/(\S+) b/", run["info"]["submission"], re.MULTILINE)))
        if iid not in RELEASE or not diff:
            print(f"{iid}: skipped (no release or no diff)")
            continue
        spec = RELEASE[iid]
        if spec not in indexes:
            got = fetch(spec, args.cache)
            started = time.process_time()
            indexes[spec] = (RepoIndex(got[0]), got[1], time.process_time() - started) if got else None
        if indexes[spec] is None:
            continue
        index, kind, seconds = indexes[spec]
        in_tree = {f: (index.named_files([f]) or [None])[0] for f in diff}  # lib/matplotlib/x.py -> matplotlib/x.py
        task = task_text(run)
        row = {"instance": iid, "release": spec, "kind": kind, "files": len(index.files), "index_cpu_s": round(seconds, 1),
               "diff": diff, "diff_in_release": sum(v is not None for v in in_tree.values()),
               "named": list(index.named_files([task]))}
        ranked = index.ranked(row["named"], index.mentioned([task]))
        row["rank"] = [ranked.index(v) + 1 if v else None for v in in_tree.values()]
        for budget in args.budgets:
            for cap in args.file_caps:
                index.settings = CodeContextSettings(max_tokens=budget, file_max_tokens=cap)
                items = repo_map(index, [task], count_tokens=count)
                paths = {i.path for i in items}
                row[f"{budget}/{cap}"] = {"hit": sum(v in paths for v in in_tree.values() if v),
                                          "tokens": sum(i.tokens for i in items), "files": len(items)}
        index.settings = CodeContextSettings(max_tokens=8000)
        payload = asyncio.run(first_request(index, task, args.window))
        row["in_request"] = sum(f"[code:{v}]" in payload for v in in_tree.values() if v)
        row["code_items_in_request"] = payload.count("[code:")
        row["packed"] = payload.startswith("CONTEXT PACK")
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("diff",)}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    diff_files = sum(len(r["diff"]) for r in rows)
    present = sum(r["diff_in_release"] for r in rows)
    ranks = [k for r in rows for k in r["rank"] if k]
    print(f"\n{len(rows)} runs, {diff_files} diff files, {present} of them in the release's tree "
          f"({sum(r['diff_in_release'] for r in rows if r['kind'] == 'wheel')} from wheels); "
          f"{sum(bool(r['named']) for r in rows)} tasks name a file; rank of a diff file in the whole ranking: "
          f"median {statistics.median(ranks)}, top-10 {sum(k <= 10 for k in ranks)}, of "
          f"{statistics.median(r['files'] for r in rows)} files (median); indexing CPU "
          f"{sum(v[2] for v in indexes.values() if v):.0f} s for {len(indexes)} trees")
    print("| max_tokens | file_max_tokens | diff files in the map | runs with every such file | map tokens, median (max) "
          "| files in the map, median |\n| --- | --- | --- | --- | --- | --- |")
    for budget in args.budgets:
        for cap in args.file_caps:
            got = [r[f"{budget}/{cap}"] for r in rows]
            hits = sum(g["hit"] for g in got)
            whole = sum(g["hit"] == r["diff_in_release"] for g, r in zip(got, rows))
            tokens = [g["tokens"] for g in got]
            print(f"| {budget:,} | {cap} | {hits}/{present} ({hits / present:.0%}) | {whole}/{len(rows)} | "
                  f"{statistics.median(tokens):,.0f} ({max(tokens):,}) | {statistics.median(g['files'] for g in got):.0f} |")
    reached = sum(r["in_request"] for r in rows)
    print(f"\nThrough a Runner (coding_agent profile, {args.window:,}-token window, 8,000 / 256): diff files in the "
          f"first request {reached}/{present} ({reached / present:.0%}); code items in it, median "
          f"{statistics.median(r['code_items_in_request'] for r in rows):.0f}; packed {sum(r['packed'] for r in rows)}")


if __name__ == "__main__":
    main()
