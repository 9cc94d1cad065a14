"""`run --smoke`: every selected run for a few steps on a short or cached warm start, in a scratch
folder, leaving the results folder alone."""

import json
import tempfile

import polars as pl
import pytest
import yaml
from test_e2e import suite

from harness.__main__ import main


@pytest.mark.slow
def test_smoke_runs_three_steps_on_a_short_warm_start_in_a_scratch_folder(tmp_path, monkeypatch, capsys):
    spec = suite("math", "test_e2e.ParityReward", steps=40)
    spec["model"]["warm_start"]["steps"] = 400
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix="": str(scratch))
    assert main(["run", str(config), "--smoke", "--results", str(tmp_path / "runs")]) == 0
    assert f"smoke run finished: its runs and leaderboards are in {scratch}" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()
    metrics = pl.read_parquet(scratch / "math" / "grpo-seed0" / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2, 3]
    evaluations = pl.read_parquet(scratch / "math" / "grpo-seed0" / "eval.parquet")
    assert evaluations["step"].to_list() == [0, 3] and [len(r) for r in evaluations["rewards"]] == [16, 16]
    (recipe,) = (tmp_path / "cache" / "policies").glob("*/recipe.json")
    assert json.loads(recipe.read_text())["warm_start"]["steps"] == 20  # not the suite's 400
    report = json.loads(recipe.read_text())["report"]  # where the warm start's time went
    assert 0 < report["batches_s"] < report["seconds"] and report["problems_s"] >= 0
