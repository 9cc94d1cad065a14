"""The cross-task summary against direct computations: the interquartile mean, the probability
of improvement and the stratified bootstrap's resampling within each task."""

import json

import numpy as np
import polars as pl
import pytest

from harness import across_tasks
from harness.__main__ import main


def test_iqm_is_the_mean_of_the_middle_half_of_every_tasks_runs_together():
    # 8 values: the lowest two and the highest two are cut
    assert across_tasks.iqm(np.array([5.0, -1.0, 2.0, 3.0]), np.array([100.0, 0.0, 4.0, 1.0])) == pytest.approx(
        (1.0 + 2.0 + 3.0 + 4.0) / 4
    )
    # a skewed sample, where the middle half's mean (3) is not the median (1.5)
    assert across_tasks.iqm(np.array([0.0, 0.0, 0.0, 1.0]), np.array([2.0, 9.0, 10.0, 100.0])) == pytest.approx(3.0)


def test_probability_of_improvement_counts_pairs_of_runs_per_task_ties_half():
    # task 1: x = [1, 2], y = [1, 0] -> pairs (1>1 tie, 1>0, 2>1, 2>0): (0.5 + 3) / 4
    # task 2: x = [0], y = [1, 2] -> 0
    p = across_tasks.probability_of_improvement(
        np.array([1.0, 2.0]), np.array([1.0, 0.0]), np.array([0.0]), np.array([1.0, 2.0])
    )
    assert p == pytest.approx(((0.5 + 3) / 4 + 0.0) / 2)


def test_the_bootstrap_resamples_within_each_task():
    """Two tasks whose scores never mix: every resample holds two values of each, so the IQM of
    (0, 0, 10, 10) is 5 whatever is drawn within a task, and the interval is that one point."""
    low, high = across_tasks.interval(across_tasks.iqm, [np.array([0.0, 0.0]), np.array([10.0, 10.0])])
    assert low == pytest.approx(5.0) and high == pytest.approx(5.0)
    # an interval that is not a point once the values within a task differ
    low, high = across_tasks.interval(across_tasks.iqm, [np.array([0.0, 1.0, 2.0]), np.array([10.0, 11.0, 12.0])])
    assert low < across_tasks.iqm(np.array([0.0, 1.0, 2.0]), np.array([10.0, 11.0, 12.0])) < high


def test_the_summarys_intervals_resample_within_each_task():
    """The summary's own intervals, stratified: with scores that never vary within a task, every
    resample gives the same IQM (0, 0, 10, 10 -> 5) and the same P(improvement) (task a: 1, task
    b: 0 -> 0.5), so both intervals are those points. Pooled over tasks, they would not be."""
    rows = [("x", "a", 0.0), ("x", "a", 0.0), ("x", "b", 10.0), ("x", "b", 10.0)]
    rows += [("grpo", "a", -1.0), ("grpo", "a", -1.0), ("grpo", "b", 20.0), ("grpo", "b", 20.0)]
    scores = pl.DataFrame(rows, schema=["algorithm", "suite", "score"], orient="row")
    x = across_tasks.summary(scores).filter(pl.col("algorithm") == "x").row(0, named=True)
    assert x["iqm"] == x["iqm_low"] == x["iqm_high"] == pytest.approx(5.0)
    assert x["p_improvement_over_grpo"] == x["p_low"] == x["p_high"] == pytest.approx(0.5)


def published(folder, suite, scores):
    """A published suite folder with one run a (algorithm, seed, before, after)."""
    folder = folder / suite
    folder.mkdir(parents=True)
    runs = {
        f"{a}-seed{s}": {"suite": suite, "algorithm": a, "seed": s, "accuracy_before": b, "accuracy_after": e}
        for a, s, b, e in scores
    }
    (folder / "runs.json").write_text(json.dumps(runs))
    for name, step in (("steps", 1), ("evaluations", 0)):  # one step a run, and its start's evaluation
        pl.DataFrame({"step": [step] * len(runs), "run": list(runs)}).write_parquet(folder / f"{name}.parquet")


def test_the_summary_reads_published_suites_and_writes_its_table(tmp_path, capsys):
    published(tmp_path, "a", [("grpo", 0, 0.5, 0.6), ("grpo", 1, 0.5, 0.5), ("x", 0, 0.5, 0.75), ("x", 1, 0.5, 0.7)])
    published(tmp_path, "b", [("grpo", 0, 0.9, 0.91), ("grpo", 1, 0.9, 0.9), ("x", 0, 0.9, 0.8), ("x", 1, 0.9, 0.95)])
    scores = across_tasks.run_scores(tmp_path).sort(["suite", "algorithm", "seed"])
    assert scores["score"].to_list() == pytest.approx([0.2, 0.0, 0.5, 0.4, 0.1, 0.0, -1.0, 0.5])
    assert main(["across", str(tmp_path)]) == 0
    table = pl.read_parquet(tmp_path / "across_tasks.parquet")
    x = table.filter(pl.col("algorithm") == "x").row(0, named=True)
    assert x["iqm"] == pytest.approx((0.4 + 0.5) / 2)  # of -1, 0.4, 0.5, 0.5
    # task a: x beats grpo in all 4 pairs; task b: (-1 vs .1, 0) loses, (.5 vs .1, 0) wins -> 2/4
    assert x["p_improvement_over_grpo"] == pytest.approx((1.0 + 0.5) / 2)
    assert "| x | 2 | 4 |" in (tmp_path / "across_tasks.md").read_text()
    assert (tmp_path / "across_tasks.png").stat().st_size > 0
