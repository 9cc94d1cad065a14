"""RLOO: G rollouts a prompt, each credited against the mean reward of the other G - 1.

    A_i = r_i - (sum_j r_j - r_i) / (G - 1)        broadcast to rollout i's eligible tokens
    s_i = pi_theta(y_i) / pi_old(y_i)               one ratio a rollout (`ratio_level: sequence-product`)
    loss = mean over rollouts of -min(s_i A_i, clip(s_i) A_i)

Ahmadian et al., 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from
Human Feedback in LLMs" (arXiv:2402.14740). Checked against TRL 1.16.0's `RLOOTrainer`: its
leave-one-out baseline and its loss, a clipped ratio of each completion's probabilities averaged
over completions (tests/test_zoo.py). Departures: TRL's default `beta` 0.05 puts a
k1 KL in the reward; here, as for every algorithm, the KL is the shared update's and off by
default. A group whose rewards are equal gets exactly zero, as in GRPO.
"""

from __future__ import annotations

from torch import Tensor

from algorithms.base import RLVRModule
from algorithms.settings import GroupSize
from rollout.batch import Rollouts


def leave_one_out_advantages(rewards: Tensor) -> Tensor:
    """rewards [num_prompts, G] -> advantages [num_prompts, G]."""
    rewards = rewards.float()
    others = (rewards.sum(-1, keepdim=True) - rewards) / (rewards.shape[-1] - 1)
    return rewards - others


class RLOO(RLVRModule):
    update_overrides = {"ratio_level": "sequence-product", "loss_aggregation": "sequence-mean"}

    def __init__(self, group_size: GroupSize = 8, **base):
        """group_size: rollouts per prompt (G)."""
        super().__init__(**base)
        self.group_size = group_size

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        advantages = leave_one_out_advantages(rollouts.rewards.view(-1, self.group_size)).view(-1, 1)
        return advantages * rollouts.eligible, {}
