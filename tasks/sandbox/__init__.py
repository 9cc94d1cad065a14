"""Run untrusted Python (a model's program plus its tests) outside the harness process.

`run_program(program, tests, timeout_s)` returns reward 1.0 only if every test passed. The tests
run in a trusted judge process; the program runs in a fresh, confined interpreter of its own (the
candidate: namespaces, a private uid, rlimits, a memory cgroup, a system-call filter, a scrubbed
environment, a minimal view of the filesystem, capped output, a wall-clock kill), and the tests
call its functions across the process boundary and get data back (plain values, or the
standard library's rebuilt by the judge; objects of the program's classes the tests use stay in
the candidate behind stand-ins). `run_programs` verifies a
batch through long-lived confined workers. What each mechanism does, what the kernel must allow,
and the residual risks: docs/sandbox.md.

One concern a file:
    __init__        the public API (this file)
    verdict         the tests' shape, a run's record, the verdict read from the judge's records
    host            what the kernel allows, uid slots, a job's description, cleanup
    run             the per-run path: one process tree per program
    pool            the batched path: long-lived workers
    layout          the process layout inside a run (runs as a script, standard library only)
    judge           the trusted judge (pid 2), which runs the tests
    candidate       the untrusted candidate, which runs the program
    kernel          the Linux calls of the trusted processes
    syscall_filter  the candidate's system-call filter
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tasks.sandbox.host import Isolation, isolation
from tasks.sandbox.pool import SandboxPool
from tasks.sandbox.run import execute
from tasks.sandbox.verdict import (
    PASSED,
    Execution,
    SandboxError,
    StdioCases,
    Tests,
    Verdict,
    failed_test_feedback,
)

__all__ = [
    "PASSED",
    "Execution",
    "Isolation",
    "SandboxError",
    "SandboxPool",
    "StdioCases",
    "Tests",
    "execute",
    "failed_test_feedback",
    "isolation",
    "run_program",
    "run_programs",
]


def __getattr__(name: str) -> str:
    # NETWORK_ISOLATION is computed lazily: importing tasks.code must not spawn processes.
    if name == "NETWORK_ISOLATION":
        return isolation().network
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_program(
    program: str,
    tests: Tests,
    timeout_s: float = 5.0,
    *,
    prompt: str | None = None,
    memory_mb: int = 512,
    output_limit: int = 10_000,
) -> Verdict:
    """Run `program` then `tests` in the sandbox; reward 1.0 only if every test passed.

    The tests see the judge's own builtins and, of the program, only the names they use and do
    not define themselves (the entry point). `prompt`: the problem's own code, if it has some
    (HumanEval's signature, docstring and helpers): run by the judge, so the helpers the tests
    call are the prompt's, and only the functions it leaves unwritten come from the program.

    Feedback, at most 300 characters, in words the judge chose (never text of the program's):
    "all tests passed"; for the first failing assert of the tests, "failed: assert <condition>
    (<its message>)" (see `failed_test_feedback`); "<builtin exception> raised by the program (in
    test: <line>)"; "program failed before the tests ran: <builtin exception> (at line N)";
    "SyntaxError in the program at line N"; "<f> returned a value that is not plain data";
    "timed out after N s"; "memory limit exceeded"; "program exited before the tests ran (...)";
    "output limit exceeded (...)". Never raises for any program."""
    return execute(program, tests, timeout_s, prompt=prompt, memory_mb=memory_mb, output_limit=output_limit).verdict


def run_programs(
    jobs: Sequence[tuple[str, Tests] | tuple[str, Tests, str | None]],
    timeout_s: float = 5.0,
    workers: int | None = None,
    *,
    batched: bool = True,
) -> list[Verdict]:
    """Verdicts of many (program, tests) pairs, in order, `workers` at a time (default: one per
    CPU). Threads suffice: each one only waits on a process. With `batched` (and a kernel that
    allows it, see `SandboxPool`) the runs go through one confined worker per thread instead of
    a fresh interpreter each; `batched=False` forces the per-run path. A job may carry a third
    item, its prompt (`run_program`'s)."""
    isolation()  # probe once, before the threads race to
    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    with SandboxPool(n, batched=batched) as sandbox, ThreadPoolExecutor(max_workers=n) as threads:
        return list(
            threads.map(
                lambda job: sandbox.execute(job[0], job[1], timeout_s, prompt=(job[2:] or [None])[0]).verdict, jobs
            )
        )
