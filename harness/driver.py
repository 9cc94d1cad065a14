"""Runs a benchmark: for each suite, task x algorithm x seed, one Lightning fit per run, then
the suite's leaderboard. A run is identified by `<suite>/<algorithm>-seed<k>`; a selection of
them (`RunFilter`) runs in this process, so that a job array can run one per job.

A run folder records the settings it ran with (`spec.json`: everything that determines its
records). A finished run with the same settings is skipped, an interrupted one resumes from its
last checkpoint, and a run whose settings changed is moved aside (`<suite>/.replaced/`) and run
again, saying which settings changed. Processes that run different runs into one results folder
at once are safe: the starting weights are built once (a file lock in the cache), a run is held
by one process at a time (a file lock in its folder), and publishing is serialized."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import time
import warnings
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

import lightning as L
import polars as pl
import torch
from lightning.pytorch.loggers import CSVLogger

from harness.config import Benchmark, Suite, TrainerArgs
from harness.leaderboard import compact, publish, run_table
from harness.locks import Lock, exclusive
from harness.models import load_policy, starting_weights, weights_recipe
from harness.plan import PlannedRun, RunFilter, plan  # noqa: F401  (the CLI's and slurm's: harness.driver.plan)
from harness.progress import bar_shown, progress
from harness.provenance import (
    check_same_start,
    data_digest,
    describe,
    environment,
    environment_key,
    weights_digest,
)
from harness.records import (
    MEASURED,
    NOT_IN_SPEC,
    Damaged,
    StepRecorder,
    check_checkpoint,
    fmt_duration,
    read_run,
    records_frame,
    resume_point,
    run_name,
    with_added_settings,
    write_json,
)
from harness.report import write as write_page
from rollout import distributed
from rollout.lora import add_adapters, has_adapters, save_adapter
from rollout.memory import estimate_mb
from rollout.scoring import activation_checkpointing
from rollout.sharding import FSDP2, full_state_dict

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


def run_benchmark(benchmark: Benchmark, results: Path, only: RunFilter | None = None) -> None:
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
        mine = [r for r in runs if r.suite is suite]
        if not mine:
            continue
        reason = suite.task.resolve().unavailable()
        if reason:
            print(f"[{suite.name}] skipped: {suite.task.class_path} {reason}")
            for _ in mine:
                progress.done(None, 0.0)
            continue
        for planned in mine:
            builds = progress.needs_weights(planned)
            started = time.perf_counter()
            position = progress.label()
            preparation_s = run_one(
                suite, planned.algorithm, planned.seed, results / suite.name, benchmark.cache_dir, position
            )
            ran_s = None if preparation_s is None else time.perf_counter() - started
            progress.done(ran_s, preparation_s if builds and preparation_s is not None else 0.0)
        if distributed.rank() == 0 and any((results / suite.name).glob("*/run.json")):
            publish(results / suite.name)
    if distributed.rank() == 0 and any(results.glob("*/*/run.json")):
        board = publish(results)
        page = write_page(results)
        print(compact(board))  # what the run found, as lm-eval ends with its table
        print(f"wrote {results / 'leaderboard.md'} and {page}")


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
        recipe = weights_recipe(planned.suite.model, planned.suite.task_key())
        if recipe is None or (self.cache_dir / "policies" / recipe[1] / "recipe.json").exists():
            return None
        return recipe[1]

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


SESSION = f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
"""This invocation of the harness, recorded with each run it finishes."""


def fmt_mb(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.1f} MiB"


def build_module(
    suite: Suite, algorithm: str, seed: int, cache_dir: Path, weights: Path | None = None, **setting_changes
):
    """(the algorithm's module on the suite's starting weights, where those weights are). The
    weights are built and cached on first use; `weights` names other ones (a checkpoint to
    evaluate). `setting_changes` replace fields of the suite's settings (e.g. schedule={"steps":
    5}) for this module only."""
    task = suite.task.build()
    weights = weights or starting_weights(suite.model, task, suite.task_key(), cache_dir)
    L.seed_everything(seed, verbose=False)
    policy, tokenizer = load_policy(weights, suite.model.dtype)
    digest = weights_digest(policy)  # of the weights as loaded, before any adapter
    check_cached_digest(weights, digest)
    if suite.model.lora is not None:
        add_adapters(policy, suite.model.lora)
    if suite.model.gradient_checkpointing:
        activation_checkpointing(policy, enable=True)
    policy.train()
    own, settings = suite.algorithm_settings(algorithm)
    for name, changes in setting_changes.items():
        settings[name] = type(settings[name])(**{**asdict(settings[name]), **changes})
    module = suite.algorithms[algorithm].resolve()(
        policy=policy, tokenizer=tokenizer, task=task, seed=seed, **own, **settings
    )
    module.starting_weights_digest = digest
    return module, weights


def check_cached_digest(weights: Path, digest: str) -> None:
    """Raise `Damaged` where cached starting weights are not those that were built there: their
    digest, recorded in the entry's recipe.json when it was built, differs from the weights' as
    loaded (bytes flipped, or other weights put in their place). Entries built before the digest
    was recorded, and weights outside the cache, are not checked."""
    recipe = Path(weights) / "recipe.json"
    recorded = json.loads(recipe.read_text()).get("weights_digest") if recipe.is_file() else None
    if recorded is not None and recorded != digest:
        raise Damaged(
            f"{weights}: the cached starting weights have digest {digest}, not the {recorded} they were built with "
            "(damaged or replaced); delete the folder to build them again"
        )


def run_spec(suite: Suite, algorithm: str, seed: int) -> dict:
    """Everything that determines a run's records, as JSON values: what its folder records in
    `spec.json` and a later invocation compares with."""
    own, settings = suite.algorithm_settings(algorithm)
    recipe = weights_recipe(suite.model, suite.task_key())
    spec = {
        "task": suite.task_key(),
        "model": asdict(suite.model),
        "starting_weights": recipe[1] if recipe else suite.model.path,
        "algorithm": {"class_path": suite.algorithms[algorithm].class_path, "init_args": own},
        "seed": seed,
        **{name: asdict(value) for name, value in settings.items()},
        "trainer": {k: v for k, v in asdict(suite.trainer).items() if k not in NOT_IN_SPEC["trainer"]},
    }
    return json.loads(json.dumps(spec, default=str))


def changed_settings(before: dict, now: dict, prefix: str = "") -> list[str]:
    """`key: old -> new` for every setting that differs, by dotted path."""
    out = []
    for key in sorted(set(before) | set(now), key=str):
        a, b = before.get(key, "(unset)"), now.get(key, "(unset)")
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_settings(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a} -> {b}")
    return out


def prepare(run_dir: Path, spec: dict, say) -> str:
    """What to do with a run folder: "skip" (finished with these settings), "resume" (interrupted,
    same settings) or "start". A folder whose recorded settings differ from `spec` (or cannot be
    read) is moved aside first to `.replaced/`, and a finished one whose records cannot be read
    or disagree to `.damaged/`: never reused or deleted, and run again."""
    recorded = run_dir / "spec.json"
    if run_dir.exists() and any(run_dir.iterdir()):
        try:
            before = with_added_settings(json.loads(recorded.read_text())) if recorded.exists() else None
        except ValueError:  # unreadable: as good as unrecorded
            before = None
        if before != spec:
            aside = run_dir.parent / ".replaced" / f"{run_dir.name}-{datetime.now():%Y%m%dT%H%M%S}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            run_dir.rename(aside)
            why = changed_settings(before, spec) if before is not None else ["it recorded no settings (spec.json)"]
            shown = "; ".join(why[:4]) + (f"; and {len(why) - 4} more" if len(why) > 4 else "")
            say(f"settings changed since it ran ({shown}): the earlier run moved to {aside}, running again")
    if (run_dir / "run.json").exists():
        try:
            read_run(run_dir)
        except Damaged as error:  # set aside and run again, as a run of other settings is
            aside = run_dir.parent / ".damaged" / f"{run_dir.name}-{datetime.now():%Y%m%dT%H%M%S}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            run_dir.rename(aside)
            say(f"its records are damaged ({error}): the run moved to {aside}, running again")
    if (run_dir / "run.json").exists():
        return "skip"
    write_json(spec, recorded)
    return "resume" if resume_point(run_dir) is not None else "start"


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
    suite_dir, task_key, own = run_dir.parent, suite.task_key(), suite.algorithm_settings(algorithm)[0]
    module.completions_per_step = suite.trainer.completions
    recorder = StepRecorder(run_dir, suite.trainer.checkpoint_every_s)
    start_key, measured = start_evaluation(suite_dir, weights, module, task_key, suite.trainer.precision)
    if not resume and start_key in measured:
        module.evaluations = [{"step": 0, **measured[start_key]}]
    if resume:
        metrics = run_dir / "metrics.parquet"  # written from the last checkpoint: its steps are the checkpoint's
        try:
            done = pl.scan_parquet(metrics).select(pl.len()).collect().item() if metrics.exists() else 0
            say(f"resuming after step {done} of {suite.settings['schedule'].steps}, from {resume_point(run_dir)}")
        except (OSError, pl.exceptions.PolarsError):  # damaged: the checkpoint holds its rows, written again
            say(f"resuming from {resume_point(run_dir)} (its metrics.parquet cannot be read: written again from it)")
    else:
        say(f"starting from {weights}")
    memory = memory_estimate(suite, module)
    parts = ", ".join(f"{k.replace('_', ' ')} {fmt_mb(v)}" for k, v in memory.items() if k != "total" and v)
    say(f"memory estimate per process: {fmt_mb(memory['total'])} ({parts}; the runtime itself not counted)")
    trainer = L.Trainer(
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
        with exclusive(suite_dir / ".start-evaluations.lock"):  # other processes may add theirs
            _, measured = start_evaluation(suite_dir, weights, module, task_key, suite.trainer.precision)
            start = {k: v for k, v in module.evaluations[0].items() if k != "step"}
            write_json({**measured, start_key: start}, suite_dir / "start-evaluations.json")
    summary = {
        "suite": suite.name,
        "task": suite.task.class_path.rsplit(".", 1)[-1],
        "task_spec": task_key,
        "algorithm": algorithm,
        "algorithm_class": suite.algorithms[algorithm].class_path,
        "algorithm_args": own,
        "reference": suite.reference,
        "seed": seed,
        "spec": run_spec(suite, algorithm, seed),
        "model": str(weights),
        "model_name": suite.model.preset or Path(suite.model.path).name,
        "versions": versions(),
        **origin,
        "group_size": module.group_size,
        "devices": trainer.world_size,
        "steps": module.rl_step,
        "wall_clock_s": module.wall_clock_s,
        "session": SESSION,  # runs of one invocation share it: their wall-clocks saw the same machine
        "warm_start_s": preparation_s,
        "memory_estimate_mb": memory["total"],
        "trainable_parameters": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "accuracy_before": module.evaluations[0]["accuracy"],
        "accuracy_after": module.evaluations[-1]["accuracy"],
        **module.hyperparameters(),
    }
    write_json(summary, run_dir / "run.json")
    log_summary(trainer, module, summary)
    records = [r for r in module.records if r.get("updates")]
    updates, silent = sum(r["updates"] for r in records), sum(r["zero_grad_updates"] for r in records)
    if updates and silent / updates > 0.5:
        log.warning(
            "%s: %d of its %d updates carried no gradient (every advantage 0: its groups all passed or all "
            "failed): most of this run measured nothing",
            run_dir.name,
            silent,
            updates,
        )
    write_json(logger_names(suite.trainer.loggers), run_dir / "loggers.json")  # what its records went to
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # finished: the record is what stays
    return preparation_s


def continued(run_dir: Path, origin: dict, resume: bool, say) -> dict:
    """A run's provenance (`harness.provenance`): written when it starts; on resume, checked against
    what it started from (other starting weights are refused, naming both digests) and returned as
    recorded then, with any other environment it was resumed in added under `resumed_in`."""
    path = run_dir / "provenance.json"
    if not resume or not path.exists():  # a run started before provenance was kept: from here on
        if distributed.rank() == 0:
            write_json(origin, path)
        return origin
    recorded = json.loads(path.read_text())
    check_same_start([("the run", recorded), ("its resume", origin)], run_dir.name)
    if environment_key(recorded) != environment_key(origin):
        say(f"resumed in another environment ({describe(origin)}; it started in {describe(recorded)})")
        recorded = {**recorded, "resumed_in": [*recorded.get("resumed_in", []), origin["environment"]]}
        if distributed.rank() == 0:
            write_json(recorded, path)
    return recorded


def memory_estimate(suite: Suite, module) -> dict[str, float]:
    """`rollout.memory.estimate_mb` for one process of this run. The length of a row is the
    longest of the first 256 training prompts plus what the sampler may add: `max_new_tokens`
    for each of a multi-turn task's turns (`max_turns`; the environment's text between them is
    not counted)."""
    t = suite.trainer
    prompts = [module.engine.prompt_ids(p.prompt) for p in list(module.task.train_problems())[:256]]
    new_tokens = module.sampling.max_new_tokens * getattr(module.task, "max_turns", 1)
    per_process = module.schedule.prompts_per_step // t.processes
    return estimate_mb(
        sum(p.numel() for p in module.parameters()),
        module.policy.config,
        rows_per_update=per_process // module.update_args.minibatches * module.group_size,
        rows_per_generate=min(per_process * module.group_size, module.sampling.batch_size),
        length=max(map(len, prompts), default=0) + new_tokens,
        scored=new_tokens,
        shards=t.processes if t.strategy == "fsdp" else 1,
        bf16=t.precision == "bf16-mixed",
        checkpointing=suite.model.gradient_checkpointing,
        offload=t.cpu_offload,
        trainable=sum(p.numel() for p in module.parameters() if p.requires_grad),
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


def versions() -> dict[str, str | int]:
    """The releases a run's numbers depend on most (a newer transformers, say, can round
    differently, and a warm start of a few hundred steps amplifies that), torch's with its build
    tag (+cpu, +cu130), and torch's thread count. The rest is in its `environment`."""
    import platform
    from importlib.metadata import version

    packages = ("transformers", "tokenizers", "lightning", "numpy")
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        **{name: version(name) for name in packages},
        "torch_threads": torch.get_num_threads(),
    }


def start_evaluation(
    suite_dir: Path, weights: Path, module, task_key: dict, precision: str = "32-true"
) -> tuple[str, dict[str, float]]:
    """(the key of this run's step-0 evaluation, the step-0 accuracies the suite has measured).
    Every algorithm of a suite starts from the same weights and evaluation is greedy, so the
    step-0 accuracy is the same for all of them: measured by the suite's first run, reused by
    the others (it is not part of the training wall-clock either way)."""
    key = hashlib.sha1(
        json.dumps(
            {
                # by content: a cache entry rebuilt with other weights under the same path is another start
                "weights": getattr(module, "starting_weights_digest", None) or str(weights),
                "task": task_key,
                # without sampled pass@k, the keys as before
                "evaluation": {
                    k: v
                    for k, v in asdict(module.eval_args).items()
                    if module.eval_args.samples or k not in ("samples", "pass_at")
                },
                "max_new_tokens": module.sampling.max_new_tokens,
                **({"sampling": asdict(module.sampling)} if module.eval_args.samples else {}),
                **({} if precision == "32-true" else {"precision": precision}),  # 32-true: the keys as before
            },
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:16]
    path = suite_dir / "start-evaluations.json"
    return key, json.loads(path.read_text()) if path.exists() else {}


def placement(args: TrainerArgs) -> dict:
    """Where a suite's processes run, as Lightning's Trainer arguments (training and `evaluate`)."""
    return {
        "accelerator": args.accelerator,
        "devices": args.devices,
        "num_nodes": args.num_nodes,
        "strategy": strategy(args),
        "precision": args.precision,
    }


def strategy(args: TrainerArgs):
    """The Lightning strategy for a suite's `trainer.strategy`."""
    if args.strategy == "fsdp":
        return FSDP2(args.processes, cpu_offload=args.cpu_offload)
    if args.strategy == "ddp" or args.processes > 1:
        return distributed.RolloutDDP(process_group_backend="gloo" if args.accelerator == "cpu" else None)
    return "auto"


def logger_names(names: list[str] | None) -> list[str]:
    """`trainer.loggers`, or its default: csv, and tensorboard where it is installed."""
    return names if names is not None else ["csv"] + ["tensorboard"] * bool(importlib.util.find_spec("tensorboard"))


def loggers(run_dir: Path, names: list[str] | None, run_id: str, spec: dict) -> list:
    """The run's Lightning loggers (`trainer.loggers`), its settings logged as hyperparameters.
    CSV writes logs/version_0, then version_1 after a resume (nothing overwritten); W&B and MLflow
    continue the same run after a resume (its id kept in the run folder)."""
    chosen = []
    for name in logger_names(names):
        if name == "csv":
            chosen.append(CSVLogger(run_dir, name="logs"))
        elif name == "tensorboard":
            from lightning.pytorch.loggers import TensorBoardLogger

            chosen.append(TensorBoardLogger(run_dir, name="tensorboard"))
        elif name == "wandb":
            from lightning.pytorch.loggers import WandbLogger

            project = os.environ.get("WANDB_PROJECT", "rlvr-harness")
            key = hashlib.sha1(f"{run_dir.resolve()}".encode()).hexdigest()[:16]  # the same run after a resume
            chosen.append(
                WandbLogger(
                    name=run_id, project=project, group=run_id.split("/")[0], save_dir=run_dir, id=key, resume="allow"
                )
            )
        elif name == "mlflow":
            from lightning.pytorch.loggers import MLFlowLogger

            uri = (
                os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(run_dir.parent.parent / 'mlflow.db').resolve()}"
            )
            known = run_dir / "mlflow-run-id"
            chosen.append(
                MLFlowLogger(
                    experiment_name=run_id.split("/")[0],
                    run_name=run_id,
                    tracking_uri=uri,
                    run_id=known.read_text().strip() if known.exists() else None,
                )
            )
            if distributed.rank() == 0:
                known.write_text(chosen[-1].run_id)
    for logger in chosen:
        logger.log_hyperparams(spec)
    return chosen


def finished_afterwards(suite: Suite, algorithm: str, seed: int, run_dir: Path, cache_dir: Path, say) -> None:
    """What a finished run can still give of the settings that do not change its records: its
    records sent to the loggers named since it ran (`trainer.loggers`), and its policy
    (`keep_policy`), which a finished run does not keep: the run is replayed from its start in a
    scratch folder, and the policy kept only if the replay's records are the run's own."""
    if suite.trainer.keep_policy and not (run_dir / "policy").is_dir():
        replay_for_policy(suite, algorithm, seed, run_dir, cache_dir, say)
    asked = logger_names(suite.trainer.loggers)
    sent = run_dir / "loggers.json"
    before = json.loads(sent.read_text()) if sent.exists() else None
    if before is None:  # a run from before loggers were recorded: the ones its folder shows
        before = [
            n
            for n, d in (("csv", "logs"), ("tensorboard", "tensorboard"), ("wandb", "wandb"))
            if (run_dir / d).exists()
        ]
        before += ["mlflow"] * (run_dir / "mlflow-run-id").exists()
    new = [name for name in asked if name not in before]
    if not new:
        return
    summary = json.loads((run_dir / "run.json").read_text())
    metrics = pl.read_parquet(run_dir / "metrics.parquet")
    evaluations = pl.read_parquet(run_dir / "eval.parquet") if (run_dir / "eval.parquet").exists() else pl.DataFrame()
    chosen = loggers(run_dir, new, f"{suite.name}/{run_dir.name}", run_spec(suite, algorithm, seed))
    for row in metrics.iter_rows(named=True):
        scalars = {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for logger in chosen:
            logger.log_metrics(scalars, step=row["step"])
    close_loggers(chosen, summary, metrics, evaluations, len(metrics))
    write_json(before + new, sent)
    say(f"its records sent to {', '.join(new)} (trainer.loggers)")


def replay_for_policy(suite: Suite, algorithm: str, seed: int, run_dir: Path, cache_dir: Path, say) -> None:
    """Run a finished run again from its start to keep its policy: on one machine a run's
    records are deterministic, so equal records are the same weights. A run of several
    processes is not replayed from here (its other processes have gone)."""
    if suite.trainer.processes > 1:
        say("trainer.keep_policy: it finished without keeping its policy; replay it with one process to keep one")
        return
    scratch = run_dir.parent / ".replay" / run_dir.name
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    say(f"trainer.keep_policy: it finished without keeping its policy; replaying it in {scratch} to keep it")
    quiet = dataclasses.replace(suite, trainer=dataclasses.replace(suite.trainer, loggers=[]))
    write_json(run_spec(quiet, algorithm, seed), scratch / "spec.json")
    fit(quiet, algorithm, seed, scratch, cache_dir, False, say)
    recorded, replayed = (pl.read_parquet(d / "metrics.parquet") for d in (run_dir, scratch))
    kept = [c for c in recorded.columns if not c.startswith(MEASURED)]
    if replayed.select(kept).equals(recorded.select(kept)):
        (scratch / "policy").rename(run_dir / "policy")
        say(f"its policy kept in {run_dir / 'policy'} (the replay's records are the run's own)")
    else:
        say("the replay's records differ from the run's (another machine or release?): no policy kept")
    shutil.rmtree(scratch.parent, ignore_errors=True)


def close_loggers(chosen: list, summary: dict, metrics: pl.DataFrame, evaluations: pl.DataFrame, step: int) -> None:
    """The run's row of the leaderboard's run table (`harness.leaderboard.run_table`: rollouts,
    accuracies, zero-gradient fraction, stage times...) on every logger as `final/...`, then each
    logger closed: the next run in this process starts a W&B run of its own."""
    (row,) = run_table([(summary, metrics, evaluations)]).iter_rows(named=True)
    numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    final = {f"final/{k}": float(v) for k, v in numbers.items()}
    for logger in chosen:
        logger.log_metrics(final, step=step)
        logger.save()
        if type(logger).__name__ == "WandbLogger":
            logger.experiment.finish()


def log_summary(trainer: L.Trainer, module, summary: dict) -> None:
    """`close_loggers` for a run that has just finished."""
    frames = (records_frame(module.records), records_frame(module.evaluations))
    close_loggers(trainer.loggers, summary, *frames, module.rl_step)


def quiet_libraries() -> None:
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*modules? in eval mode.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*LitLogger.*")
    warnings.filterwarnings("ignore", message=".*`validation_step` but have no `val_dataloader`.*")  # evaluate's
    # Resuming mid-"epoch" is by design: the prompt stream is keyed by the checkpointed step counter.
    warnings.filterwarnings("ignore", message=".*ended before the epoch ended.*")
