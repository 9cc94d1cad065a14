"""Negative control: GRPO with the step's advantages shuffled across its rollouts.

    A_i = GRPO's advantage of rollout pi(i),   pi a random permutation of the step's rollouts

The same magnitudes, the same share of zero advantages (and so of zero-gradient updates), the
same update sizes as GRPO, and no relation to what a rollout earned: a benchmark that cannot
tell this from GRPO cannot tell a method from noise (docs/studies/negative-control.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from algorithms.grpo import GRPO, group_advantages
from rollout import distributed
from rollout.batch import Rollouts


class ShuffledGRPO(GRPO):
    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        per_rollout = group_advantages(rollouts.rewards.view(-1, self.group_size), self.eps, self.scale_by_std).view(-1)
        per_rollout = per_rollout * rollouts.eligible.any(-1)  # a group left out (unjudged) lends no advantage
        # its own generator, seeded by (seed, step, process): sampling draws exactly as GRPO's run does
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + self.rl_step) * 1009 + distributed.rank())
        shuffled = per_rollout[torch.randperm(len(per_rollout), generator=generator).to(per_rollout.device)]
        return shuffled[:, None] * rollouts.eligible, {}
