"""Writing what a run produced: atomic parquet/JSON writes and the callback that persists each
step's row right after the checkpoint that contains it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import lightning as L
import polars as pl


def write_atomic(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: readers see the old file
    or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_parquet(frame: pl.DataFrame, path: Path) -> None:
    write_atomic(path, frame.write_parquet)


def write_json(data: Any, path: Path) -> None:
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2, default=str)))


def records_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.from_dicts(rows, infer_schema_length=None) if rows else pl.DataFrame()


class StepRecorder(L.Callback):
    """After every step: checkpoint first, then metrics.parquet and eval.parquet, so a kill at
    any point loses at most the step in flight and the files never run ahead of the state."""

    def __init__(self, run_dir: Path, checkpoint_every: int = 1):
        self.run_dir, self.checkpoint_every = run_dir, checkpoint_every

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoints" / "last.ckpt"

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        last = module.rl_step >= module.schedule.steps
        if module.rl_step % self.checkpoint_every == 0 or last:
            write_atomic(self.checkpoint_path, lambda tmp: trainer.save_checkpoint(tmp, weights_only=False))
        write_parquet(records_frame(module.records), self.run_dir / "metrics.parquet")
        write_parquet(records_frame(module.evaluations), self.run_dir / "eval.parquet")
