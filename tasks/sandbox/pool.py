"""The batched path: long-lived confined workers, one per slot, each serving one job at a time."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import tempfile
import time
from typing import Self

import tasks.sandbox.verdict as verdicts
from tasks.base import Verdict
from tasks.sandbox.host import (
    LAYOUT,
    WORLD_WRITABLE_DIRS,
    Isolation,
    _base_env,
    _isolation_lock,
    _job,
    _kill_uid,
    _make_workdir,
    _namespaces_work,
    _remove_leftovers,
    _secret_file,
    _slot_cgroup,
    _slot_cpu_cgroup,
    _uid_slot,
    isolation,
)
from tasks.sandbox.run import STOP_GRACE_S, _collect, _has_exited, execute
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
    """One worker process (`layout.serve`) and the private uid it holds for its lifetime. The
    harness sends it each job's public part and four descriptors over a socket; the job's pipes
    are collected here, as on the per-run path, so the worker never reads a run's program, tests
    or output (its jobs fork from it). Used by one thread at a time."""

    def __init__(self, iso: Isolation) -> None:
        self.iso = iso
        self.job_unshare = list(_namespaces_per_job(iso))
        self._stack = contextlib.ExitStack()
        self.uid = self._stack.enter_context(_uid_slot())
        self._messages: list[dict] = []
        self._known: dict = {}  # the slot's cgroups as this worker set them up
        self.dead = False
        try:
            config = {
                "unshare": [n for n in iso.unshare if n not in self.job_unshare],
                "job_unshare": self.job_unshare,
                "uid": self.uid,
                "cgroup": _slot_cgroup(iso, self.uid, 512 + 64, self._known),  # each job sets its own limit
                "cpu_cgroup": _slot_cpu_cgroup(iso, self.uid, self._known),
            }
            self._channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self.proc = subprocess.Popen(
                    [iso.python, "-S", "-s", "-P", "-B", str(LAYOUT), "serve", json.dumps(config)],
                    stdin=theirs.fileno(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    cwd="/",
                    env=_base_env("/"),
                    start_new_session=True,
                )
            finally:
                theirs.close()
        except BaseException:
            self._stack.close()
            raise
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
        public, secret = _job(
            self.iso, program, tests, self.uid, timeout_s, memory_mb, file_size_mb, max_processes, prompt, self._known
        )
        public.update(
            unshare=self.job_unshare,
            workdir=workdir,
            env=_base_env(workdir),
            timeout_s=timeout_s,
            output_limit=output_limit,
            max_output_bytes=max_output_bytes,
            leftover_dirs=sorted({*WORLD_WRITABLE_DIRS, tempfile.gettempdir(), os.path.dirname(workdir)}),
        )
        reply = self._request((public, secret), start + timeout_s + STOP_GRACE_S + WORKER_SLACK_S)
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
        verdict = verdicts.read_verdict(out, secret["token"], exit_code, timeout_s, max_output_bytes, stderr)
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

    def _request(self, job: tuple[dict, dict], deadline: float) -> dict | None:
        """Run one job: send it, collect its pipes until it ends or its time is up (then tell the
        worker to kill it), and wait until `deadline` for the worker's {"done": EXIT_CODE}. The
        collected output and how the job ended; None if the worker did not answer."""
        public, secret = job
        secret_fd = _secret_file(secret)
        pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, result
        try:
            try:
                socket.send_fds(self._channel, [json.dumps(public).encode()], [w for _, w in pipes] + [secret_fd])
            except OSError:  # the worker is gone
                return None
        finally:
            for fd in (secret_fd, *(w for _, w in pipes)):
                os.close(fd)
        try:
            out = _collect(
                tuple(r for r, _ in pipes),
                self._ended,
                time.monotonic() + public["timeout_s"],
                public["output_limit"],
                public["max_output_bytes"],
            )
        finally:
            for r, _ in pipes:
                os.close(r)
        if out.timed_out or out.overflow:
            with contextlib.suppress(OSError):
                self._channel.send(b'{"kill": true}')
        reply = self._receive(deadline)
        if reply is None or "done" not in reply:
            return reply
        return {
            "stdout": out.stdout.decode("latin-1"),
            "stderr": out.stderr.decode("latin-1"),
            "result": out.result.decode("latin-1"),
            "timed_out": out.timed_out,
            "overflow": out.overflow,
            "exit_code": reply["done"],
        }

    def _ended(self) -> bool:
        """Whether the worker has said the job is over (or anything else: it is done with it)."""
        self._poll(0.0)
        return bool(self._messages)

    def _poll(self, timeout_s: float) -> bool:
        """Take one message from the channel if one comes within `timeout_s`; False at EOF."""
        if not select.select([self._channel], [], [], max(timeout_s, 0.0))[0]:
            return True
        try:
            data = self._channel.recv(1 << 16)
        except OSError:
            return False
        if not data:
            return False
        with contextlib.suppress(ValueError, RecursionError):
            message = json.loads(data)
            self._messages.append(message if isinstance(message, dict) else {})
            return True
        self._messages.append({})
        return True

    def _receive(self, deadline: float) -> dict | None:
        """The next message from the worker, waiting until `deadline`; None if none came."""
        while not self._messages:
            now = time.monotonic()
            if now >= deadline or not self._poll(deadline - now):
                return None
        return self._messages.pop(0)

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
        """Close the channel (the worker exits when idle) and wait; kill it if it does not."""
        if self.dead:
            return
        with contextlib.suppress(OSError):
            self._channel.shutdown(socket.SHUT_RDWR)
        try:
            self.proc.wait(timeout=STOP_GRACE_S + WORKER_SLACK_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        self.dead = True
        self._release()

    def _release(self) -> None:
        with contextlib.suppress(OSError):
            self._channel.close()
        self._stack.close()
