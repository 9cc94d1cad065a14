"""Several nodes through Lightning (`trainer.num_nodes`): two "nodes" of one process each on this
machine, started by torchrun over the loopback address, against `devices: 2` on one node."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch
import yaml
from harness_cli import TESTS, run_harness
from safetensors.torch import load_file

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed support")


def spec(strategy: str, devices: int, num_nodes: int) -> dict:
    return {
        "name": "pair",
        "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 100, "eval_size": 8}},
        "model": {
            "preset": "tiny",
            "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "head_dim": 8},
            "warm_start": {"steps": 5, "batch_size": 8},
        },
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
        "seeds": [0],
        "schedule": {"steps": 3, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 6},
        "evaluation": {"every": 3},
        "trainer": {
            "devices": devices,
            "num_nodes": num_nodes,
            "strategy": strategy,
            "accelerator": "cpu",
            "keep_policy": True,
        },
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(config: Path, results: Path) -> None:
    """Node ranks 0 and 1, one process each, as two machines would start them."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RLVR_TEST_CRASH_AT"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent)])
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(rank)]
            + ["--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port)]
            + ["-m", "harness", "run", str(config), "--results", str(results)],
            cwd=TESTS.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    for node, output in zip(nodes, outputs):
        assert node.returncode == 0, output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_nodes_give_the_records_and_weights_of_two_devices(tmp_path, strategy):
    runs = {}
    for name, (devices, nodes) in {"one-node": (2, 1), "two-nodes": (1, 2)}.items():
        config = tmp_path / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec(strategy, devices, nodes)]})
        )
        if nodes == 1:
            done = run_harness(config, tmp_path / name)
            assert done.returncode == 0, done.stderr[-3000:]
        else:
            two_nodes(config, tmp_path / name)
        runs[name] = tmp_path / name / "pair" / "grpo-seed0"
    one, two = (pl.read_parquet(runs[n] / "metrics.parquet") for n in ("one-node", "two-nodes"))
    assert one.height == two.height == 3
    assert (one["grad_norm"] > 0).any()  # real updates
    for column in ("prompt_ids", "reward", "grad_norms", "loss", "rollouts_total", "tokens/generated"):
        assert one[column].to_list() == two[column].to_list(), column
    weights = [load_file(runs[n] / "policy" / "model.safetensors") for n in ("one-node", "two-nodes")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
