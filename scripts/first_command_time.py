"""Where the first command's time goes: `python -m harness run CONFIG` run in this process, with a
clock around each held-out evaluation (the start's, apart from the runs' ends) and each training
step, against the whole. The rest is building tasks and modules, ALFWorld's games, warm starts not
shipped, loading, and writing records, leaderboards and plots.

    python scripts/first_command_time.py benchmarks.yaml --results /tmp/first [--out FILE]

Run it alone on the machine, in a fresh results folder (a finished run is not run again)."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.base import RLVRModule  # noqa: E402
from harness import estimate  # noqa: E402
from harness.__main__ import main as harness_main  # noqa: E402

CLOCKS = {"estimates before training": 0.0, "start evaluations": 0.0, "end evaluations": 0.0, "training steps": 0.0}
COUNTS = dict.fromkeys(CLOCKS, 0)
STACK: list[float] = []  # time spent in clocked calls nested in each open one (an evaluation inside a step)
ESTIMATING = []  # open while the estimates measure: the steps and evaluations they make are theirs


def clocked(function, name_of):
    """`function` with its time, less that of clocked calls inside it, added to its part's clock."""

    @functools.wraps(function)
    def timed(*args, **kwargs):
        started = time.perf_counter()
        STACK.append(0.0)
        try:
            return function(*args, **kwargs)
        finally:
            spent = time.perf_counter() - started
            nested = STACK.pop()
            if STACK:
                STACK[-1] += spent
            name = "estimates before training" if ESTIMATING else name_of(*args)
            CLOCKS[name] += spent - nested
            COUNTS[name] += not ESTIMATING

    return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--results", required=True)
    parser.add_argument("--out", help="also write the table here (markdown)")
    args = parser.parse_args()
    RLVRModule.evaluate = clocked(
        RLVRModule.evaluate, lambda m, *_: "start evaluations" if m.rl_step == 0 else "end evaluations"
    )
    RLVRModule.training_step = clocked(RLVRModule.training_step, lambda *_: "training steps")
    measure = estimate.estimate

    def estimating(*args, **kwargs):
        ESTIMATING.append(True)
        try:
            return measure(*args, **kwargs)
        finally:
            ESTIMATING.pop()

    estimate.estimate = clocked(estimating, lambda *_: "estimates before training")
    started = time.perf_counter()
    code = harness_main(["run", args.config, "--results", args.results])
    total = time.perf_counter() - started
    lines = [
        f"`python scripts/first_command_time.py {args.config} --results {args.results}`",
        "",
        "| part | calls | seconds | share |",
        "|---|---|---|---|",
        *(f"| {name} | {COUNTS[name]} | {s:.1f} | {s / total:.1%} |" for name, s in CLOCKS.items()),
        f"| the rest | | {total - sum(CLOCKS.values()):.1f} | {1 - sum(CLOCKS.values()) / total:.1%} |",
        f"| **the command** | | **{total:.1f}** | |",
    ]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
