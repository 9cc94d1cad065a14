"""Runs a benchmark: for each suite, task x algorithm x seed, one Lightning fit per run, then
the suite's leaderboard. A run is identified by `<suite>/<algorithm>-seed<k>`; a selection of
them (`RunFilter`) runs in this process, so that a job array can run one per job.

A run folder records the settings it ran with (`spec.json`: everything that determines its
records). A finished run with the same settings is skipped, an interrupted one resumes from its
last checkpoint, and a run whose settings changed is moved aside (`<suite>/.replaced/`) and run
again, saying which settings changed. Processes that run different runs into one results folder
at once are safe: the starting weights are built once (a file lock in the cache), a run is held
by one process at a time (a file lock in its folder), and publishing is serialized.

One run's rooms: harness/resume.py (skip, resume or run again), harness/fit.py (train it, with
harness/build.py for the module on its starting weights), harness/finished.py (what a finished
run can still give: loggers named later, its policy)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from harness.config import Benchmark, Suite
from harness.finished import finished_afterwards
from harness.fit import fit
from harness.leaderboard import compact, publish
from harness.locks import Lock
from harness.plan import PlannedRun, RunFilter, plan
from harness.quiet import quiet_libraries
from harness.records import resume_point, run_name
from harness.report import write as write_page
from harness.resume import prepare, run_spec
from harness.time_left import Progress
from rollout import distributed


def run_benchmark(benchmark: Benchmark, results: Path, only: RunFilter | None = None) -> None:
    """Plan the runs, run each suite's, then publish the leaderboards of everything under `results`."""
    quiet_libraries()
    runs = plan(benchmark, only)
    if distributed.rank() == 0:
        from harness.costs import announce
        from harness.estimate import estimate

        measured = estimate(benchmark, runs, results, benchmark.estimate) if benchmark.estimate.enabled else None
        for line in announce(benchmark, runs, measured):
            print(line, flush=True)
    progress = Progress(runs, benchmark.cache_dir)
    for suite in benchmark.suites:
        run_suite(suite, [r for r in runs if r.suite is suite], results / suite.name, benchmark.cache_dir, progress)
    if distributed.rank() == 0 and any(results.glob("*/*/run.json")):
        board = publish(results)
        page = write_page(results)
        print(compact(board))  # what the run found, as lm-eval ends with its table
        print(f"wrote {results / 'leaderboard.md'} and {page}")


def run_suite(suite: Suite, mine: list[PlannedRun], suite_dir: Path, cache_dir: Path, progress: Progress) -> None:
    """The suite's runs of this process, one after another, then the suite's leaderboard."""
    if not mine:
        return
    reason = suite.task.resolve().unavailable()
    if reason:
        print(f"[{suite.name}] skipped: {suite.task.class_path} {reason}")
        for _ in mine:
            progress.done(None, 0.0)
        return
    for planned in mine:
        builds = progress.needs_weights(planned)
        started = time.perf_counter()
        position = progress.label()
        preparation_s = run_one(suite, planned.algorithm, planned.seed, suite_dir, cache_dir, position)
        ran_s = None if preparation_s is None else time.perf_counter() - started
        progress.done(ran_s, preparation_s if builds and preparation_s is not None else 0.0)
    if distributed.rank() == 0 and any(suite_dir.glob("*/run.json")):
        publish(suite_dir)


def run_one(
    suite: Suite, algorithm: str, seed: int, suite_dir: Path, cache_dir: Path, position: str = ""
) -> float | None:
    """Run (or resume) one run into `suite_dir`. Returns the seconds spent preparing it (its
    starting weights built or loaded), or None when it was not run here: finished earlier with
    these settings, or held by another process."""
    run_dir = suite_dir / run_name(algorithm, seed)

    def say(text: str) -> None:
        if distributed.rank() == 0:
            print(f"[{suite.name}] {run_dir.name} {position}: {text}".replace(" :", ":"), flush=True)

    held = None
    if distributed.rank() == 0:
        suite_dir.mkdir(parents=True, exist_ok=True)
        held = Lock(suite_dir / f".{run_dir.name}.lock")
        if held.acquire(wait=False):
            try:
                action = prepare(run_dir, run_spec(suite, algorithm, seed), say)
            except BaseException:
                held.release()
                raise
        else:
            held, action = None, "held"
    elif (run_dir / "run.json").exists():  # the other processes of a multi-device run follow the first's
        action = "skip"
    else:
        action = "resume" if resume_point(run_dir) is not None else "start"
    action = distributed.from_first(action)
    try:
        if action in ("skip", "held"):
            say(
                "finished earlier with these settings, skipped"
                if action == "skip"
                else "running in another process, skipped"
            )
            if action == "skip" and distributed.rank() == 0:
                finished_afterwards(suite, algorithm, seed, run_dir, cache_dir, say)
            return None
        try:
            return fit(suite, algorithm, seed, run_dir, cache_dir, action == "resume", say)
        except BaseException:
            if action == "start" and distributed.rank() == 0:
                left_nothing(run_dir)
            raise
    finally:
        if held is not None:
            held.release()


def left_nothing(run_dir: Path) -> None:
    """A run that failed before its first checkpoint leaves no folder behind: only what it wrote
    at its start (its settings, provenance, logs) was there, and nothing of it can be resumed."""
    if resume_point(run_dir) is None and not (run_dir / "metrics.parquet").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
