"""`python -m harness bench CONFIG`: where a step's time goes, per algorithm, at fixed work.

Each algorithm of each suite runs a few steps on the suite's starting weights, exactly as
`harness run` would (same module, same Lightning loop, records and checkpoints written to a
scratch folder), with one clock around the model's own work (generation: `rollout.decoding.decode`
and multi-turn `Conversation` turns; forward passes, the policy's, its trunk's and its output head's; `backward`; the
optimizer step with its gradient clipping) and another around the task's own work (its verifier; ALFWorld's game engine).
The harness overhead is the rest of the step (credit arithmetic outside the model, the surrogate,
the loop, records, checkpoints), as a share of it: what this harness adds on top of what any
implementation of the same algorithm on the same task must spend; it is also split by the stage
it falls in (`overhead_in_<stage>_s`). The first step is a warm-up and is not counted; figures
are medians over steps.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L
import polars as pl
import torch

from algorithms.base import STAGES
from harness.config import Benchmark
from harness.estimate import quiet_trainer
from harness.records import StepRecorder, write_atomic
from rollout import conversation as conversation_module
from rollout import decoding
from rollout.conversation import Conversation


class ModelClock:
    """Seconds spent inside the model's own calls. Nested calls (generate runs forward; the
    policy's forward runs its trunk's) count once, at the outermost."""

    def __init__(self):
        self.seconds, self.depth = 0.0, 0

    def wrap(self, function):
        @functools.wraps(function)
        def timed(*args, **kwargs):
            if self.depth:
                return function(*args, **kwargs)
            self.depth += 1
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.depth -= 1

        return timed

    @contextlib.contextmanager
    def around(self, module, task_clock: "ModelClock"):
        with self.patched(module, task_clock), self.stages_split(module, task_clock):
            yield self

    @contextlib.contextmanager
    def stages_split(self, module, task_clock: "ModelClock"):
        """Also split each stage of the step (`module.stage`) into model, task and the rest:
        `self.stage_overhead[stage]` holds the rest of the stage's last run."""
        original, self.stage_overhead = module.stage, {}

        @contextlib.contextmanager
        def stage(timing: dict[str, float], name: str):
            model, task = self.seconds, task_clock.seconds
            with original(timing, name):
                yield
            self.stage_overhead[name] = timing[name] - (self.seconds - model) - (task_clock.seconds - task)

        module.stage = stage  # on this module only, for the duration
        try:
            yield
        finally:
            del module.stage

    @contextlib.contextmanager
    def patched(self, module, task_clock: "ModelClock"):
        """Patch, for the duration: the samplers (`rollout.decoding.decode` and a multi-turn
        `Conversation`'s turns: the decoding loops, their forward passes and token draws), the
        module's policy (forward, trunk forward, output head), its backward and gradient clipping (the optimizers'
        steps are patched once they exist: `StepClock`); and on `task_clock`, the task's own work: its
        verifier and, for ALFWorld, the game engine's resets and steps."""
        policy = module.policy
        patched = [
            (self, decoding, "decode"),
            (self, Conversation, "turn"),
            (self, policy, "forward"),
            (self, policy.base_model, "forward"),
            (self, policy.get_output_embeddings(), "forward"),
            (self, module, "manual_backward"),
            (self, module, "synchronise_and_clip"),
            *((task_clock, obj, name) for obj, name in module.task.own_work()),
        ]
        with replaced([(obj, name, clock.wrap(getattr(obj, name))) for clock, obj, name in patched]):
            yield self


@contextlib.contextmanager
def replaced(replacements: list[tuple[object, str, object]]):
    """Each (object, name, value) set for the block, then restored as it was in the object's own
    __dict__ (where it was inherited, deleted)."""
    originals = [(obj, name, vars(obj).get(name)) for obj, name, _ in replacements]
    for obj, name, value in replacements:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, name, original in originals:
            if original is not None:
                setattr(obj, name, original)
            else:
                delattr(obj, name)


class TurnClock:
    """Where a multi-turn rollout's time goes, part by part (`TURN_PARTS`), and how many turns it
    played: the first turn's prefill, each later turn's prefill of the environment's answer, the
    decoding forward passes, the token draws, the tokenizer's calls. The game engine's time is
    the task's (`task_s`); the rest of the sample stage is the loop's own Python."""

    def __init__(self):
        self.parts = {part: ModelClock() for part in TURN_PARTS}
        self.turns = 0

    @contextlib.contextmanager
    def around(self, module):
        if not module.task.multi_turn:
            yield self
            return
        tokenizer, parts = module.tokenizer, self.parts
        feed = Conversation._feed
        prefilled, decoded = parts["answer_prefill_s"].wrap(feed), parts["decode_s"].wrap(feed)
        turn = Conversation.turn

        def counted_turn(conversation, *args, **kwargs):
            self.turns += 1
            return turn(conversation, *args, **kwargs)

        patched = [
            (Conversation, "_feed", lambda c, ids, mask: (prefilled if ids.shape[1] > 1 else decoded)(c, ids, mask)),
            (Conversation, "turn", counted_turn),
            (conversation_module, "prefill", parts["first_prefill_s"].wrap(conversation_module.prefill)),
            (conversation_module, "sample_next", parts["draw_s"].wrap(conversation_module.sample_next)),
            # a tokenizer is called through its class (`tokenizer(...)`), decoded through the instance
            (type(tokenizer), "__call__", parts["tokenizer_s"].wrap(type(tokenizer).__call__)),
            (tokenizer, "batch_decode", parts["tokenizer_s"].wrap(tokenizer.batch_decode)),
        ]
        with replaced(patched):
            yield self


TURN_PARTS = ("first_prefill_s", "answer_prefill_s", "decode_s", "draw_s", "tokenizer_s")


class StepClock(L.Callback):
    """Per step: wall-clock from batch start to after the records are written (it must come after
    the StepRecorder), and the model's share of it."""

    def __init__(self, clock: ModelClock, task_clock: ModelClock, turn_clock: TurnClock):
        self.clock, self.task_clock, self.turn_clock, self.rows = clock, task_clock, turn_clock, []

    def turn_figures(self) -> dict[str, float]:
        return {"turns": self.turn_clock.turns, **{k: c.seconds for k, c in self.turn_clock.parts.items()}}

    def on_train_start(self, trainer, module) -> None:
        for optimizer in trainer.optimizers:
            optimizer.step = self.clock.wrap(optimizer.step)

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.started, self.model_at_start, self.task_at_start = (
            time.perf_counter(),
            self.clock.seconds,
            self.task_clock.seconds,
        )
        self.turns_at_start = self.turn_figures()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        record = module.records[-1]
        self.rows.append(
            {
                "step_s": time.perf_counter() - self.started,
                "model_s": self.clock.seconds - self.model_at_start,
                "task_s": self.task_clock.seconds - self.task_at_start,
                **{stage: record[f"timing_s/{stage}"] for stage in STAGES},
                **{f"{stage}_overhead_s": self.clock.stage_overhead.get(stage, 0.0) for stage in STAGES},
                "peak_mb": record.get("memory/peak_mb"),
                "tokens": record["tokens/generated"],
                "measure_s": record.get("measure_s", 0.0),
                **{k: v - self.turns_at_start[k] for k, v in self.turn_figures().items()},
            }
        )


def bench_module(module, steps: int, checkpoint_every_s: float = 0.0, precision: str = "32-true") -> list[dict]:
    """Per-step timing rows of `steps` steps, checkpointed as a run with this interval would be,
    on one device at `precision`."""
    clock, task_clock, turn_clock = ModelClock(), ModelClock(), TurnClock()
    with tempfile.TemporaryDirectory() as scratch, clock.around(module, task_clock), turn_clock.around(module):
        timer, recorder = StepClock(clock, task_clock, turn_clock), StepRecorder(Path(scratch), checkpoint_every_s)
        trainer = quiet_trainer(
            steps,
            [recorder, timer],
            accelerator="auto",
            devices=1,
            precision=precision,
            plugins=[recorder.checkpoint_io],
        )
        loader = torch.utils.data.DataLoader(range(steps), batch_size=None)
        trainer.fit(module, loader)
    return timer.rows


def run_bench(benchmark: Benchmark, steps: int, suite_names: list[str] | None = None) -> pl.DataFrame:
    from harness.build import build_module
    from harness.quiet import quiet_libraries

    quiet_libraries()
    rows = []
    for suite in benchmark.suites:
        if suite_names and suite.name not in suite_names:
            continue
        for algorithm in suite.algorithms:
            # No held-out evaluation (it is not part of a step), `steps` + 1 steps (one warm-up).
            module, _ = build_module(
                suite,
                algorithm,
                suite.seeds[0],
                benchmark.cache_dir,
                schedule={"steps": steps + 1},
                evaluation={"every": 10**9, "limit": 0},
            )
            measured = bench_module(module, steps + 1, suite.trainer.checkpoint_every_s, suite.trainer.precision)[1:]
            for r in measured:
                r["overhead_s"] = r["step_s"] - r["model_s"] - r["task_s"]
            median = {key: statistics.median(r[key] for r in measured) for key in measured[0] if key != "peak_mb"}
            stages = sum(median[s] for s in STAGES)
            rows.append(
                {
                    "suite": suite.name,
                    "algorithm": algorithm,
                    "rollouts/step": module.schedule.prompts_per_step * module.group_size,
                    "step_s": median["step_s"],
                    **{f"{s}_s": median[s] for s in STAGES},
                    "record_and_loop_s": median["step_s"] - stages,
                    "model_s": median["model_s"],
                    "task_s": median["task_s"],
                    # the median of each step's own rest: medians of step, model and task times
                    # taken apart need not come from the same step, so their difference is noisier
                    "overhead_s": median["overhead_s"],
                    "overhead_share": median["overhead_s"] / median["step_s"],
                    **{f"overhead_in_{s}_s": median[f"{s}_overhead_s"] for s in ("sample", "credit", "update")},
                    "generated_tokens_per_s": median["tokens"] / median["sample"],
                    # credit fidelity and the other measurements: part of step_s, never of wall_clock_s
                    "measure_s": median["measure_s"],
                    "measure_share": median["measure_s"] / median["step_s"],
                    # a multi-turn task's rollout, part by part (TurnClock); the game is task_s
                    **(
                        {
                            "turns": median["turns"],
                            **{part: median[part] for part in TURN_PARTS},
                            "loop_s": median["sample"] - median["task_s"] - sum(median[p] for p in TURN_PARTS),
                        }
                        if module.task.multi_turn
                        else {}
                    ),
                    "peak_mb": max(r["peak_mb"] for r in measured),
                }
            )
            print(rows[-1])
    return pl.DataFrame(rows)


def write_report(board: pl.DataFrame, command: str, path: Path) -> None:
    from harness.leaderboard import markdown

    text = f"# Step-time benchmark\n\n`{command}`\n\nMedians over the measured steps (the first step is a warm-up).\n\n{markdown(board)}"
    write_atomic(path, lambda tmp: tmp.write_text(text))
