"""The field's baselines, each against its reference on literal inputs: RLOO (TRL's leave-one-out
baseline and loss), Dr. GRPO, DAPO (TRL's overlong punishment, dynamic sampling), GSPO and
REINFORCE++ (OpenRLHF's reinforce_baseline), and the settings each is defined by; one end-to-end
run of all of them in one suite."""

import json
import math
import random
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch
import yaml
from test_e2e import suite
from trl import RLOOTrainer
from trl.rewards import get_soft_overlong_punishment

from algorithms.dapo import DAPO, overlong_penalty
from algorithms.dr_grpo import DrGRPO
from algorithms.grpo import group_advantages
from algorithms.loss import UpdateArgs, policy_loss
from algorithms.reinforce_pp import REINFORCEPlusPlus
from algorithms.rloo import RLOO, leave_one_out_advantages
from harness.__main__ import main
from harness.config import load_benchmark
from rollout.batch import Problem, Rollouts, Verdict

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


def with_another_process(other: list[float], sums: list[float]):
    """`distributed.total` as if a second process held the token values `other`, for a whitening
    that asks, in order, for the count, the sum, then the squares about the mean of both (each
    of this process's values is appended to `sums`)."""

    def total(value):
        sums.append(value)
        if len(sums) == 1:
            return value + len(other)
        if len(sums) == 2:
            return value + sum(other)
        mean = (sums[1] + sum(other)) / (sums[0] + len(other))
        return value + sum((t - mean) ** 2 for t in other)

    return total


def stub_batch(rewards: torch.Tensor, lengths: list[int]) -> SimpleNamespace:
    eligible = torch.zeros(len(lengths), max(lengths) + 2, dtype=torch.bool)
    for row, n in enumerate(lengths):
        eligible[row, 2 : 2 + n] = True
    return SimpleNamespace(rewards=rewards.view(-1), eligible=eligible)


def test_rloo_credits_each_rollout_against_the_mean_of_the_others():
    expected = [[1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3], [1 - 2 / 3, 1 - 2 / 3, 1 - 2 / 3, -1.0], [0.0] * 4]
    torch.testing.assert_close(leave_one_out_advantages(REWARDS), torch.tensor(expected))
    module = SimpleNamespace(group_size=4)
    batch = stub_batch(REWARDS, [3, 1, 2, 4] * 3)
    advantages, _ = RLOO.credit(module, batch)
    torch.testing.assert_close(advantages[:, 2], torch.tensor(expected).view(-1))
    assert torch.equal(advantages != 0, batch.eligible & (advantages[:, 2:3] != 0))


def test_rloo_loss_is_trls_at_one_update_a_step():
    """TRL's RLOOTrainer clips the ratio of each completion's probabilities and averages over
    completions: loss and gradient equal ours, off-policy (ratios far from 1, some clipped) too."""
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(4, 6, generator=g) > 0.3
    logprobs = -torch.rand(4, 6, generator=g) * mask
    advantages = torch.randn(4, generator=g)
    ours_in, theirs_in = logprobs.clone().requires_grad_(True), logprobs.clone().requires_grad_(True)
    args = UpdateArgs(**RLOO.update_overrides)
    spread = torch.tensor([[0.02], [0.2], [0.02], [0.3]])  # rows whose ratio stays inside the clip, rows outside
    old = (logprobs + torch.randn(4, 6, generator=g) * spread) * mask
    ours, _ = policy_loss(ours_in, old, advantages[:, None] * mask, mask, args)
    stub = SimpleNamespace(
        epsilon_low=0.2,
        epsilon_high=0.2,
        aux_loss_enabled=False,
        model=SimpleNamespace(training=True),
        accelerator=SimpleNamespace(gather=lambda x: x, reduce=lambda x, reduction: x),
        _metrics={"train": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (theirs_in, torch.zeros_like(theirs_in), None),
    )
    inputs = {
        "prompt_ids": torch.zeros(4, 2, dtype=torch.long),
        "prompt_mask": torch.ones(4, 2, dtype=torch.long),
        "completion_ids": torch.zeros(4, 6, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": advantages,
        "old_logps": old.sum(1),
    }
    ratios = ((logprobs - old) * mask).sum(1).exp()
    assert ((ratios < 0.8) | (ratios > 1.2)).any() and ((ratios > 0.8) & (ratios < 1.2)).any()  # clipped and not
    theirs = RLOOTrainer._compute_loss(stub, None, inputs)
    torch.testing.assert_close(ours, theirs)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_in.grad, theirs_in.grad * mask)


def test_dr_grpo_centres_without_scaling_and_divides_by_a_constant():
    module = DrGRPO.__new__(DrGRPO)
    module.group_size, module.eps, module.scale_by_std = 4, 1e-4, False
    batch = stub_batch(REWARDS, [2] * 12)
    advantages, _ = DrGRPO.credit(module, batch)
    torch.testing.assert_close(advantages[:, 2], (REWARDS - REWARDS.mean(-1, keepdim=True)).view(-1))
    assert DrGRPO.update_overrides == {"loss_aggregation": "constant"}
    assert DrGRPO.__init__.__defaults__[1] is False  # scale_by_std


@pytest.mark.parametrize("length", [0, 5, 7, 8, 9, 10, 11, 12, 30])
def test_dapo_overlong_penalty_is_trls_soft_overlong_punishment(length):
    theirs = get_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=3)([[1] * length])[0]
    assert float(overlong_penalty(torch.tensor([length]), 10, 3)) == pytest.approx(theirs)


def test_dapo_overlong_shaping_enters_the_group_advantage_on_single_turn_tasks_only():
    module = DAPO.__new__(DAPO)
    module.group_size, module.eps, module.scale_by_std = 4, 1e-4, True
    module.sampling = SimpleNamespace(max_new_tokens=10)
    module.overlong_buffer, module.overlong_penalty = 2, 1.0
    module.dynamic_sampling = {}
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    batch = stub_batch(rewards, [4, 9, 4, 10])  # penalties 0, -0.5, 0, -1
    # on DAPO's +-1 scale: right 1, right but long 0.5, wrong -1, wrong and at the limit -2 (the
    # penalty half the gap between right and wrong, as in the paper)
    shaped = torch.tensor([[1.0, 0.5, -1.0, -2.0]])
    for multi_turn, used in ((False, shaped), (True, torch.tensor([[1.0, 1.0, -1.0, -1.0]]))):
        module.task = SimpleNamespace(multi_turn=multi_turn)
        advantages, _ = DAPO.credit(module, batch)
        torch.testing.assert_close(advantages[:, 2], group_advantages(used, 1e-4).view(-1))


class ScriptedTask:
    """Rewards by prompt: prompt k's group gets pattern k % 3 (0: all wrong, 1: mixed, 2: all right)."""

    multi_turn = False
    PATTERNS = ([0.0, 0.0], [1.0, 0.0], [1.0, 1.0])

    def __init__(self):
        self.problems = [Problem(str(k), f"q{k}", "") for k in range(30)]
        self.sampled = []

    def train_problems(self):
        return self.problems

    def rollout(self, engine, problems, group_size):
        self.sampled.append([p.id for p in problems])
        rows = [p for p in problems for _ in range(group_size)]
        n = len(rows)
        return Rollouts(
            problems=rows,
            input_ids=torch.ones(n, 3, dtype=torch.long),
            attention_mask=torch.ones(n, 3, dtype=torch.long),
            eligible=torch.tensor([[False, True, True]] * n),
            sample_logprobs=torch.zeros(n, 3),
            completions=[""] * n,
        )

    def verify_all(self, rollouts):
        return [Verdict(self.PATTERNS[int(p.id) % 3][i % 2], "") for i, p in enumerate(rollouts.problems)]


def dapo_on(task: ScriptedTask, max_gen_batches: int) -> DAPO:
    module = DAPO.__new__(DAPO)
    torch.nn.Module.__init__(module)
    module.task, module.engine, module.group_size, module.seed, module.rl_step = task, None, 2, 0, 5
    module.schedule = SimpleNamespace(prompt_pool=None)
    module.tokenizer = SimpleNamespace(pad_token_id=0)
    module.policy = torch.nn.Linear(1, 1)
    module.max_gen_batches, module.stage_peaks_mb, module.discarded_rollouts = max_gen_batches, {}, 0
    return module


def verl_dynamic_sampling(generation_batches, train_batch_size, max_num_gen_batches):
    """verl's DAPO trainer's group filter, transcribed from volcengine/verl 246cac4,
    recipe/dapo/dapo_ray_trainer.py (`fit`, `filter_groups.enable`), with a generation batch as
    a list of (prompt uid, the accuracy of each of its rollouts) and the training batch returned
    as its prompt uids in order: each generation batch's groups whose accuracies' std is above 0
    (or that have one rollout) are kept; below `train_batch_size` prompts, generate again up to
    `max_num_gen_batches` (non-positive: no limit), else raise; then the first that many."""
    batch, num_prompt_in_batch, num_gen_batches = [], 0, 0
    for new_batch in generation_batches:
        num_gen_batches += 1
        kept_prompt_uids = [uid for uid, accs in new_batch if np.std(accs) > 0 or len(accs) == 1]
        num_prompt_in_batch += len(kept_prompt_uids)
        batch += kept_prompt_uids
        if num_prompt_in_batch < train_batch_size:
            if max_num_gen_batches <= 0 or num_gen_batches < max_num_gen_batches:
                continue
            raise ValueError(f"{num_gen_batches=} >= {max_num_gen_batches=}. Generated too many.")
        return batch[:train_batch_size]
    raise AssertionError("ran out of generation batches")


def dapo_batches(task: ScriptedTask, first: list, count: int) -> list[list[tuple[str, list[float]]]]:
    """The generation batches DAPO samples at seed 0, step 5: the step's own prompts, then its stream's."""
    prompts = [first] + [
        [task.problems[i] for i in random.Random(f"dapo/0/5/{b}/0").sample(range(30), len(first))]
        for b in range(count - 1)
    ]
    return [[(p.id, ScriptedTask.PATTERNS[int(p.id) % 3]) for p in batch] for batch in prompts]


def test_dapo_keeps_verls_groups_sampling_whole_generation_batches_from_its_own_stream():
    task = ScriptedTask()
    first = task.problems[:6]  # patterns 0 1 2 0 1 2: two groups carry signal, four do not
    module = dapo_on(task, max_gen_batches=10)
    timing = {}
    rollouts = DAPO.sample(module, first, timing)
    assert task.sampled[0] == [p.id for p in first]  # the step starts from the pair's prompts
    assert all(len(batch) == 6 for batch in task.sampled)  # whole generation batches
    ids = [p.id for p in rollouts.problems[::2]]
    assert ids == verl_dynamic_sampling(dapo_batches(task, first, len(task.sampled)), 6, 10)
    assert len(ids) == 6 and all(int(i) % 3 == 1 for i in ids)  # the step its size, every group with signal
    assert module.discarded_rollouts == len(task.sampled) * 6 * 2 - 12  # every rollout sampled is counted
    assert module.dynamic_sampling == {
        "dynamic_sampling/generation_batches": len(task.sampled),
        "dynamic_sampling/short": 0,
    }
    # the stream is a pure function of (seed, step, batch): a second run draws the same
    again = ScriptedTask()
    DAPO.sample(dapo_on(again, max_gen_batches=10), first, {})
    assert again.sampled == task.sampled
    assert timing["sample"] > 0 and "verify" in timing


def test_dapo_at_its_cap_trains_on_the_groups_it_found_where_verl_raises():
    task = ScriptedTask()
    module = dapo_on(task, max_gen_batches=2)
    rollouts = DAPO.sample(module, task.problems[:6], {})
    found = [p.id for p in rollouts.problems[::2]]
    assert len(task.sampled) == 2 and 0 < len(found) < 6 and all(int(i) % 3 == 1 for i in found)
    assert module.dynamic_sampling["dynamic_sampling/short"] == 6 - len(found)
    with pytest.raises(ValueError, match="Generated too many"):
        verl_dynamic_sampling(dapo_batches(task, task.problems[:6], 2), 6, 2)
    # with none found, the first batch (all its advantages 0), as GRPO's step would be
    saturated = ScriptedTask()
    none = [p for p in saturated.problems if int(p.id) % 3 != 1][:6]
    saturated.problems = none * 5  # a pool with no prompt whose group carries signal
    module = dapo_on(saturated, max_gen_batches=3)
    rollouts = DAPO.sample(module, none, {})
    assert [p.id for p in rollouts.problems[::2]] == [p.id for p in none]
    assert module.dynamic_sampling == {"dynamic_sampling/generation_batches": 3, "dynamic_sampling/short": 6}
    assert module.discarded_rollouts == 2 * 6 * 2


def test_dapo_draws_its_refills_from_the_prompt_pool_only():
    """`schedule.prompt_pool: 12` of 30 training prompts: the step's own prompts come from the
    pool, and so must every refill (the pair's runs train on the pool alone)."""
    task = ScriptedTask()
    module = dapo_on(task, max_gen_batches=10)
    module.schedule = SimpleNamespace(prompt_pool=12)
    DAPO.sample(module, task.problems[:6], {})
    refills = [int(i) for batch in task.sampled[1:] for i in batch]
    assert len(task.sampled) > 2 and refills and max(refills) < 12


def test_reinforce_pp_is_openrlhfs_reinforce_baseline_written_out():
    """OpenRLHF: rewards minus the group mean, the return of every token (gamma 1), then the
    batch's token-weighted mean and population variance over all action tokens."""
    lengths = [3, 1, 2, 4, 2, 2, 5, 1, 3, 3, 1, 2]
    batch = stub_batch(REWARDS, lengths)
    module = SimpleNamespace(group_size=4)
    advantages, _ = REINFORCEPlusPlus.credit(module, batch)
    shaped = [r - sum(group) / 4 for group in REWARDS.tolist() for r in group]
    tokens = [a for a, n in zip(shaped, lengths) for _ in range(n)]
    mean = sum(tokens) / len(tokens)
    std = math.sqrt(sum((t - mean) ** 2 for t in tokens) / len(tokens))
    expected = torch.tensor([(a - mean) / std for a in shaped])
    torch.testing.assert_close(advantages[:, 2], expected)
    assert float(advantages[~batch.eligible].abs().sum()) == 0
    assert advantages[8:, 2].abs().min() > 0  # the all-wrong group is moved off zero by the whitening


def openrlhf_reinforce_baseline(rewards, action_mask, n_samples_per_prompt):
    """OpenRLHF's `reinforce_baseline` advantages, transcribed from OpenRLHF/OpenRLHF 3c3be62,
    openrlhf/trainer/ppo_utils/experience_maker.py (`compute_advantages_and_returns`,
    `get_cumulative_returns`; `compute_reward` with no KL puts the reward at the last action
    token): the group mean subtracted, the return of every token at gamma 1, then the mean and
    the variance over every action token of the batch, rstd = var.clamp(min=1e-8).rsqrt()."""
    rewards = rewards.reshape(-1, n_samples_per_prompt)
    rewards = (rewards - rewards.mean(-1, keepdim=True)).reshape(-1)
    last = action_mask.long().cumsum(-1).argmax(-1)
    token_rewards = torch.zeros(action_mask.shape)
    token_rewards[torch.arange(len(rewards)), last] = rewards
    token_rewards = action_mask * token_rewards
    returns, cumulative = torch.zeros_like(token_rewards), torch.zeros(len(rewards))
    for t in reversed(range(token_rewards.size(1))):
        cumulative = token_rewards[:, t] + 1.0 * cumulative
        returns[:, t] = cumulative
    num_actions = action_mask.sum()
    mean = (returns * action_mask).sum() / num_actions
    var = ((returns - mean).pow(2) * action_mask).sum() / num_actions
    return (returns - mean) * var.clamp(min=1e-8).rsqrt()


def test_reinforce_pp_equals_openrlhfs_code_on_the_action_tokens():
    lengths = [3, 1, 2, 4, 2, 2, 5, 1, 3, 3, 1, 2]
    batch = stub_batch(REWARDS, lengths)
    advantages, _ = REINFORCEPlusPlus.credit(SimpleNamespace(group_size=4), batch)
    theirs = openrlhf_reinforce_baseline(REWARDS.view(-1), batch.eligible.float(), 4)
    torch.testing.assert_close(advantages[batch.eligible], theirs[batch.eligible])
    assert (advantages[~batch.eligible] == 0).all()


def test_reinforce_pp_whitens_over_every_processs_tokens(monkeypatch):
    """Two processes: this one holds the batch above, the other (simulated through
    `distributed.total`) nine tokens of literal advantages; the mean and the population variance
    are those of all their tokens together, the count included."""
    from rollout import distributed

    lengths = [3, 1, 2, 4, 2, 2, 5, 1, 3, 3, 1, 2]
    other = [0.5] * 3 + [-1.0] * 2 + [0.25] * 4
    sums = []
    monkeypatch.setattr(distributed, "total", with_another_process(other, sums))
    batch = stub_batch(REWARDS, lengths)
    advantages, _ = REINFORCEPlusPlus.credit(SimpleNamespace(group_size=4), batch)
    shaped = [r - sum(group) / 4 for group in REWARDS.tolist() for r in group]
    tokens = [a for a, n in zip(shaped, lengths) for _ in range(n)] + other
    mean = sum(tokens) / len(tokens)
    std = math.sqrt(sum((t - mean) ** 2 for t in tokens) / len(tokens))
    torch.testing.assert_close(advantages[:, 2], torch.tensor([(a - mean) / std for a in shaped]))
    assert len(sums) == 3


@pytest.mark.parametrize("max_tokens, divisor", [(None, 6), (9, 9)])
def test_dr_grpos_constant_is_max_new_tokens_or_update_max_tokens(tiny_dir, max_tokens, divisor):
    """The shared update's loss under `constant`: one update a step (ratio 1), literal advantages
    of 1 on every eligible token, so the loss is -(eligible tokens) / (rollouts x the constant):
    `sampling.max_new_tokens` (6), or `update.max_tokens` where set; never the batch's width."""
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs
    from tasks.math import MathTask

    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    task, sampling = MathTask(train_size=20, eval_size=5), SamplingArgs(max_new_tokens=6)
    update = UpdateArgs(**DrGRPO.update_overrides, max_tokens=max_tokens)
    module = DrGRPO(policy=model, tokenizer=tokenizer, task=task, group_size=2, sampling=sampling, update=update)
    problems = [p for p in task.train_problems()[:2] for _ in range(2)]
    rollouts = RolloutEngine(model, tokenizer, sampling).generate(problems, group_size=2)
    assert rollouts.eligible.shape[1] not in (6, 9)  # the prompt's columns too
    optimizer = torch.optim.SGD(list(module.parameters()), lr=0.0)
    module.optimizers = lambda: optimizer
    module.lr_schedulers = lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    module.manual_backward = lambda loss, **kwargs: loss.backward(**kwargs)
    stats = module.update(rollouts, rollouts.eligible.float())
    assert stats["loss"] == pytest.approx(-float(rollouts.eligible.sum()) / (4 * divisor))


def test_each_algorithm_s_update_settings_stand_in_its_spec(tmp_path):
    """DAPO's clip-higher, GSPO's sequence ratio, Dr. GRPO's constant and RLOO's sequence-sum come
    with the algorithm; the algorithm's own YAML still overrides them."""
    spec = suite("zoo", "tasks.math.MathTask")
    spec["algorithms"] = {
        "grpo": {"class_path": "algorithms.grpo.GRPO"},
        "dapo": {"class_path": "algorithms.dapo.DAPO"},
        "gspo": {"class_path": "algorithms.gspo.GSPO", "init_args": {"update": {"clip_high": 5e-4}}},
        "dr_grpo": {"class_path": "algorithms.dr_grpo.DrGRPO"},
        "rloo": {"class_path": "algorithms.rloo.RLOO"},
    }
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"suites": [spec]}))
    (parsed,) = load_benchmark(config).suites
    update = {name: parsed.algorithm_settings(name)[1]["update"] for name in spec["algorithms"]}
    assert (update["grpo"].clip_high, update["dapo"].clip_high, update["dapo"].clip_low) == (0.2, 0.28, 0.2)
    assert (update["gspo"].ratio_level, update["gspo"].clip_low, update["gspo"].clip_high) == ("sequence", 3e-4, 5e-4)
    assert update["dr_grpo"].loss_aggregation == "constant" and update["rloo"].ratio_level == "sequence-product"


def test_a_bad_setting_in_an_algorithms_update_is_one_line_exit_2(tmp_path, capsys):
    spec = suite("zoo", "tasks.math.MathTask")
    spec["algorithms"]["dapo"] = {"class_path": "algorithms.dapo.DAPO", "init_args": {"update": {"clip_high": -1}}}
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"suites": [spec]}))
    assert main(["run", str(config), "--list"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {config}: suites[0].algorithms.dapo.init_args.update.clip_high: must be > 0 (got -1.0)"


ZOO = {
    "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}},
    "rloo": {"class_path": "algorithms.rloo.RLOO", "init_args": {"group_size": 4}},
    "dr_grpo": {"class_path": "algorithms.dr_grpo.DrGRPO", "init_args": {"group_size": 4}},
    "dapo": {"class_path": "algorithms.dapo.DAPO", "init_args": {"group_size": 4}},
    "gspo": {"class_path": "algorithms.gspo.GSPO", "init_args": {"group_size": 4, "update": {"minibatches": 2}}},
    "reinforce_pp": {"class_path": "algorithms.reinforce_pp.REINFORCEPlusPlus", "init_args": {"group_size": 4}},
}


@pytest.mark.slow
def test_every_baseline_runs_beside_grpo_on_the_same_prompts(tmp_path):
    spec = suite("zoo", "test_e2e.ParityReward", steps=3)
    spec["algorithms"] = ZOO
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    runs = tmp_path / "runs" / "zoo"
    metrics = {name: pl.read_parquet(runs / f"{name}-seed0" / "metrics.parquet") for name in ZOO}
    for name, m in metrics.items():
        assert m["step"].to_list() == [1, 2, 3], name
        assert (m["grad_norm"] > 0).any(), name
        if name != "dapo":  # DAPO replaces the groups that carry no signal
            assert m["prompt_ids"].to_list() == metrics["grpo"]["prompt_ids"].to_list(), name
            assert m["rollouts"].to_list() == [16] * 3, name
    dapo = metrics["dapo"]
    assert (dapo["rollouts"] >= 16).all() and dapo["rollouts_total"][-1] == dapo["rollouts"].sum()
    assert "dynamic_sampling/generation_batches" in dapo.columns
    assert (dapo["frac_reward_zero_std"] <= metrics["grpo"]["frac_reward_zero_std"]).all()
    spec_dapo = json.loads((runs / "dapo-seed0" / "spec.json").read_text())
    assert spec_dapo["update"]["clip_high"] == 0.28
    board = pl.read_parquet(runs / "leaderboard.parquet")
    shown = dict(zip(board["algorithm"], board["own_settings"]))
    assert "update.clip_high=0.28" in shown["dapo"] and "update.ratio_level=sequence" in shown["gspo"]


def test_dapos_own_defaults_token_mean_and_a_fifth_of_the_length_as_its_overlong_buffer(tmp_path, tiny_dir):
    """What DAPO is defined by when its suite says nothing: the token-mean loss and the clip-higher
    bounds (0.2, 0.28), over a suite whose own update says sequence-mean; the overlong buffer a
    fifth of max_new_tokens (DAPO's 4096 of 20480)."""
    import yaml

    from harness.config import load_benchmark
    from harness.models import load_policy
    from rollout.settings import SamplingArgs
    from tasks.math import MathTask

    suite = {
        "name": "s",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 20, "eval_size": 5}},
        "algorithms": {"dapo": {"class_path": "algorithms.dapo.DAPO"}},
        "update": {"loss_aggregation": "sequence-mean"},
    }
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"suites": [suite]}))
    update = load_benchmark(config).suites[0].algorithm_settings("dapo")[1]["update"]
    assert (update.loss_aggregation, update.clip_low, update.clip_high) == ("token-mean", 0.2, 0.28)
    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=20, eval_size=5)
    module = DAPO(policy=model, tokenizer=tokenizer, task=task, sampling=SamplingArgs(max_new_tokens=40))
    assert module.overlong_buffer == 8
