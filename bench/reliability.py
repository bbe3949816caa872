"""Reliability scenarios for many users and replicas (issue 13): run by hand, figures in docs/benchmarks.md.

Each scenario is one function of the parsed arguments returning its markdown report, registered in
`SCENARIOS` under its name; `--scenarios a,b` runs those (default: all), prints each report and,
with `--write`, puts them together in the `<!-- bench:reliability:start/end -->` section of
docs/benchmarks.md. Each scenario stays well under 5 minutes on a 2-core machine.

- `users`, `kill`, `stall` (`bench/reliability_load.py`): 64 concurrent users through one plugin,
  some sharing session ids; kill -9 during writes, then a normal exit; event-loop stalls with and
  without the plugin.
- `replicas`: two replica processes over one sqlite `DatabaseSessionService` and one store folder
  (see the marked section below).

Usage::

    python bench/reliability.py --scenarios users,kill,stall --write
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import reliability_load  # noqa: E402  (users, kill, stall)

SCENARIOS: dict[str, Callable[[argparse.Namespace], str]] = dict(reliability_load.SCENARIOS)


# ----------------------------------------------------------------------------------------------
# replicas: two replica processes over sqlite DatabaseSessionService and one store folder.
# Owned by branch h13b: its scenario function registers itself here as SCENARIOS["replicas"],
# with its options added in `_replica_arguments`.
# ----------------------------------------------------------------------------------------------
def _replica_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the replicas scenario (h13b)."""


# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from report_sections import machine, write_section

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}")
    parser.add_argument("--write", action="store_true", help="write the reports into docs/benchmarks.md")
    reliability_load.add_arguments(parser)
    _replica_arguments(parser)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    for name in names:
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r}: use one of {', '.join(SCENARIOS)}")
    reports = []
    for name in names:
        report = SCENARIOS[name](args)
        print(report + "\n", flush=True)
        reports.append(report)
    if args.write:
        command = "python bench/reliability.py " + " ".join(argv if argv is not None else sys.argv[1:])
        text = "\n\n".join(["# Reliability (issue 13)", f"`{command.replace(' --write', '')}` on {machine()}.",
                            *reports])
        write_section(ROOT / "docs" / "benchmarks.md", "reliability", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
