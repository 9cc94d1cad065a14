"""The step-time benchmark: stage times, the model's share, the harness overhead."""

import pytest
import yaml

from harness.__main__ import main
from tests.test_e2e import suite


@pytest.mark.slow
def test_bench_times_every_algorithm_and_the_model_inside_the_step(tmp_path, capsys):
    config = tmp_path / "bench.yaml"
    spec = suite("math", "tasks.math.MathTask")
    spec["algorithms"]["ppo"] = {"class_path": "algorithms.ppo.PPO"}
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    out = tmp_path / "bench.md"
    assert main(["bench", str(config), "--steps", "2", "--out", str(out)]) == 0
    from harness.bench import run_bench
    from harness.config import load_benchmark

    board = run_bench(load_benchmark(config), steps=2)
    assert board["algorithm"].to_list() == ["grpo", "ppo"]
    assert board["rollouts/step"].to_list() == [16, 4]
    for row in board.iter_rows(named=True):
        stages = row["sample_s"] + row["verify_s"] + row["credit_s"] + row["update_s"]
        assert 0 < row["model_s"] <= row["step_s"] and stages <= row["step_s"]
        assert 0 <= row["overhead_share"] < 1
        assert row["peak_mb"] > 0
    assert "overhead_share" in out.read_text() and "python -m harness bench" in out.read_text()


def test_bench_refuses_a_step_count_below_one(tmp_path, capsys):
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"suites": [suite("math", "tasks.math.MathTask")]}))
    assert main(["bench", str(config), "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
