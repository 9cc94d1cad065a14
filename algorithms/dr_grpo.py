"""Dr. GRPO: GRPO without its two length and difficulty biases.

    A_i = r_i - mean(r_group)                        no division by the group's std
    loss = sum_t l_t / (rollouts x max_tokens)        a constant, not each rollout's length

Liu et al., 2025, "Understanding R1-Zero-Like Training: A Critical Perspective" (arXiv:2503.20783).
Checked against TRL 1.16.0's `GRPOTrainer` with `loss_type="dr_grpo"` and `scale_rewards="none"`
(tests/test_loss_trl.py for the loss, tests/test_zoo.py for the advantage).
"""

from __future__ import annotations

from algorithms.grpo import GRPO
from algorithms.settings import GroupSize
from rollout.ranges import PositiveFloat


class DrGRPO(GRPO):
    update_overrides = {"loss_aggregation": "constant"}

    def __init__(self, group_size: GroupSize = 8, scale_by_std: bool = False, eps: PositiveFloat = 1e-4, **base):
        super().__init__(group_size=group_size, scale_by_std=scale_by_std, eps=eps, **base)
