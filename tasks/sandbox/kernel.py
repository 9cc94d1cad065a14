"""Linux calls of the sandbox's trusted processes (`layout.py`, `judge.py`):
namespaces, mounts, prctl, capabilities, limits, cgroups and the system-call filter, through libc.
Standard library only: these run under `python -S`."""

import contextlib
import os
import resource
import signal

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

_libc = None  # loaded once per process (a worker's jobs reuse it)


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


NAMESPACE_FILES = {"mount": "mnt", "ipc": "ipc", "pid": "pid", "net": "net", "user": "user"}


def _namespaces(names):
    """{name: a descriptor of this process's namespace of that kind}, to come back to (`_enter`)."""
    return {name: os.open(f"/proc/self/ns/{NAMESPACE_FILES[name]}", os.O_RDONLY) for name in names}


def _enter(namespaces):
    """Enter the namespaces `_namespaces` returned (for "pid": the one our children are born in)."""
    for name, fd in namespaces.items():
        _libc_call("setns", fd, CLONE_FLAGS[name])


def _mount_private_proc():
    """A /proc of the new PID namespace: the sandbox sees only its own processes, not the
    harness's command lines or (same-uid) environments."""
    import ctypes

    _libc_call("mount", None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None)
    _libc_call("mount", b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None)


def _mount_process_view(target, masks):
    """This PID namespace's /proc at `target` with only its processes' entries (procfs's
    `subset=pid`, Linux 5.8): no /proc/sys (file-nr), loadavg, stat or meminfo, whose numbers are
    the whole machine's. On an older kernel, the whole /proc with an empty /proc/sys and /dev/null
    over each of `masks` (HOST_COUNTERS)."""
    import ctypes

    flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC)
    try:
        _libc_call("mount", b"proc", target.encode(), b"proc", flags, b"subset=pid")
        return
    except OSError:
        pass
    _libc_call("mount", b"/proc", target.encode(), None, ctypes.c_ulong(MS_BIND), None)
    again = ctypes.c_ulong(MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _libc_call("mount", None, target.encode(), None, again, None)
    empty = ctypes.c_ulong(MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _libc_call("mount", b"tmpfs", (target + "/sys").encode(), b"tmpfs", empty, b"size=4k,mode=555")
    for path in masks:
        _libc_call("mount", b"/dev/null", path.encode(), None, ctypes.c_ulong(MS_BIND), None)


PRIVATE_DIRS = ("/var/tmp", "/dev/shm", "/run/lock")  # besides /tmp: the world-writable directories
MS_BIND = 4096


def _mount_private_tmp(size_mb, uid):
    """One tmpfs of `size_mb` at /tmp, bound at the other world-writable directories too: what the
    run writes there is its own, counted against one size, and freed with its mount namespace.
    A working directory (our cwd) under one of them is made again inside, at the same path."""
    import ctypes

    workdir = os.getcwd()
    flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV)
    _libc_call("mount", b"tmpfs", b"/tmp", b"tmpfs", flags, f"size={size_mb}m,mode=1777".encode())
    for directory in PRIVATE_DIRS:
        if os.path.isdir(directory) and not os.path.islink(directory):
            inside = "/tmp/.private-" + directory.strip("/").replace("/", "-")
            os.mkdir(inside)
            os.chmod(inside, 0o1777)
            _libc_call("mount", inside.encode(), directory.encode(), None, ctypes.c_ulong(MS_BIND), None)
    if any(workdir.startswith(d + "/") for d in ("/tmp", *PRIVATE_DIRS)):
        os.makedirs(workdir, 0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
        os.chdir(workdir)


MS_RDONLY, MS_REMOUNT = 1, 32
VIEW_ROOT = "/tmp/.view"  # a mount point inside the private tmpfs (the view's own /tmp does not show it)
DEVICES = ("null", "zero", "full", "random", "urandom")
HOST_COUNTERS = (
    "loadavg",
    "stat",
    "meminfo",
    "vmstat",
    "diskstats",
    "interrupts",
    "softirqs",
    "schedstat",
    "zoneinfo",
    "buddyinfo",
    "pagetypeinfo",
    "slabinfo",
    "swaps",
    "locks",
    "key-users",
)
"""Files of /proc whose numbers are the whole machine's, not the run's PID namespace's (as lxcfs
and container runtimes mask them), masked where procfs has no `subset=pid` (`_mount_process_view`)."""


def _mount_view(paths, workdir):
    """The candidate's whole filesystem, as a tree under VIEW_ROOT to chroot into: `paths` of the
    host (the interpreter, its standard library and shared libraries; symlinks copied as symlinks)
    bound read-only, so that no read changes what a later run sees (a read-only mount updates no
    access time; reads of the devices set none either); a
    few devices; this namespace's /proc; the private /tmp and its binds; the working directory.
    Nothing else: not the project, the data beside it, home directories or /sys (where a cgroup's
    counters carry data from run to run). Returns the root."""
    import ctypes

    os.mkdir(VIEW_ROOT, 0o755)
    _libc_call(
        "mount", b"tmpfs", VIEW_ROOT.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), b"size=1m,mode=755"
    )
    steps = list(_view_plan(tuple(paths)))
    if not any(workdir == d or workdir.startswith(d + "/") for d in ("/tmp", *PRIVATE_DIRS)):
        # a working directory elsewhere (tmp_root)
        parts = workdir.strip("/").split("/")
        made = {step[1] for step in steps if step[0] == "dir"}
        for i in range(1, len(parts) + 1):
            inside = VIEW_ROOT + "/" + "/".join(parts[:i])
            if inside not in made:
                steps.append(("dir", inside))
        steps.append(("bind", workdir, VIEW_ROOT + workdir, MS_NOSUID | MS_NODEV))
    for step in steps:
        if step[0] == "dir":
            os.mkdir(step[1], 0o755)
        elif step[0] == "file":
            os.close(os.open(step[1], os.O_CREAT | os.O_WRONLY, 0o644))
        elif step[0] == "symlink":
            os.symlink(step[1], step[2])
        elif step[0] == "proc":
            _mount_process_view(step[1], step[2])
        else:
            _, source, target, flags = step
            _libc_call("mount", source.encode(), target.encode(), None, ctypes.c_ulong(MS_BIND), None)
            _libc_call("mount", None, target.encode(), None, ctypes.c_ulong(MS_REMOUNT | MS_BIND | flags), None)
    _libc_call(
        "mount",
        None,
        VIEW_ROOT.encode(),
        None,
        ctypes.c_ulong(MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV),
        b"size=1m,mode=755",
    )
    return VIEW_ROOT


_view_plans = {}


def _view_plan(paths):
    """The steps that build the view of `paths` in a fresh VIEW_ROOT: ("dir", PATH), ("file",
    PATH), ("symlink", TARGET, PATH), ("proc", PATH, MASKS) or ("bind", SOURCE, TARGET, FLAGS), in
    order. Worked out
    once per process from what the host has (a worker's jobs fork from it)."""
    if paths in _view_plans:
        return _view_plans[paths]
    steps, made = [], {VIEW_ROOT}

    def parents(inside):
        missing = []
        parent = os.path.dirname(inside)
        while parent not in made:
            missing.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(missing):
            steps.append(("dir", directory))
            made.add(directory)

    def place(path, directory):
        inside = VIEW_ROOT + path
        parents(inside)
        if directory:
            if inside not in made:
                steps.append(("dir", inside))
                made.add(inside)
        else:
            steps.append(("file", inside))
        return inside

    for path in paths:
        if os.path.islink(path):
            parents(VIEW_ROOT + path)
            steps.append(("symlink", os.readlink(path), VIEW_ROOT + path))
        elif os.path.exists(path):
            steps.append(("bind", path, place(path, os.path.isdir(path)), MS_RDONLY | MS_NOSUID | MS_NODEV))
    for name in DEVICES:
        steps.append(("bind", "/dev/" + name, place("/dev/" + name, False), MS_NOSUID | MS_NOEXEC))
    for name, target in (("fd", "fd"), ("stdin", "fd/0"), ("stdout", "fd/1"), ("stderr", "fd/2")):
        steps.append(("symlink", "/proc/self/" + target, VIEW_ROOT + "/dev/" + name))
    # the processes' part of /proc only: not the machine's counters, which a concurrent run moves
    masks = tuple(VIEW_ROOT + "/proc/" + name for name in HOST_COUNTERS if os.path.isfile("/proc/" + name))
    steps.append(("proc", place("/proc", True), masks))
    for directory in ("/tmp", *PRIVATE_DIRS):
        if os.path.isdir(directory) and not os.path.islink(directory):
            steps.append(("bind", directory, place(directory, True), MS_NOSUID | MS_NODEV))
    _view_plans[paths] = tuple(steps)
    return _view_plans[paths]


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


PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def _load_filter(bpf):
    """Load a system-call filter (BPF from `tasks.syscall_filter`); it cannot be removed, and
    every descendant inherits it. Needs no_new_privs (set just before)."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    program = SockFprog(len(bpf) // 8, bpf)
    _libc_call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0)


def _apply_rlimits(rlimits):
    for name, value in rlimits.items():
        _, hard = resource.getrlimit(RLIMITS[name])
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        # CPU: the kernel sends SIGKILL at the hard limit, SIGXCPU (reported as such) at the soft one.
        resource.setrlimit(RLIMITS[name], (cap, cap + 1 if name == "cpu" and cap < hard else cap))


def _join_cgroups(*cgroups):
    """Move this process into each of `cgroups` (None: none), before it forks anything: every
    process of the run starts in them (a move per job would cost a few milliseconds)."""
    for cgroup in filter(None, cgroups):
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def _oom_kills(cgroup):
    """How many processes the kernel's OOM killer has killed in `cgroup` (v1 memory.oom_control,
    v2 memory.events), 0 without one."""
    if not cgroup:
        return 0
    for name in ("memory.events", "memory.oom_control"):
        with contextlib.suppress(OSError, ValueError):
            with open(os.path.join(cgroup, name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
    return 0


def _exit_code(status):
    """A child's wait status as our own exit code, signals as 128 + N like a shell."""
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
