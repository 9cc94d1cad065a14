"""Two processes on one step (trainer.devices: 2, DDP over gloo on CPU), run as a user would."""

from pathlib import Path

import polars as pl
import pytest
import torch
import yaml
from harness_cli import run_harness

from rollout import distributed


def test_shards_are_contiguous_and_give_the_step_back():
    items = list(range(12))
    shares = [distributed.shard(items, r, 3) for r in range(3)]
    assert shares == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert distributed.shard(items) == items  # one process: everything
    assert distributed.gather("x") == ["x"] and distributed.total(2.5) == 2.5
    # what evaluation gathers: every world-th item a rank, put back in order
    items = list(range(7))
    assert distributed.unstride([items[r::3] for r in range(3)], 7) == items


def run_suite(tmp_path: Path, devices: int) -> Path:
    spec = {
        "name": "pair",
        "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 200, "eval_size": 20}},
        "model": {
            "preset": "tiny",
            "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "head_dim": 8},
            "warm_start": {"steps": 10, "batch_size": 8},
        },
        "algorithms": {
            "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}},
            "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
        },
        "seeds": [0],
        "schedule": {"steps": 4, "prompts_per_step": 8, "prompt_pool": 12},
        "sampling": {"max_new_tokens": 10},
        "evaluation": {"every": 2},
        "trainer": {"devices": devices, "accelerator": "cpu"},
    }
    config = tmp_path / f"devices{devices}.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    results = tmp_path / f"results{devices}"
    done = run_harness(config, results)
    assert done.returncode == 0, done.stderr[-3000:]
    return results / "pair"


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed support")
def test_before_the_process_group_the_rank_is_the_launchers(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.rank() == 0
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert distributed.rank() == 0  # a SLURM allocation's variable, but no srun task of it here
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert distributed.rank() == 3  # srun's task 3: it must not print or write as rank 0
    monkeypatch.setenv("RANK", "2")
    assert distributed.rank() == 2  # torchrun's, inside an allocation


def test_two_processes_keep_pairs_records_and_the_baseline_right(tmp_path):
    """Two processes against what one process must give, computed here: the prompt stream, the
    baseline's prompts, and a fresh single-process evaluation."""
    import json

    from algorithms.base import prompt_stream
    from harness.build import build_module
    from harness.config import load_benchmark

    two = run_suite(tmp_path, 2)
    benchmark = load_benchmark(tmp_path / "devices2.yaml")
    module, _ = build_module(benchmark.suites[0], "hp_rlvr", 0, benchmark.cache_dir)
    pool = module.task.train_problems()[:12]  # the suite's prompt_pool
    prompts = [[p.id for p in prompt_stream(pool, 0, step, 8)] for step in range(4)]
    assert len({p for step in prompts for p in step}) < 4 * 8  # the pool makes prompts recur
    frames = {algo: pl.read_parquet(two / f"{algo}-seed0" / "metrics.parquet") for algo in ("grpo", "hp_rlvr")}
    for algo, frame in frames.items():
        assert frame["step"].to_list() == [1, 2, 3, 4]
        # every process's prompts, in the stream's order: the same as one process and as the pair's other algorithm
        assert frame["prompt_ids"].to_list() == prompts, algo
        assert frame["rollouts"].to_list() == [8 * (4 if algo == "grpo" else 1)] * 4
        # gradients averaged: both processes hold the same weights after every update
        assert frame["distributed/weight_checksum_spread"].to_list() == [0.0] * 4
        assert any(n > 0 for n in frame["grad_norm"].to_list())  # updates happened (HP-RLVR's first step
        # may carry no signal: no reward yet, baseline 0)
        assert (two / f"{algo}-seed0" / "run.json").exists()
    # HP-RLVR's baseline tracker learned from both processes' prompts: it knows every prompt seen so far
    seen = [len({p for step in prompts[: k + 1] for p in step}) for k in range(4)]
    assert frames["hp_rlvr"]["credit/baseline_prompts"].to_list() == seen
    assert pl.read_parquet(two / "leaderboard.parquet").height == 2
    # the step-0 accuracy was measured once per suite, over two processes, and reused: it is what a
    # fresh measurement in one process gives
    measured = json.loads((two / "start-evaluations.json").read_text())
    assert len(measured) == 1 and 0 < next(iter(measured.values()))["accuracy"] < 1  # a value that could differ
    assert module.evaluate() == next(iter(measured.values()))
    for algo in frames:
        accuracy = pl.read_parquet(two / f"{algo}-seed0" / "eval.parquet")["accuracy"][0]
        assert accuracy == next(iter(measured.values()))["accuracy"]


def _shard_gradient(rank: int, world: int, init_file: str, out_dir: str) -> None:
    from algorithms.base import token_mean_divisor
    from algorithms.loss import UpdateArgs, policy_loss

    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    weight, logits_in, adv, eligible = _problem()
    rows = slice(rank * 3, (rank + 1) * 3)
    param = torch.nn.Parameter(weight.clone())
    logprobs = torch.log_softmax(logits_in[rows] @ param, -1)[..., 0]
    tokens = token_mean_divisor(eligible[rows])  # what update() divides by
    loss, _ = policy_loss(logprobs, logprobs.detach(), adv[rows], eligible[rows], UpdateArgs(), tokens=tokens)
    loss.backward()
    distributed.average_gradients([param])
    torch.save(param.grad, Path(out_dir) / f"grad{rank}.pt")
    torch.distributed.destroy_process_group()


def _problem():
    g = torch.Generator().manual_seed(0)
    eligible = torch.rand(6, 7, generator=g) > 0.3
    eligible[0] = False  # rows with very different token counts on the two processes
    eligible[1, :2] = False
    return torch.randn(4, 3, generator=g), torch.randn(6, 7, 4, generator=g), torch.randn(6, 7, generator=g), eligible


def test_averaged_shard_gradients_equal_the_whole_batch_gradient(tmp_path):
    """Token-mean over the whole step, not the mean of each process's token-means."""
    from algorithms.loss import UpdateArgs, policy_loss

    torch.multiprocessing.spawn(_shard_gradient, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2)
    weight, logits_in, adv, eligible = _problem()
    param = torch.nn.Parameter(weight.clone())
    logprobs = torch.log_softmax(logits_in @ param, -1)[..., 0]
    policy_loss(logprobs, logprobs.detach(), adv, eligible, UpdateArgs())[0].backward()
    for rank in range(2):
        torch.testing.assert_close(torch.load(tmp_path / f"grad{rank}.pt"), param.grad)
