"""The shared RLVR step: sample -> verify -> credit -> update -> record (DESIGN section 2).

An algorithm subclasses `RLVRModule`, says how many rollouts it draws per prompt and implements
`credit` (stage 3); everything else, the clipped surrogate included, is shared so that a paired
comparison differs only in where the credit comes from.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, replace
from typing import Any, ClassVar, Sequence, get_type_hints

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.distributed.tensor import DTensor

from algorithms.fidelity import eligible_spans, locate, on_span, step_fidelity
from algorithms.loss import policy_loss
from algorithms.settings import EvalArgs, OptimArgs, Schedule, UpdateArgs
from algorithms.teaching import Teaching
from rollout import distributed
from rollout.batch import Rollouts, concatenate, solved
from rollout.decoding import RolloutEngine
from rollout.lora import adapters_disabled, has_adapters
from rollout.memory import peak_mb, reset_peak
from rollout.ranges import violation
from rollout.scoring import masked_mean, sequence_logprobs
from rollout.settings import SamplingArgs
from rollout.sharding import FSDP2, gathered, is_sharded
from tasks.base import Problem, Span, Task


def token_mean_divisor(eligible: Tensor) -> float:
    """What a mini-batch's token-mean loss divides by: the mean eligible-token count per process
    of the mini-batch over every process, not this process's own count, as gradients are then
    averaged over processes: the token-mean of the whole step's mini-batch."""
    return distributed.total(float(eligible.sum())) / distributed.world_size()


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed (Chen et al., 2021): 1 - C(n-c, k) / C(n, k),
    as the stable product 1 - prod_{i=n-c+1}^{n} (1 - k / i)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


STAGES = ("sample", "verify", "credit", "update")
"""The timed stages of a step (`timing_s/<stage>` in its record); recording is the fifth."""
NEAR_EDGE = 0.02
"""A start this close to 0 or 1 held out is warned of: most groups then carry no credit."""
log = logging.getLogger("harness")


def prompt_stream(problems: Sequence[Problem], seed: int, step: int, count: int) -> list[Problem]:
    """The prompts of `step`: a pure function of (seed, step), so every algorithm of a pair sees
    the same prompts at every step and a resumed run continues the same stream."""
    rng = random.Random(f"{seed}/{step}")
    return [problems[i] for i in rng.sample(range(len(problems)), count)]


class RLVRModule(L.LightningModule):
    """Base of every algorithm. Subclasses set `group_size` and implement `credit`."""

    group_size: int = 1
    update_overrides: ClassVar[dict[str, Any]] = {}
    """`update` settings the algorithm is defined by (DAPO's clip_high, GSPO's ratio_level), applied
    over the suite's and under the algorithm's own `init_args.update`: they stand in its spec and
    in the leaderboard's `own_settings` like any other setting."""
    teaching: ClassVar[type[Teaching] | None] = None
    """The settings and examples that teach a small model to read the algorithm's privileged
    context in the warm start (algorithms/teaching.py), for `model.warm_start.teach` to name by
    the algorithm's class path; None: it has none to teach."""

    def __init__(
        self,
        policy: torch.nn.Module,
        tokenizer,
        task: Task,
        schedule: Schedule = Schedule(),
        sampling: SamplingArgs = SamplingArgs(),
        optim: OptimArgs = OptimArgs(),
        update: UpdateArgs = UpdateArgs(),
        evaluation: EvalArgs = EvalArgs(),
        seed: int = 0,
    ):
        """`seed`: the run's seed (the suite's `seeds`): the prompt stream's and the samplers'."""
        super().__init__()
        self.seed = seed
        self.automatic_optimization = False  # several updates per step, each norm recorded
        self.policy, self.tokenizer, self.task = policy, tokenizer, task
        self.schedule, self.sampling, self.optim_args = schedule, sampling, optim
        self.update_args, self.eval_args = update, evaluation
        if sampling.backend == "vllm":
            from rollout.vllm_engine import VLLMEngine

            self.engine = VLLMEngine(policy, tokenizer, sampling, directory=policy.name_or_path, seed=seed)
        else:
            self.engine = RolloutEngine(policy, tokenizer, sampling)
        self.reference = None
        if update.kl_coef > 0 and not has_adapters(policy):  # with LoRA: the policy, adapters off
            import copy

            self.reference = copy.deepcopy(policy).requires_grad_(False).eval()
        # Training state that is not a tensor: saved and restored with the checkpoint.
        self.rl_step = 0
        self.wall_clock_s = 0.0
        self.rollouts_total = 0
        self._rng_restored = False
        self.stage_peaks_mb: dict[str, float] = {}  # this step's, by stage
        self.records: list[dict[str, Any]] = []  # one row per step
        self.evaluations: list[dict[str, Any]] = []  # held-out accuracy, step 0 included
        self.completions_per_step = 0  # the driver sets it (`trainer.completions`)
        self.completions: list[dict[str, Any]] = []  # a sample of each step's rollouts, with their text
        self.eval_completions: list[dict[str, Any]] = []  # every held-out completion of every evaluation

    @classmethod
    def check_args(cls, args: dict[str, Any]) -> None:
        """Refuse values of the algorithm's own arguments (`init_args`, less the suite's settings)
        out of range, before anything runs: raise ValueError("name: what is wrong"). Here: the
        ranges its constructor declares (`group_size: GroupSize`); a subclass adds what those
        cannot say. The types were already checked against the same annotations."""
        try:
            hints = get_type_hints(cls.__init__, include_extras=True)
        except NameError:  # a type-checking-only annotation
            hints = {}
        for key, value in args.items():
            wrong = violation(hints[key], value) if key in hints else None
            if wrong:
                raise ValueError(f"{key}: {wrong}")

    @classmethod
    def check_task(cls, task: type[Task], args: dict[str, Any]) -> None:
        """Refuse a task the algorithm cannot serve (step-level credit on a single-turn task):
        raise ValueError("the reason, in one line")."""

    @classmethod
    def critic_on_trunk(cls, args: dict[str, Any]) -> bool:
        """Whether a critic with these arguments trains the policy's own parameters (its gradient
        is then taken in a backward pass of its own over the shared graph, which FSDP cannot do)."""
        return False

    # ------------------------------------------------------------------ stage 3: the algorithm's

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        """Per-token advantages [N, L] (zero off the eligible tokens) and credit statistics."""
        raise NotImplementedError

    def score(self, batch: Rollouts) -> tuple[Tensor, dict[str, Tensor]]:
        """Per-token log-probs [N, L] under the current policy (with gradient) and any other
        per-token outputs of the same forward pass (PPO's values). A group's shared prompt runs
        through the trunk once."""
        return self.eligible_logprobs(self.policy, batch, self.positions_to_score(batch)), {}

    def eligible_logprobs(self, model, batch: Rollouts, positions: Tensor | None = None) -> Tensor:
        """[N, L] log-probs of `batch`'s eligible tokens (or of `positions`) under `model` at the
        sampling temperature (0 elsewhere), each group's shared prompt run once."""
        return sequence_logprobs(
            model,
            batch.input_ids,
            batch.attention_mask,
            self.sampling.temperature,
            batch.eligible if positions is None else positions,
            group_size=self.group_size,
            slots=self.update_args.scoring_tokens,
        )

    def positions_to_score(self, batch: Rollouts) -> Tensor:
        """The tokens the update scores: every eligible one, or with `update.skip_zero_advantage`
        none of a group whose advantages are all 0 (where that setting applies). One group is
        scored even then, so that a step without signal still has its gradient, all zeros."""
        args = self.update_args
        applies = (
            args.skip_zero_advantage
            and args.kl_coef == 0
            and all(
                getattr(type(self), name) is getattr(RLVRModule, name)
                for name in ("score", "policy_objective", "critic_loss")
            )
            and not is_sharded(self.policy)
        )
        if not applies:
            return batch.eligible
        signal = (batch.token_data["advantages"] != 0) & batch.eligible
        groups = signal.view(-1, self.group_size * signal.shape[1]).any(1)
        groups[0] |= not groups.any()
        return batch.eligible & groups.repeat_interleave(self.group_size)[:, None]

    def policy_objective(
        self, batch: Rollouts, logprobs: Tensor, surrogate: Tensor, outputs: dict[str, Tensor]
    ) -> tuple[Tensor, dict[str, float]]:
        """The policy's loss for one update from the shared surrogate (KL included), the
        mini-batch's log-probs (with gradient) and the other outputs of `score`, and its
        statistics; SDPO blends in a distillation term here. By default the surrogate itself."""
        return surrogate, {}

    def diagnostics(self, rollouts: Rollouts) -> dict[str, float]:
        """Measurements of the algorithm's own machinery recorded with the step's row, kept out
        of its wall-clock as credit fidelity is (SDPO's probe of its teacher block). None here."""
        return {}

    def critic_loss(self, batch: Rollouts, outputs: dict[str, Tensor]) -> tuple[Tensor | None, dict[str, float]]:
        """A learned critic's loss (PPO's value loss) and its statistics; None without a critic.
        Its gradient is clipped and recorded apart from the policy's."""
        return None, {}

    # ------------------------------------------------------------------ the step

    @contextmanager
    def stage(self, timing: dict[str, float], name: str):
        """Time one stage of the step into `timing[name]` and note its peak memory (`harness
        bench` wraps this to split each stage further)."""
        reset_peak()
        start = time.perf_counter()
        yield
        timing[name] = timing.get(name, 0.0) + time.perf_counter() - start  # a stage may run twice (DAPO)
        self.stage_peaks_mb[name] = max(self.stage_peaks_mb.get(name, 0.0), peak_mb())

    def training_step(self, batch: Any, batch_idx: int) -> None:
        timing: dict[str, float] = {}
        started = time.perf_counter()
        problems = prompt_stream(
            self.task.train_problems()[: self.schedule.prompt_pool],
            self.seed,
            self.rl_step,
            self.schedule.prompts_per_step,
        )
        problems = distributed.shard(problems)  # this process's prompts (all of them on one device)
        self.stage_peaks_mb, self.discarded_rollouts = {}, 0
        rollouts = self.sample(problems, timing)
        trainable = rollouts.trainable(self.group_size)  # groups the verifier judged in full
        with self.stage(timing, "credit"):
            advantages, credit_stats = self.credit(trainable)
        measured = time.perf_counter()  # a measurement, not the algorithm's work: kept out of its wall-clock
        located: dict[int, Span | None] = {}  # each rollout's first error, located once a step
        credit_stats |= step_fidelity(self.task, trainable, advantages, self.tokenizer, located=located)
        credit_stats |= self.diagnostics(trainable)
        kept = self.completions_per_step if distributed.rank() == 0 else 0
        # the kept completions show theirs (`harness show`), and each token's place in their text
        locate(self.task, trainable, range(min(kept, len(trainable))), located)
        spans = [
            eligible_spans(self.tokenizer, trainable, i, self.task.multi_turn) for i in range(min(kept, len(trainable)))
        ]
        credit_stats["measure_s"] = time.perf_counter() - measured  # what measuring cost, outside wall_clock_s
        started += credit_stats["measure_s"]
        with self.stage(timing, "update"):
            update_stats = self.update(trainable, advantages)
        if kept:
            self.completions += self.completion_rows(trainable, advantages, located, spans)
        if distributed.world_size() > 1:
            rollouts, advantages, credit_stats = self.gather_step(rollouts, advantages, credit_stats)
        self.rl_step += 1
        spent = len(rollouts) + int(distributed.total(float(self.discarded_rollouts)))
        self.rollouts_total += spent
        self.wall_clock_s += time.perf_counter() - started
        row = self.record(rollouts, advantages, timing, credit_stats | update_stats, spent)
        if self.rl_step % self.eval_args.every == 0 or self.rl_step == self.schedule.steps:
            evaluation = self.evaluate()
            row["eval/accuracy"] = evaluation["accuracy"]
            self.evaluations.append({"step": self.rl_step, **evaluation})
        self.records.append(row)
        # Every scalar goes to the loggers as is; only the progress bar's two go through self.log,
        # whose per-key bookkeeping costs about a millisecond a key.
        scalars = {k: float(v) for k, v in row.items() if isinstance(v, (int, float))}
        for logger in self.loggers:
            logger.log_metrics(scalars, step=self.rl_step)
        self.log_dict(
            {k: v for k, v in scalars.items() if k in ("reward", "eval/accuracy")},
            on_step=True,
            prog_bar=True,
            logger=False,
        )
        if self.rl_step >= self.schedule.steps:
            self.trainer.should_stop = True

    def completion_rows(
        self, rollouts: Rollouts, advantages: Tensor, located: dict[int, Span | None], spans: list[list[Span]]
    ) -> list[dict[str, Any]]:
        """The first `completions_per_step` rollouts of this step (the first process's: its first
        groups), with their text, verdicts and each generated token's advantage (and, where the
        algorithm gives tokens weights of their own, as HP-RLVR does, those weights), each token's
        character span in the completion (`spans`; on a multi-turn task its whole command's, so a
        turn's tokens share one span and the text between turns is the environment's), and the
        first error of each (`located`: the step has located them, inside its measure)."""
        weights = rollouts.token_data.get("token_weights")
        rows = []
        for i in range(min(self.completions_per_step, len(rollouts))):
            eligible = rollouts.eligible[i]
            verdict = rollouts.verdicts[i]
            ids = rollouts.input_ids[i][eligible].tolist()
            error = located[i]
            rows.append(
                {
                    "step": self.rl_step + 1,
                    "rollout": i,
                    "problem": rollouts.problems[i].id,
                    "prompt": rollouts.problems[i].prompt,
                    "completion": rollouts.completions[i],
                    "reward": verdict.reward,
                    "feedback": verdict.feedback,
                    "judged": verdict.judged,
                    "tokens": self.tokenizer.convert_ids_to_tokens(ids),
                    "token_advantages": advantages[i][eligible].float().tolist(),
                    "token_weights": None if weights is None else weights[i][eligible].float().tolist(),
                    # where the task locates the error (Task.first_error): the step, and its tokens
                    "error_step": None if error is None else rollouts.completions[i][slice(*error)],
                    "error_tokens": None if error is None else on_span(spans[i], error),
                    "token_spans": [list(span) for span in spans[i]],
                }
            )
        return rows

    def sample(self, problems: list[Problem], timing: dict[str, float]) -> Rollouts:
        """Stages 1-2: this process's rollouts of `problems`, verified. An algorithm that spends
        rollouts it does not train on (DAPO's dynamic sampling) counts them in `discarded_rollouts`."""
        with self.stage(timing, "sample"), gathered(self.policy):
            rollouts = self.task.rollout(self.engine, problems, self.group_size)
        with self.stage(timing, "verify"):
            rollouts.verdicts = self.task.verify_all(rollouts)
        return rollouts

    # ------------------------------------------------------------------ stage 4: shared update

    def update(self, rollouts: Rollouts, advantages: Tensor) -> dict[str, Any]:
        args, group_size = self.update_args, self.group_size
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        groups = torch.arange(len(rollouts)).view(-1, group_size)  # rows of one prompt stay together
        chunks = list(groups.view(args.minibatches, -1).unbind())  # equal parts (validated)
        rollouts.token_data["advantages"] = advantages
        single_update = args.minibatches == 1 and args.epochs == 1
        if not single_update:
            # pi_old must be the snapshot that sampled, for every mini-batch after the first.
            with torch.no_grad():
                rollouts.token_data["old_logprobs"] = self.eligible_logprobs(self.policy, rollouts)
        norms, losses, clipped, extras, mismatch = [], [], [], [], []
        for epoch in range(args.epochs):
            for index in chunks:
                batch = rollouts.select(index)
                logprobs, outputs = self.score(batch)
                # With one update per step the ratio is exactly 1 (pi_old is the current policy).
                old = logprobs.detach() if single_update else batch.token_data["old_logprobs"]
                if epoch == 0:  # the sampler's log-probs against the policy's, at the weights that sampled
                    mismatch.append((old - batch.sample_logprobs).abs()[self.positions_to_score(batch)])
                weights = None
                if args.tis_cap is not None:
                    weights = torch.exp(old - batch.sample_logprobs).clamp(max=args.tis_cap) * batch.eligible
                reference = None
                if args.kl_coef > 0:
                    with torch.no_grad(), self.starting_policy() as start:
                        reference = self.eligible_logprobs(start, batch)
                loss, clip = policy_loss(
                    logprobs,
                    old,
                    batch.token_data["advantages"],
                    batch.eligible,
                    args,
                    tokens=token_mean_divisor(batch.eligible),
                    max_tokens=args.max_tokens or self.sampling.max_new_tokens,
                    token_weights=weights,
                    reference=reference,
                )
                loss, objective_stats = self.policy_objective(batch, logprobs, loss, outputs)
                critic_loss, critic_stats = self.critic_loss(batch, outputs)
                optimizer.zero_grad(set_to_none=True)
                norm, critic_norm = self.backward_by_role(loss, critic_loss)
                optimizer.step()
                norms.append(norm)
                losses.append(float(loss.detach()))
                clipped.append(clip)
                extras.append(
                    objective_stats | critic_stats | ({} if critic_norm is None else {"critic/grad_norm": critic_norm})
                )
        lr = scheduler.get_last_lr()[0]  # the rate these updates used
        scheduler.step()
        self.engine.push_weights()  # the next step samples from the weights these updates made
        gaps = torch.cat(mismatch) if mismatch else torch.zeros(0)
        stats = {
            "grad_norm": norms[0],
            "grad_norms": norms,
            "updates": len(norms),
            "zero_grad_updates": sum(n == 0.0 for n in norms),
            "loss": float(np.mean(losses)),
            **{f"clip_ratio/{k}_mean": float(np.mean([c[k] for c in clipped])) for k in ("low", "high", "region")},
            "lr": lr,
            "sampler/logprob_diff_mean": float(gaps.mean()) if gaps.numel() else 0.0,
            "sampler/logprob_diff_max": float(gaps.max()) if gaps.numel() else 0.0,
        }
        for key in extras[0] if extras else []:
            stats[key] = float(np.mean([e[key] for e in extras]))
        return stats

    def backward_by_role(self, loss: Tensor, critic_loss: Tensor | None) -> tuple[float, float | None]:
        """Gradients of both losses, each role's clipped on its own at `max_grad_norm`: (the
        policy's norm, the critic's or None), before clipping. The critic's gradient is every
        gradient its loss produces (its head and, for a critic on the policy's trunk, the trunk),
        taken first in a backward pass of its own and added back after the policy's is clipped."""
        # The parameter lists are taken after each backward pass: FSDP swaps a unit's sharded
        # parameters back in only when its gradients are reduced.
        critic_norm, critic_grads = None, None
        if critic_loss is not None:
            self.manual_backward(critic_loss, retain_graph=True)
            critic_norm = self.synchronise_and_clip([p for p in self.parameters() if p.grad is not None])
            critic_grads = {p: p.grad for p in self.policy.parameters() if p.grad is not None}
            for p in critic_grads:
                p.grad = None
        self.manual_backward(loss)
        norm = self.synchronise_and_clip([p for p in self.policy.parameters() if p.requires_grad])
        for p, extra in (critic_grads or {}).items():
            p.grad = extra if p.grad is None else p.grad + extra
        return norm, critic_norm

    def synchronise_and_clip(self, parameters: list[torch.nn.Parameter]) -> float:
        """Their gradients equal on every process and clipped together; their total norm before
        clipping. FSDP averages the shards it holds in the backward pass; the others (and every
        gradient under DDP) are averaged here."""
        replicated = [p for p in parameters if not isinstance(p, DTensor)]
        distributed.average_gradients(replicated)
        norm = torch.nn.utils.clip_grad_norm_(parameters, self.optim_args.max_grad_norm)
        return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)

    # ------------------------------------------------------------------ stage 5: record

    def record(self, rollouts: Rollouts, advantages: Tensor, timing: dict, stats: dict, spent: int) -> dict[str, Any]:
        """The step's row; `spent`: the rollouts sampled for it, those discarded included."""
        rewards, judged = rollouts.rewards, rollouts.judged
        eligible = rollouts.eligible
        lengths = eligible.sum(-1).float()
        row: dict[str, Any] = {
            "step": self.rl_step,
            "wall_clock_s": self.wall_clock_s,
            **{f"timing_s/{k}": v for k, v in timing.items()},
            "prompts": len(rollouts) // self.group_size,
            # which prompts, so that a pair can be checked from the records alone
            "prompt_ids": [p.id for p in rollouts.problems[:: self.group_size]],
            "group_size": self.group_size,
            "rollouts": spent,
            "rollouts_total": self.rollouts_total,
            "tokens/generated": int(lengths.sum()),
            "completions/mean_length": float(lengths.mean()),
            "completions/max_length": float(lengths.max()),
            "completions/clipped_ratio": float(np.mean(rollouts.truncations(self.tokenizer.eos_token_id))),
            "reward": float(rewards[judged].mean()) if judged.any() else math.nan,
            # rollouts the verifier could not judge (its own failure): their groups were left out
            "verify/unjudged": int((~judged).sum()),
            # TRL's: the spread within each prompt's group, averaged (none for a group of one)
            "reward_std": float(rewards.view(-1, self.group_size).std(-1).mean()) if self.group_size > 1 else math.nan,
            "credit/mean_abs_advantage": float(masked_mean(advantages.abs(), eligible)),
            "credit/frac_tokens_zero_advantage": float(masked_mean(advantages == 0, eligible)),
            # the machine's load over the last minute, per core it may use: above 1, other work
            # shared the cores and slowed this run's wall-clock
            "machine/load_per_core": os.getloadavg()[0] / len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else math.nan,
            # the fullest process's, over the step's stages (not its checkpoint or evaluation)
            **{
                f"memory/peak_mb{'' if key is None else '/' + key}": value
                for key, value in self.peaks_over_processes().items()
            },
        }
        if self.group_size > 1:
            grouped = rewards.view(-1, self.group_size)
            saturated = grouped.max(1).values == grouped.min(1).values
            row["frac_reward_zero_std"] = float(saturated.float().mean())
            row["frac_reward_all_correct"] = float((saturated & (grouped[:, 0] == 1)).float().mean())
            row["frac_reward_all_wrong"] = float((saturated & (grouped[:, 0] == 0)).float().mean())
        row.update(stats)
        return row

    def peaks_over_processes(self) -> dict[str | None, float]:
        """{stage: the largest peak of any process in it} for this step, and {None: the largest of all}."""
        shares = distributed.gather(self.stage_peaks_mb)
        peaks = {stage: max(share.get(stage, 0.0) for share in shares) for stage in self.stage_peaks_mb}
        return {None: max(peaks.values(), default=peak_mb()), **peaks}

    def gather_step(
        self, rollouts: Rollouts, advantages: Tensor, credit_stats: dict[str, float]
    ) -> tuple[Rollouts, Tensor, dict[str, float]]:
        """Every process's rollouts and advantages in prompt order (the shards are contiguous), and
        the credit statistics averaged over processes, so that the record describes the step."""
        slim = replace(rollouts, token_data={"advantages": advantages})  # not old log-probs etc.
        # sharded weights are one copy by construction; replicated ones must agree
        checksum = 0.0 if is_sharded(self.policy) else float(sum(p.detach().double().sum() for p in self.parameters()))
        parts = distributed.gather((slim, credit_stats, checksum))
        whole = concatenate([part for part, _, _ in parts], self.tokenizer.pad_token_id)
        keys = dict.fromkeys(key for _, s, _ in parts for key in s)  # a process may lack some (none located)
        stats = {key: nan_mean([s.get(key, math.nan) for _, s, _ in parts]) for key in keys}
        # the processes must hold the same weights after every update: recorded, so it is checked
        sums = [c for _, _, c in parts]
        stats["distributed/weight_checksum_spread"] = max(sums) - min(sums)
        return whole, whole.token_data.pop("advantages"), stats

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Greedy pass@1 on the held-out problems: {"accuracy", "rewards": each problem's, in the
        held-out order}, so that two algorithms can be compared item by item. Each process takes
        every world-th problem; their rewards are gathered back into that order."""
        problems = list(self.task.eval_problems())[: self.eval_args.limit]
        world, rank = distributed.world_size(), distributed.rank()
        mine = problems[rank::world]
        rewards: list[float] = []
        texts: list[tuple[str, str]] = []  # (completion, feedback)
        unjudged = 0
        with self.compute_precision(), gathered(self.policy):
            for i in range(0, len(mine), self.eval_args.batch_size):
                chunk = self.task.rollout(self.engine, mine[i : i + self.eval_args.batch_size], 1, greedy=True)
                verdicts = self.task.verify_all(chunk)
                rewards += [v.reward for v in verdicts]
                texts += [(c, v.feedback) for c, v in zip(chunk.completions, verdicts)]
                unjudged += sum(not v.judged for v in verdicts)
        rewards = distributed.unstride(distributed.gather(rewards), len(problems))
        texts = distributed.unstride(distributed.gather(texts), len(problems))
        self.eval_completions += [
            {"step": self.rl_step, "problem": p.id, "prompt": p.prompt, "completion": c, "reward": r, "feedback": f}
            for p, (c, f), r in zip(problems, texts, rewards)
        ]
        result = {
            "accuracy": sum(rewards) / max(len(rewards), 1),
            "rewards": rewards,  # an item the verifier could not judge counts as failed, and is counted:
            "unjudged": int(distributed.total(float(unjudged))),
        }
        if self.eval_args.samples:
            result |= self.sampled_pass_at_k(mine, len(problems))
        return result

    @torch.no_grad()
    def sampled_pass_at_k(self, mine: list[Problem], total: int) -> dict[str, Any]:
        """{"pass@k": the unbiased estimate over the held-out problems, "passes": each problem's
        count of passing completions, in the held-out order} from `samples` completions of each
        of this process's problems `mine` (every world-th of `total`)."""
        n = self.eval_args.samples
        devices = [self.device] if self.device.type == "cuda" else []
        passed: list[int] = []
        with torch.random.fork_rng(devices=devices), self.compute_precision(), gathered(self.policy):
            torch.manual_seed(1_000_003 + self.rl_step + distributed.rank())  # the same draws for every algorithm
            size = max(1, self.eval_args.batch_size // n)
            for i in range(0, len(mine), size):
                chunk = self.task.rollout(self.engine, mine[i : i + size], n)
                rewards = torch.tensor([v.reward for v in self.task.verify_all(chunk)]).view(-1, n)
                passed += solved(rewards).sum(-1).tolist()
        counts = distributed.unstride(distributed.gather(passed), total)
        estimates = {
            f"pass@{k}": sum(pass_at_k(n, c, k) for c in counts) / max(total, 1) for k in self.eval_args.pass_at
        }
        return estimates | {"passes": counts}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """`python -m harness evaluate`: one evaluation of the held-out set, the same as a training
        run's at this `rl_step` (which seeds the sampled pass@k draws)."""
        self.evaluations.append({"step": self.rl_step, **self.evaluate()})

    def on_train_start(self) -> None:
        reset_peak()
        if distributed.rank() > 0 and not self._rng_restored:
            # Every process starts from the same seed; the others must not draw the same samples.
            seed = self.seed * 1_000_003 + distributed.rank()
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed % 2**32)
        self.engine.push_weights()  # a resumed run's restored weights
        if not self.evaluations:
            self.evaluations.append({"step": 0, **self.evaluate()})
        start, rewards = self.evaluations[0]["accuracy"], self.evaluations[0].get("rewards")
        measured = rewards is None or len(rewards) > 0  # an evaluation of no problem (limit 0) says nothing
        if distributed.rank() == 0 and measured and not NEAR_EDGE <= start <= 1 - NEAR_EDGE:
            log.warning(
                "the starting weights solve %.1f%% of the held-out problems: %s, so this run has little to measure",
                100 * start,
                "nearly none; its groups will mostly all fail and carry no credit"
                if start < NEAR_EDGE
                else "nearly all; its groups will mostly all pass and carry no credit",
            )

    # ------------------------------------------------------------------ Lightning plumbing

    def compute_precision(self):
        """The trainer's compute precision (bf16 autocast under `bf16-mixed`) for passes outside
        `training_step`, which Lightning runs in it already: the step-0 evaluation."""
        trainer = self._trainer
        return trainer.precision_plugin.forward_context() if trainer is not None else nullcontext()

    def configure_model(self) -> None:
        if hasattr(self.engine, "precision"):  # vLLM's: built later, in the run's compute dtype
            self.engine.precision = self.trainer.precision
        strategy = self.trainer.strategy
        if isinstance(strategy, FSDP2) and not is_sharded(self.policy):
            strategy.shard(self.policy)
            if self.reference is not None:
                strategy.shard(self.reference)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(
            [{"params": [p for p in self.policy.parameters() if p.requires_grad]}, *self.extra_parameter_groups()],
            lr=self.optim_args.lr,
            weight_decay=self.optim_args.weight_decay,
            foreach=True,  # one kernel per step over all tensors, not a loop of small ones
        )
        warmup = max(self.optim_args.warmup_steps, 1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
        return [optimizer], [scheduler]

    def extra_parameter_groups(self) -> list[dict]:
        """Optimizer parameter groups beyond the policy's (PPO's value head, at its own lr)."""
        return []

    def starting_policy(self):
        """A context holding the policy the run started from (the KL reference): a frozen copy, or
        with LoRA the policy itself with its adapters switched off."""
        return nullcontext(self.reference) if self.reference is not None else adapters_disabled(self.policy)

    def state_dict(self, *args, **kwargs):
        # The reference model is a frozen copy of the start, and with LoRA the base weights are
        # the start itself: rebuilt from the starting weights, never saved.
        state = {k: v for k, v in super().state_dict(*args, **kwargs).items() if not k.startswith("reference.")}
        if has_adapters(self.policy):  # of the policy, the adapters only
            trained = {f"policy.{n}" for n, p in self.policy.named_parameters() if p.requires_grad}
            state = {k: v for k, v in state.items() if not k.startswith("policy.") or k in trained}
        return state

    def load_state_dict(self, state_dict, strict: bool = True, **kwargs):
        partial = self.reference is not None or has_adapters(self.policy)
        return super().load_state_dict(state_dict, strict=False if partial else strict, **kwargs)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rlvr"] = {
            "rl_step": self.rl_step,
            "wall_clock_s": self.wall_clock_s,
            "rollouts_total": self.rollouts_total,
            # copies of the lists (rows are never changed once appended): the checkpoint may be
            # written in the background while later steps append
            "records": list(self.records),
            "evaluations": list(self.evaluations),
            "completions": list(self.completions),
            "eval_completions": list(self.eval_completions),
            # one entry per process (each draws its own samples); collective, as every process
            # builds the checkpoint and rank 0 writes it
            "rng": distributed.gather(
                {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
            ),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint["rlvr"]
        self.rl_step, self.wall_clock_s = state["rl_step"], state["wall_clock_s"]
        self.rollouts_total, self.records = state["rollouts_total"], state["records"]
        self.evaluations = state["evaluations"]
        self.completions = state.get("completions", [])  # checkpoints from before they were kept
        self.eval_completions = state.get("eval_completions", [])
        rng = state["rng"]
        if isinstance(rng, list):
            if len(rng) != distributed.world_size():
                raise RuntimeError(
                    f"the checkpoint was written by {len(rng)} processes; resume it with as many devices"
                )
            rng = rng[distributed.rank()]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        self._rng_restored = True

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "schedule": asdict(self.schedule),
            "sampling": asdict(self.sampling),
            "optim": asdict(self.optim_args),
            "update": asdict(self.update_args),
            "evaluation": asdict(self.eval_args),
        }


def nan_mean(values: Sequence[float]) -> float:
    finite = [v for v in values if not np.isnan(v)]
    return float(np.mean(finite)) if finite else float("nan")
