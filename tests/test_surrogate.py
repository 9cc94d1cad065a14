"""The shared clipped surrogate against numbers worked out by hand: ratio != 1, rows of unequal
length, both loss aggregations, and the shares of tokens where the clip is active."""

import math

import pytest
import torch

from algorithms.base import RLVRModule, UpdateArgs


def surrogate(aggregation: str):
    class Stub:  # RLVRModule's surrogate with its update settings, and nothing else
        surrogate = RLVRModule.surrogate
        update_args = UpdateArgs(clip_eps=0.2, loss_aggregation=aggregation)

    return Stub().surrogate


# row 0: three tokens, ratios 1.5, 0.5, 1.1 with A = +1; row 1: one token, ratio 0.7 with A = -2
ratio = torch.tensor([[1.5, 0.5, 1.1, 1.0], [0.7, 1.0, 1.0, 1.0]])
eligible = torch.tensor([[True, True, True, False], [True, False, False, False]])
adv = torch.tensor([[1.0, 1.0, 1.0, 0.0], [-2.0, 0.0, 0.0, 0.0]])
old = torch.zeros(2, 4)
logprobs = ratio.log()
# per token: -min(r A, clip(r) A) = -1.2 (clipped at 1.2), -0.5, -1.1; row 1: -min(-1.4, -1.6) = 1.6
PER_TOKEN = [[-1.2, -0.5, -1.1], [1.6]]


def test_token_mean_weighs_every_eligible_token_the_same():
    loss, clipped = surrogate("token-mean")(logprobs, old, adv, eligible)
    assert float(loss) == pytest.approx(sum(PER_TOKEN[0] + PER_TOKEN[1]) / 4)
    # TRL's clip ratios count the active clip only: 1.5 with A > 0 (high) and 0.7 with A < 0
    # (low); 0.5 with A > 0 lies outside [0.8, 1.2] but its unclipped term is the minimum
    assert clipped == pytest.approx({"low": 1 / 4, "high": 1 / 4, "region": 2 / 4})
    # with A < 0 on both ratios below 0.8, both are low clips, and neither would be with A > 0
    signs = torch.tensor([[1.0, -1.0, 1.0, 0.0], [-2.0, 0.0, 0.0, 0.0]])
    _, clipped = surrogate("token-mean")(logprobs, old, signs, eligible)
    assert clipped == pytest.approx({"low": 2 / 4, "high": 1 / 4, "region": 3 / 4})


def test_sequence_mean_averages_each_row_then_the_rows():
    loss, _ = surrogate("sequence-mean")(logprobs, old, adv, eligible)
    assert float(loss) == pytest.approx((sum(PER_TOKEN[0]) / 3 + PER_TOKEN[1][0]) / 2)


def test_token_mean_divides_by_the_count_it_is_given():
    loss, _ = surrogate("token-mean")(logprobs, old, adv, eligible, tokens=8.0)  # e.g. the mean over processes
    assert float(loss) == pytest.approx(sum(PER_TOKEN[0] + PER_TOKEN[1]) / 8)


def test_the_gradient_is_zero_where_the_clip_is_active():
    logp = logprobs.clone().requires_grad_(True)
    loss, _ = surrogate("token-mean")(logp, old, adv, eligible)
    loss.backward()
    grad = logp.grad
    assert grad[0, 0] == 0  # ratio 1.5 > 1.2 with A > 0: clipped, no gradient
    assert grad[0, 1] == pytest.approx(-0.5 / 4)  # ratio 0.5 with A > 0: the unclipped term is the min
    assert grad[1, 0] == 0  # ratio 0.7 < 0.8 with A < 0: clipped
    assert math.isclose(float(grad[0, 3]), 0.0)  # not eligible


def test_the_kl_to_the_reference_is_k3_of_the_reference_over_the_policy():
    """k3 = exp(ref - logp) - (ref - logp) - 1 per eligible token, averaged: literal numbers,
    which the reversed log-ratio (logp - ref) would not give."""
    from types import SimpleNamespace

    ref = torch.tensor([[-1.5, -1.0, 0.0]])

    class Stub:
        kl_to_reference = RLVRModule.kl_to_reference
        reference = object()

        def eligible_logprobs(self, model, batch):
            return ref

    logprobs = torch.tensor([[-1.0, -2.0, -3.0]])
    batch = SimpleNamespace(eligible=torch.tensor([[True, True, False]]))
    # ref - logp = -0.5 and 1.0: (e^-0.5 + 0.5 - 1 + e^1 - 1 - 1) / 2
    expected = (math.exp(-0.5) - 0.5 + math.exp(1.0) - 2.0) / 2
    assert float(Stub().kl_to_reference(batch, logprobs)) == pytest.approx(expected)
    assert expected == pytest.approx(0.41238, abs=1e-4)
