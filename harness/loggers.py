"""Where a run's records go besides its folder: Lightning's loggers (`trainer.loggers`), each
closed with the run's row of the leaderboard."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import lightning as L
import polars as pl
from lightning.pytorch.loggers import CSVLogger

from harness.leaderboard import run_table
from harness.records import (
    records_frame,
)
from rollout import distributed


def logger_names(names: list[str] | None) -> list[str]:
    """`trainer.loggers`, or its default: csv, and tensorboard where it is installed."""
    return names if names is not None else ["csv"] + ["tensorboard"] * bool(importlib.util.find_spec("tensorboard"))


def loggers(run_dir: Path, names: list[str] | None, run_id: str, spec: dict) -> list:
    """The run's Lightning loggers (`trainer.loggers`), its settings logged as hyperparameters.
    CSV writes logs/version_0, then version_1 after a resume (nothing overwritten); W&B and MLflow
    continue the same run after a resume (its id kept in the run folder)."""
    chosen = []
    for name in logger_names(names):
        if name == "csv":
            chosen.append(CSVLogger(run_dir, name="logs"))
        elif name == "tensorboard":
            from lightning.pytorch.loggers import TensorBoardLogger

            chosen.append(TensorBoardLogger(run_dir, name="tensorboard"))
        elif name == "wandb":
            from lightning.pytorch.loggers import WandbLogger

            project = os.environ.get("WANDB_PROJECT", "rlvr-harness")
            key = hashlib.sha1(f"{run_dir.resolve()}".encode()).hexdigest()[:16]  # the same run after a resume
            chosen.append(
                WandbLogger(
                    name=run_id, project=project, group=run_id.split("/")[0], save_dir=run_dir, id=key, resume="allow"
                )
            )
        elif name == "mlflow":
            from lightning.pytorch.loggers import MLFlowLogger

            uri = (
                os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(run_dir.parent.parent / 'mlflow.db').resolve()}"
            )
            known = run_dir / "mlflow-run-id"
            chosen.append(
                MLFlowLogger(
                    experiment_name=run_id.split("/")[0],
                    run_name=run_id,
                    tracking_uri=uri,
                    run_id=known.read_text().strip() if known.exists() else None,
                )
            )
            if distributed.rank() == 0:
                known.write_text(chosen[-1].run_id)
    for logger in chosen:
        logger.log_hyperparams(spec)
    return chosen


def close_loggers(chosen: list, summary: dict, metrics: pl.DataFrame, evaluations: pl.DataFrame, step: int) -> None:
    """The run's row of the leaderboard's run table (`harness.leaderboard.run_table`: rollouts,
    accuracies, zero-gradient fraction, stage times...) on every logger as `final/...`, then each
    logger closed: the next run in this process starts a W&B run of its own."""
    (row,) = run_table([(summary, metrics, evaluations)]).iter_rows(named=True)
    numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    final = {f"final/{k}": float(v) for k, v in numbers.items()}
    for logger in chosen:
        logger.log_metrics(final, step=step)
        logger.save()
        if type(logger).__name__ == "WandbLogger":
            logger.experiment.finish()


def log_summary(trainer: L.Trainer, module, summary: dict) -> None:
    """`close_loggers` for a run that has just finished."""
    frames = (records_frame(module.records), records_frame(module.evaluations))
    close_loggers(trainer.loggers, summary, *frames, module.rl_step)
