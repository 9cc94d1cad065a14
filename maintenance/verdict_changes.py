"""Which verdicts of the published studies change under today's test (harness/verdicts.py) against
the one their leaderboards were published with: each study's leaderboard.parquet (as committed at
`--before`, a git revision, or as it stands) beside the same records aggregated again, without
writing anything. `--markdown` prints today's verdict of every multi-seed comparison instead.

    python maintenance/verdict_changes.py --before 68450a8   # the studies before their republication
    python maintenance/verdict_changes.py --markdown         # the table in docs/studies/verdicts.md
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.leaderboard import aggregate, run_table  # noqa: E402
from harness.records import load_runs, suite_folders  # noqa: E402


def verdict(text: str) -> str:
    """The call itself, whether or not it is marked as one seed's."""
    return text.removesuffix(" (this seed)")


def published(path: Path, before: str | None) -> pl.DataFrame:
    """The leaderboard as committed at `before` (empty where it was not), or as it stands."""
    if before is None:
        return pl.read_parquet(path)
    shown = subprocess.run(["git", "show", f"{before}:{path.relative_to(ROOT)}"], cwd=ROOT, capture_output=True)
    return pl.read_parquet(io.BytesIO(shown.stdout)) if shown.returncode == 0 else pl.DataFrame()


def today(study: Path) -> pl.DataFrame:
    """The study's records aggregated under today's code (empty where it holds no runs)."""
    tables = [t for suite in suite_folders(study) if (t := run_table(load_runs(suite))).height]
    return aggregate(pl.concat(tables, how="diagonal_relaxed")) if tables else pl.DataFrame()


def leaderboards(studies: Path):
    return [p for p in sorted(studies.rglob("leaderboard.parquet")) if p.parent != studies]


def changes(studies: Path = ROOT / "results" / "studies", before: str | None = None):
    """(folder, suite, algorithm, seeds, which, published, today) for each verdict that changed,
    and how many rows were compared."""
    found, rows = [], 0
    for path in leaderboards(studies):
        new = today(path.parent)
        if new.is_empty():
            continue
        old = published(path, before)
        if old.is_empty():
            continue
        for row in new.iter_rows(named=True):
            match = old.filter((pl.col("suite") == row["suite"]) & (pl.col("algorithm") == row["algorithm"]))
            if match.is_empty():
                continue
            was, rows = match.row(0, named=True), rows + 1
            where = (str(path.parent.relative_to(ROOT)), row["suite"], row["algorithm"], row["seeds"])
            before_p, after_p = was.get("acc_gain_p"), row["acc_gain_p"]
            if before_p is not None and after_p is not None and (before_p < 0.05) != (after_p < 0.05):
                found.append((*where, "acc_gain_p", f"{before_p:.2g}", f"{after_p:.2g}"))
            before_v, after_v = was.get("vs_reference"), row["vs_reference"]
            if before_v is not None and after_v is not None and verdict(before_v) != verdict(after_v):
                found.append((*where, "vs_reference", before_v, after_v))
    return found, rows


def p_text(p: float | None) -> str:
    return "-" if p is None else (f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}")


def markdown(studies: Path = ROOT / "results" / "studies") -> list[str]:
    """Today's verdicts of every comparison with two or more seeds and a held-out test, one row
    each, from the studies' leaf folders; the same runs published in several folders share a row."""
    rows: dict[tuple, list] = {}
    paths = leaderboards(studies)
    for path in paths:
        if any(q.parent != path.parent and q.parent.is_relative_to(path.parent) for q in paths):
            continue
        for row in today(path.parent).iter_rows(named=True):
            if row["seeds"] >= 2 and row["acc_gain_p"] is not None:
                key = (row["suite"], row["algorithm"], row["acc_after"], row["vs_reference_p"])
                rows.setdefault(key, [[], row])[0].append(str(path.parent.relative_to(studies)))
    lines = [
        "| study folders | suite | algorithm | seeds | gain, 95% CI | own gain p | vs reference | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for folders, row in rows.values():
        low, high = row["acc_gain_ci95"]
        lines.append(
            f"| {', '.join(folders)} | {row['suite']} | {row['algorithm']} | {row['seeds']} "
            f"| {100 * row['acc_gain']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] | {p_text(row['acc_gain_p'])} "
            f"| {row['vs_reference'] or '-'} | {p_text(row['vs_reference_p'])} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a git revision: compare with the leaderboards committed there")
    parser.add_argument("--markdown", action="store_true", help="print today's verdicts as a markdown table")
    args = parser.parse_args(argv)
    if args.markdown:
        print("\n".join(markdown()))
        return 0
    found, rows = changes(before=args.before)
    for line in found:
        print(" | ".join(str(v) for v in line))
    print(f"{len(found)} verdicts changed over {rows} rows (a study published in several folders counts in each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
