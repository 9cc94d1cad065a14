"""The README's worked example of a new algorithm, exactly as printed there, runs."""

import importlib
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
import torch
import yaml
from test_e2e import suite

from harness.__main__ import main

README = Path(__file__).parent.parent / "README.md"


def readme_block(language: str, first_line: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


@pytest.fixture
def reinforce(tmp_path, monkeypatch):
    (tmp_path / "my_reinforce.py").write_text(readme_block("python", "# my_reinforce.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("my_reinforce")
    sys.modules.pop("my_reinforce", None)


def test_the_readme_algorithm_credits_each_rollout_against_the_steps_mean(reinforce):
    class Stub:  # the algorithm's credit, without a policy to build
        credit, group_size = reinforce.BatchMeanReinforce.credit, 4

    module = Stub()
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # mean 5/8
    batch = SimpleNamespace(rewards=rewards, eligible=torch.ones(8, 3, dtype=torch.bool))
    advantages, stats = module.credit(batch)
    expected = [3 / 8, -5 / 8, -5 / 8, 3 / 8, 3 / 8, 3 / 8, 3 / 8, -5 / 8]
    torch.testing.assert_close(advantages[:, 0], torch.tensor(expected))
    assert torch.equal(advantages[:, 0:1].expand(8, 3), advantages)


@pytest.mark.slow
def test_the_readme_algorithm_runs_five_steps_from_its_yaml(reinforce, tmp_path):
    spec = suite("math", "test_e2e.ParityReward", steps=5)
    spec["algorithms"] = yaml.safe_load(readme_block("yaml", "algorithms:"))["algorithms"]
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    metrics = pl.read_parquet(tmp_path / "runs" / "math" / "reinforce-seed0" / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2, 3, 4, 5]
    assert metrics["rollouts"].to_list() == [16] * 5  # 4 prompts x group_size 4
    assert (metrics["credit/abs_mean"] > 0).any() and (metrics["grad_norm"] > 0).any()
