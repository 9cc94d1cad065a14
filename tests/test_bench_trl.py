"""Our GRPO step against TRL's GRPOTrainer on the same work (the `bench` extra)."""

import pytest
import yaml

from tests.test_e2e import suite


@pytest.mark.slow
def test_trl_comparison_times_both_on_the_same_prompts(tmp_path):
    pytest.importorskip("trl")
    from harness.bench_trl import run_trl_comparison
    from harness.config import load_benchmark

    config = tmp_path / "bench.yaml"
    spec = suite("math", "tasks.math.MathTask")
    spec["schedule"]["prompt_pool"] = 6  # prompts drawn from the first 6 training problems, on both sides
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    trace = {}
    board = run_trl_comparison(load_benchmark(config), "math", steps=2, trace=trace)
    row = board.row(0, named=True)
    assert row["ours_step_s"] > 0 and row["trl_step_s"] > 0
    assert row["ratio_ours_to_trl"] == pytest.approx(row["ours_step_s"] / row["trl_step_s"])
    assert row["ours_cpu_s"] > 0 and row["trl_cpu_s"] > 0
    assert (row["G"], row["prompts/step"], row["max_new_tokens"]) == (4, 4, 10)
    # one warm-up step and two measured ones, on each side
    for times in ("ours_step_s", "ours_cpu_s", "trl_step_s", "trl_cpu_s"):
        assert len(trace[times]) == 3
    # every TRL step saw exactly our step's prompts, in our order, grouped G at a time
    assert len(trace["trl_prompt_ids"]) == 3
    assert trace["trl_prompt_ids"] == trace["ours_prompt_ids"]
    assert trace["trl_prompts"] == trace["expected_prompts"]
    assert all(len(ids) == 4 for ids in trace["trl_prompt_ids"])
    assert row["prompts_identical"] is True
    # completions stop at max_new_tokens on both sides: at most 16 rollouts x 10 tokens per step
    assert all(0 < t <= 160 for t in trace["trl_tokens"] + trace["ours_tokens"])
