"""Time a multi-turn suite's rollouts with its environments stepping beside decoding (an episode's
game steps as soon as its command has ended) and after it, at one and two torch threads, and
check that the records are the same every way (docs/performance.md, "Game steps beside decoding").

    python scripts/episode_overlap.py configs/zoo.yaml zoo-alfworld --steps 8

Each way runs in a process of its own (torch's thread count is set before its first kernel).
The suite's starting weights must be built (a run or `harness bench` of the suite builds them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time


def one_way(config: str, suite_name: str, steps: int, threads: int, overlap: bool) -> dict:
    from rollout import kernels

    kernels.pin()
    import torch

    torch.set_num_threads(threads)
    import rollout.episodes
    from harness.build import build_module
    from harness.config import load_benchmark
    from harness.quiet import quiet_libraries

    quiet_libraries()
    rollout.episodes.spare_cores = lambda engine: overlap
    benchmark = load_benchmark(config)
    suite = next(s for s in benchmark.suites if s.name == suite_name)
    module, _ = build_module(suite, "grpo", suite.seeds[0], benchmark.cache_dir)
    problems, size = module.task.train_problems(), module.schedule.prompts_per_step
    seconds, records = [], hashlib.sha256()
    for step in range(steps + 1):  # the first is a warm-up
        torch.manual_seed(step)
        started = time.perf_counter()
        rollouts = module.task.rollout(module.engine, problems[step * size : (step + 1) * size], module.group_size)
        seconds.append(time.perf_counter() - started)
        for tensor in (rollouts.input_ids, rollouts.eligible, rollouts.sample_logprobs):
            records.update(tensor.cpu().numpy().tobytes())
        records.update(repr(rollouts.verdicts).encode())
    timed = seconds[1:]
    return {
        "threads": threads,
        "overlap": overlap,
        "rollout_s": sum(timed) / len(timed),
        "records": records.hexdigest()[:16],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("suite")
    parser.add_argument("--steps", type=int, default=8, help="timed rollouts of a step's prompts (after one warm-up)")
    parser.add_argument("--one", nargs=2, type=int, metavar=("THREADS", "OVERLAP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_way(args.config, args.suite, args.steps, args.one[0], bool(args.one[1]))))
        return
    rows = []
    for threads in (2, 1):
        for overlap in (0, 1):
            command = [sys.executable, __file__, args.config, args.suite, "--steps", str(args.steps)]
            out = subprocess.run(
                [*command, "--one", str(threads), str(overlap)], capture_output=True, text=True, check=True
            )
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    print("| torch threads | games step | rollout of a step (s) | records |\n|---|---|---|---|")
    for r in rows:
        way = "beside decoding" if r["overlap"] else "after decoding"
        print(f"| {r['threads']} | {way} | {r['rollout_s']:.3f} | {r['records']} |")
    if len({r["records"] for r in rows}) != 1:
        sys.exit("the records differ between the ways")


if __name__ == "__main__":
    main()
