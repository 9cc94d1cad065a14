"""`python -m harness show RUN [--step N] [--held-out] [--limit K]`: what a run generated, to read
before trusting a curve: a step's kept rollouts (`trainer.completions` of them) with their
rewards, the verifier's feedback and each token's credit, or an evaluation's held-out completions."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def show(run_dir: Path, step: int | None = None, held_out: bool = False, limit: int = 8) -> str:
    """The text `show` prints; FileNotFoundError or ValueError (one line) when there is nothing to show."""
    name = "eval_completions.parquet" if held_out else "completions.parquet"
    path = run_dir / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file (a run keeps its completions from its first checkpoint on"
            + ("" if held_out else "; trainer.completions: 0 keeps none")
            + ")"
        )
    rows = pl.read_parquet(path)
    steps = sorted(set(rows["step"].to_list()))
    chosen = steps[-1] if step is None else step
    if chosen not in steps:
        raise ValueError(f"--step: {chosen} has no completions here (steps: {_ranges(steps)})")
    picked = rows.filter(pl.col("step") == chosen).head(limit)
    what = "held-out completions of the evaluation" if held_out else "rollouts"
    lines = [f"{run_dir}: {what} at step {chosen} ({picked.height} of {rows.filter(pl.col('step') == chosen).height})"]
    for row in picked.iter_rows(named=True):
        where = f"problem {row['problem']}" if held_out else f"rollout {row['rollout']}, problem {row['problem']}"
        judged = "" if row.get("judged", True) else ", NOT JUDGED (left out of the update)"
        lines += [
            "",
            f"-- {where}: reward {row['reward']:g}{judged}",
            f"prompt:     {_indent(row['prompt'])}",
            f"completion: {_indent(row['completion'])}",
            f"feedback:   {_indent(row['feedback'])}",
        ]
        if not held_out:
            credit = row["token_weights"] if row.get("token_weights") is not None else row["token_advantages"]
            label = "token weights" if row.get("token_weights") is not None else "advantages"
            marks = row.get("error_tokens") or [False] * len(credit)
            if row.get("error_step") is not None:
                lines.append(f"error:      the first wrong step is {row['error_step']!r}, its tokens marked !")
            lines.append(
                f"{label}: "
                + " ".join(f"{'!' if m else ''}{t!r}:{c:.2f}" for t, c, m in zip(row["tokens"], credit, marks))
            )
    return "\n".join(lines)


def _indent(text: str) -> str:
    return text.replace("\n", "\n            ")


def _ranges(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 8 else f"{steps[0]} to {steps[-1]}"
