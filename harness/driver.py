"""Runs a benchmark: for each suite, task x algorithm x seed, one Lightning fit per run, then
the suite's leaderboard. Finished runs are skipped; interrupted ones resume from their last
checkpoint."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger

from harness import distributed
from harness.config import Benchmark, Suite, TrainerArgs
from harness.engine import activation_checkpointing
from harness.leaderboard import publish
from harness.models import load_policy, starting_weights
from harness.records import StepRecorder, write_json

log = logging.getLogger("harness")


class StepIndices(torch.utils.data.Dataset):
    """The loop's batches are step numbers; the prompts come from the module's own stream, keyed
    by its step counter, so the data position is part of the checkpointed state."""

    def __init__(self, steps: int):
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int) -> int:
        return index


def run_name(algorithm: str, seed: int) -> str:
    return f"{algorithm}-seed{seed}"


def run_benchmark(benchmark: Benchmark, results: Path) -> None:
    quiet_libraries()
    for suite in benchmark.suites:
        reason = suite.task.resolve().unavailable()
        if reason:
            print(f"[{suite.name}] skipped: {suite.task.class_path} {reason}")
            continue
        for seed in suite.seeds:
            for algorithm in suite.algorithms:
                run_one(suite, algorithm, seed, results / suite.name, benchmark.cache_dir)
        if distributed.rank() == 0:
            publish(results / suite.name)
    if distributed.rank() == 0 and any(results.glob("*/*/run.json")):
        publish(results)


def build_module(suite: Suite, algorithm: str, seed: int, cache_dir: Path, **group_changes):
    """(the algorithm's module on the suite's starting weights, where those weights are). The
    weights are built and cached on first use. `group_changes` replace fields of the suite's
    groups (e.g. schedule={"steps": 5}) for this module only."""
    task = suite.task.resolve()(**suite.task.init_args)
    weights = starting_weights(suite.model, task, suite.task_key(), cache_dir)
    L.seed_everything(seed, verbose=False)
    policy, tokenizer = load_policy(weights, suite.model.dtype)
    if suite.model.gradient_checkpointing:
        activation_checkpointing(policy, enable=True)
    policy.train()
    own, groups = suite.algorithm_groups(algorithm)
    groups["schedule"] = type(groups["schedule"])(**{**asdict(groups["schedule"]), "seed": seed})
    for name, changes in group_changes.items():
        groups[name] = type(groups[name])(**{**asdict(groups[name]), **changes})
    module = suite.algorithms[algorithm].resolve()(policy=policy, tokenizer=tokenizer, task=task, **own, **groups)
    return module, weights


def run_one(suite: Suite, algorithm: str, seed: int, suite_dir: Path, cache_dir: Path) -> Path:
    run_dir = suite_dir / run_name(algorithm, seed)
    summary = run_dir / "run.json"
    if summary.exists():
        print(f"[{suite.name}] {run_dir.name}: finished earlier, skipped")
        return run_dir
    started = time.perf_counter()
    # Processes after the first of a multi-device run exist from its first fit on: the first
    # builds (and caches) the starting weights, the others then load them.
    module, weights = distributed.main_first(lambda: build_module(suite, algorithm, seed, cache_dir))
    preparation_s = time.perf_counter() - started
    task_key, own = suite.task_key(), suite.algorithm_groups(algorithm)[0]
    recorder = StepRecorder(run_dir, suite.trainer.checkpoint_every_s)
    resume = recorder.checkpoint_path if recorder.checkpoint_path.exists() else None
    start_key, measured = start_evaluation(suite_dir, weights, module, task_key)
    if resume is None and start_key in measured:
        module.evaluations = [{"step": 0, "accuracy": measured[start_key]}]
    if distributed.rank() == 0:
        print(f"[{suite.name}] {run_dir.name}: {'resuming' if resume else 'starting'} from {weights}")
    trainer = L.Trainer(
        accelerator=suite.trainer.accelerator,
        devices=suite.trainer.devices,
        strategy=strategy(suite.trainer, module),
        use_distributed_sampler=False,  # the batches are step numbers; every process runs every step
        max_epochs=-1,
        logger=loggers(run_dir),
        callbacks=[recorder, TQDMProgressBar()],
        plugins=[recorder.checkpoint_io],
        enable_checkpointing=False,  # StepRecorder checkpoints, atomically, in the background
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    # The loader gets its own generator: each new iterator (a resumed run starts a new epoch)
    # would otherwise draw from the global RNG that sampling uses, and a resumed run would
    # sample differently from an uninterrupted one.
    steps = torch.utils.data.DataLoader(
        StepIndices(module.schedule.steps), batch_size=None, generator=torch.Generator().manual_seed(0)
    )
    trainer.fit(module, steps, ckpt_path=resume, weights_only=False)
    if module.rl_step < module.schedule.steps:
        raise RuntimeError(f"{run_dir.name} stopped at step {module.rl_step} of {module.schedule.steps}")
    if not trainer.is_global_zero:
        return run_dir
    if start_key not in measured:
        write_json({**measured, start_key: module.evaluations[0]["accuracy"]}, suite_dir / "start-evaluations.json")
    write_json(
        {
            "suite": suite.name,
            "task": suite.task.class_path.rsplit(".", 1)[-1],
            "task_spec": task_key,
            "algorithm": algorithm,
            "algorithm_class": suite.algorithms[algorithm].class_path,
            "algorithm_args": own,
            "seed": seed,
            "model": str(weights),
            "model_name": suite.model.preset or Path(suite.model.path).name,
            "rollouts_per_prompt": module.rollouts_per_prompt,
            "devices": trainer.world_size,
            "steps": module.rl_step,
            "wall_clock_s": module.wall_clock_s,
            "warm_start_s": preparation_s,
            "accuracy_before": module.evaluations[0]["accuracy"],
            "accuracy_after": module.evaluations[-1]["accuracy"],
            **module.hyperparameters(),
        },
        summary,
    )
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # finished: the record is what stays
    return run_dir


def start_evaluation(suite_dir: Path, weights: Path, module, task_key: dict) -> tuple[str, dict[str, float]]:
    """(the key of this run's step-0 evaluation, the step-0 accuracies the suite has measured).
    Every algorithm of a suite starts from the same weights and evaluation is greedy, so the
    step-0 accuracy is the same for all of them: measured by the suite's first run, reused by
    the others (it is not part of the training wall-clock either way)."""
    key = hashlib.sha1(
        json.dumps(
            {"weights": str(weights), "task": task_key, "evaluation": asdict(module.eval_args),
             "max_new_tokens": module.sampling.max_new_tokens},
            sort_keys=True, default=str,
        ).encode()
    ).hexdigest()[:16]
    path = suite_dir / "start-evaluations.json"
    return key, json.loads(path.read_text()) if path.exists() else {}


def strategy(args: TrainerArgs, module):
    """The Lightning strategy for a suite's `trainer.strategy`."""
    if args.strategy == "fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        # Shard by decoder layer: the unit that is gathered for its forward and freed after.
        layer = type(module.policy.base_model.layers[0])
        return FSDPStrategy(auto_wrap_policy={layer}, sharding_strategy="FULL_SHARD")
    if args.strategy == "ddp" or args.devices > 1:
        return distributed.RolloutDDP(process_group_backend="gloo" if args.accelerator == "cpu" else None)
    return "auto"


def loggers(run_dir: Path) -> list:
    """CSV always (logs/version_0, then version_1 after a resume: nothing overwritten), and
    TensorBoard (tensorboard/) when it is installed."""
    chosen = [CSVLogger(run_dir, name="logs")]
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        from lightning.pytorch.loggers import TensorBoardLogger

        chosen.append(TensorBoardLogger(run_dir, name="tensorboard"))
    return chosen


def quiet_libraries() -> None:
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*modules? in eval mode.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*LitLogger.*")
    # Resuming mid-"epoch" is by design: the prompt stream is keyed by the checkpointed step counter.
    warnings.filterwarnings("ignore", message=".*ended before the epoch ended.*")
