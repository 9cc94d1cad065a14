"""PPO with a learned critic: one rollout per prompt, credit from a value head by GAE.

    V_t        value head on the policy's final hidden state at eligible token t
    r_t        the verdict's reward at the last eligible token, 0 before it
    delta_t    r_t + gamma * V_next(t) - V_t         next(t): the next eligible position (V = 0 after the last)
    A_t        delta_t + gamma * lam * A_next(t)     (GAE), whitened over the step's eligible tokens
                                                    (every process's, as verl's batch)
    R_t        A_t (before whitening) + V_t          the value target

The critic is a linear head on the policy's own trunk rather than a second model: one extra
matmul per token instead of a second forward and backward pass and a second copy of the
weights, which is what "PPO with a learned critic" costs in practice with a shared model
(TRL's earlier value-head models; TRL's PPOTrainer today and verl train a separate critic model).
Its loss reaches the trunk, scaled by `value_coef`. The head starts at
zero, so the first advantages are plain discounted returns, and learns at its own, larger rate
(`value_lr`); there is no separate critic warm-up. The critic's gradient (the head's, and the
trunk's from the value loss) is clipped and recorded apart from the policy's, as verl and OpenRLHF
do with their separate critics.
This is the baseline HP-RLVR claims to make unnecessary.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from algorithms.base import RLVRModule
from rollout import distributed
from rollout.batch import Rollouts, position_ids
from rollout.ranges import NonNegativeFloat, PositiveFloat, UnitInterval
from rollout.scoring import by_length, logprobs_at, masked_mean
from rollout.sharding import trunk


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """(advantages, returns), all [B, T]. The chain runs over the positions where `mask` is
    true, in order, skipping the rest (an environment's tokens between two actions are not
    steps); the value after the last eligible position is 0. Zero off the mask.

    Computed without a loop over time: each row's steps are packed to the left ([B, n], n the
    most steps of any row), where V_next is the next column (0 past a row's last step) and
    A_j = sum_{k >= j} (gamma lam)^(k - j) delta_k is one matrix product with the decay matrix."""
    mask = mask.bool()
    rows, cols = mask.nonzero(as_tuple=True)
    step = mask.long().cumsum(-1)[rows, cols] - 1  # each eligible position's index in its chain
    n = int(mask.sum(-1).max()) if mask.any() else 0
    packed_values = values.new_zeros((values.shape[0], n + 1), dtype=torch.float32)
    packed_rewards = torch.zeros_like(packed_values)
    packed_values[rows, step] = values[rows, cols].float()
    packed_rewards[rows, step] = rewards[rows, cols].float()
    valid = torch.zeros_like(packed_values, dtype=torch.bool)
    valid[rows, step] = True
    delta = (packed_rewards[:, :n] + gamma * packed_values[:, 1:] - packed_values[:, :n]) * valid[:, :n]
    j = torch.arange(n, device=values.device)
    distance = (j[None, :] - j[:, None]).float()  # distance[j, k] = k - j
    decay = torch.where(distance >= 0, (gamma * lam) ** distance.clamp(min=0), 0.0)
    with torch.autocast(values.device.type, enabled=False):  # float32 under bf16-mixed too
        packed_advantages = delta @ decay.T  # A[:, j] = sum_k delta[:, k] decay[j, k]
    advantages = torch.zeros_like(values, dtype=torch.float32)
    advantages[rows, cols] = packed_advantages[rows, step]
    returns = torch.where(mask, advantages + values, 0.0)
    return advantages, returns


def whitened(advantages: Tensor, eligible: Tensor) -> Tensor:
    """[N, L] advantages at zero mean and unit (unbiased) std over the eligible tokens of every
    process's rollouts, as verl's `masked_whiten` over its whole batch; 0 elsewhere. On one
    process, torch's own mean and std of them (the published records' arithmetic)."""
    picked = advantages[eligible]
    if distributed.world_size() == 1:
        if picked.numel() < 2:
            return advantages
        return torch.where(eligible, (advantages - picked.mean()) / (picked.std() + 1e-8), 0.0)
    count = distributed.total(float(picked.numel()))
    if count < 2:
        return advantages
    mean = distributed.total(float(picked.sum())) / count
    std = math.sqrt(distributed.total(float((picked - mean).pow(2).sum())) / (count - 1))
    return torch.where(eligible, (advantages - mean) / (std + 1e-8), 0.0)


def explained_variance(predicted: Tensor, target: Tensor) -> float:
    variance = target.var()
    return float(1 - (target - predicted).var() / variance) if variance > 0 else float("nan")


class PPO(RLVRModule):
    group_size = 1

    def __init__(
        self,
        gamma: UnitInterval = 1.0,
        lam: UnitInterval = 0.95,
        value_coef: NonNegativeFloat = 0.1,
        value_clip: PositiveFloat = 0.2,
        whiten_advantages: bool = True,
        value_lr: PositiveFloat | None = None,
        value_trunk_gradient: bool = True,
        **base,
    ):
        """gamma, lam: GAE discount and trace decay. value_coef: weight of the clipped value
        loss. value_clip: how far a value may move from its rollout-time estimate before its
        loss is clipped. whiten_advantages: zero mean, unit std over the step's eligible tokens
        (every process's).
        value_lr: the value head's learning rate; None: 10x the policy's (verl's critic/actor
        convention). A head that starts at V = 0 and moves at the policy's lr still predicted
        about 0.01 after 15 steps of rewards near 0.2 here: no baseline at all.
        value_trunk_gradient: whether the value loss trains the shared trunk too (as TRL's
        earlier value-head models did); False makes the critic a linear probe on the policy's
        own features, so only the policy loss moves the policy."""
        super().__init__(**base)
        self.gamma, self.lam, self.value_coef, self.value_clip = gamma, lam, value_coef, value_clip
        self.whiten_advantages, self.value_lr = whiten_advantages, value_lr
        self.value_trunk_gradient = value_trunk_gradient
        hidden = self.policy.get_output_embeddings().weight.shape[1]
        self.value_head = torch.nn.Linear(hidden, 1, dtype=self.policy.dtype, device=self.policy.device)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def extra_parameter_groups(self) -> list[dict]:
        lr = self.value_lr if self.value_lr is not None else 10 * self.optim_args.lr
        return [{"params": list(self.value_head.parameters()), "lr": lr}]

    def forward_with_values(
        self, input_ids: Tensor, attention_mask: Tensor, eligible: Tensor | None
    ) -> tuple[Tensor | None, Tensor]:
        """(log-probs [N, L] at the eligible tokens, values [N, L]) from one pass through the
        trunk. Column t's value is the head on the state that predicts token t, i.e. V before
        acting at t. eligible=None: values only (the credit stage needs no vocabulary projection)."""
        hidden = trunk(self.policy)(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids(attention_mask),
            use_cache=False,
        ).last_hidden_state
        logprobs = (
            None
            if eligible is None
            else logprobs_at(
                self.policy.get_output_embeddings(), hidden, input_ids, eligible, self.sampling.temperature
            )
        )
        features = hidden[:, :-1] if self.value_trunk_gradient else hidden[:, :-1].detach()
        values = self.value_head(features).squeeze(-1)
        return logprobs, torch.nn.functional.pad(values, (1, 0))

    # ---- stage 3: credit from the critic

    @classmethod
    def critic_on_trunk(cls, args):
        return args.get("value_trunk_gradient", True)

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        eligible = rollouts.eligible
        with torch.no_grad():
            _, values = self.forward_with_values(rollouts.input_ids, rollouts.attention_mask, None)
        values = values.float() * eligible
        last = eligible.long().cumsum(-1).argmax(-1)  # the last eligible column of each row
        rewards = torch.zeros_like(values)
        rewards[torch.arange(len(rollouts), device=rewards.device), last] = rollouts.rewards
        advantages, returns = gae(rewards, values, eligible, self.gamma, self.lam)
        rollouts.token_data["returns"], rollouts.token_data["old_values"] = returns, values
        picked = advantages[eligible]
        stats = {
            "ppo/value_mean": float(values[eligible].mean()),
            "ppo/explained_variance": explained_variance(values[eligible], returns[eligible]),
            "credit/advantage_mean": float(picked.mean()),
            "credit/advantage_std": float(picked.std()),
        }
        if self.whiten_advantages:
            advantages = whitened(advantages, eligible)
        return advantages, stats

    # ---- stage 4 extras: the clipped value loss, from the same forward pass as the policy's

    def score(self, batch: Rollouts) -> tuple[Tensor, dict[str, Tensor]]:
        slots = self.update_args.scoring_tokens
        if slots is not None:
            logprobs, values = by_length(
                self.forward_with_values, batch.input_ids, batch.attention_mask, batch.eligible, 1, slots
            )
        else:
            logprobs, values = self.forward_with_values(batch.input_ids, batch.attention_mask, batch.eligible)
        return logprobs, {"values": values}

    def critic_loss(self, batch: Rollouts, outputs: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        values, old = outputs["values"], batch.token_data["old_values"]
        returns, mask = batch.token_data["returns"], batch.eligible.float()
        clipped = old + (values - old).clamp(-self.value_clip, self.value_clip)
        per_token = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
        value_loss = masked_mean(per_token, mask)
        clip_frac = masked_mean(((values - old).abs() > self.value_clip).float(), mask)
        return self.value_coef * value_loss, {
            "ppo/value_loss": float(value_loss.detach()),
            "ppo/value_clip_frac": float(clip_frac),
        }
