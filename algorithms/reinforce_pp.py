"""REINFORCE++ with a group baseline: the prompt's mean reward subtracted, then every token's
advantage whitened over the step's batch.

    a_i = r_i - mean(r_group)
    A_t = (a_i - mu) / sigma      mu, sigma: mean and std of a over the step's eligible tokens

Hu et al., 2025, "REINFORCE++: An Efficient RLHF Algorithm with Robustness to Both Prompt and
Reward Models" (arXiv:2501.03262). Checked against OpenRLHF's `reinforce_baseline` estimator
(openrlhf/trainer/ppo_utils/experience_maker.py at 3c3be62, tests/test_zoo.py): gamma 1, so each
token's return is the rollout's reward; the batch's token-weighted mean and population variance
(clamped at 1e-8); over every process's tokens, as one process would see them. Departure:
OpenRLHF puts a k1 KL in the reward (`init_kl_coef`); here the KL is the shared update's, off by
default. Whitening moves a saturated group off zero: its tokens carry -mu / sigma.
"""

from __future__ import annotations

import math

from torch import Tensor

from algorithms.base import RLVRModule
from algorithms.settings import GroupSize
from rollout import distributed
from rollout.batch import Rollouts


def batch_whitened(advantages: Tensor, eligible: Tensor) -> Tensor:
    """[N, L] advantages whitened over the eligible tokens of every process's batch; 0 elsewhere."""
    mask = eligible.float()
    count = max(distributed.total(float(mask.sum())), 1.0)
    mean = distributed.total(float((advantages * mask).sum())) / count
    variance = distributed.total(float(((advantages - mean).pow(2) * mask).sum())) / count
    return (advantages - mean) / math.sqrt(max(variance, 1e-8)) * mask


class REINFORCEPlusPlus(RLVRModule):
    def __init__(self, group_size: GroupSize = 8, **base):
        """group_size: rollouts per prompt, whose mean reward is each one's baseline."""
        super().__init__(**base)
        self.group_size = group_size

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        rewards = rollouts.rewards.view(-1, self.group_size)
        centred = (rewards - rewards.mean(-1, keepdim=True)).view(-1, 1)
        return batch_whitened(centred * rollouts.eligible, rollouts.eligible), {}
