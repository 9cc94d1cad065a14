"""The harness from Python: `harness.run` is `python -m harness run` with the same checks, and
returns the leaderboard as a polars frame.

    import harness
    board = harness.run("benchmarks.yaml", "schedule.steps=20", suite=["math"], results="runs/try")
    board.select("suite", "algorithm", "acc_gain", "acc_gain_p", "vs_reference_p")
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Sequence
from pathlib import Path


class _Both(io.TextIOBase):
    """Writes to both streams: the errors stay on the terminal and reach the exception too."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def run(
    config: str | Path,
    *overrides: str,
    results: str | Path = "runs",
    suite: Sequence[str] = (),
    algorithm: Sequence[str] = (),
    seed: Sequence[int] = (),
):
    """Run (or resume) the selected runs of `config` with `overrides` (KEY=VALUE, as on the
    command line) into `results`; the leaderboard of everything there (`results/leaderboard.parquet`)
    as a polars frame. A config the CLI would refuse raises ValueError with its one-line error."""
    import polars as pl

    from harness.__main__ import main

    argv = ["run", str(config), *overrides, "--results", str(results)]
    for flag, values in (("--suite", suite), ("--algorithm", algorithm), ("--seed", seed)):
        for value in [values] if isinstance(values, (str, int)) else values:
            argv += [flag, str(value)]
    said = io.StringIO()
    with contextlib.redirect_stderr(_Both(sys.stderr, said)):
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse's own refusals
            code = exit.code
    if code != 0:
        errors = [line for line in said.getvalue().splitlines() if "error:" in line]
        raise ValueError(
            errors[-1].split("error: ", 1)[1] if errors else f"python -m harness {' '.join(argv)}: exit {code}"
        )
    return pl.read_parquet(Path(results) / "leaderboard.parquet")
