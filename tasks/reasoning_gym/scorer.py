"""The harness's side of the generator process (worker.py): started with a fixed hash seed, asked for
problems and scores a JSON line at a time, killed and started again when one answer runs too long."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path

HASH_SEED = "0"
"""Every generator process runs under this PYTHONHASHSEED: five generators make other problems
under another one, so the splits are the same in any process only because of it."""
ROOT = Path(__file__).resolve().parents[2]
SETUP_TIMEOUT_S = 300.0
"""What importing the library and drawing problems may take before the process counts as hung."""


class ScorerGone(RuntimeError):
    """The generator process ended or answered nothing within its time (`timed_out`)."""

    def __init__(self, timed_out: bool):
        super().__init__("no reply in time" if timed_out else "the generator process ended")
        self.timed_out = timed_out


@dataclass(frozen=True)
class Unscored:
    """Why an answer has no score: it ran past the time limit or ended the process (the answer's
    doing, judged), or the process could not start (the scorer's failure, unjudged)."""

    why: str
    judged: bool = True


class ScorerProcess:
    """One generator process for `setup` (its generators, seeds and size)."""

    def __init__(self, setup: dict, timeout_s: float):
        self.setup, self.timeout_s = setup, timeout_s
        self.process: subprocess.Popen | None = None
        self.buffer = b""
        self.finalizer: weakref.finalize | None = None  # kills the live process if this object is dropped

    def start(self) -> None:
        env = {**os.environ, "PYTHONHASHSEED": HASH_SEED, "PYTHONDONTWRITEBYTECODE": "1"}
        given = (env.get("PYTHONPATH") or "").split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *(path for path in given if os.path.isabs(path))])
        # -P, absolute paths only, and started in /: no file left in a working directory is imported
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "tasks.reasoning_gym.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
        )
        self.buffer = b""
        if self.finalizer is not None:
            self.finalizer.detach()  # its process is gone: one finalizer, for the live one
        self.finalizer = weakref.finalize(self, self.process.kill)
        self.write(self.setup)
        reply = self.read(SETUP_TIMEOUT_S)
        if "error" in reply:
            self.close()
            raise ValueError(reply["error"])

    def write(self, request: dict) -> None:
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()

    def read(self, timeout_s: float) -> dict:
        """The next reply line, or ScorerGone (the process killed) when none comes in time."""
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
            chunk = os.read(self.process.stdout.fileno(), 1 << 16) if ready else b""
            if not chunk:
                self.close()
                raise ScorerGone(timed_out=not ready)
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def ask(self, request: dict) -> dict:
        """One request's reply (drawing and probing run the library's own answers: no time limit but setup's)."""
        if self.process is None:
            self.start()
        self.write(request)
        return self.read(SETUP_TIMEOUT_S)

    def scores(self, items: list[tuple[int, int, str]]) -> list[float | Unscored]:
        """Each answer's score, or why it has none: an answer the scorer did not finish within
        `timeout_s`, or that ended the process, scores nothing (the process is started again for
        the answers after it); where the process cannot start, the rest are unscored, unjudged."""
        out: list[float | Unscored] = []
        while len(out) < len(items):
            rest = items[len(out) :]
            if self.process is not None and self.process.poll() is not None:
                self.close()  # it ended while idle: no answer of these is to blame
            try:
                if self.process is None:
                    self.start()
                self.write({"op": "score", "items": rest})
            except (ScorerGone, ValueError, OSError) as error:
                self.close()
                return out + [Unscored(f"the scorer could not start: {error!s:.200}", judged=False)] * len(rest)
            try:
                for _ in rest:
                    out.append(self.read(self.timeout_s)["score"])
            except ScorerGone as gone:
                out.append(
                    Unscored(
                        f"the scorer ran past {self.timeout_s:g} s on this answer"
                        if gone.timed_out
                        else "the scorer's process ended on this answer"
                    )
                )
        return out

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
