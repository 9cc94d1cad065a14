"""One run trained to its last step: the module built, the Lightning Trainer set up, fit, and its
summary written."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import lightning as L
import polars as pl
import torch

from harness.build import build_module
from harness.config import Suite
from harness.loggers import log_summary, logger_names, loggers
from harness.memory import fmt_mb, memory_estimate
from harness.placement import placement
from harness.progress import bar_shown, progress
from harness.provenance import (
    data_digest,
    environment,
)
from harness.records import (
    StepRecorder,
    check_checkpoint,
    resume_point,
    write_json,
)
from harness.resume import continued, run_spec
from harness.step_zero import record_start_evaluation, start_evaluation
from harness.summary import run_summary, warn_if_silent
from rollout import distributed
from rollout.lora import has_adapters, save_adapter
from rollout.sharding import full_state_dict


class StepIndices(torch.utils.data.Dataset):
    """The loop's batches are step numbers; the prompts come from the module's own stream, keyed
    by its step counter, so the data position is part of the checkpointed state."""

    def __init__(self, steps: int):
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int) -> int:
        return index


def fit(suite: Suite, algorithm: str, seed: int, run_dir: Path, cache_dir: Path, resume: bool, say) -> float:
    """Train one run to its last step and write its summary; returns the seconds spent preparing."""
    started = time.perf_counter()
    if resume:
        check_checkpoint(resume_point(run_dir))  # damaged since it was written: refused, not resumed
    # Processes after the first of a multi-device run exist from its first fit on: the first
    # builds (and caches) the starting weights, the others then load them.
    module, weights = distributed.main_first(lambda: build_module(suite, algorithm, seed, cache_dir))
    origin = {
        "starting_weights_digest": module.starting_weights_digest,
        "task_data_digest": data_digest(module.task),
        "environment": environment(),
    }
    origin = continued(run_dir, origin, resume, say)
    preparation_s = time.perf_counter() - started
    suite_dir, task_key = run_dir.parent, suite.task_key()
    module.completions_per_step = suite.trainer.completions
    recorder = StepRecorder(run_dir, suite.trainer.checkpoint_every_s)
    start_key, measured = start_evaluation(suite_dir, weights, module, task_key, suite.trainer.precision)
    if not resume and start_key in measured:
        module.evaluations = [{"step": 0, **measured[start_key]}]
    say_where_from(suite, run_dir, weights, resume, say)
    memory = memory_estimate(suite, module)
    parts = ", ".join(f"{k.replace('_', ' ')} {fmt_mb(v)}" for k, v in memory.items() if k != "total" and v)
    say(f"memory estimate per process: {fmt_mb(memory['total'])} ({parts}; the runtime itself not counted)")
    trainer = trainer_for(suite, algorithm, seed, run_dir, recorder)
    # The loader gets its own generator: each new iterator (a resumed run starts a new epoch)
    # would otherwise draw from the global RNG that sampling uses, and a resumed run would
    # sample differently from an uninterrupted one.
    steps = torch.utils.data.DataLoader(
        StepIndices(module.schedule.steps), batch_size=None, generator=torch.Generator().manual_seed(0)
    )
    trainer.fit(module, steps, ckpt_path=recorder.checkpoint_path if resume else None, weights_only=False)
    if module.rl_step < module.schedule.steps:
        raise RuntimeError(f"{run_dir.name} stopped at step {module.rl_step} of {module.schedule.steps}")
    if suite.trainer.keep_policy:
        save_policy(module, run_dir / "policy", weights)
    if not trainer.is_global_zero:
        return preparation_s
    if start_key not in measured:
        record_start_evaluation(suite_dir, start_key, weights, module, task_key, suite.trainer.precision)
    summary = run_summary(suite, algorithm, seed, module, weights, origin, trainer.world_size, preparation_s, memory)
    write_json(summary, run_dir / "run.json")
    log_summary(trainer, module, summary)
    warn_if_silent(module, run_dir.name)
    write_json(logger_names(suite.trainer.loggers), run_dir / "loggers.json")  # what its records went to
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # finished: the record is what stays
    return preparation_s


def say_where_from(suite: Suite, run_dir: Path, weights: Path, resume: bool, say) -> None:
    """Say what the run starts from: its starting weights, or the checkpoint it resumes after."""
    if resume:
        metrics = run_dir / "metrics.parquet"  # written from the last checkpoint: its steps are the checkpoint's
        try:
            done = pl.scan_parquet(metrics).select(pl.len()).collect().item() if metrics.exists() else 0
            say(f"resuming after step {done} of {suite.settings['schedule'].steps}, from {resume_point(run_dir)}")
        except (OSError, pl.exceptions.PolarsError):  # damaged: the checkpoint holds its rows, written again
            say(f"resuming from {resume_point(run_dir)} (its metrics.parquet cannot be read: written again from it)")
    else:
        say(f"starting from {weights}")


def trainer_for(suite: Suite, algorithm: str, seed: int, run_dir: Path, recorder: StepRecorder) -> L.Trainer:
    """The run's Lightning Trainer: its placement, loggers, progress and `StepRecorder`."""
    return L.Trainer(
        **placement(suite.trainer),
        use_distributed_sampler=False,  # the batches are step numbers; every process runs every step
        max_epochs=-1,
        logger=loggers(
            run_dir, suite.trainer.loggers, f"{suite.name}/{run_dir.name}", run_spec(suite, algorithm, seed)
        ),
        callbacks=[recorder, *progress(f"[{suite.name}] {run_dir.name}", suite.settings["schedule"].steps)],
        enable_progress_bar=bar_shown(),
        plugins=[recorder.checkpoint_io],
        enable_checkpointing=False,  # StepRecorder checkpoints, atomically, in the background
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )


def save_policy(module, directory: Path, base: Path) -> None:
    """The trained policy as a directory `AutoModelForCausalLM.from_pretrained` loads, written by
    the first process (collective under FSDP, which gathers the shards). With LoRA, the adapters
    merged into the weights there, and the adapter alone in `adapter/` (PEFT's format, for
    `PeftModel.from_pretrained` on `base`, the weights the run started from)."""
    state = full_state_dict(module.policy)
    if distributed.rank() == 0:
        module.policy.save_pretrained(directory, state_dict=state)
        module.tokenizer.save_pretrained(directory)
        if has_adapters(module.policy):
            save_adapter(module.policy, directory / "adapter", str(base))
