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
        assert row["peak_mb"] > 0 and row["generated_tokens_per_s"] > 0
        assert 0 < row["measure_s"] < row["step_s"]  # math locates errors: fidelity is measured
        assert row["measure_share"] == pytest.approx(row["measure_s"] / row["step_s"])
    assert "overhead_share" in out.read_text() and "python -m harness bench" in out.read_text()


def test_bench_refuses_a_step_count_below_one(tmp_path, capsys):
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"suites": [suite("math", "tasks.math.MathTask")]}))
    assert main(["bench", str(config), "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
    # the file's settings can be overridden as `run`'s are, and are checked the same way
    assert main(["bench", str(config), "--steps", "1", "schedule.prompts_per_step=0"]) == 2
    assert "schedule.prompts_per_step=0" in capsys.readouterr().err
    # an option it does not know is refused with the hint `run` gives: settings go as KEY=VALUE
    with pytest.raises(SystemExit) as refused:
        main(["bench", str(config), "--schedule.steps", "1"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "KEY=VALUE after the config" in err and "bench -h" in err


@pytest.mark.slow
def test_gpu_script_runs_every_algorithm_at_fixed_work_on_a_random_model(tmp_path):
    """The prepared device script, at the CPU-sized shape: a random model over a tokenizer that
    decodes every id it can sample, every rollout running to max_new_tokens."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_bench.py"
    spec = importlib.util.spec_from_file_location("gpu_bench", script)
    gpu_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_bench)
    from harness.tiny import build_tokenizer

    tokenizer = build_tokenizer(fill_to=300)
    assert len(tokenizer) == 300 and tokenizer.decode([299]) == "<|f200|>"
    out = tmp_path / "gpu.md"
    args = ["--shape", "tiny", "--steps", "1", "--prompts", "2", "--max-new-tokens", "8", "--out", str(out)]
    assert gpu_bench.main(args) == 0
    table = out.read_text()
    assert "python scripts/gpu_bench.py --shape tiny" in table
    assert all(f"| {algorithm} |" in table for algorithm in ("grpo", "hp_rlvr", "ppo"))


def test_a_stage_s_overhead_is_its_time_outside_the_model_and_the_task():
    """Inside one stage: 60 ms in a model call, 50 ms in a task call, 20 ms in neither; the split
    gives the stage about 20 ms of overhead, and restores the stage timer afterwards."""
    import time

    from algorithms.base import RLVRModule
    from harness.bench import ModelClock

    class Stub:  # a module with RLVRModule's stage timer, and nothing else
        stage = RLVRModule.stage
        stage_peaks_mb: dict = {}

    module = Stub()
    model_clock, task_clock = ModelClock(), ModelClock()
    model_call, task_call = model_clock.wrap(lambda: time.sleep(0.06)), task_clock.wrap(lambda: time.sleep(0.05))
    timing = {}
    with model_clock.stages_split(module, task_clock):
        with module.stage(timing, "credit"):
            model_call()
            task_call()
            time.sleep(0.02)
    assert "stage" not in vars(module)  # the class's own timer again
    assert timing["credit"] >= 0.13
    assert 0.015 <= model_clock.stage_overhead["credit"] < 0.045
