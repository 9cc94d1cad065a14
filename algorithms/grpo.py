"""GRPO: G rollouts per prompt, credit = the rollout's reward relative to its group.

    A_i = (r_i - mean(r_group)) / (std(r_group) + eps)      broadcast to rollout i's eligible tokens

A group whose rewards are all equal carries no signal (A = 0 exactly); when every group of a
mini-batch is like that, its gradient norm is exactly zero.
"""

from __future__ import annotations

from torch import Tensor

from algorithms.base import RLVRModule
from algorithms.settings import GroupSize
from rollout.batch import Rollouts
from rollout.ranges import PositiveFloat


def group_advantages(rewards: Tensor, eps: float = 1e-4, scale_by_std: bool = True) -> Tensor:
    """rewards [num_prompts, G] -> advantages [num_prompts, G]; std is the sample std (G - 1)."""
    rewards = rewards.float()
    centred = rewards - rewards.mean(-1, keepdim=True)
    if scale_by_std:
        centred = centred / (rewards.std(-1, keepdim=True) + eps)
    # Saturated groups give exactly 0, not a rounding residue of the mean.
    saturated = rewards.amax(-1, keepdim=True) == rewards.amin(-1, keepdim=True)
    return centred.masked_fill(saturated, 0.0)


class GRPO(RLVRModule):
    def __init__(self, group_size: GroupSize = 8, scale_by_std: bool = True, eps: PositiveFloat = 1e-4, **base):
        """group_size: rollouts per prompt (G). scale_by_std: divide by the group's std (Dr. GRPO
        sets this False). eps: keeps the division finite."""
        if group_size < 2:
            raise ValueError("group_size: a GRPO group needs at least 2 rollouts")
        super().__init__(**base)
        self.group_size = group_size
        self.scale_by_std, self.eps = scale_by_std, eps

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        per_rollout = group_advantages(rollouts.rewards.view(-1, self.group_size), self.eps, self.scale_by_std).view(
            -1, 1
        )
        return per_rollout * rollouts.eligible, {}
