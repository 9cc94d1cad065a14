"""GSPO: GRPO's advantage with one importance ratio a rollout.

    s_i = exp(mean_t log(pi_theta(y_t) / pi_old(y_t)))     the geometric mean of its token ratios
    l_i = -min(s_i A_i, clip(s_i, 1 - 3e-4, 1 + 4e-4) A_i)   on each of its tokens, sequence-mean

Zheng et al., 2025, "Group Sequence Policy Optimization" (arXiv:2507.18071); the clip range is the
paper's. Checked against TRL 1.16.0's `GRPOTrainer` with `importance_sampling_level="sequence"`,
`loss_type="grpo"`, `epsilon=3e-4`, `epsilon_high=4e-4` (tests/test_loss_trl.py). With one update
a step the ratio is exactly 1 and GSPO's gradient is GRPO's at sequence-mean: the two differ only
with `minibatches` or `epochs` above 1, where the sequence ratio clips whole rollouts.
"""

from __future__ import annotations

from algorithms.grpo import GRPO


class GSPO(GRPO):
    update_overrides = {
        "ratio_level": "sequence",
        "loss_aggregation": "sequence-mean",
        "clip_low": 3e-4,
        "clip_high": 4e-4,
    }
