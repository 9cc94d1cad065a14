"""`python -m harness evaluate CONFIG`: checkpoints on a suite's held-out set, without training.

Each checkpoint (the suite's own starting weights, any local Hugging Face folder, a run's kept
policy) is evaluated by the evaluation a training run makes (`RLVRModule.evaluate`, run through
Lightning's `validate` with the suite's trainer, so on one process or several, through our
engine or vLLM): greedy accuracy with its exact interval, sampled pass@k where the suite (or
`--samples`) asks for it, and each held-out item's result. A kept policy is evaluated with the
settings of the algorithm that trained it and the sampling draws of that run's last evaluation,
the starting weights with those of step 0, so both reproduce the training run's own numbers.
With two or more checkpoints, each is tested against the first on the same items (exact
McNemar, `harness.verdicts.paired_p`).

A checkpoint's results are written once it is evaluated, in `<results>/<suite>/evaluation/
<label>/` (`items.parquet`, `evaluation.json`); a killed evaluation resumes at the first
checkpoint not written, and one whose settings or weights changed is evaluated again.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import lightning as L
import polars as pl
import torch

from harness.build import build_module
from harness.config import Benchmark, Suite
from harness.leaderboard import markdown
from harness.placement import placement
from harness.quiet import quiet_libraries
from harness.records import write_atomic, write_json, write_parquet
from harness.verdicts import detectable_difference, paired_higher, paired_p
from rollout import distributed

START = "start"
"""`--model start`: the suite's own starting weights (its warm start, or `model.path`)."""


@dataclass(frozen=True)
class Checkpoint:
    label: str
    """Its name in the table and its folder's."""
    path: Path | None
    """The weights' folder; None: the suite's starting weights."""
    algorithm: str
    """Whose settings (sampling, evaluation) it is evaluated with."""
    draw_step: int
    """The step whose sampling draws the sampled pass@k uses (a kept policy: its run's last)."""


def checkpoints(suite: Suite, models: list[str]) -> list[Checkpoint]:
    """The checkpoints `--model` names (default: the starting weights), in order. A path must be
    a folder with a config.json; a run's kept policy is recognised by the run.json beside it."""
    reference = suite.reference if suite.reference in suite.algorithms else next(iter(suite.algorithms))
    chosen = []
    for model in models or [START]:
        if model == START:
            chosen.append(Checkpoint(START, None, reference, 0))
            continue
        path = Path(model)
        if not (path / "config.json").is_file():
            raise ValueError(f"--model: {model} is not a model folder (no config.json)")
        run = path.parent / "run.json"
        info = json.loads(run.read_text()) if run.is_file() else {}
        algorithm = info.get("algorithm") if info.get("algorithm") in suite.algorithms else reference
        chosen.append(Checkpoint(label(model), path, algorithm, int(info.get("steps", 0))))
    labels = [c.label for c in chosen]
    for i, c in enumerate(chosen):  # two with one short name: both by their whole path
        if labels.count(c.label) > 1:
            chosen[i] = dataclasses.replace(c, label=label(str(c.path), short=False))
    labels = [c.label for c in chosen]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--model: a checkpoint is named twice ({', '.join(labels)})")
    return chosen


def label(path: str, short: bool = True) -> str:
    """A folder name for a checkpoint: a run's kept policy (`<run>/policy`, run.json beside it) by
    its run's name (`grpo-seed0`), another folder by its own name; not short, its whole path
    with separators as underscores."""
    folder = Path(path)
    if short:
        name = folder.parent.name if folder.name == "policy" and (folder.parent / "run.json").is_file() else folder.name
    else:
        name = str(folder)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.") or "model"


def fingerprint(path: Path | None) -> dict[str, list[int]] | None:
    """Size and modification time of each file of a weights folder: a changed folder is evaluated again."""
    if path is None:
        return None
    return {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(path.iterdir()) if f.is_file()}


def evaluate_benchmark(
    benchmark: Benchmark, results: Path, suites: list[str], models: list[str], changes: dict
) -> pl.DataFrame:
    """Every selected suite's checkpoints, evaluated (or read back) and tabled; the tables are
    written beside them. `changes`: evaluation settings replacing the suite's (samples, pass_at)."""
    quiet_libraries()
    unknown = [s for s in suites if s not in {x.name for x in benchmark.suites}]
    if unknown:
        raise ValueError(f"--suite: {', '.join(unknown)} not in this benchmark")
    boards = []
    for suite in benchmark.suites:
        if suites and suite.name not in suites:
            continue
        chosen = checkpoints(suite, models)
        folder = results / suite.name / "evaluation"
        evaluated = [evaluate_checkpoint(suite, c, benchmark.cache_dir, folder / c.label, changes) for c in chosen]
        if distributed.rank() == 0:
            board = table(suite, chosen, evaluated)
            write_parquet(board, folder / "leaderboard.parquet")
            text = f"# Evaluation: {suite.name}\n\n{markdown(board.drop('path'))}"
            write_atomic(folder / "leaderboard.md", lambda tmp, text=text: tmp.write_text(text))
            boards.append(board)
    return pl.concat(boards, how="diagonal_relaxed") if boards else pl.DataFrame()


def settings_key(suite: Suite, checkpoint: Checkpoint, changes: dict) -> dict:
    """Everything an evaluation's numbers depend on: a checkpoint evaluated earlier under an equal
    key is read back, under any other evaluated again."""
    _, settings = suite.algorithm_settings(checkpoint.algorithm)
    evaluation = asdict(settings["evaluation"]) | changes
    return json.loads(
        json.dumps(
            {
                "task": suite.task_key(),
                "model": str(checkpoint.path) if checkpoint.path else {"starting_weights": asdict(suite.model)},
                "weights": fingerprint(checkpoint.path),
                "algorithm": checkpoint.algorithm,
                "draw_step": checkpoint.draw_step,
                "evaluation": evaluation,
                "sampling": asdict(settings["sampling"]),
                "precision": suite.trainer.precision,
            },
            default=str,
        )
    )


def evaluate_checkpoint(suite: Suite, checkpoint: Checkpoint, cache_dir: Path, folder: Path, changes: dict) -> dict:
    """{"summary": evaluation.json's content, "items": each item's result}: read back if this
    checkpoint was evaluated with these settings, else evaluated now."""
    spec = settings_key(suite, checkpoint, changes)
    summary_path, items_path = folder / "evaluation.json", folder / "items.parquet"
    if summary_path.is_file() and items_path.is_file():
        summary = json.loads(summary_path.read_text())
        if summary.get("spec") == spec:
            print(f"[{suite.name}] {checkpoint.label}: evaluated earlier with these settings, read back")
            return {"summary": summary, "items": pl.read_parquet(items_path)}
    print(f"[{suite.name}] {checkpoint.label}: evaluating {checkpoint.path or 'the starting weights'}", flush=True)
    module, weights = distributed.main_first(
        lambda: build_module(
            suite, checkpoint.algorithm, suite.seeds[0], cache_dir, weights=checkpoint.path, evaluation=changes
        )
    )
    module.rl_step = checkpoint.draw_step
    trainer = L.Trainer(
        **placement(suite.trainer),
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        inference_mode=False,  # as in training: the engine's own no_grad, no inference tensors
    )
    trainer.validate(module, torch.utils.data.DataLoader([0], batch_size=None), verbose=False)
    result = module.evaluations[-1]
    problems = list(module.task.eval_problems())[: module.eval_args.limit]
    items = pl.DataFrame(
        {
            "item": list(range(len(problems))),
            "id": [p.id for p in problems],
            "reward": [float(r) for r in result["rewards"]],
            **({"passes": result["passes"]} if "passes" in result else {}),
        }
    )
    summary = {
        "spec": spec,
        "weights": str(weights),
        "accuracy": result["accuracy"],
        "samples": module.eval_args.samples,
        **{k: v for k, v in result.items() if k.startswith("pass@")},
    }
    if distributed.rank() == 0:
        write_parquet(items, items_path)
        write_json(summary, summary_path)  # last: its presence says the folder is complete
    return {"summary": summary, "items": items}


def table(suite: Suite, chosen: list[Checkpoint], evaluated: list[dict]) -> pl.DataFrame:
    """One row a checkpoint, each tested against the first on the same items."""
    from scipy import stats

    first = evaluated[0]["items"]["reward"].to_list()
    rows = []
    for checkpoint, result in zip(chosen, evaluated):
        rewards = result["items"]["reward"].to_list()
        n, solved = len(rewards), round(sum(rewards))
        interval = stats.binomtest(solved, n).proportion_ci(0.95, method="exact") if n else None
        compared = checkpoint is not chosen[0]
        p = paired_p([rewards], [first]) if compared else None
        summary = result["summary"]
        rows.append(
            {
                "suite": suite.name,
                "task": suite.task.class_path.rsplit(".", 1)[-1],
                "model": checkpoint.label,
                "path": str(checkpoint.path or summary["weights"]),
                "items": n,
                "accuracy": summary["accuracy"],
                "acc_low": interval.low if interval else None,
                "acc_high": interval.high if interval else None,
                **{k: v for k, v in summary.items() if k.startswith("pass@")},
                "reference": chosen[0].label,
                "vs_reference_p": p,
                "vs_reference": None
                if p is None
                else "within noise"
                if p >= 0.05
                else "higher"
                if paired_higher([(rewards, first)])
                else "lower",
                "detectable_diff": detectable_difference([rewards], [first]) if compared else None,
                "settings_of": checkpoint.algorithm,
                "draw_step": checkpoint.draw_step,
            }
        )
    return pl.DataFrame(rows)
