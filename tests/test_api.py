"""`harness.run`, the harness from Python (harness/api.py): its arguments as the command line's."""

import polars as pl
import pytest

import harness


@pytest.fixture
def argv(tmp_path, monkeypatch):
    """The command line `harness.run` hands to the CLI, with a CLI that records it and writes a
    one-row leaderboard."""
    import harness.__main__

    seen = []

    def main(args):
        seen.append(args)
        pl.DataFrame({"suite": ["math"]}).write_parquet(tmp_path / "leaderboard.parquet")
        return 0

    monkeypatch.setattr(harness.__main__, "main", main)
    return seen


def test_one_suite_algorithm_or_seed_may_be_given_alone(tmp_path, argv):
    """`suite="math"` is one suite, not four named m, a, t and h; a seed alone is one seed."""
    board = harness.run("b.yaml", "schedule.steps=2", results=tmp_path, suite="math", algorithm="grpo", seed=0)
    assert board["suite"].to_list() == ["math"]
    (args,) = argv
    assert args == [
        "run", "b.yaml", "schedule.steps=2", "--results", str(tmp_path),
        "--suite", "math", "--algorithm", "grpo", "--seed", "0",
    ]  # fmt: skip
    harness.run("b.yaml", results=tmp_path, suite=["math", "code"], seed=[0, 1])
    assert argv[1][4:] == ["--suite", "math", "--suite", "code", "--seed", "0", "--seed", "1"]
