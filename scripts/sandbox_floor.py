"""The sandbox against its floor: CPU a program spends in the batched path (the workers' and their
jobs' CPU time, one worker) beside the isolation no job can skip (a fork into fresh net, pid,
mount and ipc namespaces whose pid 1 forks a child that exits, from the interpreter the workers
run), and what
the programs themselves cost, run in this process (the code task's own, trusted, programs).

    python scripts/sandbox_floor.py [--jobs 128] [--rounds 200]

Run it as root (the namespaces), alone on the machine."""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox_bench import code_task_jobs  # noqa: E402

from tasks.sandbox import isolation, run_programs  # noqa: E402

FLOOR = """
import ctypes, os, resource, sys
libc, rounds = ctypes.CDLL(None, use_errno=True), int(sys.argv[1])
NAMESPACES = 0x40000000 | 0x20000000 | 0x20000 | 0x08000000  # CLONE_NEWNET | NEWPID | NEWNS | NEWIPC
cpu = lambda: sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2])
before = cpu()
for _ in range(rounds):
    pid = os.fork()
    if pid == 0:
        if libc.unshare(NAMESPACES) != 0:
            os._exit(3)
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
        os._exit(0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        sys.exit("unshare failed: run as root")
print((cpu() - before) / rounds * 1e3)
"""
"""Bare isolation, forked from the interpreter the sandbox's workers run, as they start it (the
standard library only): what forking a process of that size into the namespaces costs."""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def floor_ms(rounds: int) -> float:
    """CPU ms a job of bare isolation costs: fork, unshare the namespaces, fork pid 1's child, wait."""
    command = [isolation().python, "-S", "-s", "-P", "-c", FLOOR, str(rounds)]
    return float(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    jobs = code_task_jobs(args.jobs)
    started = time.process_time()
    for program, tests, _ in jobs:
        with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
            namespace: dict = {}
            exec(compile(program, "program", "exec"), namespace)  # noqa: S102  (the task's own programs)
            exec(compile(tests, "tests", "exec"), namespace)  # noqa: S102
    own = (time.process_time() - started) / len(jobs) * 1e3
    before, wall = children_cpu(), time.perf_counter()
    run_programs(jobs, 5.0, workers=1, batched=True)
    sandbox = (children_cpu() - before) / len(jobs) * 1e3
    wall = (time.perf_counter() - wall) / len(jobs) * 1e3
    floor = floor_ms(args.rounds)
    print(f"a program's own work, in process: {own:.3f} ms CPU")
    print(f"the sandbox, batched, one worker: {sandbox:.1f} ms CPU a program ({wall:.1f} ms wall)")
    print(f"the isolation floor: {floor:.1f} ms CPU a job")
    print(f"the sandbox is {sandbox / floor:.1f}x its floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
