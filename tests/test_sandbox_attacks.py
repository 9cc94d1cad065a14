"""The attacks of issue #20, one class a test, through the per-run and the batched path: each ends
with reward 0 (a program whose tests only pass if the attack worked), within its time limit, with
nothing left running or on disk (`contained` checks those), and honest programs judged right
straight after."""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest
from test_sandbox import TIMEOUT, contained, pool  # noqa: F401 - fixtures

from tasks.base import Verdict
from tasks.sandbox import SandboxPool, isolation

filtered = pytest.mark.skipif(not isolation().syscall_filter, reason="no system-call filter here (libseccomp)")
x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="raw system-call numbers are x86_64's")


def honest_runs_judge_right(contained):  # noqa: F811
    assert contained("def f(x):\n    return x + 1\n", "assert f(1) == 2\n").verdict == Verdict(1.0, "all tests passed")
    assert contained("def f(x):\n    return x\n", "assert f(1) == 2\n").verdict == Verdict(
        0.0, "failed: assert f(1) == 2"
    )


# --- reward without solving the task ------------------------------------------------------------

# (program, tests it must not pass): each program solves nothing
REWARD_HACKS = {
    "always-equal": (
        "class Yes:\n    def __eq__(self, other):\n        return True\ndef f(xs):\n    return Yes()\n",
        "assert f([1, 2]) == 5\n",
    ),
    "always-equal-int": (
        "class Yes(int):\n    def __eq__(self, other):\n        return True\ndef f(xs):\n    return Yes(0)\n",
        "assert f([1, 2]) == 5\n",
    ),
    "patched-builtins": (  # on its first call, into the builtins its globals hold (the tests' too, in one interpreter)
        "def f(xs):\n"
        "    b = globals()['__builtins__']\n"
        "    (b if isinstance(b, dict) else vars(b))['abs'] = lambda x: 0\n"
        "    return 0\n",
        "f([0])\nassert abs(f([3]) - 7) < 1e-9\n",
    ),
    "patched-stdlib": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef f(xs):\n    return 0\n",
        "import math\nassert math.isclose(f([]), 1.5)\n",
    ),
    "stack-frames": (  # the judge's pass record, from a frame up the stack, written to every descriptor
        "import os, sys\n"
        "def f(xs):\n"
        "    frame = sys._getframe()\n"
        "    while frame is not None:\n"
        "        for value in list(frame.f_locals.values()):\n"
        "            if isinstance(value, (bytes, bytearray)) and b'pass' in value:\n"
        "                for fd in range(3, 64):\n"
        "                    try:\n"
        "                        os.write(fd, bytes(value))\n"
        "                    except OSError:\n"
        "                        pass\n"
        "        frame = frame.f_back\n"
        "    os._exit(0)\n",
        "assert f([1, 2]) == 5\n",
    ),
}


@pytest.mark.parametrize("program, tests", REWARD_HACKS.values(), ids=REWARD_HACKS.keys())
def test_reward_without_solving_the_task_is_zero(program, tests, contained):  # noqa: F811
    assert contained(program, tests).verdict.reward == 0.0
    honest_runs_judge_right(contained)


def test_the_judge_sees_exact_plain_types(contained):  # noqa: F811
    """A tuple is not a list, True is a bool, a nested dict comes back as it was: the canonical form
    keeps exact types, as the tests' comparisons expect."""
    program = "def f(x):\n    return x\ndef g():\n    return ((1, [2.5, None]), {'k': {True: b'v'}}, {3}, frozenset({4}), 'é\\udc80')\n"
    tests = (
        "assert f([1, 2]) == [1, 2] and type(f([1])) is list and type(f((1,))) is tuple\n"
        "assert type(f(True)) is bool and f(2**100) == 2**100\n"
        "assert g() == ((1, [2.5, None]), {'k': {True: b'v'}}, {3}, frozenset({4}), 'é\\udc80')\n"
    )
    assert contained(program, tests).verdict == Verdict(1.0, "all tests passed")


# --- the verify call never raises ---------------------------------------------------------------


def deep_tree(depth: int) -> str:
    return f"import os\nfor _ in range({depth}):\n    os.mkdir('d')\n    os.chdir('d')\n"


@pytest.mark.parametrize("mount", ["private tmp", "no mount namespace"])
def test_a_directory_chain_deeper_than_the_recursion_limit_is_removed(mount, contained):  # noqa: F811
    iso = isolation()
    override = dataclasses.replace(iso, unshare=tuple(n for n in iso.unshare if n != "mount"))
    run = contained(deep_tree(1500), FAILING_TESTS, isolation_override=override if mount != "private tmp" else None)
    assert run.verdict.reward == 0.0
    honest_runs_judge_right(contained)


FAILING_TESTS = "assert 1 + 1 == 3\n"

NESTED_LINES = {
    "answer-pipe": "import os\nos.write(4, b'[' * 100000 + b'\\n')\ndef f(xs):\n    return 5\n",
    "answer-in-call": "import os\ndef f(xs):\n    os.write(4, b'{\"value\": ' + b'[' * 100000 + b'\\n')\n    return 5\n",
    "every-fd": (
        "import os\ndef f(xs):\n    for fd in range(64):\n        try:\n"
        "            os.write(fd, b'{\"passed\": true, \"x\": ' + b'[' * 100000 + b'\\n')\n"
        "        except OSError:\n            pass\n    return 5\n"
    ),
    "huge-answer": "import os\ndef f(xs):\n    os.write(4, b'{\"value\": \"' + b'x' * (20 << 20))\n    return 5\n",
}


@pytest.mark.parametrize("program", NESTED_LINES.values(), ids=NESTED_LINES.keys())
def test_malformed_or_nested_answers_are_a_failure_not_an_exception(program, contained):  # noqa: F811
    run = contained(program, "assert f([1, 2]) == 5\n")
    assert run.verdict.reward == 0.0
    honest_runs_judge_right(contained)


# --- nothing crosses from one run to the next ---------------------------------------------------

RAW = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "args = [ctypes.c_char_p(a[2:].encode()) if a.startswith('s:') else ctypes.c_long(int(a)) for a in sys.argv[2:]]\n"
    "r = libc.syscall(int(sys.argv[1]), *args)\n"
    "print(r, ctypes.get_errno())\n"
)
SYSCALL = (
    "import subprocess, sys\n"
    f"RAW = {RAW!r}\n"
    "def syscall(nr, *args):\n"
    "    # a fresh interpreter of its own: no audit hook there, only what the kernel allows\n"
    "    out = subprocess.run([sys.executable, '-S', '-c', RAW, str(nr), *map(str, args)], capture_output=True, text=True)\n"
    "    return tuple(map(int, out.stdout.split()))\n"
)
ADD_KEY, KEYCTL, SHMGET, UNSHARE = 248, 250, 29, 272
KEY_SPEC_USER_KEYRING, KEYCTL_SEARCH = -4, 10


@x86_64
def test_the_kernel_keyring_carries_nothing_to_the_next_run(contained):  # noqa: F811
    secret = uuid.uuid4().hex[:12]
    plant = SYSCALL + f"r, err = syscall({ADD_KEY}, 's:user', 's:rlvr', 's:{secret}', 12, {KEY_SPEC_USER_KEYRING})\n"
    find = (
        SYSCALL
        + f"def found():\n    return syscall({KEYCTL}, {KEYCTL_SEARCH}, {KEY_SPEC_USER_KEYRING}, 's:user', 's:rlvr', 0)\n"
    )
    contained(plant + "assert r > 0, err\n")
    assert contained(find, "assert found()[0] > 0\n").verdict.reward == 0.0
    honest_runs_judge_right(contained)


@x86_64
@filtered
def test_keyring_calls_are_refused(contained):  # noqa: F811
    program = SYSCALL + f"r = syscall({KEYCTL}, 0, {KEY_SPEC_USER_KEYRING}, 0)\n"
    assert contained(program, "import errno\nassert r == (-1, errno.EPERM), r\n").verdict.reward == 1.0


@pytest.mark.parametrize("filter_", ["filtered", "IPC namespace alone"])
def test_sysv_shared_memory_does_not_outlive_a_run(filter_, contained):  # noqa: F811
    if "ipc" not in isolation().unshare:
        pytest.skip("the kernel refuses IPC namespaces")
    if filter_ == "filtered" and not isolation().syscall_filter:
        pytest.skip("no system-call filter here")
    override = None if filter_ == "filtered" else dataclasses.replace(isolation(), syscall_filter=False)
    before = subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout.count("0x")
    make = "import os\nmade = os.system('ipcmk -M 209715200 > /dev/null 2>&1') == 0\n"
    count = "import os\ndef segments():\n    return os.popen('ipcs -m').read().count('0x')\n"
    first = contained(make, "assert made\n", isolation_override=override)
    assert first.verdict.reward == (0.0 if filter_ == "filtered" else 1.0)  # refused, or made in its own namespace
    assert contained(count, "assert segments() > 0\n", isolation_override=override).verdict.reward == 0.0
    assert subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout.count("0x") == before
    honest_runs_judge_right(contained)


def test_tmp_and_shm_are_private_to_a_run(contained):  # noqa: F811
    marker = f"rlvr-attack-{uuid.uuid4().hex}"
    plant = "".join(f"open('{d}/{marker}', 'w').write('x')\n" for d in ("/tmp", "/dev/shm", "/var/tmp"))
    assert contained(plant).verdict.reward == 1.0
    assert not any(os.path.exists(f"{d}/{marker}") for d in ("/tmp", "/dev/shm", "/var/tmp"))
    look = f"import os\ndef seen():\n    return [d for d in ('/tmp', '/dev/shm', '/var/tmp') if os.path.exists(d + '/{marker}')]\n"
    assert contained(look, "assert seen()\n").verdict.reward == 0.0


# --- limits -------------------------------------------------------------------------------------

SHM_FILL = (
    "import os\n"
    "held = 0\n"
    "for i in range(13):\n"
    "    try:\n"
    "        with open(f'/dev/shm/fill{i}', 'wb') as f:\n"
    "            for _ in range(20):\n"
    "                f.write(bytes(1 << 20))\n"
    "                held += 1\n"
    "    except OSError:\n"
    "        break\n"
)


def test_memory_in_dev_shm_is_bounded(contained):  # noqa: F811
    """260 MiB into /dev/shm under a 64 MiB memory limit: its tmpfs (file_size_mb) and the memory
    cgroup bound it; the program's tests pass only if it held all of it."""
    run = contained(SHM_FILL, "assert held >= 260, held\n", memory_mb=64, file_size_mb=64)
    assert run.verdict.reward == 0.0
    honest_runs_judge_right(contained)


@filtered
def test_memfd_is_refused(contained):  # noqa: F811
    program = (
        "import os\ntry:\n    os.memfd_create('x')\n    refused = False\nexcept PermissionError:\n    refused = True\n"
    )
    assert contained(program, "assert refused\n").verdict == Verdict(1.0, "all tests passed")
    grab = "import os\nfd = os.memfd_create('x')\nos.ftruncate(fd, 260 << 20)\nos.write(fd, bytes(260 << 20))\n"
    assert contained(grab, memory_mb=64).verdict.reward == 0.0


# --- what is reachable from inside --------------------------------------------------------------


@filtered
@pytest.mark.parametrize("where", ["/run", "/tmp"])
def test_no_unix_socket_of_the_host_is_reachable(where, contained):  # noqa: F811
    directory = os.path.join(where, f"rlvr-attack-{uuid.uuid4().hex[:8]}")
    os.mkdir(directory)
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "s")
    got: list[bytes] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(path)
            os.chmod(path, 0o777)
            server.listen()
            server.settimeout(TIMEOUT + 1)

            def accept():
                try:
                    conn, _ = server.accept()
                    got.append(conn.recv(100))
                except OSError:
                    pass

            listener = threading.Thread(target=accept)
            listener.start()
            program = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\ns.sendall(b'hi')\n"
            run = contained(program)
            assert run.verdict.reward == 0.0
            server.close()
            listener.join()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert got == []
    honest_runs_judge_right(contained)


@x86_64
@filtered
def test_no_new_user_namespace(contained):  # noqa: F811
    """unshare(CLONE_NEWUSER) would give the program every capability inside it."""
    direct = SYSCALL + f"r = syscall({UNSHARE}, 0x10000000)\n"
    assert contained(direct, "assert r[0] == 0, r\n").verdict.reward == 0.0
    tool = "import os\nmade = os.system('unshare -U -r true > /dev/null 2>&1') == 0\n"
    assert contained(tool, "assert made\n").verdict.reward == 0.0
    honest_runs_judge_right(contained)


# --- forged feedback ----------------------------------------------------------------------------

FORGERIES = {
    "records-on-every-fd": (
        "import os\nfor fd in range(64):\n    try:\n"
        '        os.write(fd, b\'{"fail": "assert", "message": "FORGED credit text"}\\n\')\n'
        "    except OSError:\n        pass\n"
    ),
    "exception-text": "class Nice(Exception):\n    pass\nraise Nice('FORGED credit text')\n",
    "exception-in-call": "def f(xs):\n    raise ValueError('FORGED credit text')\n",
    "syntax-error-text": "from __future__ import FORGED_credit_text\n",
    "value-in-error": "def f(xs):\n    return 'FORGED credit text'\n",
}


@pytest.mark.parametrize("program", FORGERIES.values(), ids=FORGERIES.keys())
def test_the_program_cannot_write_its_own_feedback(program, contained):  # noqa: F811
    run = contained(program, "assert int(f([1])) == 5\n")
    assert run.verdict.reward == 0.0
    assert "FORGED" not in run.verdict.feedback, run.verdict.feedback


def test_setup_error_records_without_the_token_are_not_believed(contained):  # noqa: F811
    """A setup-error record would make the harness raise (the sandbox is broken): one the program
    writes, on any descriptor, is judged as the run it is instead."""
    program = (
        "import os\nfor fd in range(64):\n    try:\n"
        '        os.write(fd, b\'{"error": "forged"}\\n\')\n'
        "    except OSError:\n        pass\n"
    )
    run = contained(program)
    assert run.verdict.reward == 0.0 and "forged" not in run.verdict.feedback


@pytest.mark.parametrize("path", ["per-run", "batched"])
def test_anything_unexpected_in_judging_is_reward_zero_not_an_exception(path, monkeypatch):
    """Whatever goes wrong after the run (here the judging itself raising), the verify call
    returns an unjudged verdict and says so; the next run is judged as usual (batched: on a fresh worker)."""
    from tasks.sandbox import verdict

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    with SandboxPool(1, batched=path == "batched") as workers:
        with monkeypatch.context() as patch:
            patch.setattr(verdict, "read_verdict", broken)
            run = workers.execute("x = 1\n", "assert x == 1\n", TIMEOUT)
        # the sandbox's failure, not the program's: unjudged, so left out of the update (#33)
        assert run.verdict == Verdict(0.0, "the sandbox could not judge this run (RecursionError)", judged=False)
        assert workers.execute("x = 1\n", "assert x == 1\n", TIMEOUT).verdict == Verdict(1.0, "all tests passed")


# --- issue #33, classes 4-7: state across runs, the host's files, CPU, the judge's imports ------

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CGROUP_COUNTERS = """
def f():
    import os
    readable = []
    for root, dirs, files in os.walk('/sys/fs/cgroup'):
        if root.count('/') > 5:
            dirs[:] = []
        for name in files:
            if 'usage' in name or name in ('cpu.stat', 'memory.stat', 'memory.current', 'memory.peak'):
                try:
                    open(os.path.join(root, name)).read()
                    readable.append(os.path.join(root, name))
                except OSError:
                    pass
    return readable[:3]
"""


def test_no_cgroup_counter_is_readable(contained):  # noqa: F811
    """Class 4: a slot's peak memory (`memory.max_usage_in_bytes`) outlives its run, another slot's
    usage moves while it runs: both carry data from run to run. The program sees no cgroup file."""
    run = contained(CGROUP_COUNTERS, "assert f() == []\n")
    assert run.verdict == Verdict(1.0, "all tests passed"), run.verdict


NETWORK_COUNTER = """
def f():
    import socket
    def no_routes():
        try:
            rows = [line.split() for line in open('/proc/net/snmp') if line.startswith('Ip:')]
        except OSError:
            return 0
        return int(rows[1][rows[0].index('OutNoRoutes')])
    before = no_routes()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b'x', ('10.1.2.3', 9))
    except OSError:
        pass
    return before
"""


def test_network_counters_start_from_zero_in_every_run(contained):  # noqa: F811
    """Class 4: a network namespace's counters (`/proc/net/snmp`) count what every earlier run in
    it sent; a run signals the next by sending. Each run gets a namespace of its own."""
    for _ in range(2):
        run = contained(NETWORK_COUNTER, "assert f() == 0\n")
        assert run.verdict == Verdict(1.0, "all tests passed"), run.verdict


def test_reading_a_host_file_changes_nothing_a_later_run_can_see(contained):  # noqa: F811
    """Class 4: a read updated the file's access time (relatime: once it is older than the file's
    change), which a later run, or another harness, reads back. The host's files are seen through
    mounts that no read changes: read-only (a device's reads set no access time)."""
    probe = f"/usr/lib/rlvr-atime-probe-{uuid.uuid4().hex}"
    with open(probe, "w") as f:
        f.write("data\n")
    device = os.stat("/dev/zero")
    try:
        os.chmod(probe, 0o644)
        for path in (probe, "/dev/zero"):
            st = os.stat(path)
            os.utime(path, ns=(st.st_mtime_ns - 10**11, st.st_mtime_ns))  # access time before the change
        before = [os.stat(path).st_atime_ns for path in (probe, "/dev/zero")]
        program = (
            "def f():\n    try:\n"
            f"        return open({probe!r}).read() + str(len(open('/dev/zero', 'rb').read(8)))\n"
            "    except OSError:\n        return ''\n"
        )
        assert contained(program, "assert f() == 'data\\n8'\n").verdict.reward == 1.0
        assert [os.stat(path).st_atime_ns for path in (probe, "/dev/zero")] == before
    finally:
        os.unlink(probe)
        os.utime("/dev/zero", ns=(device.st_atime_ns, device.st_mtime_ns))


HOST_PATHS = [
    path
    for path in (
        CHECKOUT,
        os.path.dirname(CHECKOUT),
        "/home",
        "/root",
        "/opt",
        "/srv",
        "/mnt",
        "/var/lib",
        "/sys",
        "/boot",
    )
    # the program's own /tmp is private; a checkout under a path the view shows (/usr/src) shows
    if path not in ("/tmp", "/var/tmp") and not any(path == v or path.startswith(v + "/") for v in isolation().view)
]


def test_the_program_sees_the_interpreter_and_nothing_of_the_host(contained):  # noqa: F811
    """Class 5: the project checkout, the folders beside it (where a user's data, and the hidden
    tests of the very problem, may be) and home directories were readable. The program sees the
    interpreter, its standard library, a few devices, /proc of its own and a private /tmp."""
    program = (
        "import os, json, decimal, sqlite3\n"
        f"def f():\n    return [p for p in {HOST_PATHS!r} if os.path.lexists(p)]\n"
        "def devices():\n"
        "    with open('/dev/null', 'w') as null:\n        null.write('x')\n"
        "    return len(open('/dev/urandom', 'rb').read(8)), sorted(os.listdir('/tmp')) == sorted(os.listdir('/tmp'))\n"
    )
    run = contained(program, "assert f() == [], f()\nassert devices() == (8, True)\n")
    assert run.verdict == Verdict(1.0, "all tests passed"), run.verdict


SPINNERS = """
import os
for _ in range(60):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
"""


def honest_work(seconds: float) -> int:
    """A loop count that takes about `seconds` of one core here."""
    start, n = time.perf_counter(), 200_000
    total = 0
    for i in range(n):
        total += i
    return int(n * seconds / (time.perf_counter() - start))


def test_many_sessions_cannot_starve_a_concurrent_run(pool):  # noqa: F811
    """Class 6: sixty spinning processes that each call setsid() got a scheduling group each (the
    kernel's autogroup), and an honest run of 0.5 s beside them timed out at 5 s. Each slot is a
    CPU group of its own: the spinners share one slot's share, however many they are."""
    if not SandboxPool(2).batched and isolation().privilege != "uid-drop":
        pytest.skip("CPU groups need root")
    loop = honest_work(0.5)
    honest = f"def f():\n    total = 0\n    for i in range({loop}):\n        total += i\n    return total\n"
    with SandboxPool(2) as workers, SandboxPool(2, batched=False) as per_run:
        for sandbox in (workers, per_run):
            results = {}
            spin = threading.Thread(
                target=lambda: results.setdefault("spin", sandbox.execute(SPINNERS, "import time\ntime.sleep(6)\n", 8))
            )
            spin.start()
            time.sleep(1.5)
            start = time.monotonic()
            run = sandbox.execute(honest, f"assert f() == {sum(range(loop))}\n", 5)
            waited = time.monotonic() - start  # the harness itself must get its share too
            spin.join()
            assert run.verdict == Verdict(1.0, "all tests passed"), (sandbox.batched, run.verdict)
            assert waited < 5, (sandbox.batched, waited)


def test_the_tests_import_the_standard_library_not_the_project(contained):  # noqa: F811
    """Class 7: the judge put the sandbox's folder (then tasks/) first on its import path, so the
    tests' `import code` loaded tasks/code.py, and `import math` would, under an interpreter whose
    math is not built in."""
    tests = (
        "import sys, code\n"
        "assert hasattr(code, 'InteractiveConsole')\n"
        f"assert not [p for p in sys.path if p.startswith({CHECKOUT!r})], sys.path\n"
    )
    run = contained("def f():\n    return 1\n", tests)
    assert run.verdict == Verdict(1.0, "all tests passed"), run.verdict
