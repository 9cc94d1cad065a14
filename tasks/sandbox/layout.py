"""The child side of `tasks.sandbox`: confine a run, then judge its program against its tests.

Started by the harness as `python -S -s -P -B layout.py run JOB_PATH RESULT_FD` (or
`probe NAMESPACES` to learn what the kernel allows, or `serve CONFIG` for a worker of the batched
path, see `serve`), in a new session, with a scrubbed environment and the fresh working directory
as cwd. Standard library only: -S keeps site-packages, and with them the harness's own code, out
of the sandbox.

Process layout:

    outer      the harness's child (trusted)   memory cgroup, unshare(namespaces), fork, wait, exit
    pid 1      init of the new PID namespace   private /proc and tmpfs, fork, reap, exit with the judge's status
    judge      pid 2, trusted                  runs the tests (`judge.py`), writes the verdict
    candidate  its child, untrusted            limits, private uid, filter, then a fresh interpreter that
                                               runs the program and answers the judge's calls

Why pid 1: when pid 1 of a PID namespace exits, the kernel kills every process in it and waits for
them, so a fork bomb or a daemon left behind dies with the run, even one that called setsid() to
leave the process group. The outer and pid 1 run only this file's code and never leave the
harness-made process group, so the harness's killpg() at the deadline always reaches pid 1.
Without a PID namespace (the kernel refused one) the same layout still runs; cleanup then relies on
killpg() and, as root, on killing everything of the run's private uid.

Result protocol on RESULT_FD (which only the judge and this file's processes hold), one JSON object
a line, each with the run's token: {"phase": "program"} and {"phase": "tests"} as each part starts,
then exactly one of {"fail": KIND, "message": TEXT} or {"passed": true}, or {"error": TEXT} if
confinement itself failed (before any phase). The token is a per-run secret read from the job file
(unlinked before untrusted code runs); the candidate is a fresh interpreter that never holds it.
"""

import contextlib
import json
import os
import select
import signal
import sys


def _as_package():
    """This folder as a package of its own (`rlvr_sandbox`), found through the package's path and
    never through sys.path: the tests' `import math` or `import code` must find the standard
    library's, not a module of the project (tasks/math.py, tasks/code.py)."""
    import types

    package = types.ModuleType("rlvr_sandbox")
    package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules["rlvr_sandbox"] = package


_as_package()
from rlvr_sandbox.judge import _candidate_code, _run_judge  # noqa: E402
from rlvr_sandbox.kernel import (  # noqa: E402
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    _die_with_parent,
    _exit_code,
    _join_cgroups,
    _libc_call,
    _mount_private_proc,
    _mount_private_tmp,
    _mount_view,
    _unshare,
)


def _init(job, token, fd, outer_pid, alive_fd=None):
    """pid 1 (of the new PID namespace when there is one): start pid 2, reap, and exit with its
    status, which kills whatever pid 2 left behind. `alive_fd` (a worker's job) is the read end
    of a pipe only the outer holds open: readable (EOF) means the outer died before our prctl."""
    _die_with_parent(None if "pid" in job["unshare"] else outer_pid)
    if alive_fd is not None and select.select([alive_fd], [], [], 0)[0]:
        os._exit(70)
    if "mount" in job["unshare"]:
        _mount_private_proc()
        _mount_private_tmp(job["tmp_mb"], job["uid"])
        if job.get("view") is not None:
            job["view_root"] = _mount_view(job["view"], os.getcwd())  # the candidate chroots into it
    child = os.fork()
    if child == 0:
        if alive_fd is not None:
            os.close(alive_fd)
        if "pid" not in job["unshare"]:
            _die_with_parent(os.getppid())
        _run_judge(job, token, fd)
    token[:] = b"\0" * len(token)
    while True:
        pid, status = os.wait()
        if pid == child:
            os._exit(_exit_code(status))


def _setup_failed(fd, token, exc):
    """Report that confinement itself failed (a record with the run's token), and exit."""
    with contextlib.suppress(BaseException):
        os.write(
            fd,
            (json.dumps({"token": bytes(token).decode(), "error": f"sandbox setup failed: {exc!r}"}) + "\n").encode(),
        )
    os._exit(70)


def _wait_and_exit(child):
    os._exit(_exit_code(os.waitpid(child, 0)[1]))


def run(job_path, fd):
    # The harness stops a run with SIGTERM to this process: we SIGKILL pid 1 and reap it. pid 1's
    # exit completes only once every process of its namespace is gone, so when we exit the run
    # is over, with no process left to race the harness's cleanup.
    init = []
    signal.signal(signal.SIGTERM, lambda *_: os.kill(init[0], signal.SIGKILL) if init else os._exit(124))
    with open(job_path, "rb") as f:
        job = json.loads(f.read())
    os.unlink(job_path)  # gone before untrusted code runs; only this process's memory has the token
    token = bytearray(job.pop("token").encode())
    try:
        _die_with_parent(job["harness_pid"])
        _join_cgroups(job["cgroup"], job["cpu_cgroup"])
        _unshare(job["unshare"])
        # Without a PID namespace or a private uid the candidate could otherwise read our memory
        # (the token) and descriptors (the result pipe) through /proc; pid 1 inherits this.
        # After the unshare: a user namespace's uid_map is written while we are still dumpable.
        _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
        _setup_failed(fd, token, exc)
    outer_pid = os.getpid()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            _init(job, token, fd, outer_pid)
        except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
            _setup_failed(fd, token, exc)
    init.append(child)
    token[:] = b"\0" * len(token)
    _wait_and_exit(child)


# --- the batched path: one confined worker serving many jobs ------------------------------------

RESULT_LIMIT = 1 << 16  # the result pipe carries a few short JSON lines
EXIT_GRACE_S = 0.5  # after a job's outer exits, how long its pipes may take to close
POLL_S = 0.1
REAP_GRACE_S = 2.0  # how long a killed job may take to be gone before the worker gives up


def serve(config_json):
    """A worker: confine this process once (its uid slot's memory and CPU groups, child
    subreaper), compile the candidate and preload what every job needs, then run jobs read
    from stdin, one JSON line each, and answer each on stdout once the job is over in every sense:
    every process gone, its files removed.

    Per job:

        worker     root                              fork J, collect pipes, enforce the deadline
        J          root, own process group           unshare(net, pid, mount, ipc), fork, wait, exit
        pid 1      init of the job's PID namespace   as `_init` (private /proc, tmpfs and view)
        judge      pid 2, trusted                    as `judge._run_judge`
        candidate  its child, untrusted              a fresh interpreter, as for a per-run

    The worker exits when stdin closes (the harness exited or closed the pool), even mid-job.
    """
    config = json.loads(config_json)
    chan_in, chan_out = os.dup(0), os.dup(1)  # non-inheritable; jobs close them anyway
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    try:
        _candidate_code(config["candidate"])
        _join_cgroups(config["cgroup"], config["cpu_cgroup"])
        _unshare(config["unshare"])
        _libc_call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # a job's pid 1 whose J died is ours to reap
        import ast  # noqa: F401 - preloaded: each job's pid 2 needs them
        import shutil  # noqa: F401
        import traceback  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's
        _send(chan_out, {"error": f"sandbox setup failed: {exc!r}"})
        os._exit(70)
    _send(chan_out, {"ready": True})
    pending = bytearray()
    while True:
        line = _read_line(chan_in, pending)
        if line is None:
            os._exit(0)
        job = json.loads(line)
        line[:] = b"\0" * len(line)
        try:
            response = _serve_job(job, config["uid"], chan_in, pending)
        except Exception as exc:  # noqa: BLE001 - the harness replaces a worker that reports this
            _send(chan_out, {"fatal": repr(exc)})
            os._exit(70)
        if response is None:  # the harness is gone
            os._exit(0)
        _send(chan_out, response)


def _send(fd, record):
    data = memoryview((json.dumps(record) + "\n").encode())
    while data:
        data = data[os.write(fd, data) :]


def _read_line(fd, pending):
    """The next line from `fd` as a bytearray (the caller zeroes it: a job's line holds its token)."""
    while b"\n" not in pending:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        pending += chunk
    end = pending.index(b"\n")
    line = pending[:end]
    pending[: end + 1] = b"\0" * (end + 1)
    del pending[: end + 1]
    return line


def _serve_job(job, uid, chan_in, pending):
    """Run one job and return what it produced; None if the harness went away meanwhile."""
    token = bytearray(job.pop("token").encode())
    pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, result
    worker_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        result_w = pipes[2][1]
        try:
            os.setpgid(0, 0)  # the worker's killpg at the deadline reaches J and pid 1, never itself
            _die_with_parent(worker_pid)
            os.dup2(pipes[0][1], 1)
            os.dup2(pipes[1][1], 2)
            for name in os.listdir("/proc/self/fd"):  # the worker's channels, the other pipe ends
                if int(name) not in (0, 1, 2, result_w):
                    with contextlib.suppress(OSError):
                        os.close(int(name))
            os.chdir(job["workdir"])
            os.environ.clear()
            os.environ.update(job["env"])
            _unshare(job["unshare"])
            alive_r, alive_w = os.pipe()
            child = os.fork()
            if child == 0:
                os.close(alive_w)
                _init(job, token, result_w, None, alive_r)
            os.close(alive_r)
            token[:] = b"\0" * len(token)
            _wait_and_exit(child)
        except BaseException as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
            _setup_failed(result_w, token, exc)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # both sides set it: whichever runs first
    token[:] = b"\0" * len(token)
    del token
    for _, w in pipes:
        os.close(w)
    readers = [r for r, _ in pipes]
    try:
        kept, timed_out, overflow, harness_gone = _collect_job(
            pid, readers, job["timeout_s"], job["output_limit"], job["max_output_bytes"], chan_in, pending
        )
    finally:
        for r in readers:
            os.close(r)
        exit_code = _end_job(pid)
        _kill_uid(uid)
        _remove_leftovers(job["workdir"], uid, job["leftover_dirs"])
    if harness_gone:
        return None
    return {
        "stdout": kept["stdout"].decode("latin-1"),
        "stderr": kept["stderr"].decode("latin-1"),
        "result": kept["result"].decode("latin-1"),
        "timed_out": timed_out,
        "overflow": overflow,
        "exit_code": exit_code,
    }


def _collect_job(pid, readers, timeout_s, output_limit, max_output_bytes, chan_in, pending):
    """`tasks.sandbox._collect` for a job: read stdout, stderr and the result pipe as data
    arrives, keeping the first `output_limit` bytes of each output; done when every pipe is
    closed, when J exited and the pipes stayed open EXIT_GRACE_S longer, at the deadline, once
    the output passes `max_output_bytes`, or when the harness closes our stdin."""
    import time

    names = dict(zip(readers, ("stdout", "stderr", "result")))
    caps = {"stdout": output_limit, "stderr": output_limit, "result": RESULT_LIMIT}
    kept = {name: bytearray() for name in caps}
    total, exited_at = 0, None
    deadline = time.monotonic() + timeout_s
    poller = select.poll()
    for fd in (*readers, chan_in):
        poller.register(fd, select.POLLIN)
    open_fds = set(readers)
    while open_fds:
        now = time.monotonic()
        if exited_at is None and _has_exited(pid):
            exited_at = now
        end = deadline if exited_at is None else min(deadline, exited_at + EXIT_GRACE_S)
        if now >= end:
            return kept, exited_at is None, False, False
        for fd, _ in poller.poll(max(1, int(1000 * min(end - now, POLL_S)) + 1)):
            chunk = os.read(fd, 1 << 16)
            if fd == chan_in:
                if not chunk:
                    return kept, False, False, True
                pending += chunk
                continue
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            name = names[fd]
            kept[name] += chunk[: max(0, caps[name] - len(kept[name]))]
            if name != "result":
                total += len(chunk)
                if total > max_output_bytes:
                    return kept, False, True, False
    return kept, False, False, False


def _has_exited(pid):
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _end_job(pid):
    """SIGKILL the job's process group (J and pid 1; pid 1's death empties its PID namespace),
    reap J, then reap every other child we have (pid 1, if J died first and it was reparented to
    us, the subreaper) until none is left: then no process of the job exists. Returns J's exit
    status (pid 2's, as `run` reports it)."""
    import time

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # J is unreaped, so its pid (the group id) is still ours
    exit_code = _exit_code(os.waitpid(pid, 0)[1])
    give_up = time.monotonic() + REAP_GRACE_S
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                if time.monotonic() > give_up:
                    raise RuntimeError("a job's processes did not die")
                time.sleep(0.002)
        except ChildProcessError:
            return exit_code


def _kill_uid(uid):
    """SIGKILL every process of the private uid (kill(-1) as that uid): with a PID namespace per
    job nothing should be left, this makes sure."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:  # noqa: BLE001 - ESRCH: nothing to kill
            os._exit(1)
        os._exit(0)
    os.waitpid(pid, 0)


def _remove_leftovers(workdir, uid, directories):
    """The job's working directory and whatever the private uid created in `directories` (the
    world-writable ones). Runs after every process of the job is dead."""
    _remove_tree(workdir)
    for directory in directories:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        _remove_tree(entry.path)
                    else:
                        os.unlink(entry.path)


def _remove_tree(path):
    """Remove a tree of any depth; never raises. Usually the directory is empty (the job worked
    in its private tmpfs); shutil.rmtree recurses (RecursionError past ~1000 levels before Python
    3.12), so what it leaves goes to `rm -rf`, which walks any depth."""
    import shutil

    with contextlib.suppress(OSError):
        os.rmdir(path)
        return
    with contextlib.suppress(Exception):
        shutil.rmtree(path)
    if os.path.lexists(path):
        import subprocess

        with contextlib.suppress(Exception):
            subprocess.run(["rm", "-rf", "--", path], capture_output=True, timeout=60, check=False)


def probe(names):
    """Exit 0 if this kernel lets us enter `names` (and, with a mount namespace, mount /proc)."""
    _unshare(names)
    child = os.fork()
    if child == 0:
        try:
            if "mount" in names:
                _mount_private_proc()
        except OSError:
            os._exit(1)
        os._exit(0)
    _wait_and_exit(child)


if __name__ == "__main__":
    if sys.argv[1] == "probe":
        try:
            probe([n for n in sys.argv[2].split(",") if n])
        except OSError:
            os._exit(1)
    elif sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        run(sys.argv[2], int(sys.argv[3]))
