"""A task from a data file and a reward function (`tasks.reward.RewardTask`), the command line's
KEY=VALUE overrides, and `harness.run` from Python."""

import json
import re
import sys

import pytest
import yaml

from harness.__main__ import main
from tasks.base import Verdict
from tasks.reward import RewardTask

REWARD = '''
def reward(prompt, completion, answer, **row):
    """1 when the completion's last word is the answer."""
    words = completion.split()
    return float(bool(words) and words[-1] == str(answer))


def graded(prompt, completion, answer, unit, **row):
    right = completion.strip() == f"{answer} {unit}"
    return right, "" if right else f"expected {answer} {unit}"


def too_much(prompt, completion, **row):
    return 2.0


def echo(prompt, completion, answer, **row):
    return float(completion.strip() == str(answer)), prompt


def words(prompt, completion, answer, **row):
    return completion.strip()


def picky(prompt, completion, answer, **row):
    if answer % 2:
        raise KeyError("odd")
    return float(completion.strip() == str(answer))


def late(prompt, completion, answer, **row):
    return "no" if answer >= 30 else 0.0
'''


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A data file of 40 rows and the module beside it, importable as the config's folder is."""
    (tmp_path / "my_reward.py").write_text(REWARD)
    rows = [{"prompt": f"say {n}", "answer": n, "unit": "m", "solution": f" {n}"} for n in range(40)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "my_reward"]:
        del sys.modules[name]


def test_the_reward_gets_the_prompt_the_completion_and_every_field_of_the_row(folder):
    task = RewardTask(str(folder / "data.jsonl"), "my_reward.reward", eval_size=10, demonstration_field="solution")
    train, held = task.train_problems(), task.eval_problems()
    assert len(train) == 30 and len(held) == 10 and not {p.id for p in train} & {p.id for p in held}
    problem = train[0]
    n = int(problem.prompt.removeprefix("say "))
    assert problem.demonstration == f" {n}"
    assert task.verify(problem, problem.demonstration) == Verdict(1.0, "")
    assert task.verify(problem, f" {n + 1}").reward == 0.0
    graded = RewardTask(str(folder / "data.jsonl"), "my_reward:graded", eval_size=10)
    assert graded.verify(problem, f"{n} m") == Verdict(1.0, "")
    assert graded.verify(problem, "3 km") == Verdict(0.0, f"expected {n} m")
    # the held-out rows are drawn with the seed, the same every time
    again = RewardTask(str(folder / "data.jsonl"), "my_reward.reward", eval_size=10)
    assert [p.id for p in again.eval_problems()] == [p.id for p in held]


def test_the_reward_gets_the_rows_own_prompt_not_the_templated_one(folder):
    """`prompt_template` dresses the prompt the policy reads; the reward function reads the row's
    own field, as the documentation says (a reward that parses its question would not find it)."""
    task = RewardTask(str(folder / "data.jsonl"), "my_reward:echo", eval_size=10, prompt_template="Q: {prompt}\nA:")
    problem = task.train_problems()[0]
    n = int(problem.prompt.removeprefix("Q: say ").removesuffix("\nA:"))
    assert problem.prompt == f"Q: say {n}\nA:"
    assert task.verify(problem, f" {n}") == Verdict(1.0, f"say {n}")


def test_the_held_out_rows_are_drawn_with_the_tasks_seed(folder):
    """10 of 40 rows held out: those `random.Random(seed)` puts first when it shuffles the rows'
    numbers, so another seed holds out other rows."""
    import random

    def held_out(seed):
        task = RewardTask(str(folder / "data.jsonl"), "my_reward.reward", eval_size=10, seed=seed)
        return [int(p.id.removeprefix("data-")) for p in task.eval_problems()]

    for seed in (0, 1):
        order = list(range(40))
        random.Random(seed).shuffle(order)
        assert held_out(seed) == sorted(order[:10])
    assert held_out(0) != held_out(1)


@pytest.mark.parametrize(
    "args, message",
    [
        ({"reward": "my_reward.too_much"}, "reward: my_reward.too_much gave 2.0"),
        ({"reward": "my_reward.nothing"}, "reward: module 'my_reward' has no 'nothing'"),
        ({"reward": "nowhere.reward"}, "reward: no module 'nowhere'"),
        ({"prompt_field": "question"}, "prompt_field: "),
        ({"eval_size": 0}, "eval_size: must be >= 1 without an eval_file"),
        ({"eval_size": 40}, "eval_size: 40 of data's 40 rows would leave none"),
    ],
)
def test_bad_arguments_are_refused_by_name(folder, args, message):
    args = {"train_file": str(folder / "data.jsonl"), "reward": "my_reward.reward", "eval_size": 5} | args
    with pytest.raises(ValueError) as error:
        task = RewardTask(**args)
        RewardTask.check_args(args)
        task.verify(task.train_problems()[0], "x")
    assert str(error.value).startswith(message.replace("data's", f"{folder / 'data.jsonl'}'s"))


def test_a_row_the_reward_raises_on_is_unjudged_and_the_first_is_named(folder, caplog):
    """A choice, documented: the function's failure is not the completion's, so the row is left
    out of the update (unjudged, counted in verify/unjudged), with one warning line."""
    task = RewardTask(str(folder / "data.jsonl"), "my_reward.picky", eval_size=5)
    odd, even = (next(p for p in task.train_problems() if json.loads(p.answer)["answer"] % 2 == r) for r in (1, 0))
    verdict = task.verify(odd, " 1")
    assert verdict == Verdict(0.0, "the reward function raised KeyError", judged=False)
    assert task.verify(even, f" {json.loads(even.answer)['answer']}") == Verdict(1.0, "")
    task.verify(odd, " 2")
    warned = [r.getMessage() for r in caplog.records if "raised" in r.getMessage()]
    assert len(warned) == 1 and f"on row {odd.id}" in warned[0] and "unjudged" in warned[0]


@pytest.mark.parametrize(
    ("reward", "said"),
    [
        ("my_reward.words", "returned '1' (str) for row data-"),  # the completion it was given
        ("my_reward.too_much", "gave 2.0 for row data-"),
    ],
)
def test_what_no_reward_can_be_is_named_in_one_line_with_its_row(folder, reward, said):
    from tasks.reward import RewardError

    task = RewardTask(str(folder / "data.jsonl"), reward, eval_size=5)
    with pytest.raises(RewardError, match="^" + re.escape(f"reward: {reward} {said}")):
        task.verify(task.train_problems()[0], " 1")


@pytest.mark.parametrize(
    ("reward", "said"),
    [
        ("my_reward.words", "suites[0].task.init_args.reward: my_reward.words returned '"),
        ("my_reward.picky", "suites[0].task.init_args.reward: my_reward.picky raised KeyError('odd') on row data-"),
    ],
)
def test_check_calls_the_reward_on_rows_and_names_the_first_failure(folder, capsys, reward, said):
    assert main(["run", config(folder, reward=reward, demonstration_field="solution"), "--check"]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_reward_that_fails_mid_run_stops_it_in_one_line(folder, capsys):
    """Rows the check did not reach: the run stops at the first, exit 2, one line naming it."""
    path = config(folder, reward="my_reward.late")
    assert main(["run", path, "model.warm_start=null", "--results", str(folder / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: reward: my_reward.late returned 'no' (str) for row data-")


def config(folder, **task_args) -> str:
    suite = {
        "name": "own",
        "task": {
            "class_path": "tasks.reward.RewardTask",
            "init_args": {"train_file": "data.jsonl", "reward": "my_reward.reward", "eval_size": 8} | task_args,
        },
        "model": {
            "preset": "tiny",
            "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "head_dim": 8},
        },
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "schedule": {"steps": 2, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 4},
        "evaluation": {"every": 2},
    }
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump({"cache_dir": str(folder / "cache"), "suites": [suite]}))
    return str(path)


def test_a_config_with_a_missing_reward_or_field_is_one_line_and_exit_2(folder, capsys):
    assert main(["run", config(folder, reward="my_reward.nothing"), "--check"]) == 2
    err = capsys.readouterr().err
    assert "suites[0].task.init_args.reward: module 'my_reward' has no 'nothing'" in err and err.count("\n") == 1
    assert main(["run", config(folder), "task.init_args.prompt_field=question", "--check"]) == 2
    err = capsys.readouterr().err
    assert "has no field 'question'" in err and "(set by the override task.init_args.prompt_field=question)" in err


def test_overrides_set_every_suite_or_one_and_are_checked_as_the_file(folder, capsys):
    path = config(folder)
    assert main(["run", path, "--list", "seeds=[3, 4]"]) == 0
    assert capsys.readouterr().out.split() == ["own/grpo-seed3", "own/grpo-seed4"]
    assert main(["run", path, "own/seeds=[5]", "--list"]) == 0
    assert capsys.readouterr().out.split() == ["own/grpo-seed5"]
    for override, said in [
        ("schedule.stepz=3", "suites[0].schedule.stepz: unknown key"),
        ("schedule.steps=0", "suites[0].schedule.steps: must be >= 1 (got 0) (set by the override schedule.steps=0)"),
        ("other/seeds=[1]", "other/seeds: no suite named 'other'"),
        ("seeds", "seeds: an override is KEY=VALUE"),
        ("task.class_path.x=1", "task.class_path.x: task.class_path is 'tasks.reward.RewardTask'"),
    ]:
        assert main(["run", path, override, "--check"]) == 2, override
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, (override, err)


def test_an_option_that_is_a_setting_points_to_the_override(folder, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["run", config(folder), "--steps", "3"])
    assert exit.value.code == 2
    assert "e.g. schedule.steps=3" in capsys.readouterr().err


@pytest.mark.slow
def test_a_reward_function_task_runs_end_to_end_from_python(folder):
    """Ten lines of Python and a data file: warm start on the file's solutions, two GRPO steps,
    the leaderboard back as a frame; a refused override raises with the CLI's line."""
    import harness

    board = harness.run(
        config(folder, demonstration_field="solution"), "model.warm_start.steps=20", results=folder / "runs"
    )
    assert board.filter(board["suite"] == "own")["algorithm"].to_list() == ["grpo"]
    assert (folder / "runs" / "own" / "grpo-seed0" / "metrics.parquet").is_file()
    with pytest.raises(ValueError, match=r"schedule.steps: must be >= 1 \(got 0\)"):
        harness.run(config(folder), "schedule.steps=0", results=folder / "runs")
