import pytest
import torch

from algorithms.grpo import group_advantages


def direct(rewards, eps=1e-4, scale_by_std=True):
    out = []
    for group in rewards.tolist():
        mean = sum(group) / len(group)
        std = (sum((r - mean) ** 2 for r in group) / (len(group) - 1)) ** 0.5
        out.append([(r - mean) / (std + eps) if scale_by_std else r - mean for r in group])
    return torch.tensor(out)


def test_matches_direct_computation():
    rewards = torch.tensor([[1.0, 0, 0, 1, 1, 0, 0, 0], [0.2, 0.9, 0.5, 0.5, 0.1, 0.0, 1.0, 0.3]])
    torch.testing.assert_close(group_advantages(rewards), direct(rewards))
    torch.testing.assert_close(group_advantages(rewards, scale_by_std=False), direct(rewards, scale_by_std=False))
    torch.testing.assert_close(group_advantages(rewards, eps=0.5), direct(rewards, eps=0.5))


def test_saturated_groups_are_exactly_zero():
    rewards = torch.tensor([[1.0] * 8, [0.0] * 8, [0.1] * 8, [0.3] * 3 + [0.3] * 5])
    advantages = group_advantages(rewards)
    assert (advantages == 0).all()
    mixed = torch.tensor([[0.1] * 7 + [0.2], [0.7] * 8])
    advantages = group_advantages(mixed)
    assert (advantages[1] == 0).all() and (advantages[0] != 0).all()


def test_advantages_sum_to_zero_per_group():
    rewards = torch.rand(5, 8)
    assert group_advantages(rewards).sum(-1).abs().max() < 1e-4


def test_credit_groups_consecutive_rollouts_of_one_prompt_against_literal_numbers():
    from types import SimpleNamespace

    from algorithms.grpo import GRPO

    class Stub:  # GRPO's credit with G = 4, without a policy to build
        credit, group_size, eps, scale_by_std = GRPO.credit, 4, 1e-4, True

    # prompt 1: rollouts 1 0 0 0 (mean 0.25, std 0.5); prompt 2: 1 1 0 1 (mean 0.75, std 0.5)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    eligible = torch.tensor([[False, True, True]] * 8)
    advantages, _ = Stub().credit(SimpleNamespace(rewards=rewards, eligible=eligible))
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, -1.5, 0.5]) * (0.5 / (0.5 + 1e-4))
    torch.testing.assert_close(advantages[:, 1], expected)
    torch.testing.assert_close(advantages[:, 2], expected)
    assert (advantages[:, 0] == 0).all()  # nothing off the eligible tokens
    Stub.scale_by_std = False  # Dr. GRPO: centred only
    advantages, _ = Stub().credit(SimpleNamespace(rewards=rewards, eligible=eligible))
    torch.testing.assert_close(advantages[:, 1], torch.tensor([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25]))


def test_the_negative_control_shuffles_grpos_advantages_across_the_step():
    """Shuffled GRPO: the multiset of advantages is GRPO's, its permutation is new each step and
    reproducible, and over many steps a rollout's advantage says nothing of its own reward."""
    from types import SimpleNamespace

    from algorithms.shuffled_grpo import ShuffledGRPO

    class Stub:  # the control's credit with G = 4, without a policy to build
        credit, group_size, eps, scale_by_std, seed = ShuffledGRPO.credit, 4, 1e-4, True, 3

    torch.manual_seed(0)
    eligible = torch.ones(32, 2, dtype=torch.bool)
    stub, together = Stub(), []
    for step in range(200):
        stub.rl_step = step
        rewards = (torch.rand(32) < 0.4).float()
        rollouts = SimpleNamespace(rewards=rewards, eligible=eligible)
        control = stub.credit(rollouts)[0][:, 0]
        grpo = group_advantages(rewards.view(-1, 4)).view(-1)
        assert torch.equal(control.sort().values, grpo.sort().values)  # same magnitudes, zeros included
        assert torch.equal(control, stub.credit(rollouts)[0][:, 0])  # a function of (seed, step)
        together.append(torch.stack([control, grpo, rewards - rewards.view(-1, 4).mean(-1).repeat_interleave(4)]))
    control, grpo, centred = torch.cat(together, 1)
    assert torch.corrcoef(torch.stack([grpo, centred]))[0, 1] > 0.9  # GRPO's credit follows the reward ...
    assert abs(torch.corrcoef(torch.stack([control, centred]))[0, 1]) < 0.05  # ... the control's does not


def test_the_records_reward_std_is_the_spread_within_each_group(tiny_dir):
    """TRL's `reward_std`: the sample std of each prompt's group, averaged over groups (not the
    step's spread), with the saturated-group fractions beside it, against literal numbers."""
    from algorithms.grpo import GRPO
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.base import Verdict
    from tasks.math import MathTask

    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    module = GRPO(policy=model, tokenizer=tokenizer, task=task, group_size=4)
    problems = [p for p in task.train_problems()[:3] for _ in range(4)]
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=4)).generate(problems, group_size=4)
    rewards = [1.0, 0.0, 0.0, 0.0] + [1.0, 1.0, 0.0, 0.0] + [1.0, 1.0, 1.0, 1.0]
    rollouts.verdicts = [Verdict(r, "") for r in rewards]
    advantages, stats = module.credit(rollouts)
    row = module.record(rollouts, advantages, {}, stats, spent=len(rollouts))
    # group stds 0.5, sqrt(1/3) and 0 (the step's own std would be 0.515)
    assert row["reward_std"] == pytest.approx((0.5 + (1 / 3) ** 0.5 + 0.0) / 3)
    assert row["reward"] == pytest.approx(7 / 12)
    assert row["frac_reward_zero_std"] == pytest.approx(1 / 3)
    assert row["frac_reward_all_correct"] == pytest.approx(1 / 3) and row["frac_reward_all_wrong"] == 0


def test_the_records_load_is_the_last_minutes_per_core_it_may_use(tiny_dir, monkeypatch):
    """A load average of 3.0 over the last minute on a process allowed 4 cores: 0.75 a core (above
    1, other work shared the cores and slowed the run's wall-clock)."""
    import os

    from algorithms.grpo import GRPO
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.base import Verdict
    from tasks.math import MathTask

    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    module = GRPO(policy=model, tokenizer=tokenizer, task=task, group_size=2)
    problems = [p for p in task.train_problems()[:1] for _ in range(2)]
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=2)).generate(problems, group_size=2)
    rollouts.verdicts = [Verdict(1.0, ""), Verdict(0.0, "")]
    advantages, stats = module.credit(rollouts)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 9.0, 9.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    row = module.record(rollouts, advantages, {}, stats, spent=len(rollouts))
    assert row["machine/load_per_core"] == 0.75


def test_grpos_eps_against_a_group_with_a_tiny_reward_spread(tiny_dir):
    """GRPO as a suite builds it (eps left at its default, 1e-4 as TRL's): where the group's std
    is of the order of eps, eps shows in the advantage, and it must be the documented one."""
    from types import SimpleNamespace

    from algorithms.grpo import GRPO
    from harness.models import load_policy
    from tasks.math import MathTask

    model, tokenizer = load_policy(tiny_dir)
    module = GRPO(policy=model, tokenizer=tokenizer, task=MathTask(train_size=20, eval_size=5), group_size=4)
    # rewards 0, 0, 0, 0.001: mean 0.00025, sample std sqrt((3 * 0.00025^2 + 0.00075^2) / 3) = 0.0005
    rewards = torch.tensor([0.0, 0.0, 0.0, 0.001])
    advantages, _ = module.credit(SimpleNamespace(rewards=rewards, eligible=torch.ones(4, 2, dtype=torch.bool)))
    expected = torch.tensor([-0.00025, -0.00025, -0.00025, 0.00075]) / (0.0005 + 1e-4)  # -0.4167 and 1.25
    torch.testing.assert_close(advantages[:, 0], expected, rtol=1e-4, atol=0)
    torch.testing.assert_close(advantages[:, 1], expected, rtol=1e-4, atol=0)


def test_the_negative_control_draws_a_fresh_permutation_every_step():
    """Read back the control's permutation from advantages that are all distinct: a new one at
    every step (the same one each step would tie each rollout slot to one other's credit)."""
    from types import SimpleNamespace

    from algorithms.shuffled_grpo import ShuffledGRPO

    class Stub:  # the control's credit with G = 4, without a policy to build
        credit, group_size, eps, scale_by_std, seed = ShuffledGRPO.credit, 4, 1e-4, True, 3

    rewards = torch.tensor([0.0, 0.1, 0.3, 0.6, 0.0, 0.2, 0.5, 0.9])
    rollouts = SimpleNamespace(rewards=rewards, eligible=torch.ones(8, 1, dtype=torch.bool))
    grpo = group_advantages(rewards.view(-1, 4)).view(-1).tolist()
    assert len(set(grpo)) == 8
    stub, drawn = Stub(), []
    for step in range(6):
        stub.rl_step = step
        drawn.append(tuple(grpo.index(a) for a in stub.credit(rollouts)[0][:, 0].tolist()))
        assert sorted(drawn[-1]) == list(range(8))  # a permutation of GRPO's advantages
    assert len(set(drawn)) == 6
