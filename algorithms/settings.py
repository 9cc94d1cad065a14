"""What an algorithm's run is told: its schedule, optimizer, update and evaluation settings.

Plain dataclasses, each field's range declared beside it (`rollout.ranges`), importable without
torch: the benchmark file is checked, and `--list` answers, before anything heavy loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from rollout.ranges import (
    Distinct,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
    check_fields,
)


@dataclass
class Schedule:
    steps: PositiveInt = 100
    prompts_per_step: PositiveInt = 16
    prompt_pool: PositiveInt | None = None
    """RL draws its prompts from the first `prompt_pool` training problems (None: all of them).
    A pool smaller than steps x prompts_per_step makes prompts recur, as epochs over a
    fixed dataset do: what HP-RLVR's per-prompt historical baseline needs to be more than the
    task-wide mean. The warm start still sees every training problem."""

    def __post_init__(self):
        check_fields(self)


GroupSize = Annotated[int, Range(2)]
"""Rollouts per prompt of a group-baseline algorithm: a group's baseline needs two."""


@dataclass
class OptimArgs:
    lr: PositiveFloat = 5e-5
    warmup_steps: NonNegativeInt = 10
    """Linear warm-up of the learning rate over the first RL steps."""
    weight_decay: NonNegativeFloat = 0.0
    max_grad_norm: PositiveFloat = 1.0
    """Clip threshold of the policy's gradient, and separately of a critic's. The recorded
    `grad_norm` is the policy's total norm before clipping (`critic/grad_norm` the critic's)."""

    def __post_init__(self):
        check_fields(self)


@dataclass
class EvalArgs:
    every: PositiveInt = 25
    """Greedy pass@1 on the held-out set at step 0, every `every` steps and at the last step."""
    limit: NonNegativeInt | None = None
    """Evaluate on the first `limit` held-out problems only (None: all; 0: none, as the bench runs)."""
    batch_size: PositiveInt = 500
    samples: NonNegativeInt = 0
    """Beside greedy pass@1: n completions of each held-out problem at the sampling settings,
    for the unbiased pass@k estimate (0: none). They are drawn from an RNG of their own, seeded
    by the step, so training samples the same whatever this is."""
    pass_at: Annotated[list[PositiveInt], Distinct()] = field(default_factory=lambda: [1])
    """The k of `pass@k`, each at most `samples`."""

    def __post_init__(self):
        check_fields(self)
        if self.samples and any(not 1 <= k <= self.samples for k in self.pass_at):
            raise ValueError(f"pass_at: every k must be in [1, samples = {self.samples}] (got {self.pass_at})")


@dataclass
class UpdateArgs:
    clip_low: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.2
    """The ratio's lower clip: 1 - clip_low (TRL's `epsilon`)."""
    clip_high: PositiveFloat = 0.2
    """The ratio's upper clip: 1 + clip_high (TRL's `epsilon_high`; DAPO's clip-higher is 0.28)."""
    ratio_level: Literal["token", "sequence", "sequence-product"] = "token"
    """token: each token's own ratio (PPO, GRPO). sequence: one ratio a rollout, the geometric mean of
    its tokens' ratios, clipped as one (GSPO; TRL's `importance_sampling_level`). sequence-product:
    one ratio a rollout, the product of its tokens' (the ratio of its probabilities; TRL's RLOO)."""
    minibatches: PositiveInt = 1
    """Optimizer updates per step per epoch: the step's prompts (with all their rollouts) split
    into this many equal parts, so it must divide them. Each update is one gradient-norm record."""
    epochs: PositiveInt = 1
    """Passes over the step's rollouts, each `minibatches` updates."""
    loss_aggregation: Literal["token-mean", "sequence-mean", "constant"] = "token-mean"
    """token-mean: every eligible token of the mini-batch weighs the same (DAPO, TRL's default);
    sequence-mean: mean over each rollout's tokens, then over rollouts (the original GRPO);
    constant: the sum over tokens divided by rollouts x `max_tokens`, whatever their lengths (Dr. GRPO)."""
    max_tokens: PositiveInt | None = None
    """What `constant` divides each rollout by (TRL's `max_completion_length`). None: the suite's
    `sampling.max_new_tokens`; set it on a multi-turn task, whose rollouts hold several turns."""
    kl_coef: NonNegativeFloat = 0.0
    """Weight of a KL penalty to the starting policy, added to each token's loss; 0 keeps no
    reference model (TRL's `beta`, default 0)."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """k3: exp(ref - logp) - (ref - logp) - 1, unbiased and >= 0 (TRL's, GRPO's). k1: logp - ref."""
    tis_cap: PositiveFloat | None = None
    """Truncated importance sampling for a sampler that is not the policy (vLLM): each token's
    loss weighted by min(pi_old / pi_sampler, tis_cap), pi_old the policy's own recomputed
    probability at the weights that sampled (Yao et al., 2025). None: no correction."""
    scoring_tokens: PositiveInt | None = None
    """Token slots (rows x columns) in one forward pass of the update: a mini-batch is scored a
    few prompts' groups at a time, shortest first, each pass padded only to its own longest row
    (verl's `ppo_max_token_len_per_gpu`). The same log-probs and gradient up to float rounding.
    None: the whole mini-batch in one pass, padded to its longest row. Not under FSDP, whose
    gathers every process must run alike."""
    skip_zero_advantage: bool = False
    """Leave out of the update's forward and backward passes every group whose advantages are all
    0 (a saturated GRPO group: half of them on math): its terms of the loss, and so its gradient,
    are exactly 0 whatever its log-probs. The same loss and gradient up to float rounding, as
    `scoring_tokens`; `sampler/logprob_diff_*` then measure the scored rows. It applies where the
    loss is the surrogate alone: no KL term, no objective, critic or scoring of the algorithm's own
    (not PPO, SDPO), and not under FSDP (every process must run the same passes)."""

    def __post_init__(self):
        check_fields(self)  # clip_low < 1: the ratio's lower bound 1 - clip_low stays positive
