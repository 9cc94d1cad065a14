"""What a finished run can still give of the settings that do not change its records: its records
sent to loggers named since, and its policy kept by a replay."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import polars as pl

from harness.config import Suite
from harness.fit import fit
from harness.loggers import close_loggers, logger_names, loggers
from harness.records import (
    MEASURED,
    write_json,
)
from harness.resume import run_spec


def finished_afterwards(suite: Suite, algorithm: str, seed: int, run_dir: Path, cache_dir: Path, say) -> None:
    """What a finished run can still give of the settings that do not change its records: its
    records sent to the loggers named since it ran (`trainer.loggers`), and its policy
    (`keep_policy`), which a finished run does not keep: the run is replayed from its start in a
    scratch folder, and the policy kept only if the replay's records are the run's own."""
    if suite.trainer.keep_policy and not (run_dir / "policy").is_dir():
        replay_for_policy(suite, algorithm, seed, run_dir, cache_dir, say)
    asked = logger_names(suite.trainer.loggers)
    sent = run_dir / "loggers.json"
    before = json.loads(sent.read_text()) if sent.exists() else None
    if before is None:  # a run from before loggers were recorded: the ones its folder shows
        before = [
            n
            for n, d in (("csv", "logs"), ("tensorboard", "tensorboard"), ("wandb", "wandb"))
            if (run_dir / d).exists()
        ]
        before += ["mlflow"] * (run_dir / "mlflow-run-id").exists()
    new = [name for name in asked if name not in before]
    if not new:
        return
    summary = json.loads((run_dir / "run.json").read_text())
    metrics = pl.read_parquet(run_dir / "metrics.parquet")
    evaluations = pl.read_parquet(run_dir / "eval.parquet") if (run_dir / "eval.parquet").exists() else pl.DataFrame()
    chosen = loggers(run_dir, new, f"{suite.name}/{run_dir.name}", run_spec(suite, algorithm, seed))
    for row in metrics.iter_rows(named=True):
        scalars = {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for logger in chosen:
            logger.log_metrics(scalars, step=row["step"])
    close_loggers(chosen, summary, metrics, evaluations, len(metrics))
    write_json(before + new, sent)
    say(f"its records sent to {', '.join(new)} (trainer.loggers)")


def replay_for_policy(suite: Suite, algorithm: str, seed: int, run_dir: Path, cache_dir: Path, say) -> None:
    """Run a finished run again from its start to keep its policy: on one machine a run's
    records are deterministic, so equal records are the same weights. A run of several
    processes is not replayed from here (its other processes have gone)."""
    if suite.trainer.processes > 1:
        say("trainer.keep_policy: it finished without keeping its policy; replay it with one process to keep one")
        return
    scratch = run_dir.parent / ".replay" / run_dir.name
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    say(f"trainer.keep_policy: it finished without keeping its policy; replaying it in {scratch} to keep it")
    quiet = dataclasses.replace(suite, trainer=dataclasses.replace(suite.trainer, loggers=[]))
    write_json(run_spec(quiet, algorithm, seed), scratch / "spec.json")
    fit(quiet, algorithm, seed, scratch, cache_dir, False, say)
    recorded, replayed = (pl.read_parquet(d / "metrics.parquet") for d in (run_dir, scratch))
    kept = [c for c in recorded.columns if not c.startswith(MEASURED)]
    if replayed.select(kept).equals(recorded.select(kept)):
        (scratch / "policy").rename(run_dir / "policy")
        say(f"its policy kept in {run_dir / 'policy'} (the replay's records are the run's own)")
    else:
        say("the replay's records differ from the run's (another machine or release?): no policy kept")
    shutil.rmtree(scratch.parent, ignore_errors=True)
