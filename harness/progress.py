"""Progress of a long loop (a run's steps, a warm start's): Lightning's bar on a terminal, and a
plain line every tenth of the way where the output goes to a file (a bar redrawn there is most
of the log); and a time left, said (`fmt_duration`)."""

from __future__ import annotations

import sys
import time

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar


def fmt_duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class Lines(L.Callback):
    """`label: step k/n (t s)` every tenth of `total` steps and at the last."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.every = label, total, max(1, total // 10)
        self.started = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        step = getattr(module, "rl_step", trainer.global_step)  # RL steps, or the warm start's optimizer steps
        if trainer.is_global_zero and (step % self.every == 0 or step == self.total):
            print(f"{self.label}: step {step}/{self.total} ({time.perf_counter() - self.started:.0f} s)", flush=True)


def progress(label: str, total: int, refresh_rate: int = 1) -> list[L.Callback]:
    """The callbacks that show a loop's progress where its output goes."""
    if sys.stderr.isatty():
        return [TQDMProgressBar(refresh_rate=refresh_rate)]
    return [Lines(label, total)]


def bar_shown() -> bool:
    """Whether Lightning's own progress bar is wanted (a terminal)."""
    return sys.stderr.isatty()
