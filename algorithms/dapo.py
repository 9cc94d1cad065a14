"""DAPO: GRPO with clip-higher, a token-level loss, dynamic sampling and overlong shaping.

    clip(ratio, 1 - 0.2, 1 + 0.28)        clip-higher: room for unlikely tokens to grow
    loss: token-mean                      every token of the step weighs the same
    dynamic sampling: a group whose rewards are all equal is replaced by a group of a prompt drawn
        from a stream of DAPO's own, until the step has `prompts_per_step` groups that carry signal
    r'_i = r_i + min(0, (L_max - buffer - |y_i|) / buffer) * penalty     soft overlong shaping

Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
(arXiv:2503.14476). Checked against TRL 1.16.0: `loss_type="dapo"` with `epsilon_high=0.28`
(tests/test_loss_trl.py) and `trl.rewards.get_soft_overlong_punishment` (tests/test_zoo.py).

The pair's protocol holds: every step starts from the same prompts as GRPO's; only the groups
that carry no signal are replaced, from `Random(f"dapo/{seed}/{step}/{round}/{rank}")`, at most
`max_refills` rounds (verl's `max_num_gen_batches`); a step still short after them keeps enough
of its saturated groups to stay the same size (their advantage is 0). Every rollout sampled
counts in `rollouts` and every second in `wall_clock_s`. The overlong shaping reads one
completion's length and does not apply to a multi-turn task. The filter reads the verdicts'
rewards (DAPO's accuracy), not the shaped ones.
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
        max_refills: NonNegativeInt = 3,
        overlong_buffer: NonNegativeInt | None = None,
        overlong_penalty: NonNegativeFloat = 1.0,
        **base,
    ):
        """max_refills: rounds of dynamic sampling a step at most (0: none). overlong_buffer: the
        tokens before `max_new_tokens` where the length penalty ramps (None: a fifth of them, as
        DAPO's 4096 of 20480; 0: no shaping). overlong_penalty: the penalty at max_new_tokens."""
        super().__init__(group_size=group_size, scale_by_std=scale_by_std, eps=eps, **base)
        self.max_refills, self.overlong_penalty = max_refills, overlong_penalty
        self.overlong_buffer = self.sampling.max_new_tokens // 5 if overlong_buffer is None else overlong_buffer
        self.dynamic_sampling: dict[str, int] = {}  # this step's refills, for its record

    def sample(self, problems: list[Problem], timing: dict[str, float]) -> Rollouts:
        rollouts = super().sample(problems, timing)
        informative, saturated = self.split_groups(rollouts)
        kept = [self.groups(rollouts, informative)]
        pool = self.task.train_problems()[: self.schedule.prompt_pool]
        missing, refills = len(saturated), 0
        while missing and refills < self.max_refills:
            rng = random.Random(f"dapo/{self.seed}/{self.rl_step}/{refills}/{distributed.rank()}")
            extra = super().sample([pool[i] for i in rng.sample(range(len(pool)), missing)], timing)
            found = self.split_groups(extra)[0][:missing]
            kept.append(self.groups(extra, found))
            self.discarded_rollouts += len(extra) - len(found) * self.group_size
            missing, refills = missing - len(found), refills + 1
        # still short after every round: the first saturated groups keep the step its size
        kept.append(self.groups(rollouts, saturated[:missing]))
        self.discarded_rollouts += (len(saturated) - missing) * self.group_size
        self.dynamic_sampling = {"dynamic_sampling/refills": refills, "dynamic_sampling/kept_saturated": missing}
        return concatenate([part for part in kept if part is not None], self.tokenizer.pad_token_id)

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
        rewards = rollouts.rewards
        if not self.task.multi_turn:
            lengths = rollouts.eligible.sum(-1)
            rewards = rewards + overlong_penalty(
                lengths, self.sampling.max_new_tokens, self.overlong_buffer, self.overlong_penalty
            ).to(rewards.device)
        per_rollout = group_advantages(rewards.view(-1, self.group_size), self.eps, self.scale_by_std).view(-1, 1)
        return per_rollout * rollouts.eligible, dict(self.dynamic_sampling)
