"""A finished run's summary (`run.json`): what it ran, from what, where, and its headline numbers."""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path

import torch

from harness.config import Suite
from harness.resume import run_spec

log = logging.getLogger("harness")

SESSION = f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
"""This invocation of the harness, recorded with each run it finishes."""


def versions() -> dict[str, str | int]:
    """The releases a run's numbers depend on most (a newer transformers, say, can round
    differently, and a warm start of a few hundred steps amplifies that), torch's with its build
    tag (+cpu, +cu130), and torch's thread count. The rest is in its `environment`."""
    import platform
    from importlib.metadata import version

    packages = ("transformers", "tokenizers", "lightning", "numpy")
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        **{name: version(name) for name in packages},
        "torch_threads": torch.get_num_threads(),
    }


def run_summary(
    suite: Suite,
    algorithm: str,
    seed: int,
    module,
    weights: Path,
    origin: dict,
    devices: int,
    preparation_s: float,
    memory: dict[str, float],
) -> dict:
    """The run's `run.json`: its settings and provenance, the versions and session it ran in, and
    its headline numbers."""
    return {
        "suite": suite.name,
        "task": suite.task.class_path.rsplit(".", 1)[-1],
        "task_spec": suite.task_key(),
        "algorithm": algorithm,
        "algorithm_class": suite.algorithms[algorithm].class_path,
        "algorithm_args": suite.algorithm_settings(algorithm)[0],
        "reference": suite.reference,
        "seed": seed,
        "spec": run_spec(suite, algorithm, seed),
        "model": str(weights),
        "model_name": suite.model.preset or Path(suite.model.path).name,
        "versions": versions(),
        **origin,
        "group_size": module.group_size,
        "devices": devices,
        "steps": module.rl_step,
        "wall_clock_s": module.wall_clock_s,
        "session": SESSION,  # runs of one invocation share it: their wall-clocks saw the same machine
        "warm_start_s": preparation_s,
        "memory_estimate_mb": memory["total"],
        "trainable_parameters": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "accuracy_before": module.evaluations[0]["accuracy"],
        "accuracy_after": module.evaluations[-1]["accuracy"],
        **module.hyperparameters(),
    }


def warn_if_silent(module, name: str) -> None:
    """Warn when most of a run's updates carried no gradient: it measured little."""
    records = [r for r in module.records if r.get("updates")]
    updates, silent = sum(r["updates"] for r in records), sum(r["zero_grad_updates"] for r in records)
    if updates and silent / updates > 0.5:
        log.warning(
            "%s: %d of its %d updates carried no gradient (every advantage 0: its groups all passed or all "
            "failed): most of this run measured nothing",
            name,
            silent,
            updates,
        )
