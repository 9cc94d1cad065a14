"""A verifier's own failure is not a zero (#33): a rollout it could not judge (`Verdict.judged`
False: the sandbox broke, an environment failed) takes its group out of the update, is counted
(`verify/unjudged`), and never moves a baseline."""

from __future__ import annotations

import importlib

import pytest
import torch

from rollout.batch import Verdict

GROUP = 4
# rewards of three groups; group 0's first rollout is the one the verifier could not judge
REWARDS = [0.0, 1.0, 0.0, 1.0] + [1.0, 0.0, 0.0, 0.0] + [1.0, 1.0, 0.0, 1.0]
ALGORITHMS = [
    "algorithms.grpo.GRPO",
    "algorithms.dr_grpo.DrGRPO",
    "algorithms.gspo.GSPO",
    "algorithms.rloo.RLOO",
    "algorithms.reinforce_pp.REINFORCEPlusPlus",
    "algorithms.shuffled_grpo.ShuffledGRPO",
    "algorithms.hp_rlvr.HPRLVR",
]


@pytest.fixture(scope="module")
def setup(tiny_dir):
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.math import MathTask

    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    problems = [p for p in task.train_problems()[:3] for _ in range(GROUP)]
    torch.manual_seed(0)
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=4)).generate(problems, group_size=GROUP)
    return model, tokenizer, task, rollouts


def with_verdicts(rollouts, first_reward: float, judged: bool = False):
    """The rollouts with REWARDS, the first one's reward `first_reward`, judged or not."""
    from dataclasses import replace

    verdicts = [Verdict(r, "") for r in REWARDS]
    verdicts[0] = Verdict(first_reward, "the sandbox could not judge this run (OSError)", judged=judged)
    return replace(rollouts, verdicts=verdicts, token_data={})


def module_of(path: str, setup):
    model, tokenizer, task, _ = setup
    module_name, name = path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module_name), name)
    return cls(policy=model, tokenizer=tokenizer, task=task, **({} if name == "HPRLVR" else {"group_size": GROUP}))


def test_a_group_with_an_unjudged_rollout_has_no_eligible_token_and_the_rest_are_untouched(setup):
    rollouts = with_verdicts(setup[3], 0.0)
    trainable = rollouts.trainable(GROUP)
    assert not trainable.eligible[:GROUP].any()
    assert torch.equal(trainable.eligible[GROUP:], rollouts.eligible[GROUP:])
    assert rollouts.eligible[:GROUP].any()  # the sampled rollouts are as they were (records use them)
    judged = with_verdicts(setup[3], 0.0, judged=True)
    assert judged.trainable(GROUP) is judged


@pytest.mark.parametrize("path", ALGORITHMS, ids=[p.rsplit(".", 1)[1] for p in ALGORITHMS])
def test_what_an_unjudged_rollout_scored_moves_no_advantage(path, setup):
    """Its group's advantages are zero, and every other advantage is the same whatever reward the
    broken verifier returned for it."""
    results = []
    for reward in (0.0, 1.0):
        module = module_of(path, setup)
        if path.endswith("HPRLVR"):
            module.group_size = 1  # one rollout a prompt: its "group" is itself
        torch.manual_seed(0)
        advantages, _ = module.credit(with_verdicts(setup[3], reward).trainable(module.group_size))
        results.append(advantages)
    left_out = slice(0, 1 if path.endswith("HPRLVR") else GROUP)
    assert results[0][left_out].abs().sum() == 0 and results[1][left_out].abs().sum() == 0
    assert torch.equal(results[0], results[1])
    assert results[0].abs().sum() > 0  # the other groups do carry signal


def test_the_hindsight_baseline_learns_from_judged_rollouts_only(setup):
    module = module_of("algorithms.hp_rlvr.HPRLVR", setup)
    module.group_size = 1
    rollouts = with_verdicts(setup[3], 1.0)
    module.credit(rollouts.trainable(1))
    first = rollouts.problems[0].id
    # the first prompt's three judged rollouts are all it learnt of that prompt (discounted counts)
    d, expected = module.baseline.args.discount, (0.0, 0.0)
    for r in REWARDS[1:GROUP]:
        expected = (d * expected[0] + r, d * expected[1] + 1 - r)
    assert module.baseline.counts[first] == pytest.approx(expected)


def test_the_record_counts_unjudged_rollouts_and_averages_the_judged_rewards(setup):
    module = module_of("algorithms.grpo.GRPO", setup)
    rollouts = with_verdicts(setup[3], 1.0)
    advantages, stats = module.credit(rollouts.trainable(GROUP))
    row = module.record(rollouts, advantages, {}, stats, spent=len(rollouts))
    assert row["verify/unjudged"] == 1
    assert row["reward"] == pytest.approx(sum(REWARDS[1:]) / (len(REWARDS) - 1))
    assert row["tokens/generated"] == int(rollouts.eligible.sum())  # what was sampled, left out or not


def test_the_unjudged_count_is_of_rollouts_not_of_groups(setup):
    """Two unjudged rollouts of one group: 2, where a count of groups would say 1."""
    from dataclasses import replace

    module = module_of("algorithms.grpo.GRPO", setup)
    rollouts = with_verdicts(setup[3], 1.0)
    verdicts = list(rollouts.verdicts)
    verdicts[1] = Verdict(REWARDS[1], "the sandbox could not judge this run (OSError)", judged=False)
    rollouts = replace(rollouts, verdicts=verdicts)
    advantages, stats = module.credit(rollouts.trainable(GROUP))
    row = module.record(rollouts, advantages, {}, stats, spent=len(rollouts))
    assert row["verify/unjudged"] == 2
    assert row["reward"] == pytest.approx(sum(REWARDS[2:]) / (len(REWARDS) - 2))
