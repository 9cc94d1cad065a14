"""bf16-mixed trains: float32 master weights take every update that bf16 weights would drop."""

import polars as pl
import pytest
import torch
import yaml
from test_e2e import TINY
from transformers import AutoModelForCausalLM

from harness.__main__ import main

ALGORITHMS = {
    "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}},
    "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
    "ppo": {"class_path": "algorithms.ppo.PPO", "init_args": {}},
}


def run_suite(tmp_path, precision: str):
    spec = {
        "name": precision,
        "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 200, "eval_size": 8}},
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 10, "batch_size": 8}},
        "algorithms": ALGORITHMS,
        "seeds": [0],
        "schedule": {"steps": 10, "prompts_per_step": 8},
        "sampling": {"max_new_tokens": 8, "temperature": 0.5},
        "optim": {"lr": 1.0e-6, "warmup_steps": 1},  # the paper's rate
        "evaluation": {"every": 10},
        "trainer": {"precision": precision, "keep_policy": True},
    }
    config = tmp_path / f"{precision}.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    return tmp_path / "runs" / precision


@pytest.mark.slow
def test_ten_steps_of_bf16_mixed_change_every_tensor_as_much_as_float32(tmp_path):
    suites = {p: run_suite(tmp_path, p) for p in ("32-true", "bf16-mixed")}
    (weights,) = (tmp_path / "cache" / "policies").glob("*/recipe.json")
    start = AutoModelForCausalLM.from_pretrained(weights.parent).state_dict()
    for algorithm in ALGORITHMS:
        moved = {}
        for precision, suite in suites.items():
            trained = AutoModelForCausalLM.from_pretrained(suite / f"{algorithm}-seed0" / "policy").state_dict()
            assert trained.keys() == start.keys()
            assert all(t.dtype == torch.float32 for t in trained.values())  # master weights stay float32
            unchanged = [name for name in start if torch.equal(trained[name], start[name])]
            assert not unchanged, (algorithm, precision, unchanged)
            moved[precision] = torch.cat([(trained[n] - start[n]).flatten() for n in start])
        ratio = float(moved["bf16-mixed"].norm() / moved["32-true"].norm())
        cosine = float(torch.nn.functional.cosine_similarity(moved["bf16-mixed"], moved["32-true"], 0))
        print(f"{algorithm}: |update| bf16-mixed / 32-true = {ratio:.3f}, cosine {cosine:.3f}")
        assert 0.8 < ratio < 1.25, (algorithm, ratio)
        assert cosine > 0.9, (algorithm, cosine)  # the same direction
    # bf16 compute really ran: the gradients differ in their low digits
    for algorithm in ALGORITHMS:
        norms = [pl.read_parquet(s / f"{algorithm}-seed0" / "metrics.parquet")["grad_norm"] for s in suites.values()]
        assert norms[0].to_list() != norms[1].to_list(), algorithm
        assert (norms[0] - norms[1]).abs().max() < 0.01 * norms[0].abs().max(), algorithm


def test_bf16_weights_drop_the_papers_updates_that_float32_masters_keep():
    """Why the config refuses `model.dtype: bfloat16`: AdamW's first steps move each weight by about
    lr, and at 1e-6 on weights of about 0.02 that is below bf16's resolution."""
    torch.manual_seed(0)
    weights = 0.02 * torch.randn(4096)
    changed = {}
    for dtype in (torch.bfloat16, torch.float32):
        param = torch.nn.Parameter(weights.to(dtype, copy=True))
        optimizer = torch.optim.AdamW([param], lr=1e-6, weight_decay=0.0)
        for _ in range(10):
            param.grad = torch.randn(4096).to(dtype)
            optimizer.step()
        changed[dtype] = float((param.detach().float() != weights.to(dtype).float()).float().mean())
    assert changed[torch.float32] == 1.0
    assert changed[torch.bfloat16] < 0.1
