"""The host's side of a run: what the kernel and privileges allow (probed once per process), the
private uid slots, a job's description, and the cleanup after it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tasks.sandbox.syscall_filter import syscall_filter
from tasks.sandbox.verdict import SandboxError, StdioCases, Tests

log = logging.getLogger("tasks.sandbox")

LAYOUT = Path(__file__).with_name("start.py")  # the sandbox's command line (`layout.main`)
MEMORY_CGROUP_V1 = "/sys/fs/cgroup/memory"
CPU_CGROUP_V1 = "/sys/fs/cgroup/cpu"
SYSTEM_VIEW = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/localtime")
"""What of the host every candidate sees (read-only), besides its interpreter's own prefix: the
programs and shared libraries an interpreter needs, the loader's cache and the time zone."""
SANDBOX_UID_BASE = 2_000_000_000  # far above real users and the usual subordinate-id ranges
UID_SLOTS = 1024
WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3")


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
    """Whether the candidate runs under `tasks.sandbox.syscall_filter` (libseccomp found)."""
    cpu_cgroup: str | None = None
    """The cgroup (v1 cpu controller) under which each uid slot gets a CPU group of its own (one
    share, however many processes or sessions the program makes); None: no CPU isolation."""
    view: tuple[str, ...] = ()
    """The host paths the candidate sees, read-only (`kernel._mount_view`), where it has a mount
    namespace: SYSTEM_VIEW and the interpreter's prefix. Empty without a mount namespace."""

    @property
    def pid_namespace(self) -> bool:
        return "pid" in self.unshare


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


def _probe() -> Isolation:
    root = os.geteuid() == 0
    if root:
        python = _python_for_uid(SANDBOX_UID_BASE + UID_SLOTS)  # a uid outside the pool: never in use
        base: tuple[str, ...] = ()
    else:
        python, base = os.path.realpath(sys.executable), ("user",)  # a virtual environment's base
    _compile_sandbox(python)
    extras = {
        "memory_cgroup": _cgroup_root(MEMORY_CGROUP_V1, "memory.limit_in_bytes") if root else None,
        "cpu_cgroup": _cgroup_root(CPU_CGROUP_V1, "cpu.shares") if root else None,
        "syscall_filter": syscall_filter() is not None,
    }
    for extra in (("net", "pid", "mount", "ipc"), ("net", "pid", "mount"), ("net", "pid"), ("net",)):
        if _namespaces_work(python, base + extra):
            view = _view(python) if "mount" in extra else ()
            return Isolation("uid-drop" if root else "userns", base + extra, "netns", python, **extras, view=view)
    return Isolation("uid-drop" if root else "none", (), "socket-blocked", python, **extras)


def _cgroup_root(root: str, knob: str) -> str | None:
    """Where slot cgroups can be made: a v1 hierarchy, if we can make one there with `knob`."""
    probe = os.path.join(root, f"rlvr-sandbox-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        ok = os.path.exists(os.path.join(probe, knob))
        os.rmdir(probe)
    except OSError:
        return None
    return root if ok else None


def _view(python: str) -> tuple[str, ...]:
    """SYSTEM_VIEW and what of the interpreter lies outside it (its prefix: pyenv's, a /opt build)."""
    done = subprocess.run(
        [python, "-S", "-s", "-P", "-B", "-c", "import sys; print(sys.base_prefix)"],
        env=_base_env("/"),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    own = [done.stdout.strip(), os.path.dirname(python)]
    system = [p for p in SYSTEM_VIEW if os.path.lexists(p)]
    inside = lambda path: any(path == s or path.startswith(s + "/") for s in system)  # noqa: E731
    return tuple(system + sorted({p for p in own if p.startswith("/") and not inside(os.path.realpath(p))}))


def _slot_cpu_cgroup(iso: Isolation, uid: int | None, known: dict | None = None) -> str | None:
    """The CPU group of a uid slot, made on first use with the default share: what a program
    runs in, and the harness's own processes, each get their share of the CPU beside it. `known`:
    what this holder of the slot has set up already (a worker holds its slot for its life)."""
    if iso.cpu_cgroup is None or uid is None:
        return None
    path = os.path.join(iso.cpu_cgroup, f"rlvr-sandbox-{uid}")
    if known is not None and path in known:
        return path
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        log.warning("sandbox: no CPU group for uid %s (%r)", uid, exc)
        return None
    if known is not None:
        known[path] = True
    return path


def _slot_cgroup(iso: Isolation, uid: int | None, limit_mb: int, known: dict | None = None) -> str | None:
    """The memory cgroup of a uid slot, made on first use, limited to `limit_mb` (swap included,
    where the kernel accounts it) for this run. Kept between runs: once a run's processes are
    gone and its tmpfs freed, it holds nothing. `known`: the limits this holder of the slot has
    set already (a worker holds its slot for its life: the limit is written when it changes)."""
    if iso.memory_cgroup is None or uid is None:
        return None
    path = os.path.join(iso.memory_cgroup, f"rlvr-sandbox-{uid}")
    if known is not None and known.get(path) == limit_mb:
        return path
    limit = str(limit_mb << 20)
    try:
        os.makedirs(path, exist_ok=True)
        with contextlib.suppress(OSError), open(os.path.join(path, "memory.limit_in_bytes")) as f:
            if int(f.read()) == limit_mb << 20:  # as the last holder of the slot left it
                if known is not None:
                    known[path] = limit_mb
                return path
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
    if known is not None:
        known[path] = limit_mb
    return path


def _namespaces_work(python: str, names: tuple[str, ...]) -> bool:
    cmd = [python, "-S", "-s", "-P", "-B", str(LAYOUT), "probe", ",".join(names)]
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
    known: dict | None = None,
) -> tuple[dict, dict]:
    """A run's description in its two parts (the same for both paths, `layout.py` says why): the
    public part, which the sandbox's processes read (limits, namespaces, view, uid), and the
    secret part, which only the judge reads (the program, the tests, the prompt, the token)."""
    bpf = syscall_filter() if iso.syscall_filter else None
    public = {
        "seccomp": bpf.hex() if bpf is not None else None,
        "tmp_mb": file_size_mb,
        "cgroup": _slot_cgroup(iso, uid, memory_mb + file_size_mb, known),
        "cpu_cgroup": _slot_cpu_cgroup(iso, uid, known),
        "view": list(iso.view) if "mount" in iso.unshare else None,
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
    secret = {
        "token": secrets.token_hex(16),
        "program": program,
        "tests": tests if isinstance(tests, str) else "",
        "cases": tests.job() if isinstance(tests, StdioCases) else None,
        "prompt": prompt,
    }
    return public, secret


def _secret_file(secret: dict) -> int:
    """A descriptor of the secret part, in a file with no name (memfd; where there is none, a file
    unlinked at once in the harness's private directory): only the descriptor, which the judge
    inherits, reaches it. Memory, not disk: no journal written, no inode to evict at its close."""
    data = json.dumps(secret).encode()
    try:
        fd = os.memfd_create("rlvr-job")
    except (AttributeError, OSError):
        with tempfile.TemporaryFile(dir=_private_dir(), prefix="job-") as f:
            fd = os.dup(f.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)  # the descriptor shares this offset: the judge reads from the start
    except BaseException:
        os.close(fd)
        raise
    return fd


def _compile_sandbox(python: str) -> None:
    """Cache the sandbox's own modules compiled by its interpreter (it runs them with -B, which
    reads a cache but never writes one): each run then starts without compiling them. Best effort:
    a read-only checkout only costs that time."""
    modules = [str(LAYOUT.with_name(name)) for name in ("layout.py", "judge.py", "candidate.py", "kernel.py")]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [
                python,
                "-S",
                "-s",
                "-P",
                "-c",
                "import py_compile, sys\nfor m in sys.argv[1:]: py_compile.compile(m)",
                *modules,
            ],
            env=_base_env("/"),
            cwd="/",
            capture_output=True,
            timeout=60,
            check=False,
        )


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
