"""What a benchmark says before it trains: warm starts to build and what its held-out set can detect."""

import json
from pathlib import Path

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


def write(tmp_path, eval_size: int, seeds: list[int], **changes):
    spec = {
        "name": "small",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 100, "eval_size": eval_size}},
        "model": {"preset": "tiny", "warm_start": {"steps": 100, "batch_size": 8}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "seeds": seeds,
        "schedule": {"steps": 2, "prompts_per_step": 4},
        **changes,
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


def held_out_line(benchmark) -> str:
    (line,) = [line for line in announce(benchmark, plan(benchmark, None)) if "held-out:" in line]
    return line


def test_the_announced_held_out_size_is_cut_by_evaluation_limit(tmp_path):
    """eval_size 500 with `evaluation.limit: 100`: a run evaluates on 100 problems, and what the
    suite can detect is that of 100 (6.0% with no problem changing the other way: 6 of 6 wins is
    the fewest a two-sided sign test calls at p < 0.05)."""
    line = held_out_line(write(tmp_path, 500, [0], evaluation={"limit": 100}))
    assert line.startswith("warning: [small] held-out: 100 problems x 1 seed;") and "is 6.0% with no problem" in line
    assert held_out_line(write(tmp_path, 500, [0], evaluation={"limit": 1000})).startswith("[small] held-out: 500 ")


def test_a_suites_seeds_are_counted_once_whatever_its_algorithms(tmp_path):
    """Two algorithms at one seed are two runs of one seed: the one-seed line, not two seeds'."""
    grpo = {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}
    line = held_out_line(write(tmp_path, 200, [0], algorithms={"grpo": grpo, "again": grpo}))
    assert line.startswith("[small] held-out: 200 problems x 1 seed;") and "beyond this seed's noise" in line


def test_the_warning_reads_the_figure_with_a_fifth_of_the_problems_changing(tmp_path):
    """100 problems, one seed: 6.0% is callable when no problem changes the other way, but with a
    fifth of them changing (10 each way) a gain needs 13 more wins (23 of 33, p < 0.05): 13.0%,
    above the 10% the warning is drawn at. The warning reads that figure, not the best case."""
    line = held_out_line(write(tmp_path, 100, [0]))
    assert "6.0% with no problem changing the other way, 13.0% with a fifth" in line
    assert line.startswith("warning: ") and "cannot detect less than 10%" in line


def test_an_openenv_suite_announces_its_held_out_episodes(tmp_path):
    """OpenEnv's held-out set is a range of seeds (or a size of its task API's split): 400 seeds
    are 400 problems, cut by `evaluation.limit` as any task's."""
    from harness.costs import held_out_size

    spec = yaml.safe_load(open(Path(__file__).resolve().parent.parent / "configs" / "openenv.yaml"))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(spec))
    suite = load_benchmark(tmp_path / "b.yaml", classes=False).suites[0]  # openenv itself not needed
    eval_episodes = suite.task.init_args["eval_episodes"]["seeds"]
    assert held_out_size(suite) == eval_episodes[1] - eval_episodes[0]
    suite.task.init_args["eval_episodes"] = {"split": "test", "first": 0, "size": 50}
    assert held_out_size(suite) == 50
