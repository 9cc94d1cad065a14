"""GiGPO against its definition computed directly (loops over hand-made trajectories), its per-turn
credit on the tokens of a hand-built batch, its refusal of single-turn tasks, and a short run."""

import math
import random

import polars as pl
import pytest
import torch
import yaml

from algorithms.gigpo import GiGPO, gigpo_advantages
from harness.__main__ import main
from rollout.batch import Rollouts, Verdict, concatenate
from tasks.alfworld.task import AlfworldTask


def centred(x, pool, scale_by_std, eps):
    """x against the pool's mean (and sample std); 0 when the pool holds one value only."""
    if max(pool) == min(pool):
        return 0.0
    m = sum(pool) / len(pool)
    sd = math.sqrt(sum((v - m) ** 2 for v in pool) / (len(pool) - 1))
    return (x - m) / (sd + eps) if scale_by_std else x - m


def direct(rewards, states, G, gamma=0.95, w=1.0, scale_by_std=True, eps=1e-6, per_turn=True):
    """A(i, t) = A_episode(i) + w * A_step(i, t), from the paper's equations, turn by turn."""

    def step_return(j, u):  # sum_k gamma^k r_(j, u + k); the only reward is R_j at the last turn
        last = len(states[j]) - 1
        return sum(gamma**k * (rewards[j] if u + k == last else 0.0) for k in range(last - u + 1))

    out = []
    for i in range(len(states)):
        group = [j for j in range(len(states)) if j // G == i // G]
        pool = [rewards[j] for j in group for _ in range(len(states[j]) if per_turn else 1)]
        episode = centred(rewards[i], pool, scale_by_std, eps)
        row = []
        for t, state in enumerate(states[i]):
            anchor = [step_return(j, u) for j in group for u, s in enumerate(states[j]) if s == state]
            row.append(episode + w * centred(step_return(i, t), anchor, scale_by_std, eps))
        out.append(row)
    return out


# Group 1 (one game, G = 2): episode 0 wins in 3 turns; episode 1 is cut by the turn limit (4)
# after visiting "a" twice. Both start at "s0". "b" and "c" are seen once (singleton groups).
REWARDS = [1.0, 0.0]
STATES = [["s0", "a", "b"], ["s0", "a", "a", "c"]]


def close(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a == pytest.approx(e, abs=1e-9), (actual, expected)


def test_literal_numbers_mean_norm_per_episode():
    """gamma 0.5, no std: returns (0.25, 0.5, 1) and (0, 0, 0, 0); A_episode = +-0.5. Anchor
    groups: s0 {0.25, 0} -> +-0.125; a {0.5, 0, 0} (the repeat counts twice) -> 1/3, -1/6, -1/6;
    b, c alone -> 0."""
    out = gigpo_advantages(REWARDS, STATES, 2, gamma=0.5, scale_by_std=False, per_turn_episode_stats=False)
    close(out.step[0], [0.125, 1 / 3, 0.0])
    close(out.step[1], [-0.125, -1 / 6, -1 / 6, 0.0])
    close(out.advantages[0], [0.625, 0.5 + 1 / 3, 0.5])
    close(out.advantages[1], [-0.625, -0.5 - 1 / 6, -0.5 - 1 / 6, -0.5])
    assert out.anchor_sizes == [[2, 3, 1], [2, 3, 3, 1]]


def test_literal_numbers_episode_stats_per_turn():
    """verl-agent's episode statistics count each episode once per turn: 3 ones and 4 zeros,
    mean 3/7, so A_episode = 4/7 and -3/7 (without std)."""
    out = gigpo_advantages(REWARDS, STATES, 2, gamma=0.5, step_weight=0.0, scale_by_std=False)
    close(out.advantages[0], [4 / 7] * 3)
    close(out.advantages[1], [-3 / 7] * 4)


def test_literal_numbers_with_verl_agents_invalid_action_penalty():
    """Episode 1's second and third commands were not taken (penalty 0.1, gamma 0.5, no std, stats
    per turn). Episode level, each turn's score less its own penalty: [1, 1, 1] and [0, -0.1,
    -0.1, 0], mean 0.4, so 0.6 and [-0.4, -0.5, -0.5, -0.4]. Step level, the penalty comes off the
    turn's own return after discounting (verl-agent's order: its step returns are computed as the
    rollout ends, the penalty applied to them with the rewards): episode 1's returns [0, -0.1,
    -0.1, 0], episode 0's (0.25, 0.5, 1). Anchor groups: s0 {0.25, 0} -> +-0.125; a {0.5, -0.1,
    -0.1}, mean 0.1 -> 0.4, -0.2, -0.2."""
    invalid = [[False, False, False], [False, True, True, False]]
    out = gigpo_advantages(REWARDS, STATES, 2, gamma=0.5, scale_by_std=False, invalid=invalid, invalid_penalty=0.1)
    close(out.step[0], [0.125, 0.4, 0.0])
    close(out.step[1], [-0.125, -0.2, -0.2, 0.0])
    close(out.advantages[0], [0.6 + 0.125, 0.6 + 0.4, 0.6])
    close(out.advantages[1], [-0.4 - 0.125, -0.5 - 0.2, -0.5 - 0.2, -0.4])
    # no penalty: the flags change nothing
    assert gigpo_advantages(REWARDS, STATES, 2, invalid=invalid) == gigpo_advantages(REWARDS, STATES, 2)


def test_literal_numbers_with_std_and_weight():
    """Std scaling on both levels: s0 {0.25, 0} has sample std 0.25 / sqrt(2), so +-1/sqrt(2);
    the episode level {1, 1, 1, 0, 0, 0, 0} has std sqrt(2/7); weight 2 on the step level."""
    eps = 1e-6
    out = gigpo_advantages(REWARDS, STATES, 2, gamma=0.5, step_weight=2.0, eps=eps)
    episode = (4 / 7) / (math.sqrt(2 / 7) + eps)
    assert out.advantages[0][0] == pytest.approx(episode + 2 * 0.125 / (0.25 / math.sqrt(2) + eps))
    assert out.advantages[0][2] == pytest.approx(episode)  # "b" alone: no step credit


@pytest.mark.parametrize("scale_by_std", [True, False])
@pytest.mark.parametrize("per_turn", [True, False])
def test_hand_made_groups_match_the_direct_computation(scale_by_std, per_turn):
    rewards = [1.0, 0.0, 1.0, 0.0] + [0.0, 1.0, 1.0, 1.0]
    states = [
        # game 1: shared start, a loop ("x" twice), cut episodes (reward 0, 4 turns)
        ["start", "x", "y", "x"],
        ["start", "x", "x", "z"],
        ["start", "y"],
        ["start", "z", "y", "w"],
        # game 2: the same texts as game 1, which must not join its groups
        ["start", "x", "q", "r"],
        ["start", "q"],
        ["start", "x", "q"],
        ["start", "q"],
    ]
    kwargs = dict(gamma=0.9, scale_by_std=scale_by_std)
    out = gigpo_advantages(rewards, states, 4, step_weight=0.7, per_turn_episode_stats=per_turn, **kwargs)
    expected = direct(rewards, states, 4, w=0.7, per_turn=per_turn, **kwargs)
    for got, want in zip(out.advantages, expected):
        close(got, want)


def test_random_groups_match_the_direct_computation():
    rng = random.Random(0)
    G, states, rewards = 4, [], []
    for _ in range(6 * G):
        turns = rng.randint(1, 6)
        states.append([rng.choice("abcde") for _ in range(turns)])
        rewards.append(float(turns < 6 and rng.random() < 0.5))  # 6 turns: cut, reward 0
    out = gigpo_advantages(rewards, states, G)
    for got, want in zip(out.advantages, direct(rewards, states, G)):
        close(got, want)


def test_singleton_anchor_groups_get_the_episode_credit_alone():
    rewards, states = [1.0, 0.0, 0.0], [["a", "b"], ["c"], ["d", "e", "f"]]
    out = gigpo_advantages(rewards, states, 3)
    assert all(a == 0.0 for turns in out.step for a in turns)
    for turns, want in zip(out.advantages, direct(rewards, states, 3, w=0.0)):
        close(turns, want)


def test_all_equal_groups_give_exactly_zero():
    # every episode won along the same states; then every one lost (cut)
    states = [["s", "t", "u"]] * 3 + [["s", "t", "u", "v"]] * 3
    out = gigpo_advantages([1.0] * 3 + [0.0] * 3, states, 3, gamma=0.95)
    assert all(a == 0.0 for turns in out.advantages for a in turns)
    # a mixed game whose shared state lies equally far from both wins: that group's step credit is 0
    out = gigpo_advantages([1.0, 1.0, 0.0], [["s", "m", "w"], ["s", "n", "m", "w"], ["s", "k"]], 3)
    assert out.step[0][1] == 0.0 and out.step[1][2] == 0.0 and out.step[0][2] == 0.0
    assert out.step[0][0] != 0.0


def hand_built(rows, states, rewards):
    """A Rollouts from rows written as strings: P prompt, E eligible (a command), O observation,
    _ padding (left or right); token ids are arbitrary."""
    width = len(rows[0])
    eligible = torch.tensor([[c == "E" for c in r] for r in rows])
    mask = torch.tensor([[c != "_" for c in r] for r in rows]).long()
    ids = torch.arange(len(rows) * width).view(len(rows), width) % 50 + 1
    return Rollouts(
        problems=[None] * len(rows),
        input_ids=ids * mask,
        attention_mask=mask,
        eligible=eligible,
        sample_logprobs=torch.zeros(len(rows), width),
        completions=[""] * len(rows),
        verdicts=[Verdict(r, "") for r in rewards],
        truncated=[False] * len(rows),
        turn_states=states,
    )


class Stub:  # GiGPO's credit with G = 2, gamma 0.5, no std, per-episode statistics, without a policy
    credit, group_size, gamma, step_weight, scale_by_std, eps = GiGPO.credit, 2, 0.5, 1.0, False, 1e-6
    per_turn_episode_stats, invalid_penalty = False, 0.0


def test_each_turns_tokens_get_that_turns_advantage():
    rows = ["_PPEEOEOEEEO", "PPPEOEEOEOEO"]
    rollouts = hand_built(rows, STATES, REWARDS)
    advantages, stats = Stub().credit(rollouts)
    a0, a1 = [0.625, 0.5 + 1 / 3, 0.5], [-0.625, -0.5 - 1 / 6, -0.5 - 1 / 6, -0.5]
    expected = torch.tensor(
        [
            [0, 0, 0, a0[0], a0[0], 0, a0[1], 0, a0[2], a0[2], a0[2], 0],
            [0, 0, 0, a1[0], 0, a1[1], a1[1], 0, a1[2], 0, a1[3], 0],
        ]
    )
    torch.testing.assert_close(advantages, expected.float())
    assert stats["credit/frac_turns_shared_state"] == pytest.approx(5 / 7)  # all but "b" and "c"
    assert stats["credit/step_abs_mean"] == pytest.approx((0.125 * 2 + 1 / 3 + 2 / 6) / 7)
    # the turn <-> run correspondence survives select and concatenate (other widths, other order)
    swapped = concatenate([rollouts.select(torch.tensor([1])), rollouts.select(torch.tensor([0]))], pad_id=0)
    assert swapped.turn_states == STATES[::-1]
    again, _ = Stub().credit(swapped)
    for row in (0, 1):
        assert torch.equal(again[row][swapped.eligible[row]], advantages[1 - row][rollouts.eligible[1 - row]])


def test_the_penalty_reads_which_commands_the_game_took_and_needs_them():
    rows = ["_PPEEOEOEEEO", "PPPEOEEOEOEO"]
    rollouts = hand_built(rows, STATES, REWARDS)
    penalised = Stub()
    penalised.invalid_penalty = 0.1
    with pytest.raises(ValueError, match="turn_valid"):
        penalised.credit(rollouts)
    rollouts.turn_valid = [[True, True, True], [True, False, True, True]]
    advantages, stats = penalised.credit(rollouts)
    plain, _ = Stub().credit(rollouts)
    assert stats["credit/frac_turns_invalid"] == pytest.approx(1 / 7)
    assert not torch.equal(advantages, plain) and torch.equal(advantages != 0, plain != 0)


def test_the_penalty_falls_on_the_commands_the_game_did_not_take():
    """Episode 1's second command not taken (penalty 0.1; G = 2, gamma 0.5, no std, per-episode
    statistics). Episode level: the first turns' scores 1 and 0, mean 0.5, so 0.5 on episode 0's
    turns; episode 1's score 0 less the turn's penalty: -0.5, -0.6, -0.5, -0.5. Step level,
    returns (0.25, 0.5, 1) and (0, -0.1, 0, 0): s0 {0.25, 0} -> +-0.125; a {0.5, -0.1, 0}, mean
    0.4 / 3 -> 0.5 - 2 / 15, -0.1 - 2 / 15, -2 / 15; b, c alone -> 0."""
    rows = ["_PPEEOEOEEEO", "PPPEOEEOEOEO"]
    rollouts = hand_built(rows, STATES, REWARDS)
    rollouts.turn_valid = [[True, True, True], [True, False, True, True]]
    penalised = Stub()
    penalised.invalid_penalty = 0.1
    advantages, _ = penalised.credit(rollouts)
    a0 = [0.5 + 0.125, 0.5 + 0.5 - 2 / 15, 0.5]
    a1 = [-0.5 - 0.125, -0.6 - 0.1 - 2 / 15, -0.5 - 2 / 15, -0.5]
    expected = torch.tensor(
        [
            [0, 0, 0, a0[0], a0[0], 0, a0[1], 0, a0[2], a0[2], a0[2], 0],
            [0, 0, 0, a1[0], 0, a1[1], a1[1], 0, a1[2], 0, a1[3], 0],
        ]
    )
    torch.testing.assert_close(advantages, expected.float())


def test_per_episode_statistics_count_each_episode_once_one_turn_episodes_included():
    """`per_turn_episode_stats: false`: each episode counted once, by its first turn. One game,
    G = 3: a one-turn win and two two-turn losses; rewards 1, 0, 0, mean 1/3, so (no std, no step
    level) 2/3 on every turn of the win and -1/3 on every turn of each loss."""
    states = [["s"], ["s", "t"], ["s", "t"]]
    out = gigpo_advantages(
        [1.0, 0.0, 0.0], states, 3, step_weight=0.0, scale_by_std=False, per_turn_episode_stats=False
    )
    close(out.advantages[0], [2 / 3])
    close(out.advantages[1], [-1 / 3, -1 / 3])
    close(out.advantages[2], [-1 / 3, -1 / 3])


def test_a_batch_whose_states_do_not_match_its_turns_is_refused():
    rollouts = hand_built(["_PPEEOEOEEEO", "PPPEOEEOEOEO"], [["s0", "a"], STATES[1]], REWARDS)
    with pytest.raises(ValueError, match="turn_states"):
        Stub().credit(rollouts)


def test_out_of_range_arguments_are_refused():
    for args, message in [
        ({"gamma": 1.5}, r"gamma: must be in \[0, 1\] \(got 1.5\)"),
        ({"step_weight": -1.0}, r"step_weight: must be >= 0 \(got -1.0\)"),
        ({"eps": 0.0}, r"eps: must be > 0"),
        ({"group_size": 1}, r"group_size: must be >= 2 \(got 1\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            GiGPO.check_args(args)
    GiGPO.check_args({"gamma": 1.0, "step_weight": 0.0})


CONFIG = {
    "suites": [
        {
            "name": "s",
            "task": {"class_path": "tasks.math.MathTask", "init_args": {"eval_size": 10}},
            "model": {"preset": "tiny", "warm_start": {"steps": 5}},
            "algorithms": {"gigpo": {"class_path": "algorithms.gigpo.GiGPO", "init_args": {"group_size": 4}}},
            "schedule": {"steps": 2, "prompts_per_step": 2},
        }
    ]
}


@pytest.mark.parametrize(
    "init_args, message",
    [
        ({"group_size": 4}, "suites[0].algorithms.gigpo: GiGPO needs a multi-turn task"),
        ({"gamma": 2.0}, "suites[0].algorithms.gigpo.init_args.gamma: must be in [0, 1] (got 2.0)"),
    ],
)
def test_the_cli_refuses_a_single_turn_task_in_one_line(tmp_path, capsys, init_args, message):
    config = yaml.safe_load(yaml.safe_dump(CONFIG))
    config["suites"][0]["algorithms"]["gigpo"]["init_args"] = init_args
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "results").exists()


class ParityAlfworld(AlfworldTask):
    """ALFWorld whose reward the untrained model earns about half the time (the parity of its
    transcript's length), so that a few steps carry credit."""

    def verify_all(self, rollouts):
        return [Verdict(float(len(c) % 2), "parity") for c in rollouts.completions]


@pytest.mark.slow
def test_a_short_alfworld_run_records_step_level_credit(tmp_path):
    suite = {
        "name": "alf",
        "task": {
            "class_path": "test_gigpo.ParityAlfworld",
            "init_args": {
                "train_games": 4,
                "eval_games": 2,
                "max_turns": 4,
                "env_processes": 0,
                "cache_dir": str(tmp_path / "alfworld"),
            },
        },
        "model": {
            "preset": "tiny",
            "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "head_dim": 8},
            "warm_start": {"steps": 5, "batch_size": 4},
        },
        "algorithms": {"gigpo": {"class_path": "algorithms.gigpo.GiGPO", "init_args": {"group_size": 4}}},
        "seeds": [0],
        "schedule": {"steps": 2, "prompts_per_step": 2},
        "sampling": {"max_new_tokens": 8},
        "evaluation": {"every": 2},
    }
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [suite]}))
    assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    metrics = pl.read_parquet(tmp_path / "results" / "alf" / "gigpo-seed0" / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2] and metrics["rollouts"].to_list() == [8, 8]
    # every group's first turns share the game's first state: at least those turns are grouped
    assert (metrics["credit/frac_turns_shared_state"] > 0).all()
    assert (metrics["credit/step_abs_mean"] > 0).any() and (metrics["grad_norm"] > 0).any()


def verl_agent_gigpo(rewards, states, group_size, invalid, coef, gamma, remove_std, epsilon=1e-6, weight=1.0):
    """verl-agent's GiGPO on one step sample a turn, transcribed from a snapshot of it
    (johnhaofu/verl-agent c23d586, a fork of langfengQ/verl-agent: gigpo/core_gigpo.py's
    compute_step_discounted_returns, episode_norm_reward with compute_mean_std_cross_steps,
    build_step_group on identical observations, step_norm_reward; verl/trainer/ppo/
    ray_trainer.py's apply_invalid_action_penalty), in its order: the step returns as the
    rollout ends, then the penalty off each invalid step's score and return, then both levels."""
    samples = [(i, t) for i, s in enumerate(states) for t in range(len(s))]
    index = [i // group_size for i, _ in samples]
    # compute_step_discounted_returns over each trajectory's env rewards (its reward at its end)
    step_rewards = torch.zeros(len(samples))
    for i, s in enumerate(states):
        running = 0.0
        for t in reversed(range(len(s))):
            running = (rewards[i] if t == len(s) - 1 else 0.0) + gamma * running
            step_rewards[samples.index((i, t))] = running
    # the episode reward scores every step sample; apply_invalid_action_penalty
    scores = torch.tensor([float(rewards[i]) for i, _ in samples])
    invalids = torch.tensor([float(invalid[i][t]) for i, t in samples])
    scores -= coef * invalids
    step_rewards -= coef * invalids

    def normalised(values, keys, single_mean_zero):
        grouped = {}
        for value, key in zip(values.tolist(), keys):
            grouped.setdefault(key, []).append(value)
        out = values.clone()
        for k, key in enumerate(keys):
            group = grouped[key]
            if len(group) == 1:
                mean, std = (torch.tensor(0.0) if single_mean_zero else torch.tensor(group[0])), torch.tensor(1.0)
            else:
                mean, std = torch.mean(torch.tensor(group)), torch.std(torch.tensor([group]))
            out[k] = values[k] - mean if remove_std else (values[k] - mean) / (std + epsilon)
        return out

    episode = normalised(scores, index, single_mean_zero=True)
    step_groups = [(index[k], states[i][t]) for k, (i, t) in enumerate(samples)]
    step = normalised(step_rewards, step_groups, single_mean_zero=False)
    return (episode + weight * step).tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scale_by_std, coef", [(True, 0.0), (True, 0.1), (False, 0.1)])
def test_gigpo_with_the_invalid_action_penalty_equals_verl_agents_code(seed, scale_by_std, coef):
    rng = random.Random(seed)
    states = [[rng.choice("abcd") for _ in range(rng.randint(1, 5))] for _ in range(12)]
    rewards = [float(rng.random() < 0.4) for _ in states]
    invalid = [[rng.random() < 0.3 for _ in s] for s in states]
    ours = gigpo_advantages(rewards, states, 4, 0.95, 1.0, scale_by_std, 1e-6, True, invalid, coef)
    theirs = verl_agent_gigpo(rewards, states, 4, invalid, coef, 0.95, remove_std=not scale_by_std)
    flat = [a for row in ours.advantages for a in row]
    assert flat == pytest.approx(theirs, rel=1e-4, abs=1e-4)
