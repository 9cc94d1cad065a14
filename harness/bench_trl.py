"""`python -m harness bench CONFIG --trl`: our GRPO step against TRL's `GRPOTrainer` on the same work.

Both run in one process, one after the other (ours first), on the same thread count:

- the same starting weights and tokenizer (TRL gets a second copy loaded from the directory ours
  was loaded from), plain-text prompts (no chat template);
- the same prompts at every step: TRL's dataset is our prompt stream written out step by step
  (`prompt_stream(problems, seed, k, prompts_per_step)` for k = 0, 1, ...), read in order
  (`shuffle_dataset=False`), one generation batch per step; the prompts TRL's reward function
  receives are recorded and checked against ours (`prompts_identical`);
- the same G, temperature, top-p (no top-k), maximum completion length, reward (our verifier),
  std scaling, clip range, token-mean loss, KL weight, gradient clipping, and one optimizer step
  per batch (no gradient accumulation, one iteration, one generation per step) with an AdamW and a
  learning-rate schedule built exactly as ours (linear warm-up, then constant);
- generation through `model.generate` (no vLLM), no gradient checkpointing, the suite's dtype.

Timing: ours is `harness.bench.bench_module`'s `step_s` (batch start to after the step's records
and checkpoint are written); TRL's is `on_step_begin` -> `on_step_end` of a callback, which
brackets generation (TRL generates inside `training_step` -> `_prepare_inputs`), rewards, the loss,
backward, clipping, the optimizer and scheduler steps, and leaves out fetching the batch and
logging; `trl_cycle_s` (one `on_step_end` to the next) includes those too. The split: ours
`sample` stage against TRL's `_generate_single_turn` (padding, `generate`, cutting at EOS), and the
rest of each step (verifier, advantages, forward, backward, optimizer; ours also its records).
The first step of each is a warm-up and is not counted; figures are medians over measured steps.
Ratios are ours / TRL: below 1 means ours is faster.

What cannot be the same: the sampled completions (each side draws its own random numbers, so the
completions, their lengths and the weights after step 1 differ; the tokens generated per step are
reported for both) and each side's own bookkeeping (ours writes a checkpoint and its records every
step and the log-probs of the sampled tokens; TRL computes per-token entropies for its logs and logs
metrics every step). Neither projects the prompt's positions to the vocabulary; ours also runs a
group's shared prompt through the trunk once (prefill in sampling, and in the training forward
pass, with its gradient), where TRL's `generate` and forward run it once per completion.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any

import polars as pl
import torch

from algorithms.base import prompt_stream
from harness.config import Benchmark
from tasks.base import Task


class ComparisonError(ValueError):
    """A suite the comparison cannot run (one line for the CLI)."""


LOSS_TYPES = {"token-mean": "dapo", "sequence-mean": "grpo", "constant": "dr_grpo"}
"""Our loss aggregation -> TRL's loss_type. With one micro-batch per optimizer step, TRL's "dapo"
(divided by the number of completion tokens in the batch) is our token-mean; "grpo" (mean over
each completion's tokens, then over completions) is our sequence-mean; "dr_grpo" (divided by
completions x max_completion_length) is our constant."""


def trl_settings(module, total_steps: int) -> dict[str, Any]:
    """GRPOConfig arguments that do the same work as `module`'s GRPO step."""
    schedule, sampling, optim, update = module.schedule, module.sampling, module.optim_args, module.update_args
    if update.minibatches != 1 or update.epochs != 1:
        raise ComparisonError(
            "update: the TRL comparison needs minibatches: 1 and epochs: 1 (one optimizer step per batch)"
        )
    if update.loss_aggregation not in LOSS_TYPES:
        raise ComparisonError(f"update.loss_aggregation: no TRL equivalent of {update.loss_aggregation!r}")
    if update.max_tokens not in (None, sampling.max_new_tokens) or update.kl_estimator != "k3":
        raise ComparisonError("update: TRL divides dr_grpo by max_completion_length and estimates the KL by k3 only")
    group_size = module.group_size
    return dict(
        max_steps=total_steps,
        per_device_train_batch_size=schedule.prompts_per_step * group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        num_generations=group_size,
        shuffle_dataset=False,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=0,
        max_completion_length=sampling.max_new_tokens,
        learning_rate=optim.lr,
        weight_decay=optim.weight_decay,
        max_grad_norm=optim.max_grad_norm,
        warmup_steps=optim.warmup_steps,  # informative: the scheduler passed to the trainer is ours
        beta=update.kl_coef,
        epsilon=update.clip_low,
        epsilon_high=update.clip_high,
        importance_sampling_level=update.ratio_level,
        loss_type=LOSS_TYPES[update.loss_aggregation],
        scale_rewards="group" if getattr(module, "scale_by_std", True) else "none",
        mask_truncated_completions=False,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=not torch.cuda.is_available(),
        seed=module.seed,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )


def our_optimizer(parameters, optim):
    """AdamW and the warm-up schedule exactly as `RLVRModule.configure_optimizers` builds them."""
    optimizer = torch.optim.AdamW(parameters, lr=optim.lr, weight_decay=optim.weight_decay)
    warmup = max(optim.warmup_steps, 1)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))


def run_trl(module, weights, total_steps: int, dtype: str = "float32") -> dict[str, Any]:
    """`total_steps` steps of TRL's GRPOTrainer on `module`'s task, prompt stream and settings,
    from the weights in `weights`. Returns per-step times and what the reward function saw."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from harness.models import load_policy

    schedule, task, group_size = module.schedule, module.task, module.group_size
    problems = task.train_problems()[: schedule.prompt_pool]  # as RLVRModule.training_step draws them
    steps = [prompt_stream(problems, module.seed, k, schedule.prompts_per_step) for k in range(total_steps)]
    by_id = {p.id: p for step in steps for p in step}
    dataset = Dataset.from_dict(
        {"prompt": [p.prompt for step in steps for p in step], "problem_id": [p.id for step in steps for p in step]}
    )
    policy, tokenizer = load_policy(weights, dtype, attention="sdpa")  # as TRL's users load it
    policy.train()
    sample = steps[0][0].prompt
    if tokenizer(sample).input_ids != tokenizer(sample, add_special_tokens=False).input_ids:
        raise ComparisonError("the tokenizer adds special tokens to a prompt: TRL's prompts would differ from ours")

    seen: dict[str, list] = {"prompt_ids": [], "prompts": [], "tokens": [], "generate_s": []}

    def verifier_reward(prompts, completions, completion_ids, problem_id, **_):
        # Called once per step on the whole generation batch, grouped by prompt (G in a row).
        seen["prompt_ids"].append(list(problem_id[::group_size]))
        seen["prompts"].append(list(prompts[::group_size]))
        seen["tokens"].append(sum(len(ids) for ids in completion_ids))
        # the task's own stage 2, as ours calls it (the code task runs its programs in parallel)
        batch = SimpleNamespace(problems=[by_id[i] for i in problem_id], completions=list(completions))
        return [verdict.reward for verdict in task.verify_all(batch)]

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.begin, self.end = [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, args, state, control, **kwargs):
            self.end.append((time.perf_counter(), time.process_time()))

    times = StepTimes()
    settings = trl_settings(module, total_steps)
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    # transformers 5 renamed gradient checkpointing; setting the new name too avoids its warning
    renamed = {"activation_checkpointing": False} if "activation_checkpointing" in names else {}
    with tempfile.TemporaryDirectory() as scratch:
        config = GRPOConfig(output_dir=scratch, **settings, **renamed)
        trainer = GRPOTrainer(
            model=policy,
            reward_funcs=verifier_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[times],
            optimizers=our_optimizer([p for p in policy.parameters() if p.requires_grad], module.optim_args),
        )
        trainer.remove_callback(PrinterCallback)  # the per-step log dicts, printed
        generate = trainer._generate_single_turn

        def timed_generate(*args, **kwargs):  # where TRL calls model.generate
            started = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                seen["generate_s"].append(time.perf_counter() - started)

        trainer._generate_single_turn = timed_generate
        trainer.train()
    return {
        "step_s": [e[0] - b[0] for b, e in zip(times.begin, times.end)],
        "cpu_s": [e[1] - b[1] for b, e in zip(times.begin, times.end)],
        "cycle_s": [e[0] - b[0] for b, e in zip(times.end, times.end[1:])],
        "settings": settings,
        **seen,
    }


def process_time_per_step(module) -> list[float]:
    """CPU seconds of the process per step of `module`, filled as it trains: from the module's
    batch-start hook to its batch-end hook (Lightning calls the module's hooks after the
    callbacks', so this spans what `bench_module`'s clock does, the records and checkpoint too)."""
    seconds: list[float] = []
    start, end = module.on_train_batch_start, module.on_train_batch_end

    def on_start(*args, **kwargs):
        seconds.append(-time.process_time())
        return start(*args, **kwargs)

    def on_end(*args, **kwargs):
        end(*args, **kwargs)
        seconds[-1] += time.process_time()

    module.on_train_batch_start, module.on_train_batch_end = on_start, on_end
    return seconds


def check_suite(suite) -> None:
    """Refuse a suite the comparison cannot run, before anything is built."""
    if "grpo" not in suite.algorithms:
        raise ComparisonError(f"suite {suite.name!r}: no algorithm named 'grpo' to compare with TRL's GRPOTrainer")
    task = suite.task.resolve()
    if task.rollout is not Task.rollout:
        raise ComparisonError(
            f"suite {suite.name!r}: {task.__name__}'s multi-turn rollouts have no GRPOTrainer equivalent"
        )
    reason = task.unavailable()
    if reason:
        raise ComparisonError(f"suite {suite.name!r}: {suite.task.class_path} {reason}")


def run_trl_comparison(benchmark: Benchmark, suite_name: str, steps: int, trace: dict | None = None) -> pl.DataFrame:
    """One row: our GRPO's and TRL's median step times on the suite's `grpo` algorithm, `steps`
    measured steps each after one warm-up step, and the settings both ran with. `trace`, when
    given, is filled with the per-step details (prompts, times, tokens) of both."""
    from harness.bench import bench_module
    from harness.build import build_module
    from harness.quiet import quiet_libraries

    quiet_libraries()
    suite = next((s for s in benchmark.suites if s.name == suite_name), None)
    if suite is None:
        raise ComparisonError(f"--suite: no suite named {suite_name!r}")
    check_suite(suite)
    total = steps + 1
    module, weights = build_module(
        suite,
        "grpo",
        suite.seeds[0],
        benchmark.cache_dir,
        schedule={"steps": total},
        evaluation={"every": 10**9, "limit": 0},
    )
    trl_settings(module, total)  # refuse a protocol TRL cannot do before spending time on ours
    threads = torch.get_num_threads()
    ours_cpu_s = process_time_per_step(module)
    ours = bench_module(module, total)
    ours_prompt_ids = [list(r["prompt_ids"]) for r in module.records]
    ours_tokens = [r["tokens/generated"] for r in module.records]
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    trl = run_trl(module, weights, total, suite.model.dtype)
    trl_threads = torch.get_num_threads()

    pool, schedule = module.task.train_problems()[: module.schedule.prompt_pool], module.schedule
    expected_prompts = [
        [p.prompt for p in prompt_stream(pool, module.seed, k, schedule.prompts_per_step)] for k in range(total)
    ]
    identical = trl["prompt_ids"] == ours_prompt_ids and trl["prompts"] == expected_prompts
    if trace is not None:
        trace.update(
            ours_rows=ours,
            ours_step_s=[r["step_s"] for r in ours],
            ours_prompt_ids=ours_prompt_ids,
            ours_tokens=ours_tokens,
            ours_cpu_s=ours_cpu_s,
            expected_prompts=expected_prompts,
            **{f"trl_{key}": value for key, value in trl.items()},
        )
    measured = ours[1:]  # the first step of each side is a warm-up
    trl_measured = {key: trl[key][1:] for key in ("step_s", "cpu_s", "generate_s", "tokens")}
    ours_step = statistics.median(r["step_s"] for r in measured)
    trl_step = statistics.median(trl_measured["step_s"])
    trl_cycle = statistics.median(trl["cycle_s"]) if trl["cycle_s"] else float("nan")
    settings = trl["settings"]
    row = {
        "suite": suite.name,
        "measured_steps": steps,
        "ours_step_s": ours_step,
        "trl_step_s": trl_step,
        "ratio_ours_to_trl": ours_step / trl_step,
        # where the time goes: generation, then everything else of the step
        "ours_sample_s": statistics.median(r["sample"] for r in measured),
        "trl_generate_s": statistics.median(trl_measured["generate_s"]),
        "ours_rest_s": statistics.median(r["step_s"] - r["sample"] for r in measured),
        "trl_rest_s": statistics.median(t - g for t, g in zip(trl_measured["step_s"], trl_measured["generate_s"])),
        "ours_update_s": statistics.median(r["update"] for r in measured),
        "trl_cycle_s": trl_cycle,
        # CPU seconds of the process over the same brackets: the work done, less sensitive to other
        # processes on the machine than wall-clock (with 1 thread; more threads add their spin-waits)
        "ours_cpu_s": statistics.median(ours_cpu_s[1:]),
        "trl_cpu_s": statistics.median(trl_measured["cpu_s"]),
        "ratio_ours_to_trl_cpu": statistics.median(ours_cpu_s[1:]) / statistics.median(trl_measured["cpu_s"]),
        "ratio_ours_to_trl_cycle": ours_step / trl_cycle,
        "ours_tokens/step": statistics.mean(ours_tokens[1:]),
        "trl_tokens/step": statistics.mean(trl_measured["tokens"]),
        "prompts_identical": identical,
        "threads": f"{threads}/{trl_threads}",
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "trl_version": version("trl"),
        "prompts/step": module.schedule.prompts_per_step,
        "G": module.group_size,
        "temperature": settings["temperature"],
        "top_p": settings["top_p"],
        "max_new_tokens": settings["max_completion_length"],
        "lr": settings["learning_rate"],
        "warmup_steps": settings["warmup_steps"],
        "max_grad_norm": settings["max_grad_norm"],
        "clip": f"[1 - {settings['epsilon']}, 1 + {settings['epsilon_high']}]",
        "kl_coef": settings["beta"],
        "loss": f"{module.update_args.loss_aggregation} / loss_type={settings['loss_type']}",
        "scale_rewards": settings["scale_rewards"],
        "dtype": suite.model.dtype,
    }
    return pl.DataFrame([row])


def show(board: pl.DataFrame) -> str:
    """The comparison as `name | value` lines, one table per suite."""
    from harness.leaderboard import markdown

    tables = []
    for row in board.iter_rows(named=True):
        values = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()]
        tables.append(markdown(pl.DataFrame({"quantity": list(row), "value": values})))
    return "\n\n".join(tables)


def write_trl_report(board: pl.DataFrame, command: str, path) -> None:
    from harness.records import write_atomic

    text = (
        "# GRPO step time: ours vs TRL's GRPOTrainer\n\n"
        f"`{command}`\n\nSame weights, prompts, G, sampling, lengths, one optimizer step per batch, one process. "
        f"Medians over the measured steps (the first step is a warm-up).\n\n{show(board)}\n"
    )
    write_atomic(path, lambda tmp: tmp.write_text(text))
