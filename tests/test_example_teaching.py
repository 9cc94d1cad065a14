"""A privileged-context algorithm added from outside the project (examples/hinted/): its class
declares the warm-start examples that teach its context, its config names them, and the harness,
unchanged, lays them out in the pair's one shared start and runs it."""

import importlib
import itertools
import json
import sys
from pathlib import Path

import polars as pl
import pytest
from test_e2e import TINY

from harness.__main__ import main

EXAMPLE = Path(__file__).parent.parent / "examples" / "hinted"


@pytest.fixture
def hinted(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield importlib.import_module("hinted")
    sys.modules.pop("hinted", None)


def test_its_teaching_shows_the_hint_before_the_demonstration_on_its_share_and_keys_the_start(hinted):
    from harness.config import load_benchmark
    from harness.models import Demonstrations
    from harness.start import StartingWeights, teachings
    from harness.tiny import build_tokenizer
    from tasks.math import MathTask

    task, tokenizer = MathTask(train_size=200, eval_size=4), build_tokenizer()
    problem = task.train_problems()[0]
    ids, labels = hinted.HintTeaching(fraction=1.0).example(task, problem, tokenizer, None)
    plain_ids, plain_labels = task.supervised_example(problem, tokenizer)
    hint = tokenizer(f"Answer: {problem.answer}\n", add_special_tokens=False).input_ids
    assert ids == hint + plain_ids and labels == [-100] * len(hint) + plain_labels

    (suite,) = load_benchmark(EXAMPLE / "hinted.yaml").suites
    start = StartingWeights.of(suite)
    assert start.recipe["warm_start"]["hinted.HintTeaching"] == {"fraction": 0.25}
    assert start.recipe["hint_template"] == hinted.HINT
    marker = tokenizer("Answer: ", add_special_tokens=False).input_ids
    data = Demonstrations(task, tokenizer, 32, 0, teachings(suite.model.warm_start))
    rows = [row for batch in itertools.islice(iter(data), 8) for part in batch["parts"] for row in part["input_ids"]]
    shown = sum(row.tolist()[i : i + len(marker)] == marker for row in rows for i in range(len(row)))
    assert 0.15 < shown / 256 < 0.35  # a quarter of the examples, give or take the draws


def test_its_config_runs_both_algorithms_from_one_start_that_taught_the_hint(tmp_path):
    overrides = [
        f"cache_dir={tmp_path / 'cache'}",
        f"model.tiny={json.dumps(TINY)}",
        "model.warm_start.steps=4",
        "model.warm_start.batch_size=8",
        "task.init_args.train_size=200",
        "task.init_args.eval_size=4",
        "schedule.steps=2",
        "schedule.prompts_per_step=2",
        "sampling.max_new_tokens=8",
        "evaluation.every=2",
    ]
    assert main(["run", str(EXAMPLE / "hinted.yaml"), *overrides, "--results", str(tmp_path / "runs")]) == 0
    suite = tmp_path / "runs" / "hinted-math"
    runs = {a: json.loads((suite / f"{a}-seed0" / "run.json").read_text()) for a in ("grpo", "hinted")}
    assert runs["grpo"]["starting_weights_digest"] == runs["hinted"]["starting_weights_digest"]
    (recipe,) = (tmp_path / "cache" / "policies").glob("*/recipe.json")
    assert json.loads(recipe.read_text())["warm_start"]["hinted.HintTeaching"] == {"fraction": 0.25}
    metrics = pl.read_parquet(suite / "hinted-seed0" / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2] and "hint/weight_mean" in metrics.columns
    sys.modules.pop("hinted", None)
