"""Leaderboards from run records: one row per (task, algorithm) aggregated over seeds, paired
against GRPO on the same seeds, as parquet + markdown, with plots beside them; and publishing:
a working folder's leaderboards, plots and compact records copied to where they are kept
(results/ in git)."""

from __future__ import annotations

import ctypes
import errno
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from algorithms.base import STAGES
from harness.locks import exclusive
from harness.provenance import check_same_start, describe, environment_key
from harness.records import (
    DIR_MODE,
    Run,
    added,
    fsync,
    load_runs,
    name_of,
    publish_completions,
    publish_records,
    replaced,
    suite_folders,
    write_atomic,
    write_parquet,
)
from harness.verdicts import ONE_SEED, compare


def ci95(values: pl.Series) -> list[float] | None:
    """The 95% t-interval of the mean, [low, high] (None with fewer than two values)."""
    n = len(values)
    if n < 2:
        return None
    half = float(stats.t.ppf(0.975, n - 1)) * float(values.std()) / math.sqrt(n)
    return [float(values.mean()) - half, float(values.mean()) + half]


def binomial_ci95(successes: float, trials: int) -> list[float] | None:
    """The exact (Clopper-Pearson) 95% interval of a success rate, [low, high] (None without
    trials); rewards in [0, 1] count by their sum, rounded."""
    if not trials:
        return None
    interval = stats.binomtest(round(successes), trials).proportion_ci(0.95, method="exact")
    return [float(interval.low), float(interval.high)]


def step_interval(g: pl.DataFrame, resamples: int = 2000) -> list[float] | None:
    """A 95% interval of one pair's speedup from its steps: the steps (the same prompts in both
    runs) resampled with replacement, the ratio of the two runs' summed step times each time."""
    if g.height != 1 or g["reference_step_s"][0] is None or g["algorithm"][0] == g["reference"][0]:
        return None
    mine, theirs = np.array(g["step_s"][0]), np.array(g["reference_step_s"][0])
    if len(mine) != len(theirs) or len(mine) < 2:
        return None
    picks = np.random.default_rng(0).integers(0, len(mine), (resamples, len(mine)))
    ratios = theirs[picks].sum(1) / mine[picks].sum(1)
    return [float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))]


PROTOCOL = ("schedule", "sampling", "optim", "update", "evaluation")
SHOWN = {"schedule.prompts_per_step", "update.minibatches", "update.epochs", "optim.lr"}  # columns of their own


def protocol(info: dict) -> dict[str, str]:
    """A run's settings of the shared protocol (not the algorithm's own arguments), by dotted name."""
    return {f"{group}.{key}": str(value) for group in PROTOCOL for key, value in (info.get(group) or {}).items()}


def run_table(runs: list[Run]) -> pl.DataFrame:
    """One row per finished run of a suite."""
    rows = []
    # sampled pass@k at the last evaluation, where a run measured it (`evaluation.samples`)
    sampled = sorted({c for _, _, evals in runs for c in evals.columns if c.startswith("pass@")})
    for info, metrics, evals in runs:
        records = metrics["updates"].sum()
        # each held-out problem's reward at the last evaluation (runs recorded before these were
        # kept have none: their accuracy carries no interval)
        last_rewards = evals["rewards"][-1].to_list() if "rewards" in evals.columns else None
        first_rewards = evals["rewards"][0].to_list() if "rewards" in evals.columns else None
        rows.append(
            {
                "suite": info["suite"],
                "task": info["task"],
                "model": info.get("model_name") or model_name(info["model"]),
                "algorithm": info["algorithm"],
                "reference": info["reference"],
                "seed": info["seed"],
                "steps": metrics.height,
                "prompts_per_step": info["schedule"]["prompts_per_step"],
                "updates_per_step": info["update"]["minibatches"] * info["update"]["epochs"],
                "prompts_per_update": info["schedule"]["prompts_per_step"] // info["update"]["minibatches"],
                "lr": info["optim"]["lr"],
                "protocol": protocol(info),
                "group_size": info["group_size"],
                "rollouts": int(metrics["rollouts"].sum()),
                "wall_clock_s": float(metrics["wall_clock_s"].max()),
                # each step's own time, for a speedup's interval at one seed
                "step_s": metrics["wall_clock_s"].diff().fill_null(metrics["wall_clock_s"][0]).to_list(),
                "load": float(metrics["machine/load_per_core"].mean())
                if "machine/load_per_core" in metrics.columns
                else None,
                "session": info.get("session"),
                "accuracy_before": info["accuracy_before"],
                "accuracy_after": info["accuracy_after"],
                "zero_grad_fraction": float(metrics["zero_grad_updates"].sum() / records) if records else None,
                "grad_norm_records": int(records),
                # where the clip acted (TRL's clip_ratio/...): 0 throughout is a clip that never bound
                **{
                    f"clip_ratio_{k}": float(metrics[f"clip_ratio/{k}_mean"].mean())
                    for k in ("low", "high", "region")
                    if f"clip_ratio/{k}_mean" in metrics.columns
                },
                # dynamic sampling: the share of steps that trained on fewer groups than asked
                "short_step_share": float((metrics["dynamic_sampling/short"] > 0).mean())
                if "dynamic_sampling/short" in metrics.columns
                else None,
                "tokens_generated": int(metrics["tokens/generated"].sum()),
                # rollouts (left out of their update) and held-out items the verifier could not judge;
                # None for runs recorded before it was counted (their verifier's failures read as 0)
                "unjudged": int(metrics["verify/unjudged"].sum() + evals["unjudged"].sum())
                if "verify/unjudged" in metrics.columns and "unjudged" in evals.columns
                else None,
                "peak_memory_mb": float(metrics["memory/peak_mb"].max())
                if "memory/peak_mb" in metrics.columns
                else None,
                "memory_estimate_mb": info.get("memory_estimate_mb"),
                "reward_mean": float(metrics["reward"].mean()),
                # credit fidelity, the mean over the steps that had it (only where the task locates errors)
                **step_means(metrics, FIDELITY, prefix="credit/"),
                "final_rewards": last_rewards,
                "first_rewards": first_rewards,
                **{f"{c}_after": evals[c][-1] if c in evals.columns else None for c in sampled},
                **{f"{stage}_s": float(metrics[f"timing_s/{stage}"].sum()) for stage in STAGES},
            }
        )
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def model_name(weights: str) -> str:
    """Runs written before run.json named the model: the tiny preset's cache entry, or a path."""
    return "tiny" if "/policies/" in weights else Path(weights).name


def aggregate(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean over seeds with 95% intervals ([low, high]); speedup = the suite's reference
    algorithm's wall-clock / the algorithm's on the same seed (a pair), averaged over the seeds
    both finished. The final held-out accuracy has an exact binomial interval (its problems pooled
    over seeds), and each algorithm is tested against the reference on the same problems and seeds
    (`harness.verdicts.compare`: with several seeds the training's noise counted, with one the
    problems' only, and said so): `vs_reference` says whether its final accuracy is higher or lower
    beyond noise (p < 0.05). `acc_gain_p` tests the algorithm's own end against its start the same
    way."""
    for column in ("step_s", "load", "session"):  # tables of runs made before these were recorded
        if column not in runs.columns:
            runs = runs.with_columns(pl.lit(None).alias(column))
    reference = runs.filter(pl.col("algorithm") == pl.col("reference")).select(
        "suite",
        "task",
        "seed",
        pl.col("wall_clock_s").alias("reference_s"),
        pl.col("final_rewards").alias("reference_rewards"),
        pl.col("step_s").alias("reference_step_s"),
        pl.col("session").alias("reference_session"),
    )
    paired = runs.join(reference, on=["suite", "task", "seed"], how="left").with_columns(
        (pl.col("reference_s") / pl.col("wall_clock_s")).alias("speedup")
    )
    # settings of the protocol that differ between the algorithms of a suite, shown on each row
    settings = {(r["suite"], r["algorithm"]): r["protocol"] for r in runs.iter_rows(named=True)}
    by_suite: dict[str, list[dict[str, str]]] = {}
    for (suite, _), values in settings.items():
        by_suite.setdefault(suite, []).append(values)
    differs = {
        suite: sorted(k for k in set().union(*mine) - SHOWN if len({s.get(k) for s in mine}) > 1)
        for suite, mine in by_suite.items()
    }
    rows = []
    for (suite, task, model, algorithm), g in paired.group_by(
        ["suite", "task", "model", "algorithm"], maintain_order=True
    ):
        gain = g["accuracy_after"] - g["accuracy_before"]
        speedups = g["speedup"].drop_nulls()
        finals = g["final_rewards"].to_list()
        items = None if any(r is None for r in finals) else sum(len(r) for r in finals)
        pairs = [(m, b) for m, b in zip(finals, g["reference_rewards"].to_list()) if m is not None and b is not None]
        own = [(m, s) for m, s in zip(finals, g["first_rewards"].to_list()) if m is not None and s is not None]
        compared = bool(pairs) and algorithm != g["reference"][0]
        versus = compare([m for m, _ in pairs], [b for _, b in pairs]) if compared else None
        gained = compare([m for m, _ in own], [s for _, s in own]) if own else None
        rows.append(
            {
                "suite": suite,
                "task": task,
                "model": model,
                "algorithm": algorithm,
                "seeds": g.height,
                "steps": int(g["steps"].max()),
                "prompts/step": int(g["prompts_per_step"][0]),
                "prompts/update": int(g["prompts_per_update"][0]),
                "updates/step": int(g["updates_per_step"][0]),
                "lr": float(g["lr"][0]),
                "own_settings": ", ".join(f"{k}={settings[suite, algorithm].get(k)}" for k in differs[suite]) or None,
                "group_size": int(g["group_size"][0]),
                "rollouts": int(g["rollouts"].mean()),
                "wall_clock_s": float(g["wall_clock_s"].mean()),
                "wall_clock_ci95": ci95(g["wall_clock_s"]),
                "reference": g["reference"][0],
                "speedup": float(speedups.mean()) if len(speedups) else None,
                # over the seeds' own pairs; at one seed, over its steps (`step_interval`)
                "speedup_ci95": ci95(speedups) if len(speedups) > 1 else step_interval(g),
                "load": float(g["load"].mean()) if g["load"].null_count() < g.height else None,
                # whether each pair's two runs ran in one invocation (None: runs recorded before it was kept)
                "sessions": None
                if None in g["session"].to_list() + g["reference_session"].to_list()
                else "one"
                if all(a == b for a, b in zip(g["session"], g["reference_session"]))
                else "several",
                "acc_before": float(g["accuracy_before"].mean()),
                "acc_after": float(g["accuracy_after"].mean()),
                "acc_after_ci95": binomial_ci95(sum(sum(r) for r in finals), items) if items else None,
                "acc_gain": float(gain.mean()),
                "acc_gain_ci95": gained.ci95 if gained else ci95(gain),
                "acc_gain_p": gained.p if gained else None,
                "acc_gain_seeds_needed": gained.seeds_needed if gained else None,
                "noise_counted": (versus or gained).covers if versus or gained else None,
                "vs_reference_p": versus.p if versus else None,
                "vs_reference": versus.verdict() if versus else None,
                "vs_reference_ci95": versus.ci95 if versus else None,
                "detectable_diff": versus.detectable if versus else None,
                "vs_reference_seeds_needed": versus.seeds_needed if versus else None,
                **{c: g[c].mean() for c in g.columns if c.startswith("pass@")},
                "zero_grad_fraction": float(g["zero_grad_fraction"].mean()),
                **{c: float(g[c].mean()) for c in CLIPS if c in g.columns and g[c].null_count() < g.height},
                "tokens_generated": int(g["tokens_generated"].mean()),
                "unjudged": int(g["unjudged"].sum())
                if "unjudged" in g.columns and g["unjudged"].null_count() < g.height
                else None,
                "peak_memory_mb": float(g["peak_memory_mb"].mean())
                if g["peak_memory_mb"].null_count() < g.height
                else None,
                "memory_estimate_mb": float(g["memory_estimate_mb"].mean())
                if "memory_estimate_mb" in g.columns and g["memory_estimate_mb"].null_count() < g.height
                else None,
                **{c: float(g[c].mean()) for c in FIDELITY if c in g.columns and g[c].null_count() < g.height},
                # where the wall-clock goes, as shares of it (the rest is recording and the loop)
                **{f"{stage}_share": float((g[f"{stage}_s"] / g["wall_clock_s"]).mean()) for stage in STAGES},
            }
        )
    return pl.DataFrame(rows)


def step_means(metrics: pl.DataFrame, columns: tuple[str, ...], prefix: str) -> dict[str, float]:
    """Each column's mean over the steps that recorded a number for it (NaN: none); a column no
    step recorded is left out."""
    means = {}
    for column in columns:
        if prefix + column in metrics.columns:
            mean = metrics[prefix + column].fill_nan(None).mean()
            if mean is not None:
                means[column] = float(mean)
    return means


CLIPS = ("clip_ratio_low", "clip_ratio_high", "clip_ratio_region", "short_step_share")
"""How often an algorithm's clips bound, and DAPO's short steps: a part of a recipe that never acts shows as 0."""
FIDELITY = ("blame_on_error", "blame_lift", "reinforced_error", "reinforced_lift")
"""Credit fidelity's columns (algorithms/fidelity.py; docs/results.md), for tasks that locate errors."""


KEY_COLUMNS = (
    "suite", "algorithm", "seeds", "noise_counted", "acc_before", "acc_after", "acc_gain", "acc_gain_p",
    "acc_gain_seeds_needed", "vs_reference", "vs_reference_p", "detectable_diff", "vs_reference_seeds_needed",
    "speedup", "rollouts", "zero_grad_fraction",
)  # fmt: skip
"""The leaderboard's columns a terminal shows (docs/results.md defines them; the files hold all)."""


def compact(board: pl.DataFrame) -> str:
    """The key columns of a leaderboard as a Markdown table, for the terminal."""
    return markdown(board.select([c for c in KEY_COLUMNS if c in board.columns]))


def markdown(frame: pl.DataFrame) -> str:
    def cell(value) -> str:
        if value is None:
            return "–"
        if isinstance(value, list):  # an interval, [low, high]
            return "[" + ", ".join(cell(v) for v in value) + "]"
        if isinstance(value, float):
            if 0 < abs(value) < 1e-3:  # learning rates
                return f"{value:.1e}"
            return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([header, rule, *body]) + "\n"


def publish(directory: Path, at: Path | None = None) -> pl.DataFrame:
    """Write DIR/leaderboard.{parquet,md} (and plots for a suite folder). DIR is either one
    suite's folder (runs below it, or its published records) or a folder of suites. Processes
    that finish runs of the same folder at once publish one after another (a file lock), so the
    last one's tables hold every run. `at`: where DIR will stand once published, when it is
    staged elsewhere first (`publish_to`): the links are written from there."""
    directory = Path(directory)
    suite_dirs = suite_folders(directory)
    if not suite_dirs:
        raise FileNotFoundError(f"{directory}: no finished runs (*/run.json) to publish")
    with exclusive(directory / ".publish.lock"):
        suites = {d: load_runs(d) for d in suite_dirs}
        notes = ""
        for suite_dir, runs in suites.items():
            check_same_start([(name_of(run), run[0]) for run in runs], f"suite {suite_dir.name}")
            notes += environments_note(suite_dir.name, runs)
        tables = [t for runs in suites.values() if (t := run_table(runs)).height]
        board = aggregate(pl.concat(tables, how="diagonal_relaxed"))
        write_parquet(board, directory / "leaderboard.parquet")
        shares = [c for c in board.columns if c.endswith("_share")]
        text = (
            f"# Leaderboard: {directory.name}\n\n{markdown(board.drop(shares))}\n"
            f"Every column is defined in {columns_link(at or directory)}.\n\n{row_notes(board)}"
            f"## Where the wall-clock goes (share of each run's training time, mean over seeds)\n\n"
            f"{markdown(board.select('suite', 'task', 'algorithm', 'wall_clock_s', *shares))}"
            + (f"\n## Environments\n\n{notes}" if notes else "")
        )
        if suite_dirs == [directory]:
            from harness.plots import plot_suite

            for image in plot_suite(directory, suites[directory]):
                text += f"\n![{image.stem}]({image.name})\n"
        write_atomic(directory / "leaderboard.md", lambda tmp: tmp.write_text(text))
    return board


DEFINITIONS = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def columns_link(directory: Path) -> str:
    """A link to the columns' definitions (docs/results.md) from a leaderboard in `directory`:
    relative inside the repository, by the repository's path otherwise."""
    here = Path(directory).resolve()
    if not here.is_relative_to(DEFINITIONS.parents[1]):
        return f"docs/results.md of the harness ({DEFINITIONS})"
    return f"[docs/results.md]({os.path.relpath(DEFINITIONS, here)}#the-leaderboards-columns)"


def row_notes(board: pl.DataFrame) -> str:
    """A line for each row whose held-out accuracy started at 0 or 1 (from there no gain, or no
    loss, can show, whatever the algorithm does), for each speedup whose runs ran in different
    invocations of the harness, and one where a verdict is of one seed."""
    lines = [
        f"- {row['suite']} / {row['algorithm']}: held-out accuracy {row['acc_before']:.0%} at the start: "
        + (
            "nothing solved, so it cannot lose and gains need some problems solved first"
            if row["acc_before"] == 0
            else "everything solved, so it cannot gain"
        )
        + "; a comparison here tells little.\n"
        for row in board.iter_rows(named=True)
        if row.get("acc_before") in (0.0, 1.0)
    ]
    lines += [
        f"- {row['suite']} / {row['algorithm']}: its speedup pairs runs of different invocations, which may have "
        f"run under other loads (`load`: {row['load']:.2f} a core over its runs, on average).\n"
        if row.get("load") is not None
        else f"- {row['suite']} / {row['algorithm']}: its speedup pairs runs of different invocations.\n"
        for row in board.iter_rows(named=True)
        if row.get("sessions") == "several" and row["algorithm"] != row["reference"]
    ]
    if board.height and "blame_lift" not in board.columns:
        lines.append(
            "- No credit-fidelity columns (`blame_on_error`, `blame_lift`, ...): these tasks do not locate a failed "
            "rollout's first error (`Task.error_spans`), so there is no error for credit to land on.\n"
        )
    if any(row.get("noise_counted") == ONE_SEED for row in board.iter_rows(named=True)):
        lines.append(
            "- A verdict marked (this seed) counts which held-out problems were drawn, not how training varies: "
            "another seed, or another machine's rounding, is another trajectory. `*_seeds_needed`: how many seeds "
            "a verdict on the algorithm would need at this difference, were the seeds to spread as the studies' do.\n"
        )
    return "".join(lines) + ("\n" if lines else "")


def publish_to(directory: Path, out: Path, add: bool = False) -> pl.DataFrame:
    """Copy the finished runs of DIR's suites to OUT as compact records (replacing what OUT held
    of those suites, or with `add`, adding to it), with a sample of the rollouts they kept (for
    the page, harness/report.py), and publish OUT from those records alone: what
    git keeps of a benchmark, and the proof that it is enough to publish again. DIR is a folder
    of suites or one suite; nothing is written into it.

    A publication is whole or absent: OUT is staged beside itself (a copy of what it holds, by
    hard links, then the new records, tables and plots) and swapped in by one rename, under a
    lock beside OUT that publishers of one OUT take in turn (two `--add` at once keep both
    runs). An interruption at any point leaves OUT as it was or as the new publication."""
    directory, out = Path(directory), Path(out)
    if out.is_symlink():
        out = out.resolve()
    suites = suite_folders(directory)
    if not suites:
        raise FileNotFoundError(f"{directory}: no finished runs (*/run.json) to publish")
    out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(out.parent / f".{out.name}.publish.lock"):
        recover(out)
        box = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.publishing-"))
        try:
            staged = box / out.name  # its own name: tables and plots are titled by it
            if out.is_dir():
                shutil.copytree(out, staged, symlinks=True, copy_function=link_or_copy)
            else:
                staged.mkdir()
                os.chmod(staged, DIR_MODE)
            whole = suites == [directory]
            for suite_dir in suites:
                target = staged if whole else staged / suite_dir.name
                runs = load_runs(suite_dir)
                if add:
                    published = load_runs(target)
                    if gone := replaced(runs, published):
                        shown = out if whole else out / suite_dir.name
                        print(f"--add: {shown}: replacing the published {', '.join(gone)} with the runs of {suite_dir}")
                    runs = added(runs, published)
                publish_records(runs, target)
                publish_completions(suite_dir, target, runs, add=add)
                if not whole:
                    publish(target, at=out / suite_dir.name)
            board = publish(staged, at=out)
            swap_in(staged, out)
        finally:
            shutil.rmtree(box, ignore_errors=True)
    return board


def link_or_copy(source: str, target: str) -> None:
    """A hard link where the file system has them (every write of a publication replaces a file,
    none writes into one, so the published files are never changed through their links)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux's renameat2 with RENAME_EXCHANGE); False where this system
    or file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def swap_in(staged: Path, out: Path) -> None:
    """`staged` becomes `out` in one rename; what `out` held goes to `staged`'s place. Where the
    system cannot swap two folders in one step, two renames: the old folder is kept beside as
    `.OUT.previous` between them, and `recover` puts it back if the second never happened."""
    if not out.exists():
        os.rename(staged, out)
    elif not exchange(staged, out):
        previous = out.with_name(f".{out.name}.previous")
        shutil.rmtree(previous, ignore_errors=True)
        os.rename(out, previous)
        os.rename(staged, out)
        shutil.rmtree(previous, ignore_errors=True)
    fsync(out.parent)


def recover(out: Path) -> None:
    """What an interrupted publication left beside OUT, cleared (with the publish lock held): its
    staging folders, and the previous publication put back where the swap stopped between its
    two renames."""
    previous = out.with_name(f".{out.name}.previous")
    if previous.is_dir():
        if out.exists():
            shutil.rmtree(previous)
        else:
            os.rename(previous, out)
    for left in out.parent.glob(f".{out.name}.publishing-*"):
        shutil.rmtree(left, ignore_errors=True)


def environments_note(suite: str, runs: list[Run]) -> str:
    """A line for each environment a suite's runs come from, when there is more than one: their
    records agree bit for bit only within one (harness/provenance.py), so wall-clocks and numbers
    across them compare as runs of different machines do. Empty for one environment."""
    groups: dict[tuple, list[str]] = {}
    described: dict[tuple, str] = {}
    for run in runs:
        info = run[0]
        key = environment_key(info) if "environment" in info else ("unrecorded",)
        groups.setdefault(key, []).append(name_of(run))
        described[key] = describe(info) if "environment" in info else "not recorded (runs made before it was kept)"
    if len(groups) < 2:
        return ""
    print(f"warning: suite {suite}: its runs come from {len(groups)} environments (leaderboard.md lists them)")
    return (
        f"Suite {suite}'s runs come from {len(groups)} environments:\n\n"
        + "".join(f"- {described[key]}: {', '.join(names)}\n" for key, names in groups.items())
        + "\n"
    )


START, END = "<!-- leaderboard:start -->", "<!-- leaderboard:end -->"


def paste_into(readme: Path, board: pl.DataFrame, directory: Path) -> None:
    """Replace what stands between the markers with the leaderboard's key columns, a link to
    every column (DIR/leaderboard.md) and DIR's plots, all linked relative to the README."""
    text = readme.read_text()
    if START not in text or END not in text:
        raise FileNotFoundError(f"{readme}: no {START} ... {END} markers")
    relative = os.path.relpath(directory, readme.parent)
    table = (
        f"### Leaderboard: {Path(directory).name}\n\n{compact(board)}\n"
        f"Every column, defined in docs/results.md: [{relative}/leaderboard.md]({relative}/leaderboard.md).\n"
        + "".join(f"\n![{image.stem}]({relative}/{image.name})\n" for image in sorted(Path(directory).glob("*.png")))
    )
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    write_atomic(readme, lambda tmp: tmp.write_text(f"{head}{START}\n{table}\n{END}{tail}"))
