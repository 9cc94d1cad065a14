"""What a benchmark will take on this machine, measured before it trains: for each warm start
still to build, a few of its optimizer steps on the recipe's real examples at its batch size (after
one warm-up step); for each selected algorithm, its first training steps (sample, verify, credit,
update, records) and a batch of held-out problems, from the starting policy (the cached start, or
the untrained base when the start is still to build). Each is extrapolated to the schedule: the
first step as measured, the rest at the median of the others, plus the evaluations. The estimates
are written to RESULTS/<suite>/estimates.json, to compare with what the runs record afterwards
(`wall_clock_s` in run.json, `report.seconds` in the warm start's recipe.json)."""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness.settings import EstimateArgs

BAND = 3.0
"""The interval is the estimate x/÷ this, calibrated on a shared 2-core machine: estimates there fell
within x/÷1.3 of what happened while other jobs' load held (docs/third-day.md), and up to 6x off
when it changed between the measurement and the run."""

WINDOW_S = 1.0
"""Steps are timed until they span this long (bursts of other jobs average out) or the budget's
steps are spent, whichever comes first."""


@dataclass(frozen=True)
class Interval:
    """An estimate in seconds with its interval, and what it was measured from."""

    seconds: float
    low: float
    high: float
    basis: str

    def text(self) -> str:
        return f"about {fmt(self.seconds)} ({fmt(self.low)} - {fmt(self.high)}), {self.basis}"

    def record(self) -> list[float]:
        return [round(self.seconds, 3), round(self.low, 3), round(self.high, 3)]


def fmt(seconds: float) -> str:
    """`3 min 10 s`, `45 s`, `2.4 s`: to the second up to an hour, to the minute beyond."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min"


def extrapolate(step_s: Sequence[float], steps: int, band: float = BAND) -> tuple[float, float, float]:
    """(estimate, low, high) of `steps` steps at the mean of the timed `step_s` (a warm-up step
    before them untimed: a process's first step pays for what later ones reuse), x/÷ `band`."""
    seconds = steps * statistics.fmean(step_s)
    return seconds, seconds / band, seconds * band


def batch_cost(small: tuple[int, float], large: tuple[int, float], size: int) -> float:
    """Seconds for a batch of `size` problems on the line through two measured batches (problems,
    seconds): a batch costs a fixed part (decoding steps) and a part per problem."""
    (n1, s1), (n2, s2) = small, large
    per = max((s2 - s1) / (n2 - n1), 0.0) if n2 > n1 else s2 / n2
    return max(s2 + per * (size - n2), 0.0)


def evaluation_s(small: tuple[int, float], large: tuple[int, float], held_out: int, batch_size: int) -> float:
    """One held-out evaluation: `held_out` problems in batches of `batch_size`."""
    full, rest = divmod(held_out, batch_size)
    return full * batch_cost(small, large, batch_size) + (batch_cost(small, large, rest) if rest else 0.0)


def evaluations(steps: int, every: int) -> int:
    """The held-out evaluations a run makes after step 0: every `every` steps and at the last."""
    return steps // every + (steps % every != 0)


def affordable(measured: int, stands_for: int, budget: float) -> bool:
    return measured <= budget * stands_for


def most(least: int, stands_for: int, budget: float) -> int:
    """The steps to run at most (a warm-up and those timed): what the budget allows, at least `least`."""
    return max(least, int(budget * stands_for))


def step_times(timed: int):
    """A Lightning callback: seconds from its `start()` to the end of the first step, then between
    the ends of steps (a step's batch is made inside that span, as in the real fit); it stops the
    fit once `timed` steps after the first span WINDOW_S. Made here: this module is imported by
    the config's check, before torch loads."""
    import lightning as L

    class StepTimes(L.Callback):
        def start(self) -> None:
            self.seconds, self.last = [], time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            now = time.perf_counter()
            self.seconds.append(now - self.last)
            self.last = now
            if len(self.seconds) > timed and sum(self.seconds[1:]) >= WINDOW_S:
                trainer.should_stop = True

    return StepTimes()


def quiet_trainer(steps: int, callbacks: list, **kwargs):
    import lightning as L

    return L.Trainer(
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **kwargs,
    )


def measure_warm_start(model, task, args: EstimateArgs, scratch: Path) -> tuple[dict, Path]:
    """The warm start's pieces measured here ({"fixed_s": problems, vocabulary and loading,
    "step_s": each timed step}), and the untrained base it starts from (written under `scratch`)."""
    import torch

    from harness.models import Demonstrations, SupervisedWarmStart, load_policy
    from harness.start import teachings

    started = time.perf_counter()
    base = measure_base(model, task, scratch)
    policy, tokenizer = load_policy(base, model.dtype)
    fixed_s = time.perf_counter() - started
    ws = model.warm_start
    examples = Demonstrations(task, tokenizer, ws.batch_size, ws.seed, teachings(ws), ws.rl_only)
    timer = step_times(args.warm_start_steps)
    steps = most(1 + args.warm_start_steps, ws.steps, args.budget)
    trainer = quiet_trainer(steps, [timer], accelerator="cpu", devices=1)  # as the warm start runs
    policy.train()
    timer.start()
    trainer.fit(SupervisedWarmStart(policy, ws), torch.utils.data.DataLoader(examples, batch_size=None))
    return {"fixed_s": fixed_s, "step_s": timer.seconds[1:]}, base


def demonstrations(task, ws) -> bool:
    """Whether the warm start has examples to learn from (without, its build says why)."""
    from harness.models import demonstrated

    return any(p.demonstration for p in demonstrated(task, ws.rl_only))


def measure_base(model, task, scratch: Path) -> Path:
    """The weights a warm start starts from: the tiny preset built under `scratch` (its
    vocabulary trained as the build trains it), or `model.path`."""
    from harness.models import demonstrated, task_corpus
    from harness.tiny import save_tiny

    rl_only = model.warm_start.rl_only if model.warm_start else 0
    demonstrated(task, rl_only)  # the task's problems, as the build makes them first
    if model.preset != "tiny":
        return Path(model.path)
    corpus = task_corpus(task, rl_only) if model.tiny.vocabulary else None
    return save_tiny(model.tiny, scratch / "base", corpus=corpus)


def measure_training(
    suite, algorithm: str, seed: int, cache_dir: Path, weights: Path, args: EstimateArgs, stands_for: int
) -> dict:
    """An algorithm's steps from `weights` as the run makes them (the StepRecorder's checkpoints
    included), one warm-up and `train_steps` timed: {"prepare_s": the module's setup, "step_s":
    each timed step whole, "wall_s": its `wall_clock_s` share}; then two small batches of held-out
    problems, greedy as the evaluation decodes them ({"batches": [(problems, seconds)] x 2})."""
    from harness.build import build_module
    from harness.records import StepRecorder

    started = time.perf_counter()
    steps = most(1 + args.train_steps, stands_for, args.budget)
    module, _ = build_module(
        suite,
        algorithm,
        seed,
        cache_dir,
        weights=weights,
        schedule={"steps": steps},
        evaluation={"every": 10**9, "limit": 0},  # no held-out evaluation inside the steps
    )
    prepare_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as scratch:
        timer, recorder = step_times(args.train_steps), StepRecorder(Path(scratch), suite.trainer.checkpoint_every_s)
        trainer = quiet_trainer(
            steps,
            [recorder, timer],
            accelerator="auto",
            devices=1,
            precision=suite.trainer.precision,
            plugins=[recorder.checkpoint_io],
        )
        timer.start()
        trainer.fit(module, suite_steps(steps))
    walls = [r["wall_clock_s"] for r in module.records]
    evaluation = suite.settings["evaluation"]
    held_out = len(list(module.task.eval_problems())[: evaluation.limit])
    large = min(held_out, evaluation.batch_size, max(4, round(args.budget * held_out)))
    batches = []
    for count in sorted({max(1, large // 4), large}) if large else []:
        module.eval_args = dataclasses.replace(module.eval_args, limit=count)
        started = time.perf_counter()
        module.evaluate()
        batches.append((count, time.perf_counter() - started))
    return {
        "prepare_s": prepare_s,
        "step_s": timer.seconds[1:],
        "wall_s": [b - a for a, b in zip(walls, walls[1:])],
        "batches": batches,
        "held_out": held_out,
        "batch_size": evaluation.batch_size,
    }


def suite_steps(steps: int):
    import torch

    from harness.fit import StepIndices

    return torch.utils.data.DataLoader(StepIndices(steps), batch_size=None, generator=torch.Generator().manual_seed(0))


def run_interval(measured: dict, steps: int, every: int, with_start: bool, untrained: bool) -> dict:
    """A run's estimates from `measure_training`'s pieces: {"wall_clock_s": as run.json records it
    (the steps' own work), "run_s": the whole run (setup, every step, its evaluations)}."""
    count = evaluations(steps, every) + with_start
    batches = measured["batches"]
    one = evaluation_s(batches[0], batches[-1], measured["held_out"], measured["batch_size"]) if batches else 0.0
    wall = extrapolate(measured["wall_s"], steps)
    whole = extrapolate(measured["step_s"], steps)
    basis = f"measured from {len(measured['step_s'])} step{'s' * (len(measured['step_s']) > 1)}"
    if batches:
        basis += f" and {' + '.join(str(n) for n, _ in batches)} held-out problems"
    basis += " here" + (" (from the untrained base: its completions run long, so this leans high)" * untrained)
    extra = measured["prepare_s"] + count * one
    return {
        "wall_clock_s": Interval(*wall, basis),
        "run_s": Interval(*(x + extra for x in whole), basis),
        "evaluations": count,
    }


@dataclass
class Estimates:
    """What `estimate` measured: lines to say per suite, and the records written."""

    lines: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    warm_starts: dict[str, Interval] = dataclasses.field(default_factory=dict)
    runs: dict[str, dict] = dataclasses.field(default_factory=dict)
    cost_s: float = 0.0

    def total_s(self) -> float:
        return sum(w.seconds for w in self.warm_starts.values()) + sum(r["run_s"].seconds for r in self.runs.values())

    def summary(self) -> str:
        share = f", {self.cost_s / self.total_s():.1%} of the {fmt(self.total_s())} estimated" if self.total_s() else ""
        return f"the estimates measured in {fmt(self.cost_s)}{share} (estimate: false or --no-estimate skips them)"

    def runs_of(self, suite: str) -> list[str]:
        return [k for k in self.runs if k.startswith(f"{suite}/")]


def estimate(benchmark, runs, results: Path, args: EstimateArgs) -> Estimates:
    """Measure and extrapolate each warm start still to build and each selected run not finished
    yet (`runs`, as planned), write RESULTS/<suite>/estimates.json, and return what to say."""
    from harness.shipped import shipped
    from harness.start import StartingWeights

    out, started = Estimates(), time.perf_counter()
    for suite in {id(r.suite): r.suite for r in runs}.values():
        mine = [r for r in runs if r.suite is suite and not (results / r.id / "run.json").exists()]
        task_class = suite.task.resolve()
        if not mine or task_class.unavailable():
            continue
        say = out.lines.setdefault(suite.name, [])
        start = StartingWeights.of(suite)
        ships = start.key is not None and shipped(start.key)
        cached = start.built(benchmark.cache_dir) or ships
        ws, task = suite.model.warm_start, suite.task.build()
        with tempfile.TemporaryDirectory() as scratch:
            if cached:
                weights = ships or start.folder(benchmark.cache_dir)
            elif (
                ws is not None
                and affordable(1 + args.warm_start_steps, ws.steps, args.budget)
                and demonstrations(task, ws)
            ):
                pieces, weights = measure_warm_start(suite.model, task, args, Path(scratch))
                training = extrapolate(pieces["step_s"], ws.steps)
                basis = f"measured from {len(pieces['step_s'])} steps here"
                out.warm_starts[start.key] = Interval(*(x + pieces["fixed_s"] for x in training), basis)
                record = {"key": start.key, "seconds": Interval(*training, basis).record(), "basis": basis}
                write(results / suite.name, "warm_start", record)  # to compare with recipe.json's report.seconds
            else:
                weights = measure_base(suite.model, task, Path(scratch))  # no warm start, or one too short to measure
            for algorithm in dict.fromkeys(r.algorithm for r in mine):
                seeds = [r for r in mine if r.algorithm == algorithm]
                steps = suite.settings["schedule"].steps
                if suite.trainer.processes > 1 or suite.settings["sampling"].backend == "vllm":
                    say.append(
                        f"[{suite.name}] {algorithm}: not estimated (several processes or vLLM: too dear to measure)"
                    )
                    continue
                if not affordable(1 + args.train_steps, steps * len(seeds), args.budget):
                    say.append(
                        f"[{suite.name}] {algorithm}: not estimated ({steps} steps x {len(seeds)} "
                        f"seed{'s' * (len(seeds) > 1)} is too short for {1 + args.train_steps} measured steps "
                        f"to stay within estimate.budget {args.budget:.0%})"
                    )
                    continue
                measured = measure_training(
                    suite, algorithm, seeds[0].seed, benchmark.cache_dir, weights, args, steps * len(seeds)
                )
                first = not (results / suite.name / "start-evaluations.json").exists() and not out.runs_of(suite.name)
                for i, run in enumerate(seeds):
                    every = suite.settings["evaluation"].every
                    found = run_interval(measured, steps, every, first and i == 0, not cached and ws is not None)
                    out.runs[run.id] = found
                    write(results / suite.name, run.id.split("/")[1], as_record(found))
                found = out.runs[seeds[0].id]
                say.append(
                    f"[{suite.name}] {algorithm}: {steps} steps x {len(seeds)} seed{'s' * (len(seeds) > 1)} with "
                    f"{found['evaluations']} evaluations of {measured['held_out']} problems, {found['run_s'].text()} "
                    f"a run (of it the steps' own work, run.json's wall_clock_s: about {fmt(found['wall_clock_s'].seconds)})"
                )
    out.cost_s = time.perf_counter() - started
    return out


def as_record(found: dict) -> dict:
    return {
        "wall_clock_s": found["wall_clock_s"].record(),
        "run_s": found["run_s"].record(),
        "evaluations": found["evaluations"],
        "basis": found["run_s"].basis,
    }


def write(suite_dir: Path, name: str, entry: dict) -> None:
    """One estimate into `suite_dir`/estimates.json: {name: [estimate, low, high] figures, when}."""
    from harness.records import write_json

    path = suite_dir / "estimates.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    suite_dir.mkdir(parents=True, exist_ok=True)
    write_json({**known, name: {**entry, "at": datetime.now().isoformat(timespec="seconds")}}, path)
