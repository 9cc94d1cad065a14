"""OpenEnv environments as a task (tasks/openenv): episodes from seeds or a task API, played in
worker processes on the episode loop ALFWorld plays; an environment that drops its seed refused,
its exceptions unjudged, an action its model refuses the policy's own failure."""

import random
import re
from pathlib import Path

import pytest
import torch

from harness.models import load_policy
from rollout.decoding import RolloutEngine, SamplingArgs
from rollout.episodes import split_demonstration
from tasks.openenv import Episodes, OpenEnvTask


def say_go(**overrides):
    args = dict(
        environment="openenv_envs.SayGo",
        train_episodes={"seeds": [0, 20]},
        eval_episodes={"seeds": [100, 104]},
        expert="openenv_envs.say_go",
        max_turns=4,
        env_processes=2,
    )
    return OpenEnvTask(**(args | overrides))


@pytest.fixture(scope="module")
def engine(tiny_dir):
    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    return RolloutEngine(model, tokenizer, SamplingArgs(temperature=1.0, max_new_tokens=4))


def test_settings_are_each_named():
    for bad, field in [
        ({"environment": "SayGo"}, "environment"),
        ({"train_episodes": {"seeds": [5, 5]}}, "train_episodes"),
        ({"train_episodes": {"seeds": [0, 10], "split": "train"}}, "train_episodes"),
        ({"eval_episodes": {"split": "test"}}, "eval_episodes: size"),
        ({"eval_episodes": {"seeds": [10, 30]}}, "eval_episodes: overlaps train_episodes"),
        ({"max_turns": 0}, "max_turns"),
        ({"env_processes": 0}, "env_processes"),
        ({"expert": "say_go"}, "expert"),
    ]:
        with pytest.raises(ValueError, match=f"^{field}"):
            say_go(**bad)
    # the same split's index ranges must not overlap; another split's may
    with pytest.raises(ValueError, match="^eval_episodes: overlaps"):
        say_go(train_episodes={"split": "train", "size": 10}, eval_episodes={"split": "train", "first": 9, "size": 2})
    say_go(train_episodes={"split": "train", "size": 10}, eval_episodes={"split": "test", "size": 10})
    assert Episodes(split="test", first=3, size=2).starts() == [
        {"split": "test", "index": 3},
        {"split": "test", "index": 4},
    ]


def test_held_out_episodes_overlapping_the_training_ones_anywhere_are_refused():
    """Held-out seeds [5, 12) against training seeds [10, 20): the held-out range starts before
    the training one, so its first episode is not trained on, but seeds 10 and 11 are; the
    same for index ranges of one split. Ranges that only touch do not overlap."""
    assert Episodes(seeds=[5, 12]).overlaps(Episodes(seeds=[10, 20]))
    assert Episodes(seeds=[15, 30]).overlaps(Episodes(seeds=[10, 20]))
    assert not Episodes(seeds=[5, 10]).overlaps(Episodes(seeds=[10, 20]))
    assert Episodes(split="train", first=3, size=5).overlaps(Episodes(split="train", first=6, size=10))
    assert not Episodes(split="test", first=3, size=5).overlaps(Episodes(split="train", first=6, size=10))
    with pytest.raises(ValueError, match="^eval_episodes: overlaps train_episodes"):
        say_go(eval_episodes={"seeds": [15, 25]}, train_episodes={"seeds": [20, 40]})


def test_an_environment_that_drops_its_seed_is_refused():
    """check_args resets the first episode twice: two starts from one seed are refused, as is a
    reset that takes no seed at all (many of the library's own examples)."""
    with pytest.raises(ValueError, match="drops its seed"):
        OpenEnvTask.check_args(
            {
                "environment": "openenv_envs.DropsSeed",
                "train_episodes": {"seeds": [0, 5]},
                "eval_episodes": {"seeds": [9, 10]},
            }
        )
    with pytest.raises(ValueError, match="NoSeed.reset takes no seed"):
        OpenEnvTask.check_args(
            {
                "environment": "openenv_envs.NoSeed",
                "train_episodes": {"seeds": [0, 5]},
                "eval_episodes": {"seeds": [9, 10]},
            }
        )
    OpenEnvTask.check_args(
        {"environment": "openenv_envs.SayGo", "train_episodes": {"seeds": [0, 5]}, "eval_episodes": {"seeds": [9, 10]}}
    )


def test_problems_come_from_the_seeds_or_the_task_api_with_the_experts_demonstrations():
    task = say_go()
    train, held_out = task.train_problems(), task.eval_problems()
    assert [p.id for p in train] == [f"seed/{s}" for s in range(20)] and [p.id for p in held_out][0] == "seed/100"
    for problem in train:
        times = random.Random(int(problem.id.split("/")[1])).randint(1, 3)
        assert problem.prompt == f"Say go {times} times.\n> "
        assert [c for c, _ in split_demonstration(problem.demonstration)] == ["go"] * times
        assert task.verify(problem, problem.demonstration).reward == 1.0  # a replay in a worker agrees
        assert task.verify_trusted(problem, problem.demonstration).reward == 1.0
    assert not any(p.demonstration for p in held_out)
    assert task.verify(train[0], "stop\n> ").feedback.startswith("reward 0 after")
    by_api = say_go(
        environment="openenv_envs.Splits",
        train_episodes={"split": "train", "size": 3},
        eval_episodes={"split": "test", "first": 10, "size": 2},
    )
    assert [p.prompt for p in by_api.eval_problems()] == [
        "Task test/10: say go 2 times.\n> ",
        "Task test/11: say go 3 times.\n> ",
    ]
    with pytest.raises(ValueError, match="IndexError"):
        say_go(
            environment="openenv_envs.Splits",
            train_episodes={"split": "train", "first": 49, "size": 2},
            eval_episodes={"split": "test", "size": 1},
        ).train_problems()


def test_the_warm_start_learns_the_commands_and_not_the_answers(tiny_dir):
    _, tokenizer = load_policy(tiny_dir)
    task = say_go()
    problem = next(p for p in task.train_problems() if p.demonstration.count("go") == 3)
    ids, labels = task.supervised_example(problem, tokenizer)
    learnt = tokenizer.decode([i for i, label in zip(ids, labels) if label != -100])
    assert learnt == "go\n" * 3
    assert tokenizer.decode(ids) == problem.prompt + problem.demonstration


def test_rollouts_are_played_in_workers_as_rows_of_commands_and_answers(engine):
    """Commands eligible, answers not; a group shares its start; the verdict is the environment's
    reward; an environment that reseeds the global generator does so in its worker alone."""
    task = say_go(environment="openenv_envs.Reseeds")
    problems = task.train_problems()[:3]
    random.seed(1234)
    expected = random.random()
    random.seed(1234)
    rollouts = task.rollout(engine, problems, group_size=2)
    assert random.random() == expected  # the harness's generator untouched
    tokenizer = engine.tokenizer
    for row in range(len(rollouts)):
        eligible, ids = rollouts.eligible[row], rollouts.input_ids[row]
        turns = torch.diff(eligible.int(), prepend=torch.tensor([0])).eq(1).sum()
        assert 1 <= turns <= task.max_turns and len(rollouts.turn_states[row]) == turns
        assert rollouts.turn_states[row][0] == rollouts.problems[row].prompt
        commands = tokenizer.decode(ids[eligible].tolist())
        assert commands.count("\n") <= turns  # each command ends at its newline (or at the token limit)
        verdict = rollouts.verdicts[row]
        assert verdict.judged and verdict.reward in (0.0, 1.0)
        replayed = task.verify(rollouts.problems[row], rollouts.completions[row])
        assert replayed.reward == verdict.reward  # the environment, reset with the seed, agrees
        assert rollouts.truncated[row] == (verdict.reward == 0.0 and turns == task.max_turns)


class Scripted:
    """An engine stand-in whose every episode sends the same commands, one a turn."""

    def __init__(self, engine, commands):
        self.engine, self.commands = engine, commands

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def conversation(self, stop_ids, max_new_tokens, greedy, group_size):
        from rollout.conversation import Turn

        commands, tokenizer = iter(self.commands), self.engine.tokenizer

        class Dialogue:
            def turn(self, keys, contexts, on_stop=None):
                ids = tokenizer(next(commands) + "\n", add_special_tokens=False).input_ids
                return [Turn(list(ids), [0.0] * len(ids)) for _ in keys]

        return Dialogue()


def test_the_environments_exception_is_unjudged_and_a_refused_action_the_policys(engine):
    task = say_go(environment="openenv_envs.Raises")
    rollouts = task.rollout(Scripted(engine, ["go", "boom", "go"]), task.train_problems()[:4], group_size=1)
    for problem, verdict, states in zip(rollouts.problems, rollouts.verdicts, rollouts.turn_states):
        if problem.prompt.startswith("Say go 1 "):
            assert verdict == verdict.__class__(1.0, "reward 1 after 1 turns")
        else:  # its second command breaks the environment: unjudged, not a failure of the policy
            assert not verdict.judged and "the environment broke" in verdict.feedback and len(states) == 2
    counts = say_go(environment="openenv_envs.Counts", action_field="times", expert=None, max_turns=2)
    rollouts = counts.rollout(Scripted(engine, ["many", "3"]), counts.train_problems()[:1], group_size=1)
    assert rollouts.turn_valid == [[False, True]] and rollouts.verdicts[0].reward == 1.0
    assert rollouts.completions[0].startswith("many\nInvalid action (times: Input should be a valid integer")


def test_an_episode_whose_reset_differs_from_its_problem_is_unjudged(engine):
    task = say_go()
    problem = task.train_problems()[0]
    moved = problem.__class__(problem.id, "Say go 9 times.\n> ", problem.answer, problem.demonstration)
    rollouts = task.rollout(Scripted(engine, ["go"] * 4), [moved], group_size=2)
    assert all(not v.judged and "drops its seed" in v.feedback for v in rollouts.verdicts)
    assert not rollouts.eligible.any()


def test_the_librarys_own_example_environment_plays_from_a_class_path(tmp_path, engine):
    """`openenv init` writes the library's example environment (an echo: the reward grows with the
    message's length) as a package of its own, installed here by putting it on the path. It
    declares no action type (a plain `Environment`), so the task asks for its action class."""
    pytest.importorskip("openenv")
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-m", "openenv.cli", "init", "echo_env", "--output-dir", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(tmp_path))
    args = {
        "environment": "echo_env.server.echo_env_environment.EchoEnvironment",
        "train_episodes": {"seeds": [0, 4]},
        "eval_episodes": {"seeds": [10, 12]},
        "max_turns": 2,
        "env_processes": 2,
    }
    try:
        with pytest.raises(ValueError, match="declares no action type"):
            OpenEnvTask.check_args(args)
        args["action"] = "echo_env.models.EchoAction"
        OpenEnvTask.check_args(args)  # its start is the same from any seed: two resets agree
        task = OpenEnvTask(**args)
        rollouts = task.rollout(Scripted(engine, ["hi", "hello there"]), task.train_problems()[:2], group_size=2)
    finally:
        sys.path.remove(str(tmp_path))
    assert rollouts.problems[0].prompt == "echoed_message: Echo Env environment ready!\nmessage_length: 0\n> "
    assert [v.reward for v in rollouts.verdicts] == [1.0] * 4  # 0.2, then 1.0 (at most 1 a step), clipped
    assert rollouts.verdicts[0].feedback == "reward 1.2 after 2 turns" and all(rollouts.truncated)
    assert "echoed_message: hello there" in rollouts.completions[0]


def test_the_guessing_games_expert_wins_most_games_and_loses_some():
    pytest.importorskip("openenv")
    task = OpenEnvTask(
        environment="tasks.openenv.guess.GuessNumberEnvironment",
        init_args={"high": 20, "guesses": 5, "detour_rate": 0.3},
        action_field="guess",
        expert="tasks.openenv.guess.expert",
        train_episodes={"seeds": [0, 200]},
        eval_episodes={"seeds": [1000, 1010]},
        max_turns=5,
        env_processes=2,
    )
    won = [task.verify_trusted(p, p.demonstration).reward for p in task.train_problems()]
    assert 0.6 < sum(won) / len(won) < 0.99
    assert task.verify(task.train_problems()[0], "ten\n> ").feedback.startswith("reward 0 after 1 turns")


@pytest.mark.slow
def test_grpo_and_hp_rlvr_train_on_an_openenv_environment_from_a_yaml(tmp_path):
    pytest.importorskip("openenv")
    import polars as pl
    import yaml
    from test_e2e import TINY

    from harness.__main__ import main

    spec = yaml.safe_load(open("configs/openenv.yaml"))["suites"][0]
    spec["task"]["init_args"] |= {"train_episodes": {"seeds": [0, 60]}, "eval_episodes": {"seeds": [1000, 1008]}}
    spec["model"]["warm_start"] |= {"steps": 2, "batch_size": 4}
    spec["model"]["tiny"] = TINY
    spec |= {"seeds": [0], "schedule": {"steps": 2, "prompts_per_step": 2}, "evaluation": {"every": 2}}
    spec["algorithms"]["grpo"]["init_args"]["group_size"] = 2
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    grpo = pl.read_parquet(tmp_path / "runs" / "openenv-guess" / "grpo-seed0" / "metrics.parquet")
    hp_rlvr = pl.read_parquet(tmp_path / "runs" / "openenv-guess" / "hp_rlvr-seed0" / "metrics.parquet")
    assert grpo["rollouts"].to_list() == [4, 4] and hp_rlvr["rollouts"].to_list() == [2, 2]
    assert (tmp_path / "runs" / "openenv-guess" / "leaderboard.parquet").exists()


HOW_TO = Path(__file__).resolve().parent.parent / "docs" / "openenv.md"


def how_to_block(language: str, first_line: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", HOW_TO.read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


@pytest.mark.slow
def test_the_how_tos_environment_checks_and_trains_as_printed(tmp_path, monkeypatch):
    """docs/openenv.md's two blocks, as printed, written beside each other: --check passes, and
    a short run of its suite (a few steps, the tiny model made smaller) trains both algorithms."""
    pytest.importorskip("openenv")
    import polars as pl
    import yaml
    from test_e2e import TINY

    from harness.__main__ import main

    (tmp_path / "say_env.py").write_text(how_to_block("python", "# say_env.py"))
    spec = yaml.safe_load(how_to_block("yaml", "# say.yaml"))
    (tmp_path / "say.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "say.yaml", "--check"]) == 0
    suite = spec["suites"][0]
    suite["task"]["init_args"] |= {"train_episodes": {"seeds": [0, 40]}, "eval_episodes": {"seeds": [100000, 100008]}}
    suite["model"] |= {"tiny": TINY, "warm_start": {"steps": 4, "batch_size": 4}}
    suite |= {"schedule": {"steps": 2, "prompts_per_step": 2}, "evaluation": {"every": 2}}
    suite["algorithms"]["grpo"]["init_args"]["group_size"] = 2
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "short.yaml", "--results", "runs"]) == 0
    for algorithm, rollouts in (("grpo", [4, 4]), ("hp_rlvr", [2, 2])):
        assert (
            pl.read_parquet(tmp_path / "runs" / "say" / f"{algorithm}-seed0" / "metrics.parquet")["rollouts"].to_list()
            == rollouts
        )
