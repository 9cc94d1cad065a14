"""DAPO: GRPO with clip-higher, a token-level loss, dynamic sampling and overlong shaping.

    clip(ratio, 1 - 0.2, 1 + 0.28)        clip-higher: room for unlikely tokens to grow
    loss: token-mean                      every token of the step weighs the same
    dynamic sampling: whole generation batches are sampled, and only the groups whose accuracies
        differ are kept, until the step has `prompts_per_step` of them; the first that many train
    r'_i = (2 r_i - 1) + min(0, (L_max - buffer - |y_i|) / buffer) * penalty     overlong shaping

Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
(arXiv:2503.14476). Checked against TRL 1.16.0: `loss_type="dapo"` with `epsilon_high=0.28`
(tests/test_loss_trl.py) and `trl.rewards.get_soft_overlong_punishment`; the dynamic sampling
against verl's DAPO trainer (volcengine/verl 246cac4, recipe/dapo/dapo_ray_trainer.py),
transcribed in tests/test_zoo.py.

The reward scale is DAPO's: its verifier answers +1 or -1 (verl's `math_dapo.compute_score`), so
a 0/1 reward is mapped to 2r - 1 before the penalty, which is then half the gap between right
and wrong, as in the paper (on 0/1 the same penalty would be the whole gap). The group's
advantage is otherwise the same on either scale (mean and std move together).

The pair's protocol holds: the first generation batch is the step's own prompts, GRPO's; each
further one draws as many from `Random(f"dapo/{seed}/{step}/{batch}/{rank}")`, at most
`max_gen_batches` in all (verl's `max_num_gen_batches`, 10 in its recipe; 0: no cap). Where the
cap is reached short, verl raises; here the step trains on the groups found (`dynamic_sampling/
short` says how many it lacked), or, with none, on the first batch (whose advantages are all 0).
Every rollout sampled counts in `rollouts` and every second in `wall_clock_s`. With several
processes each fills its own share. The overlong shaping reads one completion's length and does
not apply to a multi-turn task. The filter reads the verdicts' rewards (DAPO's accuracy), not the
shaped ones.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from algorithms.grpo import GRPO, group_advantages
from algorithms.settings import GroupSize
from rollout import distributed
from rollout.batch import Problem, Rollouts, concatenate
from rollout.ranges import NonNegativeFloat, NonNegativeInt, PositiveFloat


def overlong_penalty(lengths: Tensor, max_tokens: int, buffer: int, penalty: float = 1.0) -> Tensor:
    """DAPO's soft overlong punishment of each completion length: 0 up to max_tokens - buffer,
    then falling linearly to -penalty at max_tokens (and -penalty beyond)."""
    if buffer == 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    return ((max_tokens - buffer - lengths.float()) / buffer).clamp(-1.0, 0.0) * penalty


class DAPO(GRPO):
    update_overrides = {"clip_low": 0.2, "clip_high": 0.28, "loss_aggregation": "token-mean"}

    def __init__(
        self,
        group_size: GroupSize = 8,
        scale_by_std: bool = True,
        eps: PositiveFloat = 1e-4,
        max_gen_batches: NonNegativeInt = 10,
        overlong_buffer: NonNegativeInt | None = None,
        overlong_penalty: NonNegativeFloat = 1.0,
        **base,
    ):
        """max_gen_batches: generation batches a step at most, its first included (0: no cap; 1:
        no dynamic sampling). overlong_buffer: the tokens before `max_new_tokens` where the length
        penalty ramps (None: a fifth of them, as DAPO's 4096 of 20480; 0: no shaping).
        overlong_penalty: the penalty at max_new_tokens, on DAPO's +-1 reward scale."""
        super().__init__(group_size=group_size, scale_by_std=scale_by_std, eps=eps, **base)
        self.max_gen_batches, self.overlong_penalty = max_gen_batches, overlong_penalty
        self.overlong_buffer = self.sampling.max_new_tokens // 5 if overlong_buffer is None else overlong_buffer
        self.dynamic_sampling: dict[str, int] = {}  # this step's generation batches, for its record

    def sample(self, problems: list[Problem], timing: dict[str, float]) -> Rollouts:
        wanted, size = len(problems), self.group_size
        pool = self.task.train_problems()[: self.schedule.prompt_pool]
        kept, found, batches, batch, first = [], 0, 0, problems, None
        while True:
            rollouts = super().sample(batch, timing)
            first = rollouts if first is None else first
            batches += 1
            informative = self.split_groups(rollouts)[0]
            kept.append(self.groups(rollouts, informative))
            found += len(informative)
            if found >= wanted or (self.max_gen_batches and batches >= self.max_gen_batches):
                break
            rng = random.Random(f"dapo/{self.seed}/{self.rl_step}/{batches - 1}/{distributed.rank()}")
            batch = [pool[i] for i in rng.sample(range(len(pool)), wanted)]
        spent = batches * wanted * size
        if found == 0:  # none carries signal: the first batch, whose advantages are all 0
            whole = first
        else:
            whole = concatenate([part for part in kept if part is not None], self.tokenizer.pad_token_id)
            whole = self.groups(whole, list(range(min(found, wanted))))
        self.discarded_rollouts += spent - len(whole)
        self.dynamic_sampling = {
            "dynamic_sampling/generation_batches": batches,
            "dynamic_sampling/short": max(wanted - found, 0),
        }
        return whole

    def split_groups(self, rollouts: Rollouts) -> tuple[list[int], list[int]]:
        """(the groups whose rewards differ, the groups whose rewards are all equal), by index."""
        rewards = rollouts.rewards.view(-1, self.group_size)
        differ = (rewards.amax(-1) > rewards.amin(-1)).tolist()
        return [g for g, d in enumerate(differ) if d], [g for g, d in enumerate(differ) if not d]

    def groups(self, rollouts: Rollouts, groups: list[int]) -> Rollouts | None:
        """The rows of these groups, in order (None for none)."""
        if not groups:
            return None
        size = self.group_size
        return rollouts.select(torch.tensor([g * size + k for g in groups for k in range(size)], dtype=torch.long))

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        rewards = 2 * rollouts.rewards - 1  # DAPO's scale: +1 right, -1 wrong
        if not self.task.multi_turn:
            lengths = rollouts.eligible.sum(-1)
            rewards = rewards + overlong_penalty(
                lengths, self.sampling.max_new_tokens, self.overlong_buffer, self.overlong_penalty
            ).to(rewards.device)
        per_rollout = group_advantages(rewards.view(-1, self.group_size), self.eps, self.scale_by_std).view(-1, 1)
        return per_rollout * rollouts.eligible, dict(self.dynamic_sampling)
