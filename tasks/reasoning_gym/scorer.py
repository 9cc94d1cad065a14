"""The harness's side of the generator process (worker.py): started with a fixed hash seed, asked for
problems and scores a JSON line at a time, killed and started again when one answer runs too long."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import weakref
from pathlib import Path

HASH_SEED = "0"
"""Every generator process runs under this PYTHONHASHSEED: five generators make other problems
under another one, so the splits are the same in any process only because of it."""
ROOT = Path(__file__).resolve().parents[2]
SETUP_TIMEOUT_S = 300.0
"""What importing the library and drawing problems may take before the process counts as hung."""


class ScorerGone(RuntimeError):
    """The generator process ended or answered nothing within its time."""


class ScorerProcess:
    """One generator process for `setup` (its generators, seeds and size)."""

    def __init__(self, setup: dict, timeout_s: float):
        self.setup, self.timeout_s = setup, timeout_s
        self.process: subprocess.Popen | None = None
        self.buffer = b""

    def start(self) -> None:
        env = {**os.environ, "PYTHONHASHSEED": HASH_SEED, "PYTHONDONTWRITEBYTECODE": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tasks.reasoning_gym.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.buffer = b""
        weakref.finalize(self, self.process.kill)
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
                raise ScorerGone("no reply in time" if not ready else "the generator process ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def ask(self, request: dict) -> dict:
        """One request's reply (drawing and probing run the library's own answers: no time limit but setup's)."""
        if self.process is None:
            self.start()
        self.write(request)
        return self.read(SETUP_TIMEOUT_S)

    def scores(self, items: list[tuple[int, int, str]]) -> list[float | None]:
        """Each answer's score; None for one the scorer did not finish within `timeout_s` (the process
        is then killed, and started again for the answers after it)."""
        out: list[float | None] = []
        while len(out) < len(items):
            rest = items[len(out) :]
            if self.process is None:
                self.start()
            self.write({"op": "score", "items": rest})
            try:
                for _ in rest:
                    out.append(self.read(self.timeout_s)["score"])
            except ScorerGone:
                out.append(None)
        return out

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
