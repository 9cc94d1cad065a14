"""The process layout inside a run: confine it, start the candidate, then judge its program.

Started through `start.py` (so that this file's compiled form is cached) with a scrubbed
environment, the working directory as cwd and standard library only (-S keeps site-packages, and
with them the harness's own code, out of the sandbox):

    start.py run PUBLIC_JSON SECRET_FD RESULT_FD GO_FD   one run (the per-run path), in a new session
    start.py serve CONFIG_JSON                     a worker of the batched path (`serve`)
    start.py probe NAMESPACES                      exit 0 if the kernel lets us enter them

A run's description comes in two parts. The public part (limits, namespaces, the view, the uid:
nothing the program may not know) is all this file's processes ever read. The secret part (the
program, the tests, the prompt, the run's token) is an unlinked file the harness wrote, open on
SECRET_FD, read only by the judge, after the candidate exists. So the candidate, a fork of these
processes, holds nothing of the tests or the token, nor of any other run (a worker reads no run's
program, output or tests: the harness collects the pipes itself), and needs no interpreter of its
own.

Process layout:

    outer      the harness's child (trusted)   memory and CPU groups, unshare(namespaces), fork, wait
    pid 1      init of the new PID namespace   private /proc, tmpfs and view; fork the candidate, then
                                               the judge; reap; report the candidate's end to the
                                               judge; exit with the judge's status
    candidate  pid 2, untrusted                limits, chroot into the view, private uid, filter,
                                               then runs the program and answers the judge's calls
    judge      pid 3, trusted                  reads the secret part, runs the tests (`judge.py`),
                                               writes the verdict

Why pid 1: when pid 1 of a PID namespace exits, the kernel kills every process in it and waits for
them, so a fork bomb or a daemon left behind dies with the run, even one that called setsid() to
leave the process group. The outer and pid 1 run only this file's code and never leave the
harness-made process group, so the harness's killpg() at the deadline always reaches pid 1.
Without a PID namespace (the kernel refused one) the same layout still runs; cleanup then relies on
killpg() and, as root, on killing everything of the run's private uid.

Result protocol on RESULT_FD (which only the judge and this file's processes hold; the candidate
closes it before it runs anything of the program's), one JSON object a line: the judge's records
carry the run's token: {"phase": "program"} and {"phase": "tests"} as each part starts, then
exactly one of {"fail": KIND, "message": TEXT} or {"passed": true}. {"error": TEXT} without a token,
before any of the judge's, says that confinement itself failed.
"""

import json
import os
import select
import signal
import sys

from rlvr_sandbox.candidate import main as candidate_main
from rlvr_sandbox.judge import _run_judge
from rlvr_sandbox.kernel import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    _apply_rlimits,
    _die_with_parent,
    _drop_capabilities,
    _enter,
    _exit_code,
    _join_cgroups,
    _libc_call,
    _load_filter,
    _mount_private_proc,
    _mount_private_tmp,
    _mount_view,
    _namespaces,
    _unshare,
    _view_plan,
)


def _setup_failed(fd, exc):
    """Report that confinement itself failed, and exit. No untrusted code has run yet in this
    run's processes, and none ever holds `fd`, so the record needs no token."""
    try:
        os.write(fd, (json.dumps({"error": f"sandbox setup failed: {exc!r}"}) + "\n").encode())
    except BaseException:  # noqa: BLE001, S110 - the harness sees the exit status instead
        pass
    os._exit(70)


def _init(job, secret_fd, fd, outer_pid, alive_fd=None):
    """pid 1 (of the new PID namespace when there is one): make the run's filesystem, start the
    candidate, then become the judge, whose exit kills whatever is left. `alive_fd` (a worker's
    job) is the read end of a pipe only the outer holds open: readable (EOF) means the outer died
    before our prctl."""
    _die_with_parent(None if "pid" in job["unshare"] else outer_pid)
    # in the memory group, the run's processes go before the outer or the worker (which may serve
    # the next job); the candidate raises its own to 1000, the first choice
    _oom_score_adj(500)
    if alive_fd is not None:
        if select.select([alive_fd], [], [], 0)[0]:
            os._exit(70)
        os.close(alive_fd)
    if "mount" in job["unshare"]:
        _mount_private_proc()
        _mount_private_tmp(job["tmp_mb"], job["uid"])
        if job.get("view") is not None:
            job["view_root"] = _mount_view(job["view"], os.getcwd())  # the candidate chroots into it
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    candidate = os.fork()
    if candidate == 0:
        _start_candidate(job, requests_r, answers_w)
    os.close(requests_r)
    os.close(answers_w)
    _run_judge(job, secret_fd, fd, candidate, requests_w, answers_r)


def _start_candidate(job, requests_r, answers_w):
    """The candidate's side of pid 1's fork (pid 2): its descriptors (stdout, stderr, requests on
    3, answers on 4, nothing else of the run's: not the result pipe, not the secret part), its
    limits, the OOM killer's first choice, the view (chroot), the private uid, no_new_privs, the
    system-call filter; then it runs the program (`candidate.main`). The memory and CPU groups are
    already ours: the outer or the worker joined them before forking."""
    try:
        high = [os.dup(requests_r), os.dup(answers_w)]  # either may be 3 or 4 already
        for target, fd in zip((3, 4), high):
            os.dup2(fd, target)
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 4:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        _apply_rlimits(job["rlimits"])
        # what a stdio case leaves running becomes ours once its parent is gone (`candidate._end_leftovers`)
        _libc_call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _oom_score_adj(1000)  # the OOM killer's first choice in its memory cgroup, not the judge
        if job.get("view_root"):
            workdir = os.getcwd()
            os.chroot(job["view_root"])  # the minimal view (`kernel._mount_view`), the same paths inside
            os.chdir(workdir)
        if job["uid"] is not None:
            os.setgroups([])
            os.setgid(job["gid"])
            os.setuid(job["uid"])
        _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary (su, mount) regains root
        _libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
        if "user" in job["unshare"]:
            _drop_capabilities()
        if job["seccomp"]:
            _load_filter(bytes.fromhex(job["seccomp"]))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if "random" in sys.modules:  # a fresh interpreter's state, not the one every fork shares
            sys.modules["random"].seed()
    except BaseException as exc:  # noqa: BLE001 - the judge reports a candidate that did not start
        try:
            os.write(2, f"sandbox: the candidate did not start: {exc!r}\n".encode())
        finally:
            os._exit(71)
    try:
        candidate_main()
    finally:
        os._exit(70)


def _oom_score_adj(value):
    """How readily the OOM killer picks this process (-1000..1000); only raised here (lowering it
    needs CAP_SYS_RESOURCE, which a container may lack)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


def _wait_and_exit(child):
    os._exit(_exit_code(os.waitpid(child, 0)[1]))


def run(public_json, secret_fd, fd, go_fd):
    # The harness stops a run with SIGTERM to this process: we SIGKILL pid 1 and reap it. pid 1's
    # exit completes only once every process of its namespace is gone, so when we exit the run
    # is over, with no process left to race the harness's cleanup.
    init = []
    signal.signal(signal.SIGTERM, lambda *_: os.kill(init[0], signal.SIGKILL) if init else os._exit(124))
    job = json.loads(public_json)
    import gc

    gc.freeze()  # what is loaded now stays out of every collection: the forks copy less of it
    try:
        _die_with_parent(job["harness_pid"])
        # the harness moves us into the slot's cgroups meanwhile, and says so (nothing on EOF: it is gone)
        if os.read(go_fd, 1) != b"1":
            os._exit(70)
        os.close(go_fd)
        _unshare(job["unshare"])
        # Without a PID namespace or a private uid the candidate could otherwise read our
        # descriptors (the result pipe) through /proc; pid 1 and the judge inherit this.
        # After the unshare: a user namespace's uid_map is written while we are still dumpable.
        _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
        _setup_failed(fd, exc)
    outer_pid = os.getpid()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            _init(job, secret_fd, fd, outer_pid)
        except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
            _setup_failed(fd, exc)
    init.append(child)
    os.close(secret_fd)
    _wait_and_exit(child)


# --- the batched path: one confined worker serving many jobs ------------------------------------

REAP_GRACE_S = 2.0  # how long a killed job may take to be gone before the worker gives up
CHANNEL = 0  # the worker's end of its socket with the harness (its stdin)


def serve(config_json):
    """A worker: join its uid slot's memory and CPU groups, become the subreaper of its jobs,
    preload what every job needs, then run the jobs the harness sends on the channel (a
    SOCK_SEQPACKET socket on fd 0), one at a time. A job is its public part (JSON) with four
    descriptors: the job's stdout, stderr and result pipes, and its secret part. The worker never
    reads what flows through them (the harness collects the pipes): it enters the job's new
    namespaces, forks the job's pid 1 into them and returns to its own; once pid 1 has exited, or
    the harness said {"kill": true}, it kills the job's process group, reaps everything, removes
    the job's files, and answers {"done": EXIT_CODE}. Per job:

        worker     root                              unshare(net, pid, mount, ipc), fork, setns back,
                                                     wait, clean up
        pid 1      the judge, as `_init`             own process group; view; fork the candidate
        candidate  pid 2, untrusted                  as `_start_candidate`

    The worker exits when the channel closes (the harness exited or closed the pool), even mid-job.
    """
    import socket

    config = json.loads(config_json)
    channel = socket.socket(fileno=os.dup(CHANNEL))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    try:
        _join_cgroups(config["cgroup"], config["cpu_cgroup"])
        _unshare(config["unshare"])
        _libc_call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # what a job's pid 1 leaves is ours to reap
        home = _namespaces(config["job_unshare"])  # to come back to after each job's fork
        import ast  # noqa: F401 - preloaded: each job's judge needs them
        import errno  # noqa: F401
        import marshal  # noqa: F401
        import time  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's
        channel.send(json.dumps({"error": f"sandbox setup failed: {exc!r}"}).encode())
        os._exit(70)
    import gc

    gc.freeze()  # what is loaded now stays out of every collection: the jobs' forks copy less of it
    channel.send(b'{"ready": true}')
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 4)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the harness is gone
        job = json.loads(message)
        if "kill" in job:  # for a job that had ended meanwhile
            for fd in fds:
                os.close(fd)
            continue
        if job.get("view") is not None:
            _view_plan(tuple(job["view"]))  # worked out here once: every job's pid 1 forks from us
        try:
            exit_code = _serve_job(job, fds, channel, config["uid"], home)
        except Exception as exc:  # noqa: BLE001 - the harness replaces a worker that reports this
            channel.send(json.dumps({"fatal": repr(exc)}).encode())
            os._exit(70)
        if exit_code is None:  # the harness is gone
            os._exit(0)
        channel.send(json.dumps({"done": exit_code}).encode())


def _serve_job(job, fds, channel, uid, home):
    """Run one job to its end; its exit status, or None if the harness went away meanwhile. The
    worker enters the job's new namespaces itself, forks the job's pid 1 into them, and goes back
    to its own (`home`): no process between the worker and pid 1."""
    stdout_w, stderr_w, result_w, secret_fd = fds
    alive_r, alive_w = os.pipe()  # held open here until the job is over: pid 1 sees EOF if we die
    _unshare(job["unshare"])
    try:
        pid = os.fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)  # the worker's killpg reaches pid 1, never itself
                os.dup2(stdout_w, 1)
                os.dup2(stderr_w, 2)
                for name in os.listdir("/proc/self/fd"):  # the channel, the other jobs' nothing
                    if int(name) not in (0, 1, 2, result_w, secret_fd, alive_r):
                        try:
                            os.close(int(name))
                        except OSError:
                            pass
                os.chdir(job["workdir"])
                os.environ.clear()
                os.environ.update(job["env"])
                _init(job, secret_fd, result_w, None, alive_r)
            except BaseException as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
                _setup_failed(result_w, exc)
    finally:
        _enter(home)
    try:
        os.setpgid(pid, pid)  # both sides set it: whichever runs first
    except OSError:
        pass
    for fd in (*fds, alive_r):
        os.close(fd)
    harness_gone = _wait_for_end(pid, channel)
    exit_code = _end_job(pid)
    os.close(alive_w)
    if not ("mount" in job["unshare"] and "pid" in job["unshare"] and _removed(job["workdir"])):
        _clean_up(uid, job["workdir"], job["leftover_dirs"])
    return None if harness_gone else exit_code


def _removed(workdir):
    """Whether the working directory was empty, and is gone: with a mount namespace the job wrote
    only to its own tmpfs, and with a PID namespace none of its processes is left, so there is
    nothing else to clean up."""
    try:
        os.rmdir(workdir)
    except OSError:
        return False
    return True


def _wait_for_end(pid, channel):
    """Until the job's pid 1 exits or the harness says kill; True if the harness closed the channel."""
    import socket

    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(channel.fileno(), select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == pidfd:
                    return False
                message, fds, _, _ = socket.recv_fds(channel, 1 << 10, 4)
                for extra in fds:
                    os.close(extra)
                if not message:
                    return True
                if b"kill" in message:
                    return False
    finally:
        os.close(pidfd)


def _end_job(pid):
    """SIGKILL the job's process group (pid 1, whose death empties its PID namespace), reap it,
    then reap every other child we have (as the subreaper) until none is left: then no process of
    the job exists. Returns pid 1's exit status (the judge's)."""
    import time

    try:
        os.killpg(pid, signal.SIGKILL)  # pid 1 is unreaped, so its pid (the group id) is still ours
    except (ProcessLookupError, PermissionError):
        pass
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


def _clean_up(uid, workdir, directories):
    """In a child, so that not even the names of the job's files enter the worker's memory (every
    later job forks from it): remove the working directory and whatever the private uid created in
    `directories` (the world-writable ones), then SIGKILL every process of the uid (kill(-1) as
    that uid: with a PID namespace per job nothing should be left; this makes sure)."""
    pid = os.fork()
    if pid == 0:
        try:
            _remove_leftovers(workdir, uid, directories)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:  # noqa: BLE001, S110 - ESRCH: nothing to kill
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _remove_leftovers(workdir, uid, directories):
    """The job's working directory and whatever the private uid created in `directories` (the
    world-writable ones). Runs after every process of the job is dead."""
    _remove_tree(workdir)
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def _remove_tree(path):
    """Remove a tree of any depth; never raises. Usually the directory is empty (the job worked
    in its private tmpfs); shutil.rmtree recurses (RecursionError past ~1000 levels before Python
    3.12), so what it leaves goes to `rm -rf`, which walks any depth."""
    import shutil

    try:
        os.rmdir(path)
        return
    except OSError:
        pass
    try:
        shutil.rmtree(path)
    except Exception:  # noqa: BLE001, S110
        pass
    if os.path.lexists(path):
        import subprocess

        try:
            subprocess.run(["rm", "-rf", "--", path], capture_output=True, timeout=60, check=False)
        except Exception:  # noqa: BLE001, S110
            pass


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


def main(argv):
    if argv[0] == "probe":
        try:
            probe([n for n in argv[1].split(",") if n])
        except OSError:
            os._exit(1)
    elif argv[0] == "serve":
        serve(argv[1])
    else:
        run(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))
