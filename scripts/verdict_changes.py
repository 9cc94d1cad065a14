"""Which verdicts of the published studies change under today's test (harness/verdicts.py) against
the one their leaderboards were published with: each study's leaderboard.parquet beside the same
records aggregated again, without writing anything.

    python scripts/verdict_changes.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.leaderboard import aggregate, run_table  # noqa: E402
from harness.records import load_runs, suite_folders  # noqa: E402


def changes(studies: Path = ROOT / "results" / "studies"):
    """(folder, suite, algorithm, seeds, which, published, today) for each verdict that changed,
    and how many rows were compared."""
    found, rows = [], 0
    for path in sorted(studies.rglob("leaderboard.parquet")):
        if path.parent == studies:
            continue
        tables = [t for suite in suite_folders(path.parent) if (t := run_table(load_runs(suite))).height]
        if not tables:
            continue
        old, new = pl.read_parquet(path), aggregate(pl.concat(tables, how="diagonal_relaxed"))
        for row in new.iter_rows(named=True):
            match = old.filter((pl.col("suite") == row["suite"]) & (pl.col("algorithm") == row["algorithm"]))
            if match.is_empty():
                continue
            was, rows = match.row(0, named=True), rows + 1
            where = (str(path.parent.relative_to(ROOT)), row["suite"], row["algorithm"], row["seeds"])
            before, after = was.get("acc_gain_p"), row["acc_gain_p"]
            if before is not None and after is not None and (before < 0.05) != (after < 0.05):
                found.append((*where, "acc_gain_p", f"{before:.2g}", f"{after:.2g}"))
            before, after = was.get("vs_reference"), row["vs_reference"]
            if before is not None and after is not None and before != after.removesuffix(" (this seed)"):
                found.append((*where, "vs_reference", before, after))
    return found, rows


def main() -> int:
    found, rows = changes()
    for line in found:
        print(" | ".join(str(v) for v in line))
    print(f"{len(found)} verdicts changed over {rows} rows (a study published in several folders counts in each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
