"""The shared update's loss against TRL's own: the same log-probs, old log-probs, advantages,
masks and reference log-probs go to `algorithms.loss.policy_loss` and to TRL's
`GRPOTrainer._compute_loss`, and the losses and their gradients must agree, for every
aggregation (TRL's loss_type grpo, dapo, dr_grpo), asymmetric clipping, the sequence-level ratio
(GSPO) and the k3 KL penalty."""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer

from algorithms.loss import UpdateArgs, policy_loss

AGGREGATION = {"grpo": "sequence-mean", "dapo": "token-mean", "dr_grpo": "constant"}
MAX_TOKENS = 7


def tensors(seed: int = 0):
    """A mini-batch of 5 completions of 7 tokens with ragged masks, ratios far from 1 (some
    clipped on either side) and per-token advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(5, MAX_TOKENS, generator=g) > 0.25
    mask[:, 0] = True
    mask[4, 2:] = False  # a short one
    old = -torch.rand(5, MAX_TOKENS, generator=g) * 3
    logprobs = old + torch.randn(5, MAX_TOKENS, generator=g) * 0.4
    advantages = torch.randn(5, 1, generator=g).expand(5, MAX_TOKENS) + 0.1 * torch.randn(5, MAX_TOKENS, generator=g)
    reference = old + torch.randn(5, MAX_TOKENS, generator=g) * 0.3
    return logprobs * mask, old * mask, advantages * mask, mask, reference * mask


def trl_loss(loss_type: str, logprobs, old, advantages, mask, reference, *, low, high, level, beta):
    """TRL's `_compute_loss`, its model forward replaced by the given log-probs: one process, no
    gradient accumulation, no vLLM, no entropy terms (its defaults)."""
    stub = SimpleNamespace(
        loss_type=loss_type,
        importance_sampling_level=level,
        epsilon_low=low,
        epsilon_high=high,
        beta=beta,
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_TOKENS,
        accelerator=SimpleNamespace(
            num_processes=1, gather=lambda x: x, reduce=lambda x, reduction: x, gather_for_metrics=lambda x: x
        ),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logprobs, torch.zeros_like(logprobs), None),
    )
    inputs = {
        "prompt_ids": torch.zeros(5, 2, dtype=torch.long),
        "prompt_mask": torch.ones(5, 2, dtype=torch.long),
        "completion_ids": torch.zeros(5, MAX_TOKENS, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": advantages,
        "old_per_token_logps": old,
        "ref_per_token_logps": reference,
        "num_items_in_batch": mask.sum(),
    }
    return GRPOTrainer._compute_loss(stub, None, inputs), stub._metrics["train"]


CASES = [
    # (TRL loss_type, clip low, clip high, ratio level, KL beta)
    ("grpo", 0.2, 0.2, "token", 0.0),
    ("dapo", 0.2, 0.28, "token", 0.0),
    ("dr_grpo", 0.2, 0.2, "token", 0.0),
    ("grpo", 3e-4, 4e-4, "sequence", 0.0),  # GSPO as its paper and TRL run it
    ("dapo", 0.1, 0.3, "token", 0.04),
    ("grpo", 0.2, 0.2, "token", 0.04),
    ("dr_grpo", 0.2, 0.28, "sequence", 0.04),
]


@pytest.mark.parametrize("loss_type, low, high, level, beta", CASES)
def test_loss_and_gradient_equal_trls(loss_type, low, high, level, beta):
    logprobs, old, advantages, mask, reference = tensors()
    ours_in = logprobs.clone().requires_grad_(True)
    theirs_in = logprobs.clone().requires_grad_(True)
    args = UpdateArgs(
        clip_low=low, clip_high=high, ratio_level=level, loss_aggregation=AGGREGATION[loss_type], kl_coef=beta
    )
    ours, clipped = policy_loss(ours_in, old, advantages, mask, args, max_tokens=MAX_TOKENS, reference=reference)
    theirs, metrics = trl_loss(
        loss_type, theirs_in, old, advantages, mask, reference, low=low, high=high, level=level, beta=beta
    )
    torch.testing.assert_close(ours, theirs)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_in.grad, theirs_in.grad)
    assert ours_in.grad.abs().sum() > 0
    for side in ("low", "high", "region"):  # TRL's metric of the same name
        assert clipped[side] == pytest.approx(metrics[f"clip_ratio/{side}_mean"][0])


def test_the_cases_exercise_both_clips():
    """The parity above means something only if tokens are clipped on each side."""
    logprobs, old, advantages, mask, _ = tensors()
    _, clipped = policy_loss(logprobs, old, advantages, mask, UpdateArgs())
    assert clipped["low"] > 0 and clipped["high"] > 0
