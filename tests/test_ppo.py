import pytest
import torch

from algorithms import loss
from algorithms.ppo import PPO, explained_variance, gae


def direct_gae(rewards, values, mask, gamma, lam):
    """The textbook loop over each row's eligible positions only."""
    advantages, returns = torch.zeros_like(values), torch.zeros_like(values)
    for b in range(values.shape[0]):
        steps = [t for t in range(values.shape[1]) if mask[b, t]]
        running = 0.0
        for k in reversed(range(len(steps))):
            t = steps[k]
            next_value = values[b, steps[k + 1]].item() if k + 1 < len(steps) else 0.0
            delta = rewards[b, t].item() + gamma * next_value - values[b, t].item()
            running = delta + gamma * lam * running
            advantages[b, t] = running
            returns[b, t] = running + values[b, t]
    return advantages, returns


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (1.0, 0.95), (0.9, 0.8), (0.99, 0.0)])
def test_gae_matches_the_direct_loop_with_gaps(gamma, lam):
    g = torch.Generator().manual_seed(0)
    values = torch.randn(4, 12, generator=g)
    mask = torch.zeros(4, 12, dtype=torch.bool)
    mask[0, 3:10] = True  # one contiguous completion
    mask[1, [2, 3, 6, 7, 8, 11]] = True  # actions with environment tokens between them
    mask[2, [5]] = True  # a single token
    # row 3: nothing eligible
    rewards = torch.zeros(4, 12)
    rewards[0, 9], rewards[1, 11], rewards[2, 5] = 1.0, 0.5, 1.0
    rewards[1, 3] = 0.25  # an intermediate reward on an eligible step
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    expected_adv, expected_ret = direct_gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(advantages, expected_adv)
    torch.testing.assert_close(returns, expected_ret)
    assert (advantages[~mask] == 0).all() and (returns[~mask] == 0).all()


def test_gae_with_zero_values_is_the_discounted_return():
    mask = torch.ones(1, 4, dtype=torch.bool)
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    advantages, returns = gae(rewards, torch.zeros(1, 4), mask, 0.5, 1.0)
    torch.testing.assert_close(returns, torch.tensor([[0.125, 0.25, 0.5, 1.0]]))


def test_explained_variance():
    target = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(target, target) == 1.0
    assert explained_variance(torch.full((3,), 2.0), target) == pytest.approx(0.0)


def test_value_head_values_align_with_the_policy_forward(tiny_dir):
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from rollout.scoring import sequence_logprobs
    from tasks.base import Verdict
    from tasks.math import MathTask

    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    module = PPO(policy=model, tokenizer=tokenizer, task=task, gamma=1.0, lam=1.0)
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=8)).generate(task.train_problems()[:4])
    rollouts.verdicts = [Verdict(float(i % 2), "") for i in range(4)]
    logprobs, outputs = module.score(rollouts)
    expected = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 1.0)
    torch.testing.assert_close(logprobs[rollouts.eligible], expected[rollouts.eligible], atol=1e-5, rtol=1e-5)
    advantages, stats = module.credit(rollouts)
    assert (advantages[~rollouts.eligible] == 0).all()
    # zero-initialised head, gamma = lam = 1: the return is the reward at every eligible token
    returns = rollouts.token_data["returns"]
    for i in range(4):
        assert (returns[i][rollouts.eligible[i]] == rollouts.rewards[i]).all()
    loss, value_stats = module.critic_loss(rollouts, outputs)
    assert value_stats["ppo/value_loss"] == pytest.approx(
        0.5 * float((rollouts.rewards**2 * rollouts.eligible.sum(-1)).sum() / rollouts.eligible.sum()), rel=1e-5
    )


def test_value_head_trains_at_its_own_learning_rate(tiny_dir):
    from algorithms.base import OptimArgs
    from harness.models import load_policy
    from tasks.math import MathTask

    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    for value_lr, expected in ((None, 10 * OptimArgs().lr), (1e-3, 1e-3)):
        module = PPO(policy=model, tokenizer=tokenizer, task=task, value_lr=value_lr)
        (optimizer,), _ = module.configure_optimizers()
        policy_group, head_group = optimizer.param_groups
        assert policy_group["initial_lr"] == pytest.approx(module.optim_args.lr)
        assert head_group["initial_lr"] == pytest.approx(expected)
        assert {id(p) for p in head_group["params"]} == {id(p) for p in module.value_head.parameters()}


@pytest.mark.parametrize("trunk", [True, False])
def test_policy_and_critic_gradients_are_clipped_and_recorded_apart(tiny_dir, trunk):
    """grad_norm is the policy loss's gradient alone, critic/grad_norm the value loss's (its head
    and, with a shared trunk, the trunk); each clipped on its own, then added."""
    from algorithms.base import OptimArgs
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.base import Verdict
    from tasks.math import MathTask

    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    cap = 1e-3  # below both norms: both are clipped
    module = PPO(
        policy=model, tokenizer=tokenizer, task=task, optim=OptimArgs(max_grad_norm=cap), value_trunk_gradient=trunk
    )
    torch.nn.init.normal_(module.value_head.weight, std=0.5)  # values that differ from the returns
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=8)).generate(task.train_problems()[:4])
    rollouts.verdicts = [Verdict(float(i % 2), "") for i in range(4)]
    advantages, _ = module.credit(rollouts)
    # the reference: each loss's gradient taken on its own
    params = list(module.parameters())
    logprobs, outputs = module.score(rollouts)
    policy_loss, _ = loss.policy_loss(logprobs, logprobs.detach(), advantages, rollouts.eligible, module.update_args)
    critic_loss, _ = module.critic_loss(rollouts, outputs)
    g_policy = torch.autograd.grad(policy_loss, params, retain_graph=True, allow_unused=True)
    g_critic = torch.autograd.grad(critic_loss, params, allow_unused=True)
    norm = lambda grads: float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads if g is not None])))  # noqa: E731
    policy_norm, critic_norm = norm(g_policy), norm(g_critic)
    assert g_policy[-1] is None  # the policy loss does not reach the value head
    assert (g_critic[0] is not None) == trunk  # the value loss reaches the trunk only when it shares it
    # update() with a learning rate of 0, so the gradients it leaves can be read
    optimizer = torch.optim.SGD(params, lr=0.0)
    module.optimizers = lambda: optimizer
    module.lr_schedulers = lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    module.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    stats = module.update(rollouts, advantages)
    assert stats["grad_norm"] == pytest.approx(policy_norm, rel=1e-5)
    assert stats["critic/grad_norm"] == pytest.approx(critic_norm, rel=1e-5)
    for p, gp, gc in zip(params, g_policy, g_critic):
        expected = torch.zeros_like(p)
        if gp is not None:
            expected += gp * cap / policy_norm
        if gc is not None:
            expected += gc * cap / critic_norm
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-9)


def test_ppo_credit_and_value_loss_with_a_trained_head_and_gamma_apart_from_lambda(tiny_dir):
    """A non-zero value head, gamma 0.9 and lambda 0.5: the advantages are the direct GAE loop's
    on the head's own values, whitened; the value loss is the clipped maximum, with values that
    moved past the clip from the rollout-time ones."""
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.base import Verdict
    from tasks.math import MathTask

    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    module = PPO(policy=model, tokenizer=tokenizer, task=task, gamma=0.9, lam=0.5, value_clip=0.2)
    torch.nn.init.normal_(module.value_head.weight, std=0.5)
    torch.nn.init.constant_(module.value_head.bias, 0.1)
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=8)).generate(task.train_problems()[:4])
    rollouts.verdicts = [Verdict(float(i % 2), "") for i in range(4)]
    eligible = rollouts.eligible
    with torch.no_grad():
        _, values = module.forward_with_values(rollouts.input_ids, rollouts.attention_mask, None)
    values = values * eligible
    rewards = torch.zeros_like(values)
    for i in range(4):
        rewards[i, eligible[i].nonzero().max()] = float(i % 2)
    raw, returns = direct_gae(rewards, values, eligible, 0.9, 0.5)
    picked = raw[eligible]
    expected = torch.where(eligible, (raw - picked.mean()) / (picked.std() + 1e-8), 0.0)
    advantages, stats = module.credit(rollouts)
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rollouts.token_data["returns"], returns, atol=1e-5, rtol=1e-5)
    assert stats["credit/advantage_mean"] == pytest.approx(float(picked.mean()), abs=1e-6)
    # values that moved 0.5 from the old ones: clipped to 0.2 of them, and the larger loss taken
    moved = rollouts.token_data["old_values"] + 0.5
    loss, value_stats = module.critic_loss(rollouts, {"values": moved})
    old = rollouts.token_data["old_values"]
    per_token = 0.5 * torch.maximum((moved - returns) ** 2, (old + 0.2 - returns) ** 2)
    mask = eligible.float()
    assert value_stats["ppo/value_loss"] == pytest.approx(float((per_token * mask).sum() / mask.sum()), rel=1e-5)
    assert float(loss) == pytest.approx(0.1 * value_stats["ppo/value_loss"], rel=1e-5)  # value_coef's default
    assert value_stats["ppo/value_clip_frac"] == 1.0


def test_ppo_scored_in_passes_by_length_gives_the_same_log_probs_and_values(tiny_dir, monkeypatch):
    """`update.scoring_tokens` reaches PPO's own pass (log-probs and values from one trunk pass)."""
    import algorithms.ppo
    from algorithms.loss import UpdateArgs
    from algorithms.ppo import PPO
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.math import MathTask

    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    torch.manual_seed(0)
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=12)).generate(task.train_problems()[:6])
    passes, real = [], algorithms.ppo.by_length
    monkeypatch.setattr(algorithms.ppo, "by_length", lambda *a, **k: passes.append(1) or real(*a, **k))
    outputs = []
    for slots in (None, 40):
        module = PPO(policy=model, tokenizer=tokenizer, task=task, update=UpdateArgs(scoring_tokens=slots))
        torch.manual_seed(1)
        torch.nn.init.normal_(module.value_head.weight)  # the same head both times, not zero
        logprobs, extra = module.score(rollouts)
        outputs.append((logprobs.detach(), extra["values"].detach() * rollouts.eligible))
    assert passes == [1]
    torch.testing.assert_close(outputs[1][0], outputs[0][0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(outputs[1][1], outputs[0][1], atol=1e-5, rtol=1e-5)


def test_advantages_are_whitened_over_every_processs_tokens(monkeypatch):
    """Two processes (the other simulated through `distributed.total`: five tokens of literal
    advantages): mean and unbiased std of all their tokens together, as verl's masked_whiten over
    its whole batch; on one process, torch's own mean and std of this one's."""
    import math

    from test_zoo import with_another_process

    from algorithms.ppo import whitened
    from rollout import distributed

    advantages = torch.tensor([[0.0, 1.0, 2.0, 0.0], [0.0, 4.0, 0.0, 0.0]])
    eligible = torch.tensor([[False, True, True, False], [False, True, False, False]])
    mine, other = [1.0, 2.0, 4.0], [0.5, -1.0, -1.0, 3.0, 0.0]
    one = whitened(advantages, eligible)[eligible]
    torch.testing.assert_close(one, (torch.tensor(mine) - 7 / 3) / (torch.tensor(mine).std() + 1e-8))
    sums = []
    monkeypatch.setattr(distributed, "total", with_another_process(other, sums))
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    both = mine + other
    mean = sum(both) / len(both)
    std = math.sqrt(sum((t - mean) ** 2 for t in both) / (len(both) - 1))
    expected = torch.tensor([(a - mean) / (std + 1e-8) for a in mine])
    torch.testing.assert_close(whitened(advantages, eligible)[eligible], expected)
    assert len(sums) == 3 and (whitened(advantages, eligible)[~eligible] == 0).all()


def verl_gae_whitened(token_level_rewards, values, response_mask, gamma, lam):
    """verl's `compute_gae_advantage_return` and `masked_whiten`, transcribed from volcengine/verl
    b178a3c, verl/trainer/ppo/core_algos.py and verl/utils/torch_functional.py: the reversed loop
    over every position, which carries the next value and the running advantage across the
    positions off the mask (an environment's tokens), then whitening over the mask (mean, unbiased
    variance, rsqrt(var + 1e-8))."""
    nextvalues, lastgaelam, advantages_reversed = 0, 0, []
    for t in reversed(range(token_level_rewards.shape[-1])):
        delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * response_mask[:, t] + (1 - response_mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * response_mask[:, t] + (1 - response_mask[:, t]) * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values
    mask_sum = response_mask.sum()
    mean = (advantages * response_mask).sum() / (mask_sum + 1e-8)
    variance = ((advantages - mean) ** 2 * response_mask).sum() / (mask_sum + 1e-8) * mask_sum / (mask_sum - 1)
    return (advantages - mean) * torch.rsqrt(variance + 1e-8), returns


@pytest.mark.parametrize("gamma, lam", [(1.0, 0.95), (0.9, 0.8), (0.99, 0.0)])
def test_gae_and_whitening_equal_verls_on_the_mask(gamma, lam):
    """The same rows as the direct loop's test (a gap of environment tokens, a single token, a row
    with none), against verl's own code: advantages, returns and the whitened advantages."""
    from algorithms.ppo import whitened

    g = torch.Generator().manual_seed(1)
    values = torch.randn(4, 12, generator=g)
    mask = torch.zeros(4, 12, dtype=torch.bool)
    mask[0, 3:10], mask[1, [2, 3, 6, 7, 8, 11]], mask[2, [5]] = True, True, True
    rewards = torch.zeros(4, 12)
    rewards[0, 9], rewards[1, 11], rewards[2, 5], rewards[1, 3] = 1.0, 0.5, 1.0, 0.25
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    theirs_whitened, theirs_returns = verl_gae_whitened(rewards, values, mask.float(), gamma, lam)
    torch.testing.assert_close(returns[mask], theirs_returns[mask])
    torch.testing.assert_close(advantages[mask] + values[mask], theirs_returns[mask])
    torch.testing.assert_close(whitened(advantages, mask)[mask], theirs_whitened[mask], atol=1e-5, rtol=1e-5)
