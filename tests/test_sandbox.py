"""The sandbox contains hostile programs: each ends with reward 0 and a clear feedback, within its
time limit, with nothing left running or on disk and the harness (this process) unaffected; and a
program cannot fake a pass."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from tasks import sandbox
from tasks.base import Verdict
from tasks.sandbox import (
    Execution,
    SandboxPool,
    execute,
    isolation,
    run_program,
    run_programs,
)
from tasks.sandbox import pool as worker_pool
from tasks.sandbox import run as per_run
from tasks.sandbox import verdict as verdicts

TIMEOUT = 2.0
SLACK_S = 3.0  # interpreter start-up and cleanup on a loaded 2-core machine
PASSING = "assert True\n"
FAILING = "assert 1 + 1 == 3\n"

uid_drop_only = pytest.mark.skipif(
    isolation().privilege != "uid-drop",
    reason="only a private uid (harness running as root) keeps the harness's files out of reach",
)


def processes_of(workdir: str) -> list[int]:
    """Live processes of a run: the sandbox gives each HOME=<its workdir>."""
    marker = f"HOME={workdir}\0".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if marker in f.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def processes_of_uid(uid: int | None) -> list[int]:
    """Live processes running as a run's private uid (none without root)."""
    if uid is None:
        return []
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    found.append(int(name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def pool():
    """One worker for the whole module: every batched test also checks that what the tests before
    it left behind did not leak into it."""
    with SandboxPool(1) as workers:
        yield workers


@pytest.fixture(params=["per-run", "batched"])
def contained(request, pool):
    """Run through the per-run path or a worker, and check the run is over in every sense: in
    time, no process left, no directory left, this process's own state as it was; and, batched,
    that the program did not take its worker down with it."""
    batched = request.param == "batched"
    if batched and not pool.batched:
        pytest.skip(f"no batched path with isolation {isolation()}")

    def contained(program: str, tests: str = PASSING, timeout_s: float = TIMEOUT, **kwargs) -> Execution:
        if batched and kwargs.pop("isolation_override", None) is not None:
            pytest.skip("the batched path always uses the probed isolation")
        cwd, env = os.getcwd(), dict(os.environ)
        workers = pool.worker_pids()
        start = time.monotonic()
        run = (
            pool.execute(program, tests, timeout_s, **kwargs)
            if batched
            else execute(program, tests, timeout_s, **kwargs)
        )
        assert time.monotonic() - start < timeout_s + SLACK_S
        assert not os.path.exists(run.workdir)
        assert processes_of(run.workdir) == []
        assert processes_of_uid(run.uid) == []
        assert (os.getcwd(), dict(os.environ)) == (cwd, env)
        if batched and workers:
            assert pool.worker_pids() == workers, "the program killed or broke its worker"
        return run

    return contained


def test_a_passing_program_passes(contained):
    run = contained("def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\n")
    assert run.verdict == Verdict(1.0, "all tests passed")


def test_a_wrong_program_fails_naming_the_first_failing_assert(contained):
    program = "def add(a, b):\n    return a * b\n"
    tests = "def check(candidate):\n    assert candidate(2, 2) == 4\n    assert candidate(2, 3) == 5\n    assert candidate(1, 1) == 2\n\ncheck(add)\n"
    assert contained(program, tests).verdict == Verdict(0.0, "failed: assert candidate(2, 3) == 5")


def test_an_assert_is_named_by_its_condition_and_message(contained):
    run = contained("x = 1\n", "assert x == 1\nassert (x ==\n        2), f'x is {x}'\n")
    assert run.verdict == Verdict(0.0, "failed: assert x == 2 (x is 1)")  # the AST's span: no redundant parentheses
    assert run.verdict.feedback == sandbox.failed_test_feedback("x ==\n        2", "x is 1")


def test_failed_test_feedback_reproduces_the_sandbox(contained):
    tests = "_got = f([1, 2])\nassert _got == 5, f'f([1, 2]) returned {_got!r}, expected 5'\n"
    run = contained("def f(xs):\n    return sum(xs)\n", tests)
    assert run.verdict == Verdict(0.0, sandbox.failed_test_feedback("_got == 5", "f([1, 2]) returned 3, expected 5"))
    assert contained("x = 1\n", "assert x == 1\n").verdict == Verdict(1.0, sandbox.PASSED)


def test_a_syntax_error_fails_with_its_line(contained):
    run = contained("def f(:\n    return 1\n")
    assert run.verdict.reward == 0.0
    assert run.verdict.feedback == "SyntaxError in the program at line 1"  # not the line, nor the message


def test_an_exception_in_the_program_under_test_names_the_test(contained):
    run = contained("def f(x):\n    return 1 / x\n", "assert f(1) == 1\nassert f(0) == 0\n")
    assert run.verdict == Verdict(0.0, "ZeroDivisionError raised by the program (in test: assert f(0) == 0)")


def test_an_exception_before_the_tests_is_reported_as_such(contained):
    run = contained("y = undefined_name + 1\n")
    assert run.verdict.reward == 0.0
    assert run.verdict.feedback == "program failed before the tests ran: NameError (at line 1)"  # no name said back


def test_feedback_is_truncated(contained):
    run = contained("x = 1\n", "assert x == 2, 'x' * 5000\n")
    assert len(run.verdict.feedback) == verdicts.FEEDBACK_LIMIT and run.verdict.feedback.endswith("...")


def test_an_infinite_loop_times_out(contained):
    run = contained("while True:\n    pass\n", timeout_s=1.0)
    assert run.verdict == Verdict(0.0, "timed out after 1 s")
    assert run.timed_out and run.duration_s < 1.0 + SLACK_S


def test_a_fork_bomb_is_stopped(contained):
    run = contained("import os\nwhile True:\n    os.fork()\n")
    assert run.verdict.reward == 0.0
    assert run.verdict.feedback  # BlockingIOError once RLIMIT_NPROC is reached, or the timeout


def test_a_fork_bomb_that_leaves_the_process_group_is_stopped(contained):
    program = "import os\nwhile True:\n    if os.fork() == 0:\n        os.setsid()\n"
    assert contained(program).verdict.reward == 0.0


def test_a_daemon_left_behind_by_a_passing_program_is_killed(contained):
    program = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
    run = contained(program)  # contained() checks that the sleeper is gone
    assert run.verdict == Verdict(1.0, "all tests passed")


@pytest.mark.parametrize(
    "program",
    ["x = bytearray(8 * 1024**3)\n", "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))\n"],
    ids=["one-allocation", "growing"],
)
def test_a_memory_bomb_hits_the_memory_limit(program, contained):
    assert contained(program, memory_mb=256).verdict == Verdict(0.0, "memory limit exceeded")


def test_huge_output_is_capped_and_fails(contained):
    run = contained("while True:\n    print('x' * 100_000)\n")
    assert run.verdict.reward == 0.0 and run.verdict.feedback.startswith("output limit exceeded")
    assert len(run.stdout) <= 10_000


def test_output_is_captured_up_to_the_limit(contained):
    run = contained("import sys\nprint('a' * 50_000)\nprint('oops', file=sys.stderr)\n", output_limit=1000)
    assert run.verdict.reward == 1.0
    assert run.stdout == "a" * 1000 and run.stderr == "oops\n"


@uid_drop_only
def test_writing_outside_the_working_directory_is_refused(tmp_path, contained):
    """The host's paths the program sees are read-only (and root's); the harness's /tmp is not
    even visible."""
    for target in (Path("/usr/lib") / f"rlvr-escaped-{uuid.uuid4().hex}", Path("/rlvr-escaped")):
        run = contained(f"open({str(target)!r}, 'w').write('pwned')\n")
        assert run.verdict.reward == 0.0 and run.verdict.feedback.startswith("program failed before the tests ran")
        assert not target.exists()
    hidden = tmp_path / "escaped.txt"
    assert contained(f"open({str(hidden)!r}, 'w').write('pwned')\n").verdict.reward == 0.0
    assert not hidden.exists()


@uid_drop_only
def test_files_left_in_world_writable_directories_are_removed(contained):
    names = [f"/tmp/rlvr-sandbox-test-{uuid.uuid4().hex}", f"/dev/shm/rlvr-sandbox-test-{uuid.uuid4().hex}"]
    program = "import os\n" + "".join(
        f"os.makedirs({n!r} + '/sub')\nopen({n!r} + '/sub/f', 'w').write('x')\n" for n in names
    )
    assert contained(program).verdict.reward == 1.0
    assert not any(os.path.exists(n) for n in names)


def test_a_big_file_hits_the_file_size_limit(contained):
    program = "with open('big', 'wb') as f:\n    for _ in range(8):\n        f.write(bytes(1 << 20))\n"
    run = contained(program, file_size_mb=4)
    assert run.verdict == Verdict(0.0, "program failed before the tests ran: OSError (EFBIG) (at line 3)")


def test_the_harness_environment_is_invisible(monkeypatch, contained):
    monkeypatch.setenv("RLVR_SANDBOX_TEST_SECRET", "hunter2-secret")
    program = (
        "import os\n"
        "assert 'RLVR_SANDBOX_TEST_SECRET' not in os.environ\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        assert b'hunter2-secret' not in open(f'/proc/{pid}/environ', 'rb').read(), pid\n"
        "    except OSError:\n"
        "        pass\n"
        "print(sorted(os.environ))\n"
    )
    run = contained(program)
    assert run.verdict == Verdict(1.0, "all tests passed")
    assert "RLVR_SANDBOX_TEST_SECRET" not in run.stdout and "HOME" in run.stdout


def socket_blocked() -> sandbox.Isolation:
    iso = isolation()
    return dataclasses.replace(iso, unshare=tuple(n for n in iso.unshare if n != "net"), network="socket-blocked")


@pytest.mark.parametrize("mode", ["probed", "socket-blocked"])
def test_no_network_connection_reaches_the_harness(mode, contained):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.3)
        port = server.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\n"
        run = contained(program, isolation_override=socket_blocked() if mode == "socket-blocked" else None)
        assert run.verdict.reward == 0.0
        assert run.verdict.feedback.startswith("program failed before the tests ran: ")
        assert any(word in run.verdict.feedback for word in ("OSError", "RuntimeError"))  # no route, or refused
        with pytest.raises(TimeoutError):
            server.accept()


@pytest.mark.parametrize(
    "program",
    [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
        "import os, signal\nos.killpg(os.getpgid(0), signal.SIGKILL)\n",
        "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
        f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n",
        f"import os, signal\nos.killpg({os.getpgid(0)}, signal.SIGKILL)\n",
    ],
    ids=["parent", "own-group", "everything", "harness-pid", "harness-group"],
)
def test_killing_other_processes_does_not_reach_the_harness(program, contained):
    run = contained(program, FAILING)
    assert run.verdict.reward == 0.0
    # Still here, and still able to judge.
    assert run_program("x = 1\n", "assert x == 1\n", TIMEOUT).reward == 1.0


@pytest.mark.parametrize(
    "program",
    [
        "import os\nos._exit(0)\n",
        "import sys\nsys.exit(0)\n",
        "raise SystemExit\n",
        "import sys\nsys.exit(3)\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    ],
    ids=["os._exit", "sys.exit", "SystemExit", "sys.exit-3", "SIGKILL-self"],
)
def test_exiting_before_the_tests_is_not_a_pass(program, contained):
    run = contained(program, FAILING)
    assert run.verdict.reward == 0.0
    assert run.verdict.feedback.startswith("program exited before the tests ran")


def test_exiting_during_the_tests_is_not_a_pass(contained):
    run = contained("import os\ndef f():\n    os._exit(0)\n", "f()\n" + FAILING)
    assert run.verdict == Verdict(0.0, "the program's process ended during the tests (exit status 0)")


SPOOFS = {
    "atexit": "import atexit\natexit.register(lambda: print('all tests passed'))\n",
    "excepthook": "import sys\nsys.excepthook = lambda *a: None\n",
    "assertion-error": "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n",
    "fake-records": (
        "import os\nfor fd in range(64):\n    try:\n"
        '        os.write(fd, b\'{"pass": "0"}\\n{"phase": "tests"}\\nall tests passed\\n\')\n'
        "    except OSError:\n        pass\n"
    ),
    "settrace": "import sys\nsys.settrace(lambda *a: None)\n",
    "gc-scan": "import gc\ngc.get_objects()\n",
    "ctypes": "import ctypes\n",
    "exit-thread": "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\n",
}


@pytest.mark.parametrize("program", SPOOFS.values(), ids=SPOOFS.keys())
def test_a_program_cannot_fake_a_pass(program, contained):
    tests = "import time\ntime.sleep(0.5)\n" + FAILING
    assert contained(program, tests).verdict.reward == 0.0


def test_patched_builtins_do_not_bend_the_tests(contained):
    program = "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.len = lambda x: 3\ndef f():\n    return 10\n"
    run = contained(program, "assert len([]) == 0\nassert abs(f() - 3) < 1e-6\n")
    assert run.verdict == Verdict(0.0, "failed: assert abs(f() - 3) < 1e-6")


def test_stdin_is_empty(contained):
    assert contained("x = input()\n").verdict.feedback.startswith("program failed before the tests ran: EOFError")


def test_hashing_is_reproducible(contained):
    runs = [contained("print(hash('abc'), list({'a', 'b', 'c', 'd'}))\n").stdout for _ in range(2)]
    assert runs[0] == runs[1]


def test_run_programs_keeps_the_order():
    jobs = [("x = 1\n", "assert x == 1\n"), ("x = 2\n", "assert x == 1\n"), ("x = 1\n", "assert x == 1\n")]
    assert [v.reward for v in run_programs(jobs, TIMEOUT, workers=2)] == [1.0, 0.0, 1.0]


def test_a_sandbox_that_cannot_be_set_up_raises_instead_of_judging():
    broken = dataclasses.replace(isolation(), unshare=("no-such-namespace",))
    with pytest.raises(sandbox.SandboxError, match="sandbox setup failed"):
        execute("x = 1\n", PASSING, TIMEOUT, isolation_override=broken)


def test_the_isolation_in_use_is_reported():
    assert sandbox.NETWORK_ISOLATION in ("netns", "socket-blocked")
    assert isolation().privilege in ("uid-drop", "userns", "none")


# --- the batched path: what a worker keeps apart between jobs, and how it fails -------------------

batched_only = pytest.mark.skipif(not SandboxPool(1).batched, reason="no batched path with this isolation")


@batched_only
def test_a_daemon_cannot_affect_the_next_job_on_the_same_worker():
    """The daemon runs as the same private uid as the next job: if it survived, it would kill that
    job (kill(-1)) and plant a file the job looks for."""
    marker = f"/tmp/rlvr-sandbox-test-{uuid.uuid4().hex}"
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(0.3)  # until its own job is over: it would kill that one too\n"
        "    for _ in range(300):\n"
        f"        open({marker!r}, 'w').write('planted')\n"
        "        try:\n"
        "            os.kill(-1, 9)\n"
        "        except OSError:\n"
        "            pass\n"
        "        time.sleep(0.01)\n"
        "    os._exit(0)\n"
    )
    victim = f"import os, time\ntime.sleep(0.5)\nassert not os.path.exists({marker!r})\n"
    with SandboxPool(1) as pool:
        first = pool.execute(daemon, PASSING, TIMEOUT)
        assert first.verdict == Verdict(1.0, "all tests passed")
        assert processes_of_uid(first.uid) == [] and not os.path.exists(marker)
        second = pool.execute(victim, PASSING, TIMEOUT)
        assert second.verdict == Verdict(1.0, "all tests passed") and second.uid == first.uid


@batched_only
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGSTOP"], ids=["killed", "hung"])
def test_a_worker_that_dies_or_hangs_mid_job_fails_that_job_and_is_replaced(signal_name, monkeypatch):
    import signal
    import threading

    monkeypatch.setattr(worker_pool, "WORKER_SLACK_S", 0.5)  # how long a hung worker is waited for
    with SandboxPool(1) as pool:
        assert pool.execute("x = 1\n", "assert x == 1\n", TIMEOUT).verdict.reward == 1.0
        (worker,) = pool.worker_pids()
        runs: list[Execution] = []
        job = threading.Thread(
            target=lambda: runs.append(pool.execute("import time\ntime.sleep(1.5)\n", PASSING, TIMEOUT))
        )
        job.start()
        time.sleep(0.5)
        os.kill(worker, getattr(signal, signal_name))
        job.join(timeout=TIMEOUT + per_run.STOP_GRACE_S + 0.5 + SLACK_S)
        (run,) = runs
        assert run.verdict.reward == 0.0 and run.verdict.feedback.startswith(worker_pool.WORKER_FAILED)
        assert not run.verdict.judged  # the sandbox's own failure
        assert not os.path.exists(run.workdir) and processes_of_uid(run.uid) == []
        # The batch goes on, on a fresh worker.
        assert pool.execute("x = 1\n", "assert x == 1\n", TIMEOUT).verdict == Verdict(1.0, "all tests passed")
        assert pool.worker_pids() != [worker]


@batched_only
def test_batched_verdicts_equal_the_per_run_ones():
    jobs = [
        ("def f(x):\n    return x + 1\n", "assert f(1) == 2\n"),
        ("def f(x):\n    return x + 2\n", "assert f(1) == 2\n"),
        ("def f(x):\n    return 1 / x\n", "assert f(0) == 0\n"),
        ("raise KeyError('k')\n", PASSING),
        ("while True:\n    pass\n", PASSING),
        ("def f(:\n", PASSING),
        ("import sys\nsys.exit(0)\n", FAILING),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", FAILING),
        ("print(hash('abc'))\n", f"assert hash('abc') == {hash_in_sandbox()}\n"),
    ]
    per_run = run_programs(jobs, 1.0, workers=2, batched=False)
    batched = run_programs(jobs, 1.0, workers=2, batched=True)
    assert batched == per_run
    assert [v.reward for v in batched] == [1.0] + [0.0] * 7 + [1.0]


def hash_in_sandbox() -> int:
    """hash('abc') in a per-run sandbox (PYTHONHASHSEED=0): a worker must agree."""
    return int(execute("print(hash('abc'))\n", PASSING).stdout)


@batched_only
def test_a_worker_that_answers_nonsense_fails_its_job_and_is_replaced(monkeypatch):
    with SandboxPool(1) as pool:
        assert pool.execute("x = 1\n", "assert x == 1\n", TIMEOUT).verdict.reward == 1.0
        (worker,) = pool.worker_pids()
        real = worker_pool._Worker._request
        monkeypatch.setattr(worker_pool._Worker, "_request", lambda self, job, deadline: {"stdout": "", "pass": True})
        run = pool.execute("x = 1\n", "assert x == 1\n", TIMEOUT)
        assert run.verdict.reward == 0.0 and run.verdict.feedback.startswith(worker_pool.WORKER_FAILED)
        assert not run.verdict.judged  # the sandbox's own failure
        assert not os.path.exists(run.workdir)
        monkeypatch.setattr(worker_pool._Worker, "_request", real)
        assert pool.execute("x = 1\n", "assert x == 1\n", TIMEOUT).verdict.reward == 1.0
        assert pool.worker_pids() != [worker]


@batched_only
def test_a_harness_that_dies_mid_job_leaves_nothing_running():
    """The worker sees its stdin close, kills its job and exits: no PDEATHSIG needed."""
    import signal
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "from tasks.sandbox import SandboxPool\n"
        "pool = SandboxPool(1)\n"
        "run = pool.execute('x = 1\\n', 'assert x == 1\\n')\n"
        "print(run.uid, pool.worker_pids()[0], flush=True)\n"
        "pool.execute('import time\\ntime.sleep(30)\\n', 'assert True\\n', 60)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    harness = subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE, text=True)
    uid, worker = map(int, harness.stdout.readline().split())
    time.sleep(0.5)  # the sleeper is running
    assert processes_of_uid(uid)
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    give_up = time.monotonic() + SLACK_S
    while (processes_of_uid(uid) or alive(worker)) and time.monotonic() < give_up:
        time.sleep(0.05)
    assert processes_of_uid(uid) == [] and not alive(worker)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
