"""How often each test calls a difference where there is none, and how often it finds one that is
there, in simulated worlds whose truth is known: the table in docs/results.md
(#verdicts-that-count-the-training).

    python scripts/verdict_calibration.py [--reps 1000] [--out docs/verdict-calibration.md]

A world is a held-out set and runs that solve its problems. Problem i has a difficulty z_i; a run
solves it when z_i + b + (the algorithm's own view of that problem, fixed across its seeds) + (the
run's trajectory, one draw per seed) + (the run's noise on that problem) > 0, all normal. The
spreads are chosen so that accuracies, how many problems two runs disagree on, and the spread
between seeds fall where the zoo's three-seed studies put them (printed beside each world); the
offset b is solved so that two algorithms (or an algorithm and its start, one fixed run) have
exactly the same expected accuracy over problems and trajectories, or differ by exactly `delta`.

Tests, each at p < 0.05 two-sided:
- pooled:  exact McNemar over all (seed, problem) pairs: the leaderboard's test before issue 63;
- per-seed: a t-test of the seeds' differences (S - 1 df): counts seeds, not which problems;
- two-way: `harness.verdicts.compare` (seeds and problems): the leaderboard's test now.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.verdicts import compare, paired_p  # noqa: E402


@dataclass(frozen=True)
class World:
    name: str
    items: int
    accuracy: float
    noise: float  # a run's own noise on each problem (latent SD)
    view: float  # an algorithm's own view of each problem, shared by its seeds (latent SD)
    trajectory: float  # a seed's shift of the whole run (latent SD)


WORLDS = (
    World("math, zoo-like", 500, 0.38, 0.45, 0.25, 0.035),
    World("math, default-like", 2000, 0.48, 0.45, 0.25, 0.018),
    World("code, default-like", 2500, 0.40, 0.25, 0.15, 0.018),
    World("code, seeds alike", 2500, 0.40, 0.25, 0.15, 0.0),
    World("ALFWorld, zoo-like", 400, 0.26, 0.55, 0.25, 0.04),
    World("math, twice the studies' spread", 2000, 0.48, 0.45, 0.25, 0.036),
)
"""Seeds that spread about as the studies' do beside their problems' noise (`SEED_RATIO`: about 2;
the trajectory spreads solved here to give that), one world whose seeds differ by no more than
their problems' noise, and one whose seeds spread twice as widely (four times the variance)."""


def offset(accuracy: float, *spreads: float) -> float:
    """The b at which P(z + b + noise > 0) = accuracy, z ~ N(0, 1) and the noise N(0, sum of squares)."""
    return float(stats.norm.ppf(accuracy)) * math.sqrt(1 + sum(s * s for s in spreads))


def runs(world: World, z: np.ndarray, seeds: int, delta: float, rng: np.random.Generator) -> np.ndarray:
    """One algorithm's seeds: solved[seed, problem], expected accuracy world.accuracy + delta."""
    spreads = (world.noise, world.view, world.trajectory)
    b = offset(world.accuracy + delta, *spreads)
    view = rng.normal(0, world.view, z.size)
    shift = rng.normal(0, world.trajectory, (seeds, 1))
    return (z + b + view + shift + rng.normal(0, world.noise, (seeds, z.size)) > 0).astype(float)


def start(world: World, z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The starting weights' one evaluation: a fixed model, so no trajectory of its own."""
    b = offset(world.accuracy, world.noise, world.view)
    return (z + b + rng.normal(0, world.view, z.size) + rng.normal(0, world.noise, z.size) > 0).astype(float)


def draw(world: World, seeds: int, delta: float, against: str, rng: np.random.Generator):
    """Mine and theirs, seeds x problems; `against` 'reference' (another algorithm's seeds) or
    'start' (the start's one evaluation, repeated)."""
    z = rng.normal(0, 1, world.items)
    mine = runs(world, z, seeds, delta, rng)
    theirs = runs(world, z, seeds, 0.0, rng) if against == "reference" else np.tile(start(world, z, rng), (seeds, 1))
    return mine, theirs


def per_seed_p(mine: np.ndarray, theirs: np.ndarray) -> float:
    d = (mine - theirs).mean(1)
    if len(d) < 2 or d.std(ddof=1) == 0:
        return 1.0 if d.mean() == 0 else 0.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


def calls(mine: np.ndarray, theirs: np.ndarray, sign: int) -> dict[str, bool]:
    """Whether each test called a difference (sign 0: either way; else: the right way)."""
    c = compare(mine.tolist(), theirs.tolist())
    diff = float((mine - theirs).mean())
    right = (lambda d: d != 0) if sign == 0 else (lambda d: np.sign(d) == sign)
    return {
        "pooled": paired_p(mine.tolist(), theirs.tolist()) < 0.05 and right(diff),
        "per-seed": per_seed_p(mine, theirs) < 0.05 and right(diff),
        "two-way": c.beyond_noise and right(c.diff),
        "detectable": c.detectable,
    }


def rates(world: World, seeds: int, delta: float, against: str, reps: int, seed: int = 0) -> dict[str, float]:
    """Share of `reps` worlds in which each test called a difference (at delta = 0: any; else the
    right one), the median detectable difference the new test reported, and the worlds' own
    between-seed SD of accuracy and share of problems two seeds disagree on."""
    rng = np.random.default_rng(seed)
    tallies = {"pooled": 0, "per-seed": 0, "two-way": 0}
    detectable, spread, disagree = [], [], []
    for _ in range(reps):
        mine, theirs = draw(world, seeds, delta, against, rng)
        result = calls(mine, theirs, 0 if delta == 0 else int(np.sign(delta)))
        for test in tallies:
            tallies[test] += result[test]
        detectable.append(result["detectable"])
        if seeds > 1:
            spread.append(mine.mean(1).std(ddof=1))
            disagree.append(float((mine[0] != mine[1]).mean()))
    return {
        **{t: n / reps for t, n in tallies.items()},
        "detectable": float(np.median(detectable)),
        "seed_sd": float(np.sqrt(np.mean(np.square(spread)))) if spread else float("nan"),
        "disagree": float(np.mean(disagree)) if disagree else float("nan"),
    }


def table(reps: int, seed_counts=(1, 2, 3, 5)) -> str:
    lines = [
        "| world | against | seeds | seed SD | two seeds disagree | false calls: pooled | per-seed | two-way "
        "| detectable (two-way) | power at it: two-way | at twice it |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for world in WORLDS:
        for against in ("reference", "start"):
            for seeds in seed_counts:
                null = rates(world, seeds, 0.0, against, reps)
                delta = null["detectable"]
                at = rates(world, seeds, delta, against, reps, seed=1)
                more = rates(world, seeds, 2 * delta, against, reps, seed=2)
                lines.append(
                    f"| {world.name} (N={world.items}, acc {world.accuracy:.2f}) | {against} | {seeds} "
                    f"| {null['seed_sd']:.3f} | {null['disagree']:.3f} | {null['pooled']:.3f} "
                    f"| {null['per-seed'] if seeds > 1 else float('nan'):.3f} | {null['two-way']:.3f} "
                    f"| {delta:.3f} | {at['two-way']:.2f} | {more['two-way']:.2f} |"
                )
    return "\n".join(lines).replace("nan", "–") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000, help="simulated worlds per cell")
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    text = (
        f"`python scripts/verdict_calibration.py --reps {args.reps}`: false calls at no true difference, "
        f"and the new test's power, {args.reps} worlds a cell (simulation error about "
        f"{math.sqrt(0.05 * 0.95 / args.reps):.3f} on a 5% rate)\n\n" + table(args.reps)
    )
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
