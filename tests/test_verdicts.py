"""The verdicts' arithmetic against direct computations, and their calibration in simulated worlds
whose truth is known (scripts/verdict_calibration.py)."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from harness.verdicts import (
    MAX_SEEDS,
    ONE_SEED,
    PRIOR_DF,
    SEED_RATIO,
    SEEDS,
    SHARED_SHARE,
    compare,
    paired_p,
    seeds_needed,
    two_way,
)

ROOT = Path(__file__).resolve().parents[1]


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_two_way_variance_is_the_seeds_and_the_problems_mean_squares_worked_out_by_loops():
    rng = np.random.default_rng(3)
    x = (rng.random((3, 40)) < 0.3).astype(float) - (rng.random((3, 40)) < 0.25)
    S, N = x.shape
    grand = sum(sum(row) for row in x) / (S * N)
    seed_means = [sum(row) / N for row in x]
    item_means = [sum(x[s][i] for s in range(S)) / S for i in range(N)]
    ms_s = N * sum((m - grand) ** 2 for m in seed_means) / (S - 1)
    ms_p = S * sum((m - grand) ** 2 for m in item_means) / (N - 1)
    ms_e = sum((x[s][i] - seed_means[s] - item_means[i] + grand) ** 2 for s in range(S) for i in range(N)) / (
        (S - 1) * (N - 1)
    )
    moderated = (PRIOR_DF * (1 + SEED_RATIO) * ms_e + (S - 1) * ms_s) / (PRIOR_DF + S - 1)
    seed_part, seed_df = (ms_s, S - 1) if ms_s > moderated else (moderated, PRIOR_DF + S - 1)
    df = (seed_part + ms_p) ** 2 / (seed_part**2 / seed_df + ms_p**2 / (N - 1))
    mean, variance, got_df = two_way(x)
    assert mean == pytest.approx(grand)
    assert variance == pytest.approx((seed_part + ms_p) / (S * N))
    assert got_df == pytest.approx(df)


def test_seeds_that_spread_more_than_the_studies_keep_their_own_spread_and_its_few_df():
    # every problem alike within a seed; the seeds' means 0.0, 0.2, 0.4: no residual, so no prior
    x = np.repeat(np.array([[0.0], [0.2], [0.4]]), 50, axis=1)
    mean, variance, df = two_way(x)
    assert mean == pytest.approx(0.2)
    assert variance == pytest.approx(np.var([0.0, 0.2, 0.4], ddof=1) / 3)  # the seeds' own: t over seeds
    assert df == pytest.approx(2.0)


def test_one_seed_is_mcnemar_and_says_it_counts_the_problems_only():
    mine, theirs = [[1.0] * 9 + [0.0]], [[1.0] * 2 + [0.0] * 8]
    result = compare(mine, theirs)
    assert result.covers == ONE_SEED and result.p == paired_p(mine, theirs) == pytest.approx(2 / 2**7)
    assert result.verdict() == "higher (this seed)"
    assert compare(theirs, mine).verdict() == "lower (this seed)"
    assert compare(mine, mine).verdict() == "within noise (this seed)" and compare(mine, mine).seeds_needed is None


def test_several_seeds_give_a_t_test_on_the_two_way_variance():
    rng = np.random.default_rng(0)
    mine = (rng.random((3, 200)) < 0.6).astype(float)
    theirs = (rng.random((3, 200)) < 0.4).astype(float)
    result = compare(mine.tolist(), theirs.tolist())
    mean, variance, df = two_way(mine - theirs)
    half = stats.t.ppf(0.975, df) * math.sqrt(variance)
    assert result.covers == SEEDS and result.diff == pytest.approx(mean)
    assert result.p == pytest.approx(2 * stats.t.sf(mean / math.sqrt(variance), df))
    assert result.ci95 == pytest.approx([mean - half, mean + half]) and result.detectable == pytest.approx(half)
    assert result.verdict() == "higher"  # 20 points on 600 pairs: beyond any spread the studies saw


def test_seeds_needed_is_the_least_count_whose_test_calls_the_difference():
    problems_variance, items = 0.25 / 2000, 2000
    needed = seeds_needed(0.02, problems_variance, items)
    assert needed is not None and 2 <= needed <= MAX_SEEDS

    def called(count):  # the planned variance of `count` seeds, worked out here
        residual = problems_variance * (1 - SHARED_SHARE)
        seed_part = SEED_RATIO * residual / count
        problems_part = problems_variance * SHARED_SHARE + residual / count
        total = seed_part + problems_part
        df = total**2 / (seed_part**2 / (PRIOR_DF + count - 1) + problems_part**2 / (items - 1))
        return 0.02 > stats.t.ppf(0.975, df) * math.sqrt(total)

    assert called(needed) and (needed == 2 or not called(needed - 1))
    assert seeds_needed(0.5, problems_variance, items) == 2
    assert seeds_needed(0.004, problems_variance, items) is None  # within the noise that seeds do not average


def test_the_planning_figures_are_what_the_published_studies_show():
    """Each figure lies within one standard error of the studies' mean: a study more moves the mean
    by less than that, so a new study does not call for new figures (and every verdict again)."""
    studies = script("seed_spread")
    ratios, shares = studies.ratios(), studies.shares()
    assert SEED_RATIO == pytest.approx(ratios.mean(), abs=studies.standard_error(ratios))
    assert SHARED_SHARE == pytest.approx(shares.mean(), abs=studies.standard_error(shares))


@pytest.mark.parametrize("world", ["math, zoo-like", "code, default-like"])
def test_with_no_true_difference_the_new_test_calls_one_at_most_5_percent_and_the_pooled_more(world):
    calibration = script("verdict_calibration")
    chosen = next(w for w in calibration.WORLDS if w.name == world)
    reps = 300
    slack = 2.5 * math.sqrt(0.05 * 0.95 / reps)  # simulation error
    for against in ("reference", "start"):
        rates = calibration.rates(chosen, 3, 0.0, against, reps)
        assert rates["two-way"] <= 0.05 + slack, (against, rates)
        assert rates["pooled"] > rates["two-way"] + slack, (against, rates)


def test_a_true_difference_of_the_detectable_size_is_called_about_half_the_time_and_twice_it_mostly():
    calibration = script("verdict_calibration")
    world = next(w for w in calibration.WORLDS if w.name == "math, default-like")
    null = calibration.rates(world, 3, 0.0, "reference", 200)
    at = calibration.rates(world, 3, null["detectable"], "reference", 300, seed=1)
    twice = calibration.rates(world, 3, 2 * null["detectable"], "reference", 200, seed=2)
    assert 0.35 <= at["two-way"] <= 0.75, at
    assert twice["two-way"] >= 0.8, twice
