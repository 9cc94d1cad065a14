"""`python -m harness evaluate`: checkpoints evaluated without training reproduce a training run's
own evaluations (the same evaluation), item by item, with the paired comparison; a kept policy
starts a second RL phase from a config."""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch
import yaml
from harness_cli import run_harness
from test_e2e import TINY

from harness.__main__ import main
from harness.verdicts import paired_p

SUITE = {
    "name": "tiny-math",
    # rewarded about half the time: sampled pass counts vary from one draw to another
    "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 200, "eval_size": 24}},
    "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 30, "batch_size": 16}},
    "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
    "seeds": [0],
    "schedule": {"steps": 3, "prompts_per_step": 4},
    "sampling": {"max_new_tokens": 12, "temperature": 1.0},
    "optim": {"lr": 1.0e-3, "warmup_steps": 1},
    "evaluation": {"every": 3, "samples": 4, "pass_at": [1, 2]},
    "trainer": {"keep_policy": True},
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run with a kept policy, and its config."""
    root = tmp_path_factory.mktemp("evaluate")
    config = root / "suite.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [SUITE]}))
    assert main(["run", str(config), "--results", str(root / "runs")]) == 0
    return root, config, root / "runs" / "tiny-math" / "grpo-seed0"


@pytest.mark.slow
def test_evaluating_the_start_and_a_kept_policy_reproduces_the_runs_own_evaluations(trained, capsys):
    root, config, run = trained
    results = root / "runs"
    policy = run / "policy"
    assert main(["evaluate", str(config), "--results", str(results), "--model", "start", "--model", str(policy)]) == 0
    folder = results / "tiny-math" / "evaluation"
    board = pl.read_parquet(folder / "leaderboard.parquet")
    trained_evals = pl.read_parquet(run / "eval.parquet")
    start, kept = board.row(0, named=True), board.row(1, named=True)
    for row, at in ((start, 0), (kept, -1)):
        items = pl.read_parquet(folder / row["model"] / "items.parquet")
        assert items["reward"].to_list() == trained_evals["rewards"][at].to_list()  # item by item
        assert row["accuracy"] == trained_evals["accuracy"][at]
        assert items["passes"].to_list() == trained_evals["passes"][at].to_list()
        assert 0 < sum(items["passes"]) < 4 * row["items"]  # draws that could have come out otherwise
        assert (row["pass@1"], row["pass@2"]) == (trained_evals["pass@1"][at], trained_evals["pass@2"][at])
        assert row["items"] == 24 and row["acc_low"] <= row["accuracy"] <= row["acc_high"]
    assert (start["model"], start["reference"], start["vs_reference_p"]) == ("start", "start", None)
    first, last = trained_evals["rewards"][0].to_list(), trained_evals["rewards"][-1].to_list()
    assert kept["vs_reference_p"] == paired_p([last], [first])  # the run's own acc_gain_p
    assert kept["draw_step"] == 3 and kept["settings_of"] == "grpo"
    assert "| start |" in (folder / "leaderboard.md").read_text()

    # done once: a second call reads both back; a checkpoint whose record is gone is evaluated again
    capsys.readouterr()
    (folder / kept["model"] / "evaluation.json").unlink()
    assert main(["evaluate", str(config), "--results", str(results), "--model", "start", "--model", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "start: evaluated earlier with these settings, read back" in out
    assert f"{kept['model']}: evaluating {policy}" in out
    assert pl.read_parquet(folder / "leaderboard.parquet").equals(board)


@pytest.mark.slow
def test_a_kept_policy_named_as_a_model_starts_a_second_phase(trained):
    root, _, run = trained
    second = {**SUITE, "name": "second-phase", "model": {"path": str(run / "policy")}, "trainer": {}}
    config = root / "second.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [second]}))
    assert main(["run", str(config), "--results", str(root / "runs")]) == 0
    info = json.loads((root / "runs" / "second-phase" / "grpo-seed0" / "run.json").read_text())
    assert info["model"] == str(run / "policy")
    # it starts where the first phase ended: its step-0 evaluation is the first run's last
    assert info["accuracy_before"] == json.loads((run / "run.json").read_text())["accuracy_after"]


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed support")
def test_two_processes_evaluate_the_same_items_as_one(trained):
    root, _, run = trained
    spread = {**SUITE, "trainer": {"devices": 2, "accelerator": "cpu"}, "evaluation": {"every": 3}}
    config = root / "two.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [spread]}))
    done = run_harness(config, root / "two", "--model", str(run / "policy"), command="evaluate")
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = (root / "two" / "tiny-math" / "evaluation").glob(run.name)  # a kept policy: by its run
    items = pl.read_parquet(folder / "items.parquet")
    assert items["reward"].to_list() == pl.read_parquet(run / "eval.parquet")["rewards"][-1].to_list()


def test_a_folder_that_is_no_model_is_refused_in_one_line(tmp_path, capsys):
    config = tmp_path / "suite.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [SUITE]}))
    assert main(["evaluate", str(config), "--model", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --model: {tmp_path} is not a model folder (no config.json)"
    assert main(["evaluate", str(config), "--samples", "2", "--pass-at", "3"]) == 2
    assert capsys.readouterr().err.startswith("error: --samples/--pass-at: pass_at:")


def test_the_comparison_with_the_first_checkpoint_says_which_way_it_goes():
    """A checkpoint that solves what the first does and 30 items more is `higher`; the first,
    against it, `lower` (the labels are not the test's p alone)."""
    from types import SimpleNamespace

    from harness.evaluate import table

    suite = SimpleNamespace(name="s", task=SimpleNamespace(class_path="tasks.math.MathTask"))

    def checkpoint(name):
        return SimpleNamespace(label=name, path=name, algorithm="grpo", draw_step=None)

    def result(solved):
        rewards = [1.0] * solved + [0.0] * (100 - solved)
        return {"items": pl.DataFrame({"reward": rewards}), "summary": {"accuracy": solved / 100}}

    board = table(suite, [checkpoint("start"), checkpoint("better")], [result(20), result(50)])
    assert board["vs_reference"].to_list() == [None, "higher"]
    board = table(suite, [checkpoint("better"), checkpoint("start")], [result(50), result(20)])
    assert board["vs_reference"].to_list() == [None, "lower"]


def test_a_weights_folder_rewritten_at_the_same_size_is_evaluated_again(tmp_path):
    import os

    from harness.evaluate import fingerprint

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"12345678")
    before = fingerprint(tmp_path)
    weights.write_bytes(b"87654321")  # retrained: the same size, other bytes
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert fingerprint(tmp_path) != before


def test_an_evaluation_is_read_back_only_under_the_same_sampling(tmp_path):
    """The key under which an evaluation is read back holds the sampling settings: a temperature,
    top-p or length limit changed since, each changes what is measured, so each changes the key."""
    from harness.config import load_benchmark
    from harness.evaluate import checkpoints, settings_key

    def key(**sampling):
        suite = {**SUITE, "sampling": {**SUITE["sampling"], **sampling}}
        config = tmp_path / "suite.yaml"
        config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [suite]}))
        (loaded,) = load_benchmark(config).suites
        return settings_key(loaded, checkpoints(loaded, [])[0], {})

    same = key()
    assert key() == same
    for changed in ({"temperature": 0.7}, {"top_p": 0.9}, {"max_new_tokens": 13}):
        assert key(**changed) != same, changed
