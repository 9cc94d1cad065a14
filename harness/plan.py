"""Which runs of a benchmark, in what order: a run is `<suite>/<algorithm>-seed<k>`, and a
selection of them (`RunFilter`) is what one process, or one job of an array, runs. Light on
purpose: `--list` answers from this and the benchmark file alone."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.config import Benchmark, Suite


def run_name(algorithm: str, seed: int) -> str:
    """A run's folder in its suite's folder, and its name in the suite's records."""
    return f"{algorithm}-seed{seed}"


@dataclass
class PlannedRun:
    suite: Suite
    algorithm: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.suite.name}/{run_name(self.algorithm, self.seed)}"


@dataclass
class RunFilter:
    """Which runs of a benchmark to run: each list empty means all; a run must match every
    non-empty one. `runs` holds ids as `python -m harness run CONFIG --list` prints them."""

    suites: list[str] = field(default_factory=list)
    algorithms: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


def plan(benchmark: Benchmark, only: RunFilter | None = None) -> list[PlannedRun]:
    """Every run of the benchmark in the order they run (suite, then seed, then algorithm), less
    those `only` leaves out. A filter value that matches nothing in the file is a `ValueError`
    naming the option, as is a selection that leaves no run."""
    only = only or RunFilter()
    every = [PlannedRun(s, a, seed) for s in benchmark.suites for seed in s.seeds for a in s.algorithms]
    for option, wanted, present in (
        ("--suite", only.suites, {r.suite.name for r in every}),
        ("--algorithm", only.algorithms, {r.algorithm for r in every}),
        ("--seed", only.seeds, {r.seed for r in every}),
        ("--run", only.runs, {r.id for r in every}),
    ):
        unknown = [str(w) for w in wanted if w not in present]
        if unknown:
            raise ValueError(
                f"{option}: {', '.join(unknown)} not in this benchmark (it has: {', '.join(sorted(map(str, present)))})"
            )
    chosen = [
        r
        for r in every
        if (not only.suites or r.suite.name in only.suites)
        and (not only.algorithms or r.algorithm in only.algorithms)
        and (not only.seeds or r.seed in only.seeds)
        and (not only.runs or r.id in only.runs)
    ]
    if not chosen:
        raise ValueError("--suite/--algorithm/--seed/--run: no run of this benchmark matches all of them")
    return chosen


SMOKE_STEPS, SMOKE_HELD_OUT, SMOKE_WARM_START = 3, 16, 20


def smoke(benchmark: Benchmark) -> Benchmark:
    """The benchmark cut to a check of itself end to end: each suite for SMOKE_STEPS steps, its
    evaluations on the first SMOKE_HELD_OUT held-out problems, on its own warm start where that
    is cached and on a SMOKE_WARM_START-step one otherwise. It measures nothing: a base that short
    solves almost nothing, and most of its updates carry no gradient."""
    from harness.start import StartingWeights

    suites = []
    for suite in benchmark.suites:
        settings = dict(suite.settings)
        steps = min(SMOKE_STEPS, settings["schedule"].steps)
        settings["schedule"] = dataclasses.replace(settings["schedule"], steps=steps)
        limit = min(SMOKE_HELD_OUT, settings["evaluation"].limit or SMOKE_HELD_OUT)
        settings["evaluation"] = dataclasses.replace(settings["evaluation"], every=steps, limit=limit)
        model = suite.model
        start = StartingWeights.of(suite)
        cached = start.key is not None and start.built(benchmark.cache_dir)
        if model.warm_start is not None and not cached:
            short = dataclasses.replace(model.warm_start, steps=min(SMOKE_WARM_START, model.warm_start.steps))
            model = dataclasses.replace(model, warm_start=short)
        suites.append(dataclasses.replace(suite, settings=settings, model=model))
    # measuring steps to estimate a 3-step check would cost as much as the check
    return dataclasses.replace(
        benchmark, suites=suites, estimate=dataclasses.replace(benchmark.estimate, enabled=False)
    )
