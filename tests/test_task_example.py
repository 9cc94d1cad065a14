"""docs/tasks.md's worked example of a new task, exactly as printed there, runs, from a file
beside the benchmark file (not on the import path)."""

import re
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from test_e2e import suite

from harness.__main__ import main

DOC = Path(__file__).parent.parent / "docs" / "tasks.md"


def doc_block(language: str, first_line: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


@pytest.fixture
def folder(tmp_path):
    """The example's module beside a benchmark file that names it."""
    (tmp_path / "reverse_task.py").write_text(doc_block("python", "# reverse_task.py"))
    spec = suite("reverse", "unused", steps=3)
    spec["task"] = yaml.safe_load(doc_block("yaml", "task: {class_path: reverse_task."))["task"]
    spec["task"]["init_args"] = {"train_size": 60, "eval_size": 8}
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    yield tmp_path
    sys.modules.pop("reverse_task", None)
    sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def test_the_example_task_is_found_beside_its_config_and_judges_literal_completions(folder):
    from harness.config import load_benchmark

    (loaded,) = load_benchmark(folder / "bench.yaml").suites
    task = loaded.task.build()
    problem = task.train_problems()[0]
    assert problem.prompt.startswith("reverse ") and problem.answer == problem.prompt[8:-2][::-1]
    assert task.verify(problem, problem.answer + "\n").reward == 1.0
    wrong = task.verify(problem, "zz")
    assert (wrong.reward, wrong.feedback) == (0.0, "wrong: 'zz' is not the word reversed")
    assert [p.id for p in task.eval_problems()] == [str(i) for i in range(60, 68)]
    again = loaded.task.build()
    assert [p.prompt for p in again.train_problems()] == [p.prompt for p in task.train_problems()]  # seeded


def test_a_module_found_nowhere_names_where_it_was_looked_for(folder, capsys):
    text = (folder / "bench.yaml").read_text().replace("reverse_task.ReverseTask", "reverse_tsak.ReverseTask")
    (folder / "bench.yaml").write_text(text)
    assert main(["run", str(folder / "bench.yaml"), "--list"]) == 2
    err = capsys.readouterr().err
    assert "task.class_path: cannot import 'reverse_tsak.ReverseTask' (searched the working directory" in err
    assert str(folder) in err and err.count("\n") == 1


def test_a_range_declared_on_the_example_is_checked(folder, capsys):
    text = (folder / "bench.yaml").read_text().replace("train_size: 60", "train_size: 0")
    (folder / "bench.yaml").write_text(text)
    assert main(["run", str(folder / "bench.yaml"), "--check"]) == 2
    assert "suites[0].task.init_args.train_size: must be >= 1 (got 0)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_example_task_runs_three_steps_from_its_yaml(folder):
    assert main(["run", str(folder / "bench.yaml"), "--results", str(folder / "runs")]) == 0
    metrics = pl.read_parquet(folder / "runs" / "reverse" / "grpo-seed0" / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2, 3]
    assert metrics["rollouts"].to_list() == [16] * 3
