"""The per-run path: one confined process tree per program, started, watched, stopped, judged."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import tempfile
import time

from tasks.sandbox import verdict as verdicts
from tasks.sandbox.host import (
    LAYOUT,
    Isolation,
    _base_env,
    _job,
    _kill_uid,
    _make_workdir,
    _private_dir,
    _remove_leftovers,
    _tasks_of_uid,
    _uid_slot,
    _unlink_quietly,
    isolation,
)
from tasks.sandbox.verdict import RESULT_LIMIT, Execution, SandboxError, Tests, _Collected, _unjudged

EXIT_GRACE_S = 0.5  # after the sandbox exits, how long its pipes may take to close
POLL_S = 0.1  # how often to check for that exit while pipes stay open
STOP_GRACE_S = 2.0  # how long the outer bootstrap may take to empty the namespace when told to stop


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
            [iso.python, "-S", "-s", "-P", "-B", str(LAYOUT), "run", job_path, str(result_w)],
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
    verdict = verdicts.read_verdict(out, job["token"], exit_code, timeout_s, max_output_bytes, stderr)
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
