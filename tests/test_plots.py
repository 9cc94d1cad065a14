"""The plots' numbers (harness/plots.py), against hand-worked records."""

import polars as pl
import pytest

from harness.plots import paired_differences


def test_the_paired_difference_counts_passes_not_partial_scores():
    """Four held-out problems scored by the fraction of their tests passed. The algorithm scores
    1, 0.5, 0.9, 0; the reference 0.5, 0, 1, 0: passes (a full score) 1, 0, 0, 0 against 0, 0,
    1, 0, so the differences are +1, 0, -1, 0, mean 0, as the leaderboard's paired test counts
    them (raw scores would give +0.5, +0.5, -0.1, 0, mean 0.225)."""
    made = []
    for algorithm, rewards in (("grpo", [0.5, 0.0, 1.0, 0.0]), ("hp_rlvr", [1.0, 0.5, 0.9, 0.0])):
        info = {"algorithm": algorithm, "seed": 0, "reference": "grpo"}
        made.append((info, pl.DataFrame(), pl.DataFrame({"step": [3], "rewards": [rewards]})))
    ((step, mean, half),) = paired_differences(made, "hp_rlvr", "grpo")
    # sample sd of (1, 0, -1, 0): sqrt(2 / 3)
    assert step == 3 and mean == 0.0 and half == pytest.approx(1.96 * (2 / 3) ** 0.5 / 2)
