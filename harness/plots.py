"""Plots of a suite, written next to its leaderboard: curves against step, wall-clock and rollouts, and
gradient norms with exact zeros marked (the records GRPO loses to saturated groups)."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from scipy import stats  # noqa: E402

from harness.records import Run, write_atomic  # noqa: E402
from rollout.batch import solved  # noqa: E402

STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 3)), "P")]
"""Each algorithm's line style and marker besides its colour: curves that coincide (two algorithms
that learned nothing) still show as two."""


def plot_suite(suite_dir: Path, runs: list[Run]) -> list[Path]:
    algorithms = sorted({info["algorithm"] for info, _, _ in runs})
    colour = {a: f"C{i}" for i, a in enumerate(algorithms)}
    style = {a: STYLES[i % len(STYLES)] for i, a in enumerate(algorithms)}
    written = []

    # Columns: the same curves against step, wall-clock and rollouts spent (the paper's claim is
    # "as good, sooner, with fewer rollouts"; each column reads one part of it).
    axes_x = [("step", "step"), ("wall_clock_s", "wall-clock (s)"), ("rollouts_total", "rollouts (cumulative)")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    for algorithm in algorithms:
        c = colour[algorithm]
        mine = [(metrics, evals) for info, metrics, evals in runs if info["algorithm"] == algorithm]
        reward = [m["reward"].rolling_mean(10, min_samples=1).to_list() for m, _ in mine]
        accuracy = [(e["accuracy"] * 100).to_list() for _, e in mine]
        same_shape = len({len(r) for r in reward}) == 1 and len({len(a) for a in accuracy}) == 1
        band = accuracy_band([e for _, e in mine]) if same_shape else None
        for col, (x, _) in enumerate(axes_x):
            xs = [m[x].to_list() for m, _ in mine]
            eval_xs = [
                [dict(zip(m["step"], m[x])).get(s, 0.0) for s in e["step"]] for m, e in mine
            ]  # step 0: nothing spent
            for r, a, x_r, x_a in zip(reward, accuracy, xs, eval_xs):  # seeds, faint
                axes[0, col].plot(x_r, r, color=c, alpha=0.2, lw=0.8)
                axes[1, col].plot(x_a, a, color=c, alpha=0.25, lw=0.8)
            if same_shape:  # mean over seeds, bold
                label = f"{algorithm} (mean of {len(mine)})"
                line, marker = style[algorithm]
                axes[0, col].plot(mean(xs), mean(reward), color=c, lw=2, ls=line, label=label)
                axes[1, col].plot(mean(eval_xs), mean(accuracy), color=c, lw=2, ls=line, marker=marker, label=label)
                if band:  # the held-out evaluation's own 95% interval
                    axes[1, col].fill_between(mean(eval_xs), *band, color=c, alpha=0.12, lw=0)
    for col, (_, x_label) in enumerate(axes_x):
        for row, y_label in enumerate(["training reward (10-step mean)", "held-out accuracy, greedy (%)"]):
            axes[row, col].set_xlabel(x_label), axes[row, col].set_ylabel(y_label), axes[row, col].grid(alpha=0.3)
            if col != 1:  # steps and rollouts are counts
                axes[row, col].xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    handles, labels = axes[1, 0].get_legend_handles_labels()
    handles.append(Patch(color="grey", alpha=0.25, lw=0))
    labels.append("shaded: held-out accuracy's 95% interval (exact binomial, problems pooled over seeds)")
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), fontsize=8, frameon=False)
    fig.suptitle(f"{suite_dir.name}: bold = mean over seeds, faint = each seed")
    fig.tight_layout(rect=(0, 0.02 + 0.03 * ((len(labels) + 2) // 3), 1, 1))
    written.append(save(fig, suite_dir / "curves.png"))

    fig, ax = plt.subplots(figsize=(11, 4))
    for info, metrics, _ in runs:
        c = colour[info["algorithm"]]
        norms = metrics.select("step", pl.col("grad_norms")).explode("grad_norms")
        ax.scatter(
            norms["step"],
            norms["grad_norms"],
            s=8,
            color=c,
            marker=style[info["algorithm"]][1],
            alpha=0.5,
            label=f"{info['algorithm']} s{info['seed']}",
        )
        zeros = norms.filter(pl.col("grad_norms") == 0.0)
        if zeros.height:
            ax.scatter(
                zeros["step"],
                zeros["grad_norms"],
                marker="x",
                s=30,
                color=c,
                label=f"{info['algorithm']} zero ({zeros.height})",
            )
    ax.set_xlabel("step"), ax.set_ylabel("gradient norm before clipping (every update)"), ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{suite_dir.name}: gradient-norm records (x = exactly zero)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    written.append(save(fig, suite_dir / "grad_norms.png"))
    if any("credit/blame_lift" in metrics.columns for _, metrics, _ in runs):
        written.append(fidelity_plot(suite_dir, runs, colour, style))
    paired = paired_plot(suite_dir, runs, colour, style)
    if paired:
        written.append(paired)
    return written


def paired_differences(runs: list[Run], algorithm: str, reference: str) -> list[tuple[int, float, float]]:
    """(step, mean, half-width of its 95% interval) of the held-out accuracy of `algorithm` less
    the reference's, item by item on the same problems of the same seed, pooled over seeds, at
    each step both evaluated: what the leaderboard's paired test reads, over steps."""
    evals = {(info["algorithm"], info["seed"]): e for info, _, e in runs if "rewards" in e.columns}
    out = []
    steps = sorted({s for (a, _), e in evals.items() if a == algorithm for s in e["step"].to_list()})
    for step in steps:
        differences = []
        for (a, seed), mine in evals.items():
            theirs = evals.get((reference, seed))
            if a != algorithm or theirs is None:
                continue
            x, y = mine.filter(pl.col("step") == step)["rewards"], theirs.filter(pl.col("step") == step)["rewards"]
            if len(x) and len(y) and len(x[0]) == len(y[0]):
                differences += [float(solved(p)) - float(solved(q)) for p, q in zip(x[0], y[0])]
        if len(differences) > 1:
            d = np.array(differences)
            out.append((step, float(d.mean()), float(1.96 * d.std(ddof=1) / np.sqrt(len(d)))))
    return out


def paired_plot(suite_dir: Path, runs: list[Run], colour: dict, style: dict) -> Path | None:
    """Each algorithm's held-out accuracy less the reference's on the same problems, over steps,
    with a 95% interval (a normal one on the item differences, problems pooled over seeds): where
    curves of accuracy overlap, this is the difference the paired test judges."""
    reference = runs[0][0].get("reference", "grpo")
    others = [a for a in colour if a != reference]
    curves = {a: paired_differences(runs, a, reference) for a in others}
    if not any(curves.values()):
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for algorithm, points in curves.items():
        if not points:
            continue
        steps, means, halves = (np.array(v) for v in zip(*points))
        line, marker = style[algorithm]
        ax.plot(steps, means * 100, color=colour[algorithm], ls=line, marker=marker, label=algorithm)
        ax.fill_between(
            steps, (means - halves) * 100, (means + halves) * 100, color=colour[algorithm], alpha=0.15, lw=0
        )
    ax.axhline(0.0, color="grey", lw=1, ls=":")
    ax.set_xlabel("step"), ax.set_ylabel(f"held-out accuracy - {reference}'s (points)"), ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8)
    ax.set_title(
        f"{suite_dir.name}: paired difference on the same problems, 95% interval (problems pooled over seeds)",
        fontsize=9,
    )
    fig.tight_layout()
    return save(fig, suite_dir / "paired.png")


def fidelity_plot(suite_dir: Path, runs: list[Run], colour: dict, style: dict) -> Path:
    """Credit fidelity over steps (docs/results.md): the lift of blame on failures' first wrong
    step and of praise on successes' wrong steps, each a 10-step mean of the steps that recorded
    it; 1 is uniform credit."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    figures = [
        ("credit/blame_lift", "blame on the error, lift over uniform"),
        ("credit/reinforced_lift", "praise on a success's error, lift over uniform"),
    ]
    for ax, (column, title) in zip(axes, figures):
        for algorithm in colour:
            mine = [m for info, m, _ in runs if info["algorithm"] == algorithm and column in m.columns]
            curves = [
                m[column].fill_nan(None).rolling_mean(10, min_samples=1).fill_null(np.nan).to_numpy() for m in mine
            ]
            for curve in curves:
                ax.plot(range(1, len(curve) + 1), curve, color=colour[algorithm], alpha=0.25, lw=0.8)
            if curves and len({len(c) for c in curves}) == 1:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # a step no seed recorded: NaN
                    means = np.nanmean(np.stack(curves), axis=0)
                ax.plot(
                    range(1, len(means) + 1),
                    means,
                    color=colour[algorithm],
                    lw=2,
                    ls=style[algorithm][0],
                    label=f"{algorithm} (mean of {len(curves)})",
                )
        ax.axhline(1.0, color="grey", lw=1, ls=":")
        (
            ax.set_title(title, fontsize=10),
            ax.set_xlabel("step"),
            ax.set_ylabel("lift (10-step mean)"),
            ax.grid(alpha=0.3),
        )
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{suite_dir.name}: where the credit lands (1 = uniform, as GRPO's)")
    fig.tight_layout()
    return save(fig, suite_dir / "fidelity.png")


def accuracy_band(evals: list[pl.DataFrame]) -> tuple[list[float], list[float]] | None:
    """(low, high) in % at each evaluation: the exact binomial 95% interval of the held-out
    problems pooled over seeds, or None where runs recorded no per-problem rewards (or evaluated
    on none)."""
    if not all("rewards" in e.columns for e in evals) or not any(len(r) for e in evals for r in e["rewards"]):
        return None
    low, high = [], []
    for at in zip(*(e["rewards"].to_list() for e in evals)):
        solved, trials = round(sum(sum(r) for r in at)), sum(len(r) for r in at)
        interval = stats.binomtest(solved, trials).proportion_ci(0.95, method="exact")
        low.append(100 * interval.low)
        high.append(100 * interval.high)
    return low, high


def across_tasks_plot(table: pl.DataFrame, reference: str, path: Path) -> Path:
    """Each algorithm's IQM score and P(improvement over `reference`), with their 95% intervals."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.45 * table.height + 1.5), sharey=True)
    names = table["algorithm"].to_list()[::-1]
    rows = list(table.iter_rows(named=True))[::-1]
    y = range(len(rows))
    left.errorbar(
        [r["iqm"] for r in rows],
        y,
        xerr=[[r["iqm"] - r["iqm_low"] for r in rows], [r["iqm_high"] - r["iqm"] for r in rows]],
        fmt="o",
        capsize=3,
    )
    left.axvline(0, color="grey", lw=0.8)
    left.set(yticks=list(y), yticklabels=names, xlabel="IQM of (after - before) / (1 - before), 95% CI")
    key = f"p_improvement_over_{reference}"
    shown = [(i, r) for i, r in enumerate(rows) if r[key] is not None]
    right.errorbar(
        [r[key] for _, r in shown],
        [i for i, _ in shown],
        xerr=[[r[key] - r["p_low"] for _, r in shown], [r["p_high"] - r[key] for _, r in shown]],
        fmt="o",
        capsize=3,
    )
    right.axvline(0.5, color="grey", lw=0.8)
    right.set(xlim=(0, 1), xlabel=f"P(improvement over {reference}), 95% CI")
    fig.tight_layout()
    return save(fig, path)


def mean(series: list[list[float]]) -> list[float]:
    return [sum(column) / len(column) for column in zip(*series)]


def save(fig, path: Path) -> Path:
    write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path
