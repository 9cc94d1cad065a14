"""Credit fidelity by algorithm (issue #51), from the run folders of a suite: each figure's mean
over every step that had it (all seeds pooled) with a 95% interval over those steps, and the
rollouts read. docs/studies/fidelity.md holds the table, with the command that made it.

    python scripts/fidelity_table.py runs/fidelity/zoo-math
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import polars as pl

FIGURES = ("blame_on_error", "blame_before", "blame_after", "blame_lift", "reinforced_error", "reinforced_lift")


def interval(values: list[float]) -> str:
    if not values:
        return "–"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.3f}"
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    return f"{mean:.3f} +- {half:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, help="a suite's folder of run folders")
    args = parser.parse_args()
    by_algorithm: dict[str, list[pl.DataFrame]] = {}
    for run in sorted(p for p in args.suite.iterdir() if (p / "run.json").is_file()):  # finished runs
        algorithm = json.loads((run / "run.json").read_text())["algorithm"]
        by_algorithm.setdefault(algorithm, []).append(pl.read_parquet(run / "metrics.parquet"))
    print("| algorithm | seeds | rollouts read | " + " | ".join(FIGURES) + " |")
    print("|---|---|---|" + "---|" * len(FIGURES))
    for algorithm, frames in by_algorithm.items():
        steps = pl.concat(frames, how="diagonal_relaxed")
        if "credit/fidelity_rollouts" not in steps.columns:
            continue
        cells = []
        for figure in FIGURES:
            column = steps[f"credit/{figure}"].fill_nan(None).drop_nulls().to_list()
            cells.append(interval(column))
        read = int(steps["credit/fidelity_rollouts"].sum())
        print(f"| {algorithm} | {len(frames)} | {read} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
