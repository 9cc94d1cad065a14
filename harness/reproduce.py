"""Whether runs made here reproduce a published results folder, cell by cell (a suite's algorithm
over its seeds): bit for bit where the starting weights and every record match; consistent within
the training noise the verdicts count where the final held-out accuracies differ by no more than
another trajectory would make them (harness/verdicts.py); or not. `python -m harness reproduce
CONFIG PUBLISHED` reruns the config and writes this report."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl

from harness.leaderboard import markdown
from harness.plan import run_name
from harness.records import MEASURED, Run, load_runs, suite_folders
from harness.verdicts import consistent


def records_digest(run: Run) -> str:
    """sha256 (16 hex digits) of a run's step records but those that measure the machine, and of
    its evaluations: the same whether read from its run folder or from published records."""
    _, steps, evals = run
    h = hashlib.sha256()
    for frame in (steps, evals):
        frame = frame.select(sorted(c for c in frame.columns if not c.startswith(MEASURED)))
        h.update(repr(frame.columns).encode() + repr(frame.rows()).encode())  # repr: NaN reads alike
    return h.hexdigest()[:16]


def by_run(directory: Path) -> dict[tuple[str, str], Run]:
    """Every finished run below a results folder, by (suite, run name)."""
    return {
        (suite.name, run_name(run[0]["algorithm"], run[0]["seed"])): run
        for suite in suite_folders(directory)
        for run in load_runs(suite)
    }


def report(published: Path, here: Path) -> pl.DataFrame:
    """One row a cell of the published folder that `here` reran: its verdict and why."""
    theirs, mine = by_run(published), by_run(here)
    cells: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for suite, name in sorted(theirs.keys() & mine.keys()):
        cells.setdefault((suite, theirs[suite, name][0]["algorithm"]), []).append((suite, name))
    rows = []
    for (suite, algorithm), keys in cells.items():
        old, new = [theirs[k] for k in keys], [mine[k] for k in keys]
        same_start = all(
            a[0].get("starting_weights_digest") == b[0].get("starting_weights_digest") for a, b in zip(old, new)
        )
        same_data = all(a[0].get("task_data_digest") == b[0].get("task_data_digest") for a, b in zip(old, new))
        same_records = all(records_digest(a) == records_digest(b) for a, b in zip(old, new))
        finals = [(b[2]["rewards"][-1].to_list(), a[2]["rewards"][-1].to_list()) for a, b in zip(old, new)]
        check = consistent([m for m, _ in finals], [t for _, t in finals]) if same_data else None
        if same_start and same_data and same_records:
            verdict, why = "bit for bit", "the same starting weights and records"
        elif check is not None and check.p >= 0.05:
            verdict = "consistent within training noise"
            why = f"{'other' if not same_start else 'the same'} starting weights; final accuracy within noise"
        else:
            verdict = "not"
            why = "other held-out problems" if not same_data else "final accuracy beyond the training's noise"
        rows.append(
            {
                "suite": suite,
                "algorithm": algorithm,
                "seeds": len(keys),
                "reproduced": verdict,
                "why": why,
                "acc_before_published": sum(a[0]["accuracy_before"] for a in old) / len(old),
                "acc_before_here": sum(b[0]["accuracy_before"] for b in new) / len(new),
                "acc_after_published": sum(a[0]["accuracy_after"] for a in old) / len(old),
                "acc_after_here": sum(b[0]["accuracy_after"] for b in new) / len(new),
                "p": check.p if check else None,
                "starting_weights": "same" if same_start else "other",
                "records": "same" if same_records else "other",
            }
        )
    return pl.DataFrame(rows)


def write(published: Path, here: Path) -> tuple[pl.DataFrame, str]:
    """The report as a frame and as Markdown, written to `here`/reproduce.md."""
    frame = report(published, here)
    if frame.is_empty():
        raise FileNotFoundError(f"{here}: no run of {published}'s was rerun here")
    text = (
        f"# Reproducing {published}\n\nRerun in {here}. `reproduced`: bit for bit (the same starting weights and "
        "records); consistent within training noise (the final held-out accuracies differ by no more than another "
        "training trajectory makes them: harness.verdicts.consistent, p >= 0.05); or not.\n\n" + markdown(frame)
    )
    (here / "reproduce.md").write_text(text)
    return frame, text
