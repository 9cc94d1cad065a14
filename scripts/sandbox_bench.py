"""Programs per second through the sandbox: the per-run path against the batched path, on the same
jobs, measured in one run.

    python scripts/sandbox_bench.py                 # 128 code-task jobs, 2 workers, 3 rounds
    python scripts/sandbox_bench.py --jobs 256 --workers 4 --rounds 5

The jobs are the code task's own: half its demonstrations (pass), half corruptions of them (fail
on an assert), each a distinct program. Both paths run `tasks.sandbox.run_programs` with the same
workers; the batched path's time includes starting its workers. Rounds alternate the two paths,
and the verdicts of the two must be equal (the script exits 1 otherwise).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.code import CodeTask
from tasks.sandbox import isolation, run_programs


def code_task_jobs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    task = CodeTask(train_size=count, eval_size=8, seed=seed)
    rng = random.Random(seed)
    jobs = []
    for i, problem in enumerate(task.train_problems()[:count]):
        completion = problem.demonstration if i % 2 == 0 else task.corrupt(problem, rng)
        jobs.append(task.program(problem, completion or problem.demonstration))
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()

    print(f"isolation: {isolation()}")
    jobs = code_task_jobs(args.jobs)
    rates: dict[str, list[float]] = {"per-run": [], "batched": []}
    verdicts = {}
    for _ in range(args.rounds):
        for name, values in rates.items():
            start = time.perf_counter()
            verdicts[name] = run_programs(jobs, args.timeout, workers=args.workers, batched=name == "batched")
            values.append(len(jobs) / (time.perf_counter() - start))
    passed = sum(v.reward for v in verdicts["batched"])
    print(f"{len(jobs)} jobs ({passed:g} pass), {args.workers} workers, {args.rounds} rounds")
    for name, values in rates.items():
        print(
            f"{name:>8}: {statistics.median(values):7.1f} programs/s (median; rounds: {', '.join(f'{v:.1f}' for v in values)})"
        )
    print(f" speed-up: {statistics.median(rates['batched']) / statistics.median(rates['per-run']):.2f}x")
    if verdicts["batched"] != verdicts["per-run"]:
        print("verdicts differ between the two paths", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
