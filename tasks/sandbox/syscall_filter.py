"""The system-call filter the sandbox's candidate process runs under: calls a test program never
needs are refused with EPERM (clone3 with ENOSYS, so that libc falls back to clone, whose flags a
filter can read). Built here with libseccomp (through `pyseccomp`, an API-compatible ctypes
binding) and handed to the sandbox as raw BPF, since the sandbox's interpreter has no
site-packages. docs/sandbox.md says what each group closes."""

from __future__ import annotations

import errno
import functools
import logging
import tempfile

log = logging.getLogger(__name__)

REFUSED = (
    # new namespaces (a user namespace gives full capabilities inside it), and entering others'
    "unshare",
    "setns",
    # another process's memory
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    # the kernel keyring: it is per uid, so a run could leave data for the next on its slot
    "keyctl",
    "add_key",
    "request_key",
    # memory the address-space limit does not count
    "memfd_create",
    "memfd_secret",
    # SysV IPC, which outlives processes (the IPC namespace is the other lock on it)
    "shmget",
    "shmat",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    # filesystems and the machine
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "open_tree",
    "move_mount",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "acct",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "vhangup",
    # kernel interfaces with their own attack surface, or that bypass this filter
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "fanotify_init",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "lookup_dcookie",
    "personality",
    # whether another run read a file: its pages' presence in the shared page cache (preadv2's
    # RWF_NOWAIT below); and the whole machine's process count and free memory
    "mincore",
    "cachestat",
    "sysinfo",
)
RWF_NOWAIT = 0x8
"""preadv2/pwritev2 flag: fail instead of waiting for the disk, which tells a cached page apart."""
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME: refused in clone's flags."""
AF_INET, AF_INET6 = 2, 10
"""The only socket families allowed (the network namespace has no interface): no AF_UNIX socket can
reach a listener on the host's filesystem, no netlink, no raw packets. socketpair stays allowed."""


@functools.cache
def syscall_filter() -> bytes | None:
    """The filter as BPF bytes (a sock_filter array), or None where libseccomp is missing
    (logged once: the sandbox then runs without one)."""
    try:
        import pyseccomp as seccomp

        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        refuse = seccomp.ERRNO(errno.EPERM)
        for name in REFUSED:
            try:
                rules.add_rule(refuse, name)
            except (ValueError, RuntimeError, OSError):  # a call this libseccomp does not know yet
                if name != "cachestat":
                    raise
        for name in ("preadv2", "pwritev2"):  # flags: the sixth argument
            rules.add_rule(refuse, name, seccomp.Arg(5, seccomp.MASKED_EQ, RWF_NOWAIT, RWF_NOWAIT))
        for flag in NAMESPACE_FLAGS:
            rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.LT, AF_INET))
        rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.GT, AF_INET6))
        for family in range(AF_INET + 1, AF_INET6):
            rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.EQ, family))
        with tempfile.TemporaryFile() as f:
            rules.export_bpf(f)
            f.seek(0)
            return f.read()
    except (ImportError, AttributeError, OSError, RuntimeError, ValueError) as exc:
        log.warning("sandbox: no system-call filter (libseccomp unavailable: %r)", exc)
        return None
