"""How far a benchmark is: `(i/n)` for each run, and the time the rest should take."""

from __future__ import annotations

from pathlib import Path

from harness.plan import PlannedRun
from harness.progress import fmt_duration
from harness.start import StartingWeights


class Progress:
    """`(i/n)` for each run and, once a run has finished here, the time the rest should take: the
    mean run so far for each run left, and the mean warm start so far for each set of starting
    weights they still need built."""

    def __init__(self, runs: list[PlannedRun], cache_dir: Path):
        self.runs, self.cache_dir, self.index = runs, cache_dir, 0
        self.run_s: list[float] = []  # each run's time, less building its starting weights
        self.build_s: list[float] = []

    def needs_weights(self, planned: PlannedRun) -> str | None:
        """The cache key of the starting weights `planned` will build, or None when they exist."""
        start = StartingWeights.of(planned.suite)
        return None if start.built(self.cache_dir) else start.key

    def label(self) -> str:
        text = f"({self.index + 1}/{len(self.runs)})"
        if self.run_s:
            left = self.runs[self.index :]
            builds = {key for r in left if (key := self.needs_weights(r))}
            seconds = len(left) * mean(self.run_s) + (len(builds) * mean(self.build_s) if self.build_s else 0.0)
            text += f", about {fmt_duration(seconds)} left"
        return text

    def done(self, seconds: float | None, build_s: float) -> None:
        """One run over: it took `seconds` (None: not run here), `build_s` of them building its
        starting weights."""
        self.index += 1
        if seconds is not None:
            self.run_s.append(seconds - build_s)
            if build_s:
                self.build_s.append(build_s)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)
