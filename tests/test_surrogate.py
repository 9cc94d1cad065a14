"""The shared clipped surrogate against numbers worked out by hand: ratio != 1, rows of unequal
length, both loss aggregations, and the shares of tokens where the clip is active; and the shared
update around it: its mini-batches and what it records of every one."""

import math

import pytest
import torch

from algorithms.loss import UpdateArgs, policy_loss


def surrogate(aggregation: str, **settings):
    args = UpdateArgs(loss_aggregation=aggregation, **settings)
    return lambda *tensors, **kwargs: policy_loss(*tensors, args, **kwargs)


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
    """k3 = exp(ref - logp) - (ref - logp) - 1 per eligible token, added to each token's loss:
    literal numbers, which the reversed log-ratio (logp - ref) would not give; k1 = logp - ref."""
    ref = torch.tensor([[-1.5, -1.0, 0.0]])
    logprobs = torch.tensor([[-1.0, -2.0, -3.0]])
    eligible = torch.tensor([[True, True, False]])
    zero = torch.zeros(1, 3)  # no advantage: the loss is the KL term alone
    # ref - logp = -0.5 and 1.0: (e^-0.5 + 0.5 - 1 + e^1 - 1 - 1) / 2
    expected = (math.exp(-0.5) - 0.5 + math.exp(1.0) - 2.0) / 2
    loss, _ = surrogate("token-mean", kl_coef=0.5)(logprobs, logprobs, zero, eligible, reference=ref)
    assert float(loss) == pytest.approx(0.5 * expected)
    assert expected == pytest.approx(0.41238, abs=1e-4)
    loss, _ = surrogate("token-mean", kl_coef=0.5, kl_estimator="k1")(logprobs, logprobs, zero, eligible, reference=ref)
    assert float(loss) == pytest.approx(0.5 * (0.5 - 1.0) / 2)


def test_asymmetric_clip_bounds_each_side_on_its_own():
    """clip_high 0.6: ratio 1.5 with A > 0 is inside [0.8, 1.6] and unclipped; 0.7 with A < 0 is
    still clipped at 0.8."""
    loss, clipped = surrogate("token-mean", clip_high=0.6)(logprobs, old, adv, eligible)
    assert float(loss) == pytest.approx((-1.5 - 0.5 - 1.1 + 1.6) / 4)
    assert clipped == pytest.approx({"low": 1 / 4, "high": 0.0, "region": 1 / 4})


def test_constant_divides_by_rollouts_times_max_tokens():
    loss, _ = surrogate("constant")(logprobs, old, adv, eligible, max_tokens=10)
    assert float(loss) == pytest.approx(sum(PER_TOKEN[0] + PER_TOKEN[1]) / (2 * 10))


def test_sequence_ratio_is_the_geometric_mean_of_the_rollouts_token_ratios():
    """Row 0: exp(mean(log 1.5, log 0.5, log 1.1)) = 0.9374, inside the clip, times A = 1 on each
    of its three tokens; row 1: 0.7 with A = -2, clipped at 0.8."""
    row0 = math.exp((math.log(1.5) + math.log(0.5) + math.log(1.1)) / 3)
    loss, clipped = surrogate("sequence-mean", ratio_level="sequence")(logprobs, old, adv, eligible)
    assert float(loss) == pytest.approx((-row0 + 1.6) / 2)
    assert clipped == pytest.approx({"low": 1 / 4, "high": 0.0, "region": 1 / 4})


def test_the_update_takes_whole_groups_per_mini_batch_and_records_every_mini_batchs_clip(tiny_dir, monkeypatch):
    """The shared update (`RLVRModule.update`) with 4 prompts x G = 2, 2 mini-batches and 2 epochs:
    each mini-batch is whole consecutive groups (prompts 0-1, then 2-3, each epoch), and the
    recorded clip fractions are the mean over all 4 updates of what each one's loss reported."""
    import algorithms.base
    from algorithms.grpo import GRPO
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.base import Verdict
    from tasks.math import MathTask

    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    module = GRPO(
        policy=model, tokenizer=tokenizer, task=task, group_size=2, update=UpdateArgs(minibatches=2, epochs=2)
    )
    problems = [p for p in task.train_problems()[:4] for _ in range(2)]
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=4)).generate(problems, group_size=2)
    rollouts.verdicts = [Verdict(float(i % 2), "") for i in range(8)]
    advantages, _ = module.credit(rollouts)
    optimizer = torch.optim.SGD(list(module.parameters()), lr=0.0)
    module.optimizers = lambda: optimizer
    module.lr_schedulers = lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    module.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    batches, score = [], module.score

    def recorded_score(batch):
        batches.append([p.id for p in batch.problems])
        return score(batch)

    module.score = recorded_score
    # each update's loss as computed, its clip fractions literal ones
    reported = iter(
        [
            {"low": 0.1, "high": 0.0, "region": 0.5},
            {"low": 0.3, "high": 0.2, "region": 0.0},
            {"low": 0.0, "high": 0.6, "region": 0.1},
            {"low": 0.4, "high": 0.0, "region": 0.2},
        ]
    )
    real = algorithms.base.policy_loss
    monkeypatch.setattr(algorithms.base, "policy_loss", lambda *a, **k: (real(*a, **k)[0], next(reported)))
    stats = module.update(rollouts, advantages)
    ids = [p.id for p in task.train_problems()[:4]]
    first, second = [ids[0]] * 2 + [ids[1]] * 2, [ids[2]] * 2 + [ids[3]] * 2
    assert batches == [first, second, first, second]
    assert stats["updates"] == 4
    assert stats["clip_ratio/low_mean"] == pytest.approx((0.1 + 0.3 + 0.0 + 0.4) / 4)
    assert stats["clip_ratio/high_mean"] == pytest.approx((0.0 + 0.2 + 0.6 + 0.0) / 4)
    assert stats["clip_ratio/region_mean"] == pytest.approx((0.5 + 0.0 + 0.1 + 0.2) / 4)


def test_an_update_scored_in_passes_by_length_steps_as_one_pass_does(tiny_dir, monkeypatch):
    """`update.scoring_tokens`: the shared update scores its mini-batch a few groups a pass and
    ends at the weights one pass reaches, up to rounding."""
    import rollout.scoring
    from algorithms.grpo import GRPO
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.base import Verdict
    from tasks.math import MathTask

    task = MathTask(train_size=20, eval_size=5)
    problems = [p for p in task.train_problems()[:6] for _ in range(4)]
    passes, real = [], rollout.scoring.by_length
    monkeypatch.setattr(rollout.scoring, "by_length", lambda *a, **k: passes.append(1) or real(*a, **k))
    after = []
    for slots in (None, 64):
        model, tokenizer = load_policy(tiny_dir)
        torch.manual_seed(0)
        rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=12)).generate(problems, group_size=4)
        rollouts.verdicts = [Verdict(float(i % 3 == 0), "") for i in range(24)]
        module = GRPO(
            policy=model, tokenizer=tokenizer, task=task, group_size=4, update=UpdateArgs(scoring_tokens=slots)
        )
        optimizer = torch.optim.SGD(list(module.parameters()), lr=1.0)
        module.optimizers = lambda: optimizer
        module.lr_schedulers = lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        module.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
        module.engine.push_weights = lambda: None
        stats = module.update(rollouts, module.credit(rollouts)[0])
        after.append((stats, [p.detach().clone() for p in model.parameters()]))
    assert passes == [1]  # the setting reached the scoring, once
    assert after[1][0]["grad_norm"] == pytest.approx(after[0][0]["grad_norm"], rel=1e-5)
    assert after[1][0]["loss"] == pytest.approx(after[0][0]["loss"], rel=1e-5, abs=1e-7)
    for one_pass, by_passes in zip(after[0][1], after[1][1]):
        torch.testing.assert_close(by_passes, one_pass, atol=1e-5, rtol=1e-4)


def grpo_update_after(tiny_dir, rewards: list[float], **update):
    """(stats, weights after, rows the update's passes ran) of one GRPO update (G = 4, six prompts)
    on fixed rollouts with these rewards, plain SGD at lr 1."""
    from algorithms.grpo import GRPO
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.base import Verdict
    from tasks.math import MathTask

    task = MathTask(train_size=20, eval_size=5)
    model, tokenizer = load_policy(tiny_dir)
    torch.manual_seed(0)
    problems = [p for p in task.train_problems()[:6] for _ in range(4)]
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=12)).generate(problems, group_size=4)
    rollouts.verdicts = [Verdict(r, "") for r in rewards]
    module = GRPO(policy=model, tokenizer=tokenizer, task=task, group_size=4, update=UpdateArgs(**update))
    optimizer = torch.optim.SGD(list(module.parameters()), lr=1.0)
    module.optimizers = lambda: optimizer
    module.lr_schedulers = lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    module.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    module.engine.push_weights = lambda: None
    rows = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: rows.append(out.shape[0]))
    stats = module.update(rollouts, module.credit(rollouts)[0])
    hook.remove()
    return stats, [p.detach().clone() for p in model.parameters()], rows


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean", "constant"])
def test_an_update_that_skips_zero_advantage_groups_steps_as_one_that_scores_them(tiny_dir, aggregation):
    """`update.skip_zero_advantage`: the saturated groups' terms are exactly 0, so leaving them out
    of the passes ends at the same weights, up to rounding, with the same records."""
    rewards = [1, 1, 1, 1] + [0, 1, 0, 0] + [0] * 4 + [1, 0, 1, 1] + [0, 0, 1, 1] + [1] * 4  # 3 of 6 saturated
    every, skipping = (
        grpo_update_after(tiny_dir, [float(r) for r in rewards], loss_aggregation=aggregation, skip_zero_advantage=skip)
        for skip in (False, True)
    )
    assert every[2] == [6, 24] and skipping[2] == [3, 12]  # prompts once a group, then completions
    for key in ("grad_norm", "loss", "clip_ratio/low_mean", "clip_ratio/high_mean", "zero_grad_updates"):
        assert skipping[0][key] == pytest.approx(every[0][key], rel=1e-5, abs=1e-7), key
    for all_rows, fewer in zip(every[1], skipping[1]):
        torch.testing.assert_close(fewer, all_rows, atol=1e-6, rtol=1e-5)


def test_a_step_without_signal_still_scores_one_group_and_records_a_zero_gradient(tiny_dir):
    stats, after, rows = grpo_update_after(tiny_dir, [1.0] * 12 + [0.0] * 12, skip_zero_advantage=True)
    before = grpo_update_after(tiny_dir, [1.0] * 12 + [0.0] * 12)
    assert rows == [1, 4] and stats["grad_norm"] == 0.0 and stats["zero_grad_updates"] == 1
    for a, b in zip(after, before[1]):
        assert torch.equal(a, b)


def test_skipping_zero_advantage_applies_only_where_the_loss_is_the_surrogate_alone(tiny_dir):
    from algorithms.grpo import GRPO
    from algorithms.ppo import PPO
    from algorithms.sdpo import SDPO
    from harness.models import load_policy
    from rollout.batch import Rollouts
    from tasks.math import MathTask

    task = MathTask(train_size=20, eval_size=5)
    model, tokenizer = load_policy(tiny_dir)
    eligible = torch.tensor([[False, True, True]] * 6)
    batch = Rollouts(
        problems=[],
        input_ids=torch.ones(6, 3, dtype=torch.long),
        attention_mask=torch.ones(6, 3, dtype=torch.long),
        eligible=eligible,
        sample_logprobs=torch.zeros(6, 3),
        completions=[],
        # groups of two: both signs; zero; negative only (a term of the loss all the same)
        token_data={
            "advantages": torch.tensor([[0, 1, 1], [0, -1, -1], [0] * 3, [0] * 3, [0, -1, 0], [0] * 3]).float()
        },
    )
    skip = UpdateArgs(skip_zero_advantage=True)
    grpo = GRPO(policy=model, tokenizer=tokenizer, task=task, group_size=2, update=skip)
    assert (
        grpo.positions_to_score(batch).tolist()
        == [[False, True, True]] * 2 + [[False] * 3] * 2 + [[False, True, True]] * 2
    )
    for module in (
        GRPO(policy=model, tokenizer=tokenizer, task=task, group_size=2),
        GRPO(
            policy=model,
            tokenizer=tokenizer,
            task=task,
            group_size=2,
            update=UpdateArgs(skip_zero_advantage=True, kl_coef=0.1),
        ),
        PPO(policy=model, tokenizer=tokenizer, task=task, update=skip),
        SDPO(policy=model, tokenizer=tokenizer, task=task, group_size=2, update=skip),
    ):
        assert torch.equal(module.positions_to_score(batch), eligible), type(module).__name__
