"""End to end on the tiny model: the CLI, the per-step records, the leaderboard."""

import json

import polars as pl
import pytest
import yaml

from harness.__main__ import main
from tasks.base import Verdict
from tasks.math import MathTask

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "head_dim": 8}


class ConstantReward(MathTask):
    """Every rollout gets the same reward: every GRPO group is saturated."""

    def verify(self, problem, completion):
        return Verdict(1.0, "always right")


def suite(name, task_class, steps=3, **extra):
    return {
        "name": name,
        "task": {"class_path": task_class, "init_args": {"train_size": 200, "eval_size": 20}},
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 10, "batch_size": 8}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "seeds": [0],
        "schedule": {"steps": steps, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 10},
        "evaluation": {"every": 2},
        **extra,
    }


@pytest.mark.slow
def test_grpo_run_writes_one_row_per_step_and_a_leaderboard(tmp_path):
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [suite("math", "tasks.math.MathTask", update={"minibatches": 2})]}))
    results = tmp_path / "results"
    assert main(["run", str(config), "--results", str(results)]) == 0
    run = results / "math" / "grpo-seed0"
    metrics = pl.read_parquet(run / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2, 3]
    assert metrics["rollouts"].to_list() == [16, 16, 16]
    assert metrics["rollouts_total"].to_list() == [16, 32, 48]
    assert metrics["updates"].to_list() == [2, 2, 2]
    assert (metrics["grad_norm"] == metrics["grad_norms"].list.first()).all()
    assert metrics["wall_clock_s"].is_sorted() and metrics["wall_clock_s"][0] > 0
    assert set(metrics.columns) >= {"step", "grad_norm", "updates", "zero_grad_updates", "rollouts", "wall_clock_s", "reward",
                                    "frac_reward_zero_std", "timing_s/sample", "timing_s/verify", "timing_s/credit", "timing_s/update"}
    # zero-grad counts are the exact-zero norms among each step's records
    for norms, zeros in zip(metrics["grad_norms"].to_list(), metrics["zero_grad_updates"].to_list()):
        assert zeros == sum(n == 0.0 for n in norms)
    evals = pl.read_parquet(run / "eval.parquet")
    assert evals["step"].to_list() == [0, 2, 3]
    info = json.loads((run / "run.json").read_text())
    assert info["rollouts_per_prompt"] == 4 and info["steps"] == 3
    assert not (run / "checkpoints").exists()
    board = pl.read_parquet(results / "math" / "leaderboard.parquet")
    assert board.row(0, named=True)["rollouts"] == 48
    assert "| math | MathTask | grpo |" in (results / "leaderboard.md").read_text()
    # a second run of the same command skips the finished run and republishes
    assert main(["run", str(config), "--results", str(results)]) == 0
    assert pl.read_parquet(run / "metrics.parquet").equals(metrics)
    assert main(["leaderboard", str(results)]) == 0


@pytest.mark.slow
def test_saturated_groups_give_exactly_zero_gradient_records(tmp_path):
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [suite("flat", "test_e2e.ConstantReward", steps=2, update={"minibatches": 4})]}))
    assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    metrics = pl.read_parquet(tmp_path / "results" / "flat" / "grpo-seed0" / "metrics.parquet")
    assert metrics["frac_reward_zero_std"].to_list() == [1.0, 1.0]
    assert metrics["zero_grad_updates"].to_list() == [4, 4]
    assert all(n == 0.0 for norms in metrics["grad_norms"].to_list() for n in norms)
