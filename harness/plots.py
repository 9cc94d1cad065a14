"""Plots of a suite, written next to its leaderboard: curves against step and wall-clock, and
gradient norms with exact zeros marked (the records GRPO loses to saturated groups)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402


def load_runs(suite_dir: Path) -> list[tuple[dict, pl.DataFrame, pl.DataFrame]]:
    runs = []
    for summary in sorted(suite_dir.glob("*/run.json")):
        info = json.loads(summary.read_text())
        runs.append((info, pl.read_parquet(summary.parent / "metrics.parquet"), pl.read_parquet(summary.parent / "eval.parquet")))
    return runs


def plot_suite(suite_dir: Path) -> list[Path]:
    runs = load_runs(suite_dir)
    algorithms = sorted({info["algorithm"] for info, _, _ in runs})
    colour = {a: f"C{i}" for i, a in enumerate(algorithms)}
    written = []

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for info, metrics, evals in runs:
        c, label = colour[info["algorithm"]], f"{info['algorithm']} s{info['seed']}"
        axes[0, 0].plot(metrics["step"], metrics["reward"].rolling_mean(5, min_samples=1), color=c, alpha=0.8, label=label)
        axes[0, 1].plot(metrics["wall_clock_s"], metrics["reward"].rolling_mean(5, min_samples=1), color=c, alpha=0.8, label=label)
        clock = dict(zip(metrics["step"].to_list(), metrics["wall_clock_s"].to_list())) | {0: 0.0}
        axes[1, 0].plot(evals["step"], evals["accuracy"] * 100, "o-", color=c, alpha=0.8, label=label)
        axes[1, 1].plot([clock[s] for s in evals["step"]], evals["accuracy"] * 100, "o-", color=c, alpha=0.8, label=label)
    for ax, (x, y) in zip(axes.flat, [("step", "reward (5-step mean)"), ("wall-clock (s)", "reward (5-step mean)"),
                                     ("step", "held-out accuracy (%)"), ("wall-clock (s)", "held-out accuracy (%)")]):
        ax.set_xlabel(x), ax.set_ylabel(y), ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{suite_dir.name}: training reward and held-out accuracy, by step and by wall-clock")
    fig.tight_layout()
    written.append(save(fig, suite_dir / "curves.png"))

    fig, ax = plt.subplots(figsize=(11, 4))
    for info, metrics, _ in runs:
        c = colour[info["algorithm"]]
        norms = metrics.select("step", pl.col("grad_norms")).explode("grad_norms")
        ax.scatter(norms["step"], norms["grad_norms"], s=6, color=c, alpha=0.5, label=f"{info['algorithm']} s{info['seed']}")
        zeros = norms.filter(pl.col("grad_norms") == 0.0)
        if zeros.height:
            ax.scatter(zeros["step"], zeros["grad_norms"], marker="x", s=30, color=c, label=f"{info['algorithm']} zero ({zeros.height})")
    ax.set_xlabel("step"), ax.set_ylabel("gradient norm before clipping (every update)"), ax.grid(alpha=0.3)
    ax.set_title(f"{suite_dir.name}: gradient-norm records (x = exactly zero)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    written.append(save(fig, suite_dir / "grad_norms.png"))
    return written


def save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path
