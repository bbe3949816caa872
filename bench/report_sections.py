"""One benchmarks file, one section per script: write a script's report between its own markers.

All benchmark reports live in docs/benchmarks.md. Each script owns the text between
``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->`` and replaces only that, so a run of one
benchmark never touches the hand-written top of the file or another benchmark's figures. A section
that is missing is appended; a missing file is created with a bare title.

A script's report is written as a standalone document (its title is a ``#`` heading, as it prints
on the console); inside the shared file every heading moves one level down, so the reports nest
under the file's own title.

    from report_sections import write_section
    write_section(ROOT / "docs/benchmarks.md", "trajectories", report)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import re
import statistics
from pathlib import Path
from typing import Callable, Iterable, Sequence

__all__ = ["DEFAULT_FILE", "machine", "markers", "mean", "nest_headings", "pct", "replace_section", "section_main",
           "write_section"]

DEFAULT_FILE = "docs/benchmarks.md"
NEW_FILE_TITLE = "# Benchmarks\n"

_HEADING = re.compile(r"^(#{1,5}) ")
_FENCE = re.compile(r"^\s*(```|~~~)")


def markers(name: str) -> tuple[str, str]:
    """The start and end comment lines that delimit section `name`."""
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def nest_headings(markdown: str) -> str:
    """Every ATX heading one level deeper (`# T` → `## T`), code fences left alone."""
    out, in_fence = [], False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and _HEADING.match(line):
            line = "#" + line
        out.append(line)
    return "\n".join(out)


def replace_section(document: str, name: str, body: str) -> str:
    """`document` with section `name` holding `body` (appended at the end when the section is new)."""
    start, end = markers(name)
    block = f"{start}\n{body.strip()}\n{end}"
    i, j = document.find(start), document.find(end)
    if i >= 0 and j > i:
        return document[:i] + block + document[j + len(end):]
    if i >= 0 or j >= 0:  # one marker without the other: refuse rather than guess what to overwrite
        raise ValueError(f"section {name!r}: unmatched marker in the document")
    return document.rstrip("\n") + "\n\n" + block + "\n"


def write_section(path: "str | Path", name: str, report: str) -> Path:
    """Put `report` into section `name` of the file at `path`, leaving the rest of the file as it was."""
    path = Path(path)
    document = path.read_text(encoding="utf-8") if path.exists() else NEW_FILE_TITLE
    body = nest_headings(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_section(document, name, body), encoding="utf-8")
    return path


def section_main(section: str, description: str, report: "Callable[[argparse.Namespace, Sequence[str] | None], str]",
                 argv: "Sequence[str] | None", *, default_data: str) -> int:
    """The command line of a one-section benchmark: `--data`, `--out`, `--no-write`; prints the report, then
    writes it into its section (paths relative to the repository root)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", default=default_data, help="shared datasets folder (default: %(default)s, from the repo root)")
    ap.add_argument("--out", default=DEFAULT_FILE, help=f"benchmarks file whose '{section}' section gets the report")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    text = report(args, argv)
    print(text)
    if not args.no_write:
        print(f"wrote the '{section}' section of {write_section(Path(__file__).resolve().parent.parent / args.out, section, text)}")
    return 0


# ---------------------------------------------------------------- figures every report shares
def pct(values: Sequence[float], q: float) -> float:
    """Percentile by linear interpolation (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def mean(values: Iterable[float]) -> float:
    xs = list(values)
    return statistics.fmean(xs) if xs else math.nan


def machine() -> str:
    """The CPU, core count, load and versions a report's figures were taken on."""
    import google.adk  # only here: the module itself needs nothing beyond the standard library
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"{cpu}, {os.cpu_count()} cores (load average at start {load}); Python {platform.python_version()}, "
            f"google-adk {google.adk.__version__}")
