"""The batched path: long-lived confined workers, one per slot, each serving one job at a time."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import selectors
import signal
import subprocess
import tempfile
import time
from typing import Self

from tasks.base import Verdict
from tasks.sandbox import verdict as verdicts
from tasks.sandbox.host import (
    LAYOUT,
    WORLD_WRITABLE_DIRS,
    Isolation,
    _base_env,
    _candidate_source,
    _isolation_lock,
    _job,
    _kill_uid,
    _make_workdir,
    _namespaces_work,
    _remove_leftovers,
    _slot_cgroup,
    _slot_cpu_cgroup,
    _uid_slot,
    isolation,
)
from tasks.sandbox.run import STOP_GRACE_S, _has_exited, execute
from tasks.sandbox.verdict import Execution, SandboxError, Tests, _Collected, _truncate, _unjudged

log = logging.getLogger("tasks.sandbox")

# --- the batched path ----------------------------------------------------------------------------

WORKER_SLACK_S = 5.0  # beyond a job's timeout and STOP_GRACE_S, how long a worker may take to answer
WORKER_START_S = 30.0  # how long a worker may take to confine itself and say it is ready
WORKER_FAILED = "the sandbox worker failed"
JOB_NAMESPACES = ("net", "pid", "mount")  # what each job of a worker enters on its own (and "ipc" if allowed)


class SandboxPool:
    """`execute` for many programs, through `workers` confined worker processes that each serve
    one job at a time (the module docstring says what a worker does and keeps apart between
    jobs). Thread-safe: call `execute` from up to `workers` threads; more wait for a free worker.

    Workers are used where the isolation is "uid-drop" with network, PID and mount namespaces;
    elsewhere, or with `batched=False`, `execute` is the per-run path. A worker is started on its
    first job; one that died, hung or answered nonsense is killed, its job fails (reward 0,
    feedback "the sandbox worker failed ...") and the next job gets a fresh one."""

    def __init__(self, workers: int = 1, *, batched: bool = True) -> None:
        iso = isolation()
        self.isolation = iso
        self.batched = batched and iso.privilege == "uid-drop" and {"net", "pid", "mount"} <= set(iso.unshare)
        self.workers = max(1, workers)
        self._slots: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
        for _ in range(self.workers):
            self._slots.put(None)  # a slot whose worker starts on first use
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(
        self,
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
    ) -> Execution:
        """As the module-level `execute` (same verdicts, same record)."""
        limits = {
            "prompt": prompt,
            "memory_mb": memory_mb,
            "output_limit": output_limit,
            "max_output_bytes": max_output_bytes,
            "file_size_mb": file_size_mb,
            "max_processes": max_processes,
            "tmp_root": tmp_root,
        }
        if not self.batched:
            return execute(program, tests, timeout_s, **limits)  # type: ignore[arg-type]
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        worker = self._slots.get()
        try:
            if worker is not None and not worker.alive():
                worker.kill()  # it died between jobs: no job to fail
                worker = None
            if worker is None:
                worker = _Worker(self.isolation)
            start = time.monotonic()
            try:
                return worker.execute(program, tests, timeout_s, **limits)  # type: ignore[arg-type]
            except SandboxError:
                raise
            except Exception as exc:  # noqa: BLE001 - a program must never stop training
                worker.kill()  # its state is unknown: the next job gets a fresh one
                return _unjudged(exc, start)
        finally:
            self._slots.put(worker)

    def worker_pids(self) -> list[int]:
        """The pids of the live workers (for tests; call it between jobs: it waits for every slot)."""
        return [w.proc.pid for w in self._peek() if w is not None and not w.dead]

    def _peek(self) -> list[_Worker | None]:
        slots = [self._slots.get() for _ in range(self.workers)]
        for slot in slots:
            self._slots.put(slot)
        return slots

    def close(self) -> None:
        """Stop every worker (waiting for jobs in flight)."""
        if self._closed:
            return
        self._closed = True
        for _ in range(self.workers):
            worker = self._slots.get()
            if worker is not None:
                worker.close()


_job_namespaces: tuple[str, ...] | None = None


def _namespaces_per_job(iso: Isolation) -> tuple[str, ...]:
    """The namespaces each job of a worker enters: network (its counters, `/proc/net/snmp`, would
    otherwise carry from one job to the next), PID and mount, and IPC (SysV shared memory,
    semaphores and message queues outlive processes; a job's die with its namespace) if the kernel
    allows it. Probed once per process."""
    global _job_namespaces
    with _isolation_lock:
        if _job_namespaces is None:
            with_ipc = (*JOB_NAMESPACES, "ipc")
            _job_namespaces = with_ipc if _namespaces_work(iso.python, with_ipc) else JOB_NAMESPACES
        return _job_namespaces


class _Worker:
    """One worker process (`layout.py serve`) and the private uid it holds for its
    lifetime. Used by one thread at a time."""

    def __init__(self, iso: Isolation) -> None:
        self.iso = iso
        self.job_unshare = list(_namespaces_per_job(iso))
        self._stack = contextlib.ExitStack()
        self.uid = self._stack.enter_context(_uid_slot())
        self._buffer = bytearray()
        self.dead = False
        try:
            config = {
                "unshare": [n for n in iso.unshare if n not in self.job_unshare],
                "uid": self.uid,
                "cgroup": _slot_cgroup(iso, self.uid, 512 + 64),  # each job sets its own limit
                "cpu_cgroup": _slot_cpu_cgroup(iso, self.uid),
                "candidate": _candidate_source(),
            }
            self.proc = subprocess.Popen(
                [iso.python, "-S", "-s", "-P", "-B", str(LAYOUT), "serve", json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                bufsize=0,
                cwd="/",
                env=_base_env("/"),
                start_new_session=True,
            )
        except BaseException:
            self._stack.close()
            raise
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        ready = self._receive(time.monotonic() + WORKER_START_S)
        if ready is None or ready.get("ready") is not True:
            self.kill()
            raise SandboxError(str(ready.get("error", ready) if ready else "the sandbox worker did not start"))

    def alive(self) -> bool:
        return not self.dead and not _has_exited(self.proc.pid)

    def execute(
        self,
        program: str,
        tests: Tests,
        timeout_s: float,
        *,
        prompt: str | None,
        memory_mb: int,
        output_limit: int,
        max_output_bytes: int,
        file_size_mb: int,
        max_processes: int,
        tmp_root: str | None,
    ) -> Execution:
        start = time.monotonic()
        workdir = _make_workdir(self.uid, tmp_root)
        job = _job(self.iso, program, tests, self.uid, timeout_s, memory_mb, file_size_mb, max_processes, prompt)
        job.update(
            unshare=self.job_unshare,
            workdir=workdir,
            env=_base_env(workdir),
            timeout_s=timeout_s,
            output_limit=output_limit,
            max_output_bytes=max_output_bytes,
            leftover_dirs=sorted({*WORLD_WRITABLE_DIRS, tempfile.gettempdir(), os.path.dirname(workdir)}),
        )
        token = job["token"]
        reply = self._request(job, start + timeout_s + STOP_GRACE_S + WORKER_SLACK_S)
        try:
            out = _Collected(
                str(reply["stdout"]).encode("latin-1"),
                str(reply["stderr"]).encode("latin-1"),
                str(reply["result"]).encode("latin-1"),
                bool(reply["timed_out"]),
                bool(reply["overflow"]),
            )
            exit_code = int(reply["exit_code"])
        except (TypeError, KeyError, ValueError, UnicodeError):
            # No answer (the worker died or hung), or not one a sound worker gives: the job fails.
            why = "no answer" if reply is None else str(reply.get("fatal", "an invalid answer"))
            log.warning("sandbox worker %d failed (%s); replacing it", self.proc.pid, why)
            self.kill(workdir)
            verdict = Verdict(0.0, _truncate(f"{WORKER_FAILED} ({why})"), judged=False)
            return Execution(verdict, "", "", -1, False, time.monotonic() - start, workdir, self.uid)
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
            self.uid,
        )

    def _request(self, job: dict, deadline: float) -> dict | None:
        """Send one job and wait for its answer until `deadline`; None if none came."""
        data = memoryview((json.dumps(job) + "\n").encode())
        with selectors.DefaultSelector() as sel:
            sel.register(self._in, selectors.EVENT_WRITE)
            while data:
                now = time.monotonic()
                if now >= deadline:
                    return None
                if sel.select(deadline - now):
                    try:
                        data = data[os.write(self._in, data) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # EPIPE: the worker is gone
                        return None
        return self._receive(deadline)

    def _receive(self, deadline: float) -> dict | None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._out, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                now = time.monotonic()
                if now >= deadline:
                    return None
                if sel.select(deadline - now):
                    chunk = os.read(self._out, 1 << 20)
                    if not chunk:
                        return None
                    self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        with contextlib.suppress(ValueError, RecursionError):
            reply = json.loads(line)
            if isinstance(reply, dict):
                return reply
        return None

    def kill(self, workdir: str | None = None) -> None:
        """SIGKILL the worker's process group (the worker; its job's J and pid 1 are in their own
        group and die by PDEATHSIG), reap it, SIGKILL whatever runs as the private uid, remove
        the job's files, and give the uid back. Once only: after the wait, the pid is not ours."""
        if self.dead:
            return
        self.dead = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still ours
        self.proc.wait()
        _kill_uid(self.iso.python, self.uid)
        if workdir is not None:
            _remove_leftovers(workdir, self.uid)
        self._release()

    def close(self) -> None:
        """Close the worker's stdin (it exits when idle) and wait; kill it if it does not."""
        if self.dead:
            return
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=STOP_GRACE_S + WORKER_SLACK_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        self.dead = True
        self._release()

    def _release(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        self._stack.close()
