"""One summary across tasks, as the RL evaluation literature writes it (Agarwal et al., 2021,
"Deep Reinforcement Learning at the Edge of the Statistical Precipice", the `rliable` package):

    score of a run = (held-out accuracy after - before) / (1 - before)    the share of its starting
                                                                           errors it fixed (< 0: lost)
    IQM            = the mean of the middle half of an algorithm's runs, every task's together
    P(X > Y)       = mean over tasks of P(a run of X scores above a run of Y), ties counting half
                     (the Mann-Whitney statistic over the pairs of runs)

with 95% intervals by the stratified bootstrap: each task's runs resampled on their own.
rliable computes these with `arch`, whose releases that rliable accepts do not import beside
pandas 3 (what `datasets` brings), so they are computed here with scipy: `trim_mean` and
`bootstrap` (which resamples each sample it is given on its own: one a task, or one a task and
algorithm, is the stratified bootstrap). tests/test_across_tasks.py checks both against direct
computations.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from harness.records import load_runs, suite_folders, write_atomic, write_parquet

RESAMPLES = 2000


def run_scores(directory: Path) -> pl.DataFrame:
    """One row a finished run of every suite under `directory`: suite, algorithm, seed, score."""
    rows = []
    for suite_dir in suite_folders(directory):
        for info, _, _ in load_runs(suite_dir):
            before, after = info["accuracy_before"], info["accuracy_after"]
            rows.append(
                {
                    "suite": info["suite"],
                    "algorithm": info["algorithm"],
                    "seed": info["seed"],
                    "score": (after - before) / (1 - before) if before < 1 else 0.0,
                }
            )
    return pl.DataFrame(rows)


def iqm(*samples: np.ndarray) -> float:
    """The interquartile mean of every sample's values together."""
    return float(stats.trim_mean(np.concatenate(samples), 0.25))


def probability_of_improvement(*samples: np.ndarray) -> float:
    """P(X > Y) from samples (x_task1, y_task1, x_task2, y_task2, ...): per task the share of
    pairs of runs where X's scores higher, ties half, averaged over tasks."""
    per_task = []
    for x, y in zip(samples[::2], samples[1::2]):
        greater = (x[:, None] > y[None, :]).mean()
        ties = (x[:, None] == y[None, :]).mean()
        per_task.append(greater + 0.5 * ties)
    return float(np.mean(per_task))


def interval(statistic, samples: list[np.ndarray], seed: int = 0) -> tuple[float, float]:
    """The 95% percentile interval of `statistic` under the stratified bootstrap."""
    if any(len(s) < 2 for s in samples):
        return (float("nan"), float("nan"))
    result = stats.bootstrap(
        samples,
        statistic,
        vectorized=False,
        paired=False,
        n_resamples=RESAMPLES,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def summary(scores: pl.DataFrame, reference: str = "grpo") -> pl.DataFrame:
    """A row an algorithm: the tasks it ran, its runs, IQM [low, high], and P(it > `reference`)
    [low, high] over the tasks both ran."""
    by = {
        (r["algorithm"], r["suite"]): np.array(r["score"])
        for r in scores.group_by(["algorithm", "suite"]).agg("score").iter_rows(named=True)
    }
    rows = []
    for algorithm in scores["algorithm"].unique(maintain_order=True):
        suites = sorted(s for a, s in by if a == algorithm)
        mine = [by[algorithm, s] for s in suites]
        low, high = interval(iqm, mine)
        row = {
            "algorithm": algorithm,
            "tasks": len(suites),
            "runs": int(sum(len(m) for m in mine)),
            "iqm": iqm(*mine),
            "iqm_low": low,
            "iqm_high": high,
            f"p_improvement_over_{reference}": None,
            "p_low": None,
            "p_high": None,
        }
        shared = [s for s in suites if (reference, s) in by]
        if algorithm != reference and shared:
            pairs = [x for s in shared for x in (by[algorithm, s], by[reference, s])]
            row[f"p_improvement_over_{reference}"] = probability_of_improvement(*pairs)
            row["p_low"], row["p_high"] = interval(probability_of_improvement, pairs)
        rows.append(row)
    return pl.DataFrame(rows).sort("iqm", descending=True)


def publish(directory: Path, reference: str = "grpo") -> pl.DataFrame:
    """Write `directory`/across_tasks.{md,parquet,png} from every suite under it."""
    from harness.plots import across_tasks_plot

    scores = run_scores(directory)
    table = summary(scores, reference)
    write_parquet(table, directory / "across_tasks.parquet")
    suites = sorted(scores["suite"].unique())
    lines = [
        "### Across tasks: " + ", ".join(suites),
        "",
        "Score of a run: (held-out accuracy after - before) / (1 - before). IQM and P(improvement) over "
        f"{reference} with 95% stratified-bootstrap intervals (harness/across_tasks.py).",
        "",
        f"| algorithm | tasks | runs | IQM [95% CI] | P(improvement over {reference}) [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for r in table.iter_rows(named=True):
        p = r[f"p_improvement_over_{reference}"]
        shown = "–" if p is None else f"{p:.2f} [{r['p_low']:.2f}, {r['p_high']:.2f}]"
        lines.append(
            f"| {r['algorithm']} | {r['tasks']} | {r['runs']} | {r['iqm']:.3f} [{r['iqm_low']:.3f}, {r['iqm_high']:.3f}] "
            f"| {shown} |"
        )
    write_atomic(directory / "across_tasks.md", lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    across_tasks_plot(table, reference, directory / "across_tasks.png")
    return table
