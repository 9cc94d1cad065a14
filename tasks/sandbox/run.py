"""The per-run path: one confined process tree per program, started, watched, stopped, judged."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable

import tasks.sandbox.verdict as verdicts
from tasks.sandbox.host import (
    LAYOUT,
    Isolation,
    _base_env,
    _job,
    _kill_uid,
    _make_workdir,
    _remove_leftovers,
    _secret_file,
    _tasks_of_uid,
    _uid_slot,
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
            public, secret = _job(iso, program, tests, uid, timeout_s, memory_mb, file_size_mb, nproc, prompt)
            secret_fd = _secret_file(secret)
            stack.callback(os.close, secret_fd)
            return _supervise(
                iso, public, secret_fd, secret["token"], workdir, timeout_s, output_limit, max_output_bytes, stack
            )
    except SandboxError:
        raise
    except Exception as exc:  # noqa: BLE001 - a program must never stop training
        return _unjudged(exc, start)


def _supervise(
    iso: Isolation,
    public: dict,
    secret_fd: int,
    token: str,
    workdir: str,
    timeout_s: float,
    output_limit: int,
    max_output_bytes: int,
    stack: contextlib.ExitStack,
) -> Execution:
    """Start the layout (`layout.run`), collect its pipes until it is done or the deadline passes,
    kill its process group (taking the PID namespace with it), and judge."""
    result_r, result_w = os.pipe()
    go_r, go_w = os.pipe()
    stack.callback(os.close, result_r)
    stack.callback(os.close, go_w)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [
                iso.python,
                "-S",
                "-s",
                "-P",
                "-B",
                str(LAYOUT),
                "run",
                json.dumps(public),
                str(secret_fd),
                str(result_w),
                str(go_r),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(secret_fd, result_w, go_r),
            cwd=workdir,
            env=_base_env(workdir),
            start_new_session=True,
        )
    finally:
        os.close(result_w)
        os.close(go_r)
    # Moving a process into a cgroup waits for the kernel (an RCU grace period, ~10 ms): done here
    # while the layout's interpreter starts, which waits for the word before it forks anything.
    for cgroup in filter(None, (public["cgroup"], public["cpu_cgroup"])):
        try:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(proc.pid))
        except OSError as exc:
            _stop(proc)
            raise SandboxError(f"sandbox setup failed: could not move the run into {cgroup} ({exc!r})") from exc
    os.write(go_w, b"1")
    with proc:
        assert proc.stdout is not None and proc.stderr is not None
        pipes = (proc.stdout.fileno(), proc.stderr.fileno(), result_r)
        try:
            out = _collect(pipes, lambda: _has_exited(proc.pid), start + timeout_s, output_limit, max_output_bytes)
        finally:
            exit_code = _stop(proc)
            if iso.privilege == "uid-drop" and not iso.pid_namespace:
                _kill_uid(iso.python, public["uid"])
    stderr = out.stderr.decode("utf-8", "replace")
    verdict = verdicts.read_verdict(out, token, exit_code, timeout_s, max_output_bytes, stderr)
    return Execution(
        verdict,
        out.stdout.decode("utf-8", "replace"),
        stderr,
        exit_code,
        out.timed_out,
        time.monotonic() - start,
        workdir,
        public["uid"],
    )


def _collect(
    pipes: tuple[int, int, int],
    exited: Callable[[], bool],
    deadline: float,
    output_limit: int,
    max_output_bytes: int,
) -> _Collected:
    """Read a run's stdout, stderr and result pipes as data arrives, keeping the first
    `output_limit` bytes of stdout and stderr. Done when every pipe is closed (with a PID namespace
    that is when the run ended), when `exited()` and the pipes stayed open EXIT_GRACE_S longer (a
    leftover process holds them), at the deadline, or once the output passes `max_output_bytes`."""
    names = dict(zip(pipes, ("stdout", "stderr", "result")))
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
            if exited_at is None and exited():
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
