"""How far seeds of one comparison spread beyond the noise of their shared problems, in the
multi-seed studies published under results/studies: `harness.verdicts.SEED_RATIO`.

    python scripts/seed_spread.py

For every comparison a leaderboard makes with two or more seeds (an algorithm against the suite's
reference, and against its own start), X[seed, problem] = solved - solved; the seeds' variance
component of its two-way ANOVA, max(ms_s - ms_e, 0) / N, is how much the seeds' accuracy
differences vary beyond their problems' noise; over the residual variance ms_e / N, it is the
ratio SEED_RATIO (the seeds' spread in units of the problem-by-seed noise). Comparisons published
in several studies count once. Prints each, the root mean square of the spread, and the ratio's
mean with its standard error; and beside it the share of a seed's problem-by-
problem noise that repeats on every seed (which more seeds do not average away), and its mean:
`harness.verdicts.SHARED_SHARE`.
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.leaderboard import run_table  # noqa: E402
from harness.records import load_runs, suite_folders  # noqa: E402
from harness.verdicts import mean_squares, solved_matrix  # noqa: E402


def seed_component(x: np.ndarray) -> float:
    """max(ms_s - ms_e, 0) / N of X[seed, problem]: the seeds' variance beyond the problems'."""
    ms_s, _, ms_e = mean_squares(x)
    return max(ms_s - ms_e, 0.0) / x.shape[1]


def seed_ratio(x: np.ndarray) -> float | None:
    """N max(ms_s - ms_e, 0) / ms_e: the seeds' variance over the residual's (None without residual)."""
    ms_s, _, ms_e = mean_squares(x)
    return max(ms_s - ms_e, 0.0) / ms_e if ms_e > 0 else None


def ratios() -> np.ndarray:
    """`seed_ratio` of every comparison that has a residual."""
    return np.array([r for *_, x in published() if (r := seed_ratio(x)) is not None])


def standard_error(values: np.ndarray) -> float:
    """The standard error of the mean of `values`: how far a study more or less may move it."""
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def shared_share(x: np.ndarray) -> float:
    """Of one seed's problem-by-problem variance, the share that repeats on every seed (the
    problems' component of the two-way ANOVA, max(ms_p - ms_e, 0) / S, over it plus ms_e)."""
    _, ms_p, ms_e = mean_squares(x)
    shared = max(ms_p - ms_e, 0.0) / x.shape[0]
    return shared / (shared + ms_e) if shared + ms_e > 0 else 0.0


@functools.cache
def published() -> list:
    """`comparisons` of the published studies, read once."""
    return list(comparisons())


def comparisons(studies: Path = ROOT / "results" / "studies"):
    """(study/suite, algorithm, against, X) for each multi-seed comparison, each once."""
    seen = set()
    for suite_dir in sorted(d for study in sorted(studies.iterdir()) if study.is_dir() for d in suite_folders(study)):
        table = run_table(load_runs(suite_dir))
        if table.is_empty() or "final_rewards" not in table.columns:
            continue
        reference = table.filter(pl.col("algorithm") == pl.col("reference")).sort("seed")
        for (algorithm,), g in table.group_by(["algorithm"], maintain_order=True):
            g = g.sort("seed")
            if g.height < 2 or None in g["final_rewards"].to_list():
                continue
            mine = solved_matrix(g["final_rewards"].to_list())
            against = {"start": solved_matrix(g["first_rewards"].to_list())}
            if algorithm != reference["algorithm"][0] and reference["seed"].to_list() == g["seed"].to_list():
                against["reference"] = solved_matrix(reference["final_rewards"].to_list())
            for name, theirs in against.items():
                x = mine - theirs
                key = (name, x.tobytes())
                if key not in seen:
                    seen.add(key)
                    yield f"{suite_dir.parent.name}/{suite_dir.name}", algorithm, name, x


def spread() -> float:
    """The root mean square of the seeds' component over every comparison, each once."""
    return math.sqrt(np.mean([seed_component(x) for *_, x in published()]))


def shares() -> np.ndarray:
    """`shared_share` of every comparison."""
    return np.array([shared_share(x) for *_, x in published()])


def main() -> int:
    print(f"{'study/suite':45s} {'algorithm':14s} {'against':12s} seeds  spread  shared")
    for where, algorithm, against, x in published():
        print(
            f"{where:45s} {algorithm:14s} vs {against:9s} {x.shape[0]:5d}  {math.sqrt(seed_component(x)):.4f}"
            f"  {shared_share(x):.2f}"
        )
    print(
        f"seeds' spread, root mean square: {spread():.4f}; over the residual (SEED_RATIO), mean: {ratios().mean():.2f}"
        f" +- {standard_error(ratios()):.2f} (standard error, {len(ratios())} comparisons); problems' shared share"
        f" (SHARED_SHARE), mean: {shares().mean():.2f} +- {standard_error(shares()):.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
