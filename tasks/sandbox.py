"""Run untrusted Python (a model's program plus its tests) outside the harness process.

`run_program(program, tests, timeout_s)` returns reward 1.0 only if every test passed. The tests
run in a trusted judge process; the program runs in a fresh, confined interpreter of its own (the
candidate: namespaces, a private uid, rlimits, a memory cgroup, a system-call filter, a scrubbed
environment, private /tmp and /dev/shm, capped output, a wall-clock kill), and the tests call its
functions across the process boundary and get plain data back. The process layout is
`tasks/_sandbox_bootstrap.py`'s; the judge and the candidate are `_sandbox_judge.py` and
`_sandbox_candidate.py`. `run_programs` verifies a batch through long-lived confined workers. What
each mechanism does, what the kernel must allow, and the residual risks: docs/sandbox.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import math
import os
import queue
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tasks.base import Verdict
from tasks.syscall_filter import syscall_filter

log = logging.getLogger(__name__)

BOOTSTRAP = Path(__file__).with_name("_sandbox_bootstrap.py")
CANDIDATE = Path(__file__).with_name("_sandbox_candidate.py")
MEMORY_CGROUP_V1 = "/sys/fs/cgroup/memory"
FEEDBACK_LIMIT = 300
PASSED = "all tests passed"
SANDBOX_UID_BASE = 2_000_000_000  # far above real users and the usual subordinate-id ranges
UID_SLOTS = 1024
WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3")
EXIT_GRACE_S = 0.5  # after the sandbox exits, how long its pipes may take to close
POLL_S = 0.1  # how often to check for that exit while pipes stay open
STOP_GRACE_S = 2.0  # how long the outer bootstrap may take to empty the namespace when told to stop
RESULT_LIMIT = 1 << 16  # the result pipe carries a few short JSON lines


@dataclass(frozen=True)
class StdioCases:
    """Tests of a program that reads standard input and writes standard output (APPS, CodeContests,
    LiveCodeBench, TACO): the program runs as a script, afresh for each case, with the case's
    input on stdin; its output must equal the expected one by the field's rule (the same
    whitespace-separated tokens; numbers within `float_tolerance`, absolute or relative, if set).
    Pass them where tests are passed; the run's `timeout_s` bounds the whole run (start-up and
    every case), so give it room for `case_timeout_s` per case (`budget_s`)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    case_timeout_s: float = 2.0
    """Wall-clock limit of one case; a case past it is killed and fails."""
    float_tolerance: float | None = None
    """None: tokens compare as text. Otherwise two numeric tokens may differ by this much."""
    partial: bool = False
    """Reward the fraction of cases passed (every case runs) instead of 1 only if all pass."""

    def __post_init__(self):
        if len(self.inputs) != len(self.outputs) or not self.inputs:
            raise ValueError(f"cases: {len(self.inputs)} inputs and {len(self.outputs)} outputs (need as many, >= 1)")
        if not all(type(x) is str for x in (*self.inputs, *self.outputs)):
            raise ValueError("cases: every input and output must be text")
        if not self.case_timeout_s > 0:
            raise ValueError(f"case_timeout_s: must be > 0 (got {self.case_timeout_s})")
        if self.float_tolerance is not None and not self.float_tolerance >= 0:
            raise ValueError(f"float_tolerance: must be >= 0 (got {self.float_tolerance})")

    def budget_s(self, start_s: float = 5.0) -> float:
        """A whole-run timeout that lets every case use its limit: `start_s` plus one limit a case."""
        return start_s + self.case_timeout_s * len(self.inputs)

    def job(self) -> dict:
        return {
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "case_timeout_s": self.case_timeout_s,
            "float_tolerance": self.float_tolerance,
            "partial": self.partial,
        }


Tests = str | StdioCases
"""Python test code run against the program's functions, or standard input/output cases."""


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (not a verdict on the program)."""


@dataclass(frozen=True)
class Isolation:
    """What this kernel and these privileges allow, probed once per process.

    privilege: "uid-drop" (root: private unprivileged uid per run), "userns" (an unprivileged user
    namespace) or "none" (the harness user's own uid, no namespaces). unshare: the namespaces the
    bootstrap enters. network: "netns" or "socket-blocked". python: the sandbox's interpreter."""

    privilege: str
    unshare: tuple[str, ...]
    network: str
    python: str
    memory_cgroup: str | None = None
    """The cgroup (v1 memory controller) under which each uid slot gets a memory cgroup of its
    own, where the harness may make them (root); None: memory is bounded by RLIMIT_AS alone."""
    syscall_filter: bool = False
    """Whether the candidate runs under `tasks.syscall_filter` (libseccomp found)."""

    @property
    def pid_namespace(self) -> bool:
        return "pid" in self.unshare


@dataclass(frozen=True)
class Execution:
    """Everything one run produced; `verdict` is what the harness uses, the rest is for
    debugging and tests."""

    verdict: Verdict
    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_s: float
    workdir: str
    uid: int | None = None  # the private uid it ran as (None without root)


# --- probing what the kernel allows -----------------------------------------------------------

_isolation: Isolation | None = None
_isolation_lock = threading.Lock()


def isolation() -> Isolation:
    """The isolation this process's sandboxes use, probed on first call (a few short
    subprocesses) and logged, so the harness's log says which mechanisms a run relied on."""
    global _isolation
    with _isolation_lock:
        if _isolation is None:
            _isolation = _probe()
            level = logging.WARNING if _isolation.privilege == "none" or _isolation.network != "netns" else logging.INFO
            log.log(level, "sandbox isolation: %s", _isolation)
        return _isolation


def __getattr__(name: str) -> str:
    # NETWORK_ISOLATION is computed lazily: importing tasks.code must not spawn processes.
    if name == "NETWORK_ISOLATION":
        return isolation().network
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _probe() -> Isolation:
    root = os.geteuid() == 0
    if root:
        python = _python_for_uid(SANDBOX_UID_BASE + UID_SLOTS)  # a uid outside the pool: never in use
        base: tuple[str, ...] = ()
    else:
        python, base = sys.executable, ("user",)
    extras = {"memory_cgroup": _memory_cgroup_root() if root else None, "syscall_filter": syscall_filter() is not None}
    for extra in (("net", "pid", "mount", "ipc"), ("net", "pid", "mount"), ("net", "pid"), ("net",)):
        if _namespaces_work(python, base + extra):
            return Isolation("uid-drop" if root else "userns", base + extra, "netns", python, **extras)
    return Isolation("uid-drop" if root else "none", (), "socket-blocked", python, **extras)


def _memory_cgroup_root() -> str | None:
    """Where slot cgroups can be made: the v1 memory hierarchy, if we can make one there."""
    root = MEMORY_CGROUP_V1
    probe = os.path.join(root, f"rlvr-sandbox-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        ok = os.path.exists(os.path.join(probe, "memory.limit_in_bytes"))
        os.rmdir(probe)
    except OSError:
        return None
    return root if ok else None


def _slot_cgroup(iso: Isolation, uid: int | None, limit_mb: int) -> str | None:
    """The memory cgroup of a uid slot, made on first use, limited to `limit_mb` (swap included,
    where the kernel accounts it) for this run. Kept between runs: once a run's processes are
    gone and its tmpfs freed, it holds nothing."""
    if iso.memory_cgroup is None or uid is None:
        return None
    path = os.path.join(iso.memory_cgroup, f"rlvr-sandbox-{uid}")
    limit = str(limit_mb << 20)
    try:
        os.makedirs(path, exist_ok=True)
        # memsw must stay >= the limit: raise it first, set the limit, then lower it to match
        for name in ("memory.memsw.limit_in_bytes", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            with contextlib.suppress(OSError), open(os.path.join(path, name), "w") as f:
                f.write(limit)
        with open(os.path.join(path, "memory.limit_in_bytes")) as f:
            if int(f.read()) != limit_mb << 20:
                raise OSError(f"{path}: the memory limit did not take")
    except (OSError, ValueError) as exc:
        log.warning("sandbox: no memory cgroup for uid %s (%r)", uid, exc)
        return None
    return path


def _namespaces_work(python: str, names: tuple[str, ...]) -> bool:
    cmd = [python, "-S", "-s", "-P", "-B", str(BOOTSTRAP), "probe", ",".join(names)]
    try:
        done = subprocess.run(cmd, env=_base_env("/"), cwd="/", capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _python_for_uid(uid: int) -> str:
    """An interpreter the sandbox uid can run and import the standard library with. The
    harness's own may sit under a directory that uid cannot enter (pyenv under /root, 0700)."""
    check = "import sys, json, math, re, collections, hashlib; sys.exit(sys.version_info < (3, 11))"
    candidates = [os.environ.get("RLVR_SANDBOX_PYTHON", ""), sys.executable, *PYTHON_CANDIDATES]
    for python in filter(None, candidates):
        try:
            done = _run_as(uid, [python, "-S", "-s", "-P", "-B", "-c", check])
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return python
    raise SandboxError(
        "no Python >= 3.11 usable by an unprivileged uid; set RLVR_SANDBOX_PYTHON to one outside 0700 directories"
    )


# --- private state: uid slots and job files ----------------------------------------------------


def _private_dir() -> str:
    """A directory only the harness user can enter, for slot locks and job files (which hold the
    run's token until the bootstrap unlinks them)."""
    path = os.path.join(tempfile.gettempdir(), f"rlvr-sandbox-{os.geteuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise SandboxError(f"{path} must be a directory owned by uid {os.geteuid()} with mode 0700")
    return path


@contextlib.contextmanager
def _uid_slot() -> Iterator[int]:
    """A uid no other run (in this or another harness process) uses meanwhile: with one uid per
    run, RLIMIT_NPROC counts only this run's processes, and kill(-1) as that uid (the fallback
    cleanup) cannot touch another run."""
    directory = _private_dir()
    for slot in range(UID_SLOTS):
        fd = os.open(os.path.join(directory, f"slot-{slot}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield SANDBOX_UID_BASE + slot
        finally:
            os.close(fd)
        return
    raise SandboxError(f"all {UID_SLOTS} sandbox uid slots are busy")


# --- running one program ------------------------------------------------------------------------


def _base_env(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "PYTHONHASHSEED": "0",  # set iteration order, and so verdicts, reproducible
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",  # each glibc arena reserves 64 MiB of address space against RLIMIT_AS
    }


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


def execute(
    program: str,
    tests: Tests,
    timeout_s: float = 5.0,
    *,
    prompt: str | None = None,
    memory_mb: int = 512,
    output_limit: int = 10_000,
    max_output_bytes: int = 8 << 20,
    file_size_mb: int = 64,
    max_processes: int = 64,
    tmp_root: str | None = None,
    isolation_override: Isolation | None = None,
) -> Execution:
    """`run_program` with every knob and the whole record of the run (`isolation_override` is for
    tests that exercise a fallback on a kernel that allows more). Never raises for any program:
    only a sandbox that cannot be set up at all raises (SandboxError)."""
    iso, start = isolation_override or isolation(), time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            uid = stack.enter_context(_uid_slot()) if iso.privilege == "uid-drop" else None
            workdir = _make_workdir(uid, tmp_root)
            stack.callback(_remove_leftovers, workdir, uid)
            if uid is not None and not iso.pid_namespace:
                _kill_uid(iso.python, uid)  # a crashed harness may have left processes under this uid
            nproc = max_processes if iso.privilege != "none" else _tasks_of_uid(os.getuid()) + max_processes
            job = _job(iso, program, tests, uid, timeout_s, memory_mb, file_size_mb, nproc, prompt)
            fd, job_path = tempfile.mkstemp(dir=_private_dir(), prefix="job-")
            stack.callback(_unlink_quietly, job_path)
            with os.fdopen(fd, "w") as f:
                json.dump(job, f)
            return _supervise(iso, job, job_path, workdir, timeout_s, output_limit, max_output_bytes, stack)
    except SandboxError:
        raise
    except Exception as exc:  # noqa: BLE001 - a program must never stop training
        return _unjudged(exc, start)


def _unjudged(exc: BaseException, start: float) -> Execution:
    """The record of a run the harness could not judge: reward 0, said so, logged."""
    log.warning("sandbox: a run could not be judged (%r)", exc)
    verdict = Verdict(0.0, f"the sandbox could not judge this run ({type(exc).__name__})")
    return Execution(verdict, "", "", -1, False, time.monotonic() - start, "")


def _make_workdir(uid: int | None, tmp_root: str | None) -> str:
    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-run-", dir=tmp_root)
    if uid is not None:
        os.chown(workdir, uid, uid)
    return workdir


def _job(
    iso: Isolation,
    program: str,
    tests: Tests,
    uid: int | None,
    timeout_s: float,
    memory_mb: int,
    file_size_mb: int,
    nproc: int,
    prompt: str | None = None,
) -> dict:
    """What the bootstrap needs to confine and run one program (the same for both paths)."""
    bpf = syscall_filter() if iso.syscall_filter else None
    return {
        "token": secrets.token_hex(16),
        "program": program,
        "tests": tests if isinstance(tests, str) else "",
        "cases": tests.job() if isinstance(tests, StdioCases) else None,
        "prompt": prompt,
        "candidate": _candidate_source(),
        "python": iso.python,
        "seccomp": bpf.hex() if bpf is not None else None,
        "tmp_mb": file_size_mb,
        "cgroup": _slot_cgroup(iso, uid, memory_mb + file_size_mb),
        "unshare": list(iso.unshare),
        "uid": uid,
        "gid": uid,
        "harness_pid": os.getpid(),
        "block_network": iso.network != "netns",
        # kill(-1) or an exec'd program could reach the harness's processes only when the
        # sandbox shares the harness's uid and PID namespace.
        "block_processes": uid is None and not iso.pid_namespace,
        "rlimits": {
            "cpu": math.ceil(timeout_s) + 1,
            "as": memory_mb << 20,
            "fsize": file_size_mb << 20,
            "nproc": nproc,
            "core": 0,
        },
    }


@functools.cache
def _candidate_source() -> str:
    return CANDIDATE.read_text()


def _supervise(
    iso: Isolation,
    job: dict,
    job_path: str,
    workdir: str,
    timeout_s: float,
    output_limit: int,
    max_output_bytes: int,
    stack: contextlib.ExitStack,
) -> Execution:
    """Start the bootstrap, collect its pipes until it is done or the deadline passes, kill its
    process group (taking the PID namespace with it), and judge."""
    result_r, result_w = os.pipe()
    stack.callback(os.close, result_r)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [iso.python, "-S", "-s", "-P", "-B", str(BOOTSTRAP), "run", job_path, str(result_w)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(result_w,),
            cwd=workdir,
            env=_base_env(workdir),
            start_new_session=True,
        )
    finally:
        os.close(result_w)
    with proc:
        try:
            out = _collect(proc, result_r, start + timeout_s, output_limit, max_output_bytes)
        finally:
            exit_code = _stop(proc)
            if iso.privilege == "uid-drop" and not iso.pid_namespace:
                _kill_uid(iso.python, job["uid"])
    stderr = out.stderr.decode("utf-8", "replace")
    verdict = _judge(out, job["token"], exit_code, timeout_s, max_output_bytes, stderr)
    return Execution(
        verdict,
        out.stdout.decode("utf-8", "replace"),
        stderr,
        exit_code,
        out.timed_out,
        time.monotonic() - start,
        workdir,
        job["uid"],
    )


@dataclass(frozen=True)
class _Collected:
    stdout: bytes
    stderr: bytes
    result: bytes
    timed_out: bool
    overflow: bool


def _collect(
    proc: subprocess.Popen, result_r: int, deadline: float, output_limit: int, max_output_bytes: int
) -> _Collected:
    """Read the three pipes as data arrives, keeping the first `output_limit` bytes of stdout and
    stderr. Done when every pipe is closed (with a PID namespace that is when the run ended),
    when the bootstrap exited and the pipes stayed open EXIT_GRACE_S longer (a leftover process
    holds them), at the deadline, or once the output passes `max_output_bytes`."""
    assert proc.stdout is not None and proc.stderr is not None
    names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr", result_r: "result"}
    caps = {"stdout": output_limit, "stderr": output_limit, "result": RESULT_LIMIT}
    kept = {name: bytearray() for name in caps}
    total = 0
    exited_at: float | None = None

    def collected(timed_out: bool = False, overflow: bool = False) -> _Collected:
        return _Collected(bytes(kept["stdout"]), bytes(kept["stderr"]), bytes(kept["result"]), timed_out, overflow)

    with selectors.DefaultSelector() as sel:
        for fd in names:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and _has_exited(proc.pid):
                exited_at = now
            end = deadline if exited_at is None else min(deadline, exited_at + EXIT_GRACE_S)
            if now >= end:
                return collected(timed_out=exited_at is None)
            for key, _ in sel.select(min(end - now, POLL_S)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                name = names[key.fd]
                kept[name] += chunk[: max(0, caps[name] - len(kept[name]))]
                if name != "result":
                    total += len(chunk)
                    if total > max_output_bytes:
                        return collected(overflow=True)
    return collected()


def _judge(
    out: _Collected, token: str, exit_code: int, timeout_s: float, max_output_bytes: int, stderr: str
) -> Verdict:
    """The verdict from the result pipe. Only records that carry the run's token count (the
    judge's; the candidate never holds the token or the pipe), each parsed against a strict
    schema: {"phase"}, {"fail", "message"}, {"passed"} or {"error"}. A pass needs a pass record
    from a run that exited 0 and no fail record."""
    records = []
    for line in out.result.splitlines()[:16]:
        record = _record(line, token)
        if record is not None:
            records.append(record)
    # A setup error is only believed before any phase marker.
    for record in records:
        if "phase" in record:
            break
        if "error" in record:
            raise SandboxError(str(record["error"]))
    if out.timed_out:
        return Verdict(0.0, f"timed out after {timeout_s:g} s")
    if out.overflow:
        return Verdict(0.0, f"output limit exceeded (more than {max_output_bytes} bytes on stdout and stderr)")
    fails = [record for record in records if "fail" in record]
    if exit_code == 0 and not fails and any(record.get("passed") is True for record in records):
        return Verdict(1.0, PASSED)
    if fails:
        # a partial score (standard input/output cases with `partial`): the fraction that passed
        score = next((record["score"] for record in records if "score" in record), 0.0)
        return Verdict(score if 0.0 <= score < 1.0 else 0.0, _truncate(str(fails[0].get("message", "failed"))))
    phases = [record["phase"] for record in records if "phase" in record]
    return Verdict(0.0, _truncate(_describe_exit(exit_code, phases[-1] if phases else None, stderr)))


RECORD_FIELDS = {"phase": str, "fail": str, "message": str, "passed": bool, "error": str, "score": float}


def _record(line: bytes, token: str) -> dict | None:
    """One result line as a record: a JSON object of at most RESULT_LIMIT bytes, with this run's
    token and only known fields of their own types; None for anything else."""
    if len(line) > RESULT_LIMIT:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError, MemoryError):
        return None
    if type(record) is not dict or record.pop("token", None) != token:
        return None
    if any(RECORD_FIELDS.get(key) is not type(value) for key, value in record.items()):
        return None
    return record


def _describe_exit(exit_code: int, phase: str | None, stderr: str) -> str:
    """Feedback for a run that ended without a verdict record: it exited or was killed."""
    if exit_code > 128 and exit_code - 128 in signal.valid_signals():
        sig = signal.Signals(exit_code - 128)
        if sig == signal.SIGXCPU:
            return "CPU time limit exceeded"
        how = f"killed by {sig.name}"
    else:
        how = f"exit status {exit_code}"
    if phase == "tests":
        return f"exited during the tests ({how}) before they completed"
    if phase is None:  # the interpreter itself did not get going (e.g. memory_mb too small)
        last = stderr.strip().splitlines()[-1:] or [""]
        return f"program exited before the tests ran ({how}{': ' + last[0] if last[0] else ''})"
    return f"program exited before the tests ran ({how})"


def failed_test_feedback(condition: str, message: str = "") -> str:
    """The sandbox's feedback when `assert condition, message` in the tests fails first, for a
    verifier that judges completions it wrote itself without running them and must say exactly
    what the sandbox would. `condition` as written in the tests, without parentheses that only
    enclose it (whitespace is collapsed)."""
    return _truncate(f"failed: assert {' '.join(condition.split())}" + (f" ({message})" if message else ""))


def _truncate(text: str) -> str:
    return text if len(text) <= FEEDBACK_LIMIT else text[: FEEDBACK_LIMIT - 3] + "..."


# --- the batched path ----------------------------------------------------------------------------

WORKER_SLACK_S = 5.0  # beyond a job's timeout and STOP_GRACE_S, how long a worker may take to answer
WORKER_START_S = 30.0  # how long a worker may take to confine itself and say it is ready
WORKER_FAILED = "the sandbox worker failed"
JOB_NAMESPACES = ("pid", "mount")  # what each job of a worker enters on its own (and "ipc" if allowed)


class SandboxPool:
    """`execute` for many programs, through `workers` confined worker processes that each serve
    one job at a time (the module docstring says what a worker does and keeps apart between
    jobs). Thread-safe: call `execute` from up to `workers` threads; more wait for a free worker.

    Workers are used where the isolation is "uid-drop" with network, PID and mount namespaces;
    elsewhere, or with `batched=False`, `execute` is the per-run path. A worker is started on its
    first job; one that died, hung or answered nonsense is killed, its job fails (reward 0,
    feedback "the sandbox worker failed ...") and the next job gets a fresh one."""

    def __init__(self, workers: int = 1, *, batched: bool = True) -> None:
        iso = isolation()
        self.isolation = iso
        self.batched = batched and iso.privilege == "uid-drop" and {"net", "pid", "mount"} <= set(iso.unshare)
        self.workers = max(1, workers)
        self._slots: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
        for _ in range(self.workers):
            self._slots.put(None)  # a slot whose worker starts on first use
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(
        self,
        program: str,
        tests: Tests,
        timeout_s: float = 5.0,
        *,
        prompt: str | None = None,
        memory_mb: int = 512,
        output_limit: int = 10_000,
        max_output_bytes: int = 8 << 20,
        file_size_mb: int = 64,
        max_processes: int = 64,
        tmp_root: str | None = None,
    ) -> Execution:
        """As the module-level `execute` (same verdicts, same record)."""
        limits = {
            "prompt": prompt,
            "memory_mb": memory_mb,
            "output_limit": output_limit,
            "max_output_bytes": max_output_bytes,
            "file_size_mb": file_size_mb,
            "max_processes": max_processes,
            "tmp_root": tmp_root,
        }
        if not self.batched:
            return execute(program, tests, timeout_s, **limits)  # type: ignore[arg-type]
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        worker = self._slots.get()
        try:
            if worker is not None and not worker.alive():
                worker.kill()  # it died between jobs: no job to fail
                worker = None
            if worker is None:
                worker = _Worker(self.isolation)
            start = time.monotonic()
            try:
                return worker.execute(program, tests, timeout_s, **limits)  # type: ignore[arg-type]
            except SandboxError:
                raise
            except Exception as exc:  # noqa: BLE001 - a program must never stop training
                worker.kill()  # its state is unknown: the next job gets a fresh one
                return _unjudged(exc, start)
        finally:
            self._slots.put(worker)

    def worker_pids(self) -> list[int]:
        """The pids of the live workers (for tests; call it between jobs: it waits for every slot)."""
        return [w.proc.pid for w in self._peek() if w is not None and not w.dead]

    def _peek(self) -> list[_Worker | None]:
        slots = [self._slots.get() for _ in range(self.workers)]
        for slot in slots:
            self._slots.put(slot)
        return slots

    def close(self) -> None:
        """Stop every worker (waiting for jobs in flight)."""
        if self._closed:
            return
        self._closed = True
        for _ in range(self.workers):
            worker = self._slots.get()
            if worker is not None:
                worker.close()


_job_namespaces: tuple[str, ...] | None = None


def _namespaces_per_job(iso: Isolation) -> tuple[str, ...]:
    """The namespaces each job of a worker enters: PID and mount, and IPC (SysV shared memory,
    semaphores and message queues outlive processes; a job's die with its namespace) if the kernel
    allows it. Probed once per process."""
    global _job_namespaces
    with _isolation_lock:
        if _job_namespaces is None:
            with_ipc = (*JOB_NAMESPACES, "ipc")
            _job_namespaces = with_ipc if _namespaces_work(iso.python, with_ipc) else JOB_NAMESPACES
        return _job_namespaces


class _Worker:
    """One worker process (`_sandbox_bootstrap.py serve`) and the private uid it holds for its
    lifetime. Used by one thread at a time."""

    def __init__(self, iso: Isolation) -> None:
        self.iso = iso
        self.job_unshare = list(_namespaces_per_job(iso))
        self._stack = contextlib.ExitStack()
        self.uid = self._stack.enter_context(_uid_slot())
        self._buffer = bytearray()
        self.dead = False
        try:
            config = {
                "unshare": [n for n in iso.unshare if n not in self.job_unshare],
                "uid": self.uid,
                "cgroup": _slot_cgroup(iso, self.uid, 512 + 64),  # each job sets its own limit
                "candidate": _candidate_source(),
            }
            self.proc = subprocess.Popen(
                [iso.python, "-S", "-s", "-P", "-B", str(BOOTSTRAP), "serve", json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                bufsize=0,
                cwd="/",
                env=_base_env("/"),
                start_new_session=True,
            )
        except BaseException:
            self._stack.close()
            raise
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        ready = self._receive(time.monotonic() + WORKER_START_S)
        if ready is None or ready.get("ready") is not True:
            self.kill()
            raise SandboxError(str(ready.get("error", ready) if ready else "the sandbox worker did not start"))

    def alive(self) -> bool:
        return not self.dead and not _has_exited(self.proc.pid)

    def execute(
        self,
        program: str,
        tests: Tests,
        timeout_s: float,
        *,
        prompt: str | None,
        memory_mb: int,
        output_limit: int,
        max_output_bytes: int,
        file_size_mb: int,
        max_processes: int,
        tmp_root: str | None,
    ) -> Execution:
        start = time.monotonic()
        workdir = _make_workdir(self.uid, tmp_root)
        job = _job(self.iso, program, tests, self.uid, timeout_s, memory_mb, file_size_mb, max_processes, prompt)
        job.update(
            unshare=self.job_unshare,
            workdir=workdir,
            env=_base_env(workdir),
            timeout_s=timeout_s,
            output_limit=output_limit,
            max_output_bytes=max_output_bytes,
            leftover_dirs=sorted({*WORLD_WRITABLE_DIRS, tempfile.gettempdir(), os.path.dirname(workdir)}),
        )
        token = job["token"]
        reply = self._request(job, start + timeout_s + STOP_GRACE_S + WORKER_SLACK_S)
        try:
            out = _Collected(
                str(reply["stdout"]).encode("latin-1"),
                str(reply["stderr"]).encode("latin-1"),
                str(reply["result"]).encode("latin-1"),
                bool(reply["timed_out"]),
                bool(reply["overflow"]),
            )
            exit_code = int(reply["exit_code"])
        except (TypeError, KeyError, ValueError, UnicodeError):
            # No answer (the worker died or hung), or not one a sound worker gives: the job fails.
            why = "no answer" if reply is None else str(reply.get("fatal", "an invalid answer"))
            log.warning("sandbox worker %d failed (%s); replacing it", self.proc.pid, why)
            self.kill(workdir)
            verdict = Verdict(0.0, _truncate(f"{WORKER_FAILED} ({why})"))
            return Execution(verdict, "", "", -1, False, time.monotonic() - start, workdir, self.uid)
        stderr = out.stderr.decode("utf-8", "replace")
        verdict = _judge(out, token, exit_code, timeout_s, max_output_bytes, stderr)
        return Execution(
            verdict,
            out.stdout.decode("utf-8", "replace"),
            stderr,
            exit_code,
            out.timed_out,
            time.monotonic() - start,
            workdir,
            self.uid,
        )

    def _request(self, job: dict, deadline: float) -> dict | None:
        """Send one job and wait for its answer until `deadline`; None if none came."""
        data = memoryview((json.dumps(job) + "\n").encode())
        with selectors.DefaultSelector() as sel:
            sel.register(self._in, selectors.EVENT_WRITE)
            while data:
                now = time.monotonic()
                if now >= deadline:
                    return None
                if sel.select(deadline - now):
                    try:
                        data = data[os.write(self._in, data) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # EPIPE: the worker is gone
                        return None
        return self._receive(deadline)

    def _receive(self, deadline: float) -> dict | None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._out, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                now = time.monotonic()
                if now >= deadline:
                    return None
                if sel.select(deadline - now):
                    chunk = os.read(self._out, 1 << 20)
                    if not chunk:
                        return None
                    self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        with contextlib.suppress(ValueError, RecursionError):
            reply = json.loads(line)
            if isinstance(reply, dict):
                return reply
        return None

    def kill(self, workdir: str | None = None) -> None:
        """SIGKILL the worker's process group (the worker; its job's J and pid 1 are in their own
        group and die by PDEATHSIG), reap it, SIGKILL whatever runs as the private uid, remove
        the job's files, and give the uid back. Once only: after the wait, the pid is not ours."""
        if self.dead:
            return
        self.dead = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still ours
        self.proc.wait()
        _kill_uid(self.iso.python, self.uid)
        if workdir is not None:
            _remove_leftovers(workdir, self.uid)
        self._release()

    def close(self) -> None:
        """Close the worker's stdin (it exits when idle) and wait; kill it if it does not."""
        if self.dead:
            return
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=STOP_GRACE_S + WORKER_SLACK_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        self.dead = True
        self._release()

    def _release(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        self._stack.close()


# --- cleanup -------------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen) -> int:
    """End the run and return the bootstrap's exit code. SIGTERM asks the outer bootstrap to
    SIGKILL pid 1 and reap it, which returns only once the PID namespace is empty; the SIGKILL
    to the whole process group afterwards is the fallback (no namespace, or an outer that did
    not answer), sent before we reap the outer so that its pid, the group id, cannot be reused."""
    if not _has_exited(proc.pid):
        os.kill(proc.pid, signal.SIGTERM)
        give_up = time.monotonic() + STOP_GRACE_S
        while not _has_exited(proc.pid) and time.monotonic() < give_up:
            time.sleep(0.005)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def _has_exited(pid: int) -> bool:
    """Whether our child exited, without reaping it (WNOWAIT): until we reap it, its pid, which
    is also the run's process group id, stays ours and safe to signal."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _run_as(uid: int, argv: list[str]) -> subprocess.CompletedProcess:
    """`argv` as the private uid, with nothing of the harness's environment, within 30 s."""
    return subprocess.run(
        argv,
        user=uid,
        group=uid,
        extra_groups=[],
        env=_base_env("/"),
        cwd="/",
        capture_output=True,
        timeout=30,
        check=False,
    )


def _kill_uid(python: str, uid: int) -> None:
    """SIGKILL every process of the run's private uid. kill(-1) as that uid reaches exactly its
    processes and, unlike a scan of /proc, cannot be outrun by a fork bomb (the kernel signals
    them under one lock, and a fork with SIGKILL pending fails)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        _run_as(uid, [python, "-S", "-s", "-P", "-c", "import os; os.kill(-1, 9)"])


def _remove_leftovers(workdir: str, uid: int | None) -> None:
    """Remove the working directory and, as root, whatever the run's private uid created in
    world-writable directories. Runs after every process of the run is dead."""
    _rmtree(workdir)
    if uid is None:
        return
    for directory in {*WORLD_WRITABLE_DIRS, tempfile.gettempdir(), os.path.dirname(workdir)}:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        _rmtree(entry.path)
                    else:
                        os.unlink(entry.path)


def _rmtree(path: str) -> None:
    """Remove a tree of any depth, whatever permissions the program left on it; never raises.
    Usually the directory is empty (the run worked in its private tmpfs). shutil.rmtree and
    os.walk recurse (RecursionError past ~1000 levels before Python 3.12), so what they leave goes
    to chmod -R and rm -rf, which walk any depth."""
    with contextlib.suppress(OSError):
        os.rmdir(path)
        return
    with contextlib.suppress(Exception):
        if os.geteuid() != 0:  # root ignores permissions; the harness user must restore its own
            os.chmod(path, 0o700)
            for root, dirs, _ in os.walk(path):
                for name in dirs:
                    sub = os.path.join(root, name)
                    if not os.path.islink(sub):
                        os.chmod(sub, 0o700)
        shutil.rmtree(path)
    if os.path.lexists(path):
        with contextlib.suppress(Exception):
            if os.geteuid() != 0:
                subprocess.run(["chmod", "-R", "u+rwx", "--", path], capture_output=True, timeout=60, check=False)
            subprocess.run(["rm", "-rf", "--", path], capture_output=True, timeout=60, check=False)
    if os.path.lexists(path):
        log.warning("sandbox: could not remove %s", path)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _tasks_of_uid(uid: int) -> int:
    """Threads of `uid`'s processes (what RLIMIT_NPROC counts), for the no-namespace fallback,
    where the limit must leave room for everything the harness user already runs."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
    return count
