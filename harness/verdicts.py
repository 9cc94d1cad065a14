"""Whether one set of runs solved more held-out problems than another beyond noise: an algorithm
against the suite's reference on the same seeds, or against its own start.

The unit is the training run. A seed is one training trajectory, and so is another machine's
rounding of it; the problems are one draw of the held-out set. With two or more seeds the test
counts both: the solved-minus-solved matrix X[seed, problem] is a two-way crossed design, and the
variance of its mean is that of seeds plus that of problems (ANOVA mean squares; Cameron, Gelbach
and Miller 2011's two-way clustering), with Satterthwaite's degrees of freedom. With one seed no
spread between trajectories can be measured: the test is McNemar's on the problems, and it says
so (`covers`). docs/results.md#verdicts-that-count-the-training justifies the choice and shows
its calibration (scripts/verdict_calibration.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from rollout.batch import solved

SEED_RATIO = 2.1
"""How much seeds of one comparison spread beyond their problems' noise, as the seeds' variance
component over the residual problem-by-seed variance (N tau^2 / ms_e): the mean over the
multi-seed studies in results/studies (`python scripts/seed_spread.py`), within one standard error
(tests/test_verdicts.py). A ratio, not a spread in points: seeds spread less where problems are
near certain than where they are not (docs/results.md). The prior of `two_way` and the planning
figure of `seeds_needed` and `consistent`."""

PRIOR_DF = 2
"""How many degrees of freedom SEED_RATIO counts for in `two_way`: as much as one three-seed
study's own spread."""

SHARED_SHARE = 0.4
"""Of one seed's problem-by-problem noise, the share that repeats on every seed, so that more seeds
do not average it away: the studies' mean (`python scripts/seed_spread.py`). Planning only."""

MAX_SEEDS = 20
"""`seeds_needed` looks no further than this."""

ONE_SEED = "problems (1 seed)"
SEEDS = "seeds and problems"
"""What a comparison's noise counts (`Comparison.covers`)."""


def solved_matrix(rewards: list[list[float]]) -> np.ndarray:
    """Rewards, a list per seed of one per problem, as 0/1 solved (`rollout.batch.solved`)."""
    return np.array([[float(solved(r)) for r in seed] for seed in rewards], dtype=float)


def paired_p(mine: list[list[float]], theirs: list[list[float]]) -> float | None:
    """Exact McNemar test of two runs on the same held-out problems, pooled over seeds: the
    two-sided p of the problems only one of them solved splitting as they did by chance. It counts
    which problems were drawn, not how training varies: the test of one seed."""
    pairs = [(solved(a), solved(b)) for xs, ys in zip(mine, theirs) for a, b in zip(xs, ys)]
    only_mine, only_theirs = sum(a and not b for a, b in pairs), sum(b and not a for a, b in pairs)
    if only_mine + only_theirs == 0:
        return 1.0
    return float(stats.binomtest(only_mine, only_mine + only_theirs, 0.5).pvalue)


def detectable_difference(mine: list[list[float]], theirs: list[list[float]]) -> float | None:
    """The smallest gain that `paired_p` would call beyond noise (p < 0.05), given the noise these
    runs show: of N problems, D were solved by only one of the two; with those split evenly and m
    more solved by the better one only, the least m with an exact two-sided p below 0.05, as a
    share m / N (6 / N when D = 0). None without problems."""
    items = sum(len(xs) for xs in mine)
    if not items:
        return None
    discordant = sum(solved(a) != solved(b) for xs, ys in zip(mine, theirs) for a, b in zip(xs, ys))
    extra = 0
    while (
        not discordant + extra or stats.binomtest(math.ceil(discordant / 2) + extra, discordant + extra).pvalue >= 0.05
    ):
        extra += 1
    return extra / items


def paired_higher(pairs: list[tuple[list[float], list[float]]]) -> bool:
    """Whether the first of each pair solved more of the problems than the second."""
    return sum(sum(m) - sum(b) for m, b in pairs) > 0


def mean_squares(x: np.ndarray) -> tuple[float, float, float]:
    """The two-way ANOVA mean squares of X[seed, problem]: seeds' (S - 1 df), problems' (N - 1 df)
    and the residual's ((S - 1)(N - 1) df)."""
    seeds, items = x.shape
    mean, by_seed, by_item = float(x.mean()), x.mean(1), x.mean(0)
    ms_s = items * float(((by_seed - mean) ** 2).sum()) / (seeds - 1)
    ms_p = seeds * float(((by_item - mean) ** 2).sum()) / (items - 1)
    residual = x - by_seed[:, None] - by_item[None, :] + mean
    return ms_s, ms_p, float((residual**2).sum()) / ((seeds - 1) * (items - 1))


def two_way(x: np.ndarray) -> tuple[float, float, float]:
    """The mean of X[seed, problem], its variance counting seeds and problems as random, and that
    variance's degrees of freedom (Satterthwaite's, at least 1).

    From the mean squares of seeds (ms_s, S - 1 df) and of problems (ms_p, N - 1 df), var =
    (seeds' part + ms_p) / (S N): the cross term is left in, which counts a seed-problem's own noise
    twice (conservative, and never negative). Two or three seeds say little of their own spread,
    and a spread that looks small by chance makes the test too sure; so the seeds' part is their
    ms_s moderated towards the spread the studies show (Smyth 2004): pooled with
    (1 + SEED_RATIO) ms_e worth PRIOR_DF degrees of freedom, or ms_s itself where that is larger
    (seeds that visibly spread more than the studies' are not talked down)."""
    seeds, items = x.shape
    mean = float(x.mean())
    ms_s, ms_p, ms_e = mean_squares(x)
    prior = (1 + SEED_RATIO) * ms_e
    moderated = (PRIOR_DF * prior + (seeds - 1) * ms_s) / (PRIOR_DF + seeds - 1)
    seed_part, seed_df = (ms_s, seeds - 1) if ms_s > moderated else (moderated, PRIOR_DF + seeds - 1)
    total = seed_part + ms_p
    if total <= 0:  # every seed changed every problem alike
        return mean, 0.0, math.inf
    df = total**2 / (seed_part**2 / seed_df + ms_p**2 / (items - 1))
    return mean, total / (seeds * items), max(df, 1.0)


@dataclass(frozen=True)
class Comparison:
    """Mine against theirs on the same held-out problems, seed by seed."""

    diff: float
    """Mean over seeds of the share of problems mine solved minus theirs."""
    p: float
    """Two-sided p of a difference at least this large with none in truth."""
    ci95: list[float]
    """95% interval of `diff`."""
    detectable: float
    """The least difference this test would call beyond noise at the noise these runs show: a true
    difference of this size is called about half the time, and one of twice it mostly (in the
    calibration worlds at least 85% of the time from three seeds, 63-97% with two)
    (scripts/verdict_calibration.py)."""
    covers: str
    """What the noise counts: `SEEDS`, or `ONE_SEED` where the verdict is about this seed only."""
    seeds_needed: int | None = None
    """With one seed: the least seeds whose test would call `diff` beyond noise, were the seeds to
    spread as the studies' do (`SEED_RATIO`) and the problems as this seed's (None: more than
    `MAX_SEEDS`)."""

    @property
    def beyond_noise(self) -> bool:
        return self.p < 0.05

    def verdict(self) -> str:
        """'higher', 'lower' or 'within noise'; with one seed, '... (this seed)'."""
        word = "within noise" if not self.beyond_noise else "higher" if self.diff > 0 else "lower"
        return word if self.covers == SEEDS else f"{word} (this seed)"


def compare(mine: list[list[float]], theirs: list[list[float]]) -> Comparison | None:
    """Mine against theirs: a list of rewards per seed, the same problems in the same order in both
    (the seeds paired, or `theirs` one start repeated). None without problems."""
    x = solved_matrix(mine) - solved_matrix(theirs)
    seeds, items = x.shape if x.ndim == 2 else (0, 0)
    if not seeds or not items:
        return None
    if seeds == 1:
        diff, spread = float(x.mean()), float(x.std(ddof=1)) if items > 1 else 0.0
        half = float(stats.t.ppf(0.975, max(items - 1, 1))) * spread / math.sqrt(items)
        return Comparison(
            diff=diff,
            p=paired_p(mine, theirs),
            ci95=[diff - half, diff + half],
            detectable=detectable_difference(mine, theirs),
            covers=ONE_SEED,
            seeds_needed=seeds_needed(diff, spread**2 / items, items),
        )
    diff, variance, df = two_way(x)
    if variance == 0:
        return Comparison(diff=diff, p=float(diff == 0), ci95=[diff, diff], detectable=0.0, covers=SEEDS)
    p = float(2 * stats.t.sf(abs(diff) / math.sqrt(variance), df))
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(variance)
    return Comparison(diff=diff, p=p, ci95=[diff - half, diff + half], detectable=half, covers=SEEDS)


def planned_detectable(seeds: int, problems_variance: float, items: int) -> float:
    """The least difference `two_way`'s test of `seeds` seeds would call beyond noise, planned
    before they run from one seed's `problems_variance` (the variance of its mean difference):
    of it, SHARED_SHARE repeats on every seed and the rest is residual, which more seeds average
    (items - 1 df); the seeds' own part is SEED_RATIO times that residual (PRIOR_DF + seeds - 1 df)."""
    residual = problems_variance * (1 - SHARED_SHARE)
    seed_part = SEED_RATIO * residual / seeds
    problems_part = problems_variance * SHARED_SHARE + residual / seeds
    total = seed_part + problems_part
    if total <= 0:
        return 0.0
    df = total**2 / (seed_part**2 / (PRIOR_DF + seeds - 1) + problems_part**2 / max(items - 1, 1))
    return float(stats.t.ppf(0.975, df)) * math.sqrt(total)


def seeds_needed(diff: float, problems_variance: float, items: int) -> int | None:
    """The least seeds (2..MAX_SEEDS) whose planned test would call `diff` beyond noise."""
    return next(
        (n for n in range(2, MAX_SEEDS + 1) if abs(diff) > planned_detectable(n, problems_variance, items)), None
    )


def consistent(mine: list[list[float]], theirs: list[list[float]]) -> Comparison | None:
    """Two trainings of one config (a rerun and the published runs, seed by seed on the same
    problems): is their difference within what another trajectory makes it? With several seeds,
    `compare`'s test; with one, the problems' noise plus the seeds' part the studies show for it
    (SEED_RATIO times its residual share: a seed cannot measure its own), normal."""
    result = compare(mine, theirs)
    if result is None or result.covers == SEEDS:
        return result
    x = solved_matrix(mine)[0] - solved_matrix(theirs)[0]
    problems_variance = float(x.var(ddof=1)) / x.size if x.size > 1 else 0.0
    spread = math.sqrt(problems_variance * (1 + SEED_RATIO * (1 - SHARED_SHARE)))
    if spread == 0:
        return result
    half = 1.959963984540054 * spread
    return Comparison(
        diff=result.diff,
        p=float(2 * stats.norm.sf(abs(result.diff) / spread)),
        ci95=[result.diff - half, result.diff + half],
        detectable=half,
        covers=SEEDS,
    )
