"""The estimates said before a benchmark trains (harness/estimate.py): the extrapolation's
arithmetic against a direct computation, and an estimate against what the run then took."""

import json

import pytest
import yaml

from harness.config import ConfigError, load_benchmark
from harness.estimate import BAND, EstimateArgs, affordable, evaluation_s, evaluations, extrapolate, most

REWARD = "def reward(prompt, completion, answer, **row):\n    return float(completion.strip() == str(answer))\n"


def test_steps_are_extrapolated_at_the_mean_of_the_timed_ones():
    timed = [0.5, 0.9, 0.4]
    seconds, low, high = extrapolate(timed, 100)
    assert seconds == pytest.approx(sum(timed) / len(timed) * 100)
    assert (low, high) == pytest.approx((seconds / BAND, seconds * BAND))
    assert extrapolate([0.2], 10, band=1.5) == pytest.approx((2.0, 2.0 / 1.5, 3.0))


def test_the_steps_measured_stay_within_the_budget():
    assert affordable(3, 60, 0.05) and not affordable(3, 59, 0.05)
    assert most(3, 1000, 0.05) == 50 and most(3, 20, 0.05) == 3


def test_an_evaluation_is_its_batches_on_the_line_through_two_measured_ones():
    small, large = (2, 1.2), (8, 1.8)  # 1.0 s a batch and 0.1 s a problem
    assert evaluation_s(small, large, held_out=60, batch_size=25) == pytest.approx(2 * 3.5 + 2.0)
    assert evaluation_s(small, large, held_out=8, batch_size=500) == pytest.approx(1.8)


@pytest.mark.parametrize("steps, every", [(40, 6), (12, 12), (5, 25), (100, 25), (7, 1)])
def test_the_evaluations_counted_are_those_the_training_step_makes(steps, every):
    made = sum(1 for step in range(1, steps + 1) if step % every == 0 or step == steps)  # algorithms/base.py
    assert evaluations(steps, every) == made


def test_the_settings_are_checked_and_estimate_false_turns_them_off(tmp_path):
    with pytest.raises(ValueError, match="budget"):
        EstimateArgs(budget=2.0)
    path = write(tmp_path, ws_steps=20, steps=2)
    raw = yaml.safe_load(path.read_text())
    for value, enabled in ((False, False), (True, True), ({"train_steps": 2}, True)):
        path.write_text(yaml.safe_dump({**raw, "estimate": value}))
        assert load_benchmark(path).estimate.enabled is enabled
    path.write_text(yaml.safe_dump({**raw, "estimate": {"budgt": 0.1}}))
    with pytest.raises(ConfigError, match=r"estimate\.budgt: unknown key.*did you mean 'budget'"):
        load_benchmark(path)
    assert not load_benchmark(path, overrides=["estimate=false"]).estimate.enabled


def write(tmp_path, ws_steps: int, steps: int, batch_size: int = 8, **top):
    (tmp_path / "est_reward.py").write_text(REWARD)
    rows = [{"prompt": f"say {n}", "answer": n, "solution": f" {n}"} for n in range(200)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = {
        "name": "say",
        "task": {
            "class_path": "tasks.reward.RewardTask",
            "init_args": {"train_file": "data.jsonl", "reward": "est_reward.reward", "eval_size": 8}
            | {"demonstration_field": "solution"},
        },
        "model": {"preset": "tiny", "warm_start": {"steps": ws_steps, "batch_size": batch_size}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "seeds": [0],
        "schedule": {"steps": steps, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 4},
        "evaluation": {"every": 20},
        "trainer": {"checkpoint_every_s": 0, "loggers": []},
    }
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [suite], **top}))
    return path


def test_the_estimates_said_first_hold_for_the_warm_start_and_the_run_that_follow(tmp_path, capsys):
    """Within 3x each way on a shared 2-core machine: wide enough for other jobs' noise, narrow
    enough to catch an estimate off by the examples in a warm-start step (8 here). One thread:
    two threads on cores that other jobs hold ran 1x to 70x slower from second to second."""
    import torch

    from harness.driver import run_benchmark

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        measure = {"warm_start_steps": 6, "train_steps": 4, "budget": 0.2}
        run_benchmark(load_benchmark(write(tmp_path, 200, 40, estimate=measure)), tmp_path / "runs")
    finally:
        torch.set_num_threads(threads)
    said = capsys.readouterr().out
    assert "[say] warm start to build first: 200 steps of 8 examples, about" in said
    assert "steps here" in said and "[say] grpo: 40 steps x 1 seed with 3 evaluations" in said
    estimates = json.loads((tmp_path / "runs" / "say" / "estimates.json").read_text())
    (recipe,) = (tmp_path / "cache" / "policies").glob("*/recipe.json")
    built = json.loads(recipe.read_text())["report"]["seconds"]
    ran = json.loads((tmp_path / "runs" / "say" / "grpo-seed0" / "run.json").read_text())["wall_clock_s"]
    for what, estimate, measured in (
        ("warm start", estimates["warm_start"]["seconds"][0], built),
        ("training", estimates["grpo-seed0"]["wall_clock_s"][0], ran),
    ):
        assert measured / 3 <= estimate <= 3 * measured, f"{what}: estimated {estimate:.1f} s, took {measured:.1f} s"


def test_a_start_evaluated_on_no_problem_warns_of_nothing(caplog):
    """The estimate's modules evaluate no held-out problem (`evaluation.limit` 0): their accuracy
    of 0 says nothing of the start, so no "solve 0.0%" warning; a start that solves none of its
    problems still gets it."""
    from types import SimpleNamespace

    from algorithms.base import RLVRModule

    said = []
    for rewards in ([], [0.0, 0.0]):
        module = SimpleNamespace(
            _rng_restored=True,
            engine=SimpleNamespace(push_weights=lambda: None),
            evaluations=[{"step": 0, "accuracy": 0.0, "rewards": rewards}],
        )
        caplog.clear()
        with caplog.at_level("WARNING", logger="harness"):
            RLVRModule.on_train_start(module)
        said.append([r.getMessage() for r in caplog.records if r.name == "harness"])
    assert said[0] == [] and len(said[1]) == 1 and said[1][0].startswith("the starting weights solve 0.0%")
