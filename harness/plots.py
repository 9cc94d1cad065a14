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
    for algorithm in algorithms:
        c = colour[algorithm]
        mine = [(metrics, evals) for info, metrics, evals in runs if info["algorithm"] == algorithm]
        reward = [m["reward"].rolling_mean(10, min_samples=1) for m, _ in mine]
        clock = [m["wall_clock_s"] for m, _ in mine]
        accuracy = [e["accuracy"] * 100 for _, e in mine]
        eval_clock = [[dict(zip(m["step"], m["wall_clock_s"])).get(s, 0.0) for s in e["step"]] for m, e in mine]
        for r, t, a, et, (m, e) in zip(reward, clock, accuracy, eval_clock, mine):  # seeds, faint
            axes[0, 0].plot(m["step"], r, color=c, alpha=0.2, lw=0.8)
            axes[0, 1].plot(t, r, color=c, alpha=0.2, lw=0.8)
            axes[1, 0].plot(e["step"], a, color=c, alpha=0.25, lw=0.8)
            axes[1, 1].plot(et, a, color=c, alpha=0.25, lw=0.8)
        label = f"{algorithm} (mean of {len(mine)})"
        if len({len(r) for r in reward}) == 1 and len({len(a) for a in accuracy}) == 1:  # mean over seeds, bold
            axes[0, 0].plot(mine[0][0]["step"], sum(reward) / len(reward), color=c, lw=2, label=label)
            axes[0, 1].plot(sum(clock) / len(clock), sum(reward) / len(reward), color=c, lw=2, label=label)
            axes[1, 0].plot(mine[0][1]["step"], sum(accuracy) / len(accuracy), "o-", color=c, lw=2, label=label)
            mean_clock = [sum(col) / len(col) for col in zip(*eval_clock)]
            axes[1, 1].plot(mean_clock, sum(accuracy) / len(accuracy), "o-", color=c, lw=2, label=label)
    for ax, (x, y) in zip(axes.flat, [("step", "training reward (10-step mean)"), ("wall-clock (s)", "training reward (10-step mean)"),
                                     ("step", "held-out accuracy, greedy (%)"), ("wall-clock (s)", "held-out accuracy, greedy (%)")]):
        ax.set_xlabel(x), ax.set_ylabel(y), ax.grid(alpha=0.3)
    axes[1, 0].legend(fontsize=8)
    fig.suptitle(f"{suite_dir.name}: bold = mean over seeds, faint = each seed")
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
