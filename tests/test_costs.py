"""What a benchmark says before it trains: warm starts to build and what its held-out set can detect."""

import json

import pytest
import yaml

from harness.config import load_benchmark
from harness.costs import announce, least_detectable
from harness.plan import plan
from harness.verdicts import detectable_difference


@pytest.mark.parametrize("items, discordant", [(100, 0), (100, 20), (37, 9), (500, 101)])
def test_the_least_detectable_gain_is_the_leaderboards_rule_before_any_run(items, discordant):
    """`detectable_difference` on records with `discordant` problems split evenly between two
    runs, and the same computed from the counts alone."""
    mine = [1.0] * (discordant // 2) + [0.0] * (discordant - discordant // 2) + [0.0] * (items - discordant)
    theirs = [0.0] * (discordant // 2) + [1.0] * (discordant - discordant // 2) + [0.0] * (items - discordant)
    assert least_detectable(items, discordant / items) == detectable_difference([mine], [theirs])


def write(tmp_path, eval_size: int, seeds: list[int]):
    spec = {
        "name": "small",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 100, "eval_size": eval_size}},
        "model": {"preset": "tiny", "warm_start": {"steps": 100, "batch_size": 8}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "seeds": seeds,
        "schedule": {"steps": 2, "prompts_per_step": 4},
    }
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    return load_benchmark(path)


def test_a_held_out_set_too_small_to_detect_ten_points_is_warned_of(tmp_path):
    small = announce(benchmark := write(tmp_path, 20, [0, 1]), plan(benchmark, None))
    assert small[0].startswith("[small] warm start to build first: 100 steps of 8 examples, no earlier warm start")
    assert (
        small[1].startswith("warning: [small] held-out: 20 problems x 2 seeds")
        and "raise the task's eval_size" in small[1]
    )
    enough = announce(benchmark := write(tmp_path, 200, [0]), plan(benchmark, None))
    assert enough[1].startswith("[small] held-out: 200 problems x 1 seed;") and "3.0% with no problem" in enough[1]


def test_a_warm_start_is_estimated_from_those_the_cache_holds(tmp_path):
    benchmark = write(tmp_path, 200, [0])
    earlier = tmp_path / "cache" / "policies" / "0123456789abcdef"
    earlier.mkdir(parents=True)
    recipe = {
        "task": {"class_path": "tasks.math.MathTask"},
        "warm_start": {"steps": 50, "batch_size": 8},
        "report": {"seconds": 40.0},
    }
    (earlier / "recipe.json").write_text(json.dumps(recipe))
    (line, _) = announce(benchmark, plan(benchmark, None))
    assert "100 steps of 8 examples, about 80 s at the pace of the warm starts of this task" in line
