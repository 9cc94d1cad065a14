"""What a benchmark will cost and what it can detect, said before anything trains: each warm start
still to build (its estimate: harness/start.py), and each suite's held-out set and seeds with the
least gain its verdicts can call beyond noise."""

from __future__ import annotations

import inspect
import math

from harness.config import Benchmark, Suite
from harness.estimate import Estimates
from harness.plan import PlannedRun
from harness.start import StartingWeights
from harness.verdicts import planned_detectable

TOO_COARSE = 0.10
"""A held-out set and seeds that cannot call a gain below this (10 points) beyond noise, with a fifth of the
problems changing, are warned of."""


def least_detectable(items: int, discordant_share: float) -> float:
    """The least gain a paired test at p < 0.05 calls beyond one seed's noise on `items` shared
    problems when `discordant_share` of them change outcome both ways evenly: the leaderboard's
    `detectable_diff` rule for one seed (`harness.verdicts.detectable_difference`) before any run."""
    from scipy import stats

    discordant, extra = round(discordant_share * items), 0
    while (
        not discordant + extra or stats.binomtest(math.ceil(discordant / 2) + extra, discordant + extra).pvalue >= 0.05
    ):
        extra += 1
    return extra / items


def held_out_size(suite: Suite) -> int | None:
    """The held-out problems a run evaluates on, from the task's `eval_size` (given or its
    default), `eval_games`, or OpenEnv's `eval_episodes`, and `evaluation.limit`; None where the
    task does not declare one (data files)."""
    size = declared_size(suite)
    limit = suite.settings["evaluation"].limit
    if size is None:
        return None
    return min(size, limit) if limit is not None else size


def declared_size(suite: Suite) -> int | None:
    cls = suite.task.resolve()
    parameters = inspect.signature(cls.__init__).parameters
    episodes = suite.task.init_args.get("eval_episodes") if "eval_episodes" in parameters else None
    if isinstance(episodes, dict):  # OpenEnv's: a range of seeds, or a size of the task API's split
        seeds = episodes.get("seeds")
        size = seeds[1] - seeds[0] if isinstance(seeds, list) and len(seeds) == 2 else episodes.get("size")
        return size if isinstance(size, int) else None
    names = [n for n in ("eval_size", "eval_games") if n in parameters]
    if not names or suite.task.init_args.get("eval_file"):
        return None
    size = suite.task.init_args.get(names[0], parameters[names[0]].default)
    return size if isinstance(size, int) else None


def announce(benchmark: Benchmark, runs: list[PlannedRun], measured: Estimates | None = None) -> list[str]:
    """The lines said before a benchmark trains; `measured`: the times measured here first
    (`harness.estimate`), said in place of the cache's pace."""
    lines, seen = [], set()
    for suite in {id(r.suite): r.suite for r in runs}.values():
        start = StartingWeights.of(suite)
        if start.key not in seen and (cost := start.estimate(benchmark.cache_dir)):
            seen.add(start.key)
            if measured and start.key in measured.warm_starts:  # measured here: said instead
                ws = suite.model.warm_start
                cost = f"{ws.steps} steps of {ws.batch_size} examples, {measured.warm_starts[start.key].text()}"
            lines.append(f"[{suite.name}] warm start to build first: {cost}")
        lines += measured.lines.get(suite.name, []) if measured else []
        size = held_out_size(suite)
        if size is None:
            continue
        seeds = len({r.seed for r in runs if r.suite is suite})  # those selected to run
        line = f"[{suite.name}] held-out: {size} problems x {seeds} seed{'s' * (seeds > 1)}; "
        if seeds == 1:
            best, least = least_detectable(size, 0.0), least_detectable(size, 0.2)
            line += (
                f"the least gain a paired test can call beyond this seed's noise is {best:.1%} with no problem changing "
                f"the other way, {least:.1%} with a fifth of them changing; a verdict on the algorithm counts the "
                f"training's noise too and needs seeds: with 3, about {planned_detectable(3, 0.2 / size, size):.1%}"
            )
        else:
            least = planned_detectable(seeds, 0.2 / size, size)
            line += (
                "the least gain a verdict counting seeds and problems can call beyond noise, were the seeds to spread "
                f"as the studies' do, is about {least:.1%} with a fifth of the problems changing"
            )
        if least > TOO_COARSE:
            line = (
                f"warning: {line}: this suite cannot detect less than {TOO_COARSE:.0%}; raise the task's eval_size "
                "(or evaluation.limit) or the seeds"
            )
        lines.append(line)
    return lines + ([measured.summary()] if measured and measured.cost_s else [])
