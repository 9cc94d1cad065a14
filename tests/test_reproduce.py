"""`python -m harness reproduce`: a rerun's cells against a published folder's, on records made
up here (bit for bit, consistent within the training's noise, not), and end to end on the tiny
model."""

import polars as pl
import pytest

from harness.records import publish_records
from harness.reproduce import records_digest, report


def made(seed: int, final: list[float], *, weights="w1", data="d1", loss=0.5):
    info = {
        "suite": "s",
        "algorithm": "grpo",
        "seed": seed,
        "reference": "grpo",
        "starting_weights_digest": weights,
        "task_data_digest": data,
        "accuracy_before": 0.0,
        "accuracy_after": sum(final) / len(final),
    }
    steps = pl.DataFrame({"step": [1, 2], "loss": [loss, loss / 2], "wall_clock_s": [1.0, 2.0]})
    evals = pl.DataFrame({"step": [0, 2], "rewards": [[0.0] * len(final), final]})
    return info, steps, evals


def folder(tmp_path, name, runs):
    publish_records(runs, tmp_path / name / "s")
    return tmp_path / name


def test_records_digest_ignores_what_measures_the_machine():
    a = made(0, [1.0, 0.0])
    b = (a[0], a[1].with_columns(wall_clock_s=pl.lit(9.0)), a[2])
    assert records_digest(a) == records_digest(b)
    assert records_digest(a) != records_digest(made(0, [1.0, 0.0], loss=0.4))


def test_cells_are_bit_for_bit_consistent_or_not(tmp_path):
    final = [1.0] * 100 + [0.0] * 100
    published = folder(tmp_path, "published", [made(0, final)])
    same = folder(tmp_path, "same", [made(0, final)])
    assert report(published, same)["reproduced"].to_list() == ["bit for bit"]
    # another trajectory: 6 problems changed each way, other weights: within the training's noise
    nearby = final[:94] + [0.0] * 6 + [1.0] * 6 + final[106:]
    other = folder(tmp_path, "other", [made(0, nearby, weights="w2", loss=0.4)])
    row = report(published, other).row(0, named=True)
    assert row["reproduced"] == "consistent within training noise" and row["starting_weights"] == "other"
    # 40 problems fewer solved: far beyond what another trajectory makes of 200 problems
    worse = folder(tmp_path, "worse", [made(0, [1.0] * 60 + [0.0] * 140, loss=0.4)])
    row = report(published, worse).row(0, named=True)
    assert row["reproduced"] == "not" and row["p"] < 0.05
    # other held-out problems: not comparable at all
    data = folder(tmp_path, "data", [made(0, final, data="d2")])
    assert report(published, data).row(0, named=True)["why"] == "other held-out problems"


@pytest.mark.slow
def test_the_command_reruns_a_config_and_says_bit_for_bit_then_not_for_a_changed_setting(tmp_path, capsys):
    import yaml

    from harness.__main__ import main

    spec = {
        "name": "math",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 64, "eval_size": 64}},
        "model": {"preset": "tiny", "warm_start": {"steps": 20, "batch_size": 8}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
        "seeds": [0],
        "schedule": {"steps": 2, "prompts_per_step": 2},
        "sampling": {"max_new_tokens": 8},
        "evaluation": {"every": 2},
    }
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    assert main(["leaderboard", str(tmp_path / "runs"), "--publish", str(tmp_path / "published")]) == 0
    assert main(["reproduce", str(config), str(tmp_path / "published"), "--results", str(tmp_path / "again")]) == 0
    assert "| math | grpo | 1 | bit for bit |" in (tmp_path / "again" / "reproduce.md").read_text()
    # held-out problems of another draw: the command must say not
    changed = ["reproduce", str(config), str(tmp_path / "published"), "task.init_args.eval_size=32"]
    assert main([*changed, "--results", str(tmp_path / "changed")]) == 0
    text = (tmp_path / "changed" / "reproduce.md").read_text()
    assert "| math | grpo | 1 | not | other held-out problems |" in text
