"""Stage 4's objective: the clipped policy-gradient loss, in the variants the field runs.

    w_t = pi_theta(y_t) / pi_old(y_t)                         ratio_level: token
    w_t = exp(mean_{t' in E} log(pi_theta(y_t') / pi_old(y_t')))   ratio_level: sequence (GSPO)
    w_t = exp(sum_{t' in E} log(pi_theta(y_t') / pi_old(y_t')))    ratio_level: sequence-product (RLOO)
    l_t = -min(w_t A_t, clip(w_t, 1 - clip_low, 1 + clip_high) A_t)  (+ kl_coef * KL_t)
    loss = token-mean:    sum_t l_t / (eligible tokens of the mini-batch)            (DAPO)
           sequence-mean: mean over rollouts of (sum_t l_t / the rollout's tokens)   (GRPO)
           constant:      sum_t l_t / (rollouts x max_tokens)                        (Dr. GRPO)

Each variant is checked against TRL's `GRPOTrainer._compute_loss` on identical tensors
(tests/test_loss_trl.py): sequence-mean is its loss_type "grpo", token-mean "dapo", constant
"dr_grpo", ratio_level sequence its importance_sampling_level "sequence", the k3 KL its `beta`;
sequence-product at sequence-mean is `RLOOTrainer`'s loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from algorithms.settings import UpdateArgs
from rollout.scoring import masked_mean


def kl_penalty(logprobs: Tensor, reference: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from the sampled tokens' log-probs."""
    log_ratio = reference - logprobs
    if estimator == "k1":
        return -log_ratio
    return torch.exp(log_ratio) - log_ratio - 1


def policy_loss(
    logprobs: Tensor,
    old: Tensor,
    advantages: Tensor,
    eligible: Tensor,
    args: UpdateArgs,
    *,
    tokens: float | None = None,
    max_tokens: int | None = None,
    token_weights: Tensor | None = None,
    reference: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The loss of one mini-batch ([N, L] tensors, 0 off `eligible`) and the shares of eligible
    tokens where the clip is active, TRL's `clip_ratio/...`: {"low": ratio < 1 - clip_low with
    A < 0, "high": ratio > 1 + clip_high with A > 0, "region": either}. `tokens`: what token-mean
    divides by (default: this batch's count; the driver passes the mean over processes).
    `max_tokens`: constant's divisor per rollout. `token_weights`: a constant factor on each
    token's term (truncated importance sampling). `reference`: the starting policy's log-probs,
    for the KL term."""
    mask = eligible.float()
    log_ratio = logprobs - old
    if args.ratio_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    elif args.ratio_level == "sequence-product":
        log_ratio = (log_ratio * mask).sum(-1, keepdim=True)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - args.clip_low, 1 + args.clip_high)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    if token_weights is not None:
        per_token = per_token * token_weights.detach()
    if reference is not None and args.kl_coef > 0:
        per_token = per_token + args.kl_coef * kl_penalty(logprobs, reference, args.kl_estimator)
    if args.loss_aggregation == "token-mean":
        loss = (per_token * mask).sum() / max(tokens if tokens is not None else float(mask.sum()), 1.0)
    elif args.loss_aggregation == "sequence-mean":
        loss = masked_mean(per_token, mask, -1).mean()
    else:
        if max_tokens is None:
            raise ValueError("loss_aggregation constant needs max_tokens")
        loss = (per_token * mask).sum() / (mask.shape[0] * max_tokens)
    low = (ratio < 1 - args.clip_low) & (advantages < 0) & eligible
    high = (ratio > 1 + args.clip_high) & (advantages > 0) & eligible
    shares = {
        name: float(masked_mean(m, eligible)) for name, m in (("low", low), ("high", high), ("region", low | high))
    }
    return loss, shares
