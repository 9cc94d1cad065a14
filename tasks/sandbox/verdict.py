"""What a run comes back as: the tests' shape, the record of a run, and the verdict read from
the judge's result records (only those that carry the run's token), in words the judge chose."""

from __future__ import annotations

import json
import logging
import signal
import time
from dataclasses import dataclass

from tasks.base import Verdict

log = logging.getLogger("tasks.sandbox")

FEEDBACK_LIMIT = 300
PASSED = "all tests passed"
RESULT_LIMIT = 1 << 16  # the result pipe carries a few short JSON lines


@dataclass(frozen=True)
class StdioCases:
    """Tests of a program that reads standard input and writes standard output (APPS, CodeContests,
    LiveCodeBench, TACO): the program runs as a script, afresh for each case, with the case's
    input on stdin; its output must equal the expected one by the field's rule (the same
    whitespace-separated tokens; numbers within `float_tolerance`, absolute or relative, if set).
    Pass them where tests are passed; the run's `timeout_s` bounds the whole run (start-up and
    every case), so give it room for `case_timeout_s` per case (`budget_s`)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    case_timeout_s: float = 2.0
    """Wall-clock limit of one case; a case past it is killed and fails."""
    float_tolerance: float | None = None
    """None: tokens compare as text. Otherwise two numeric tokens may differ by this much
    (absolutely or relatively), except two integers, which must be equal."""
    partial: bool = False
    """Reward the fraction of cases passed (every case runs) instead of 1 only if all pass."""

    def __post_init__(self):
        if len(self.inputs) != len(self.outputs) or not self.inputs:
            raise ValueError(f"cases: {len(self.inputs)} inputs and {len(self.outputs)} outputs (need as many, >= 1)")
        if not all(type(x) is str for x in (*self.inputs, *self.outputs)):
            raise ValueError("cases: every input and output must be text")
        if not self.case_timeout_s > 0:
            raise ValueError(f"case_timeout_s: must be > 0 (got {self.case_timeout_s})")
        if self.float_tolerance is not None and not self.float_tolerance >= 0:
            raise ValueError(f"float_tolerance: must be >= 0 (got {self.float_tolerance})")

    def budget_s(self, start_s: float = 5.0) -> float:
        """A whole-run timeout that lets every case use its limit: `start_s` plus one limit a case."""
        return start_s + self.case_timeout_s * len(self.inputs)

    def job(self) -> dict:
        return {
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "case_timeout_s": self.case_timeout_s,
            "float_tolerance": self.float_tolerance,
            "partial": self.partial,
        }


Tests = str | StdioCases
"""Python test code run against the program's functions, or standard input/output cases."""


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (not a verdict on the program)."""


@dataclass(frozen=True)
class Execution:
    """Everything one run produced; `verdict` is what the harness uses, the rest is for
    debugging and tests."""

    verdict: Verdict
    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_s: float
    workdir: str
    uid: int | None = None  # the private uid it ran as (None without root)


def _unjudged(exc: BaseException, start: float) -> Execution:
    """The record of a run the harness could not judge: reward 0, said so, logged."""
    log.warning("sandbox: a run could not be judged (%r)", exc)
    verdict = Verdict(0.0, f"the sandbox could not judge this run ({type(exc).__name__})", judged=False)
    return Execution(verdict, "", "", -1, False, time.monotonic() - start, "")


@dataclass(frozen=True)
class _Collected:
    stdout: bytes
    stderr: bytes
    result: bytes
    timed_out: bool
    overflow: bool


def read_verdict(
    out: _Collected, token: str, exit_code: int, timeout_s: float, max_output_bytes: int, stderr: str
) -> Verdict:
    """The verdict from the result pipe. Only records that carry the run's token count (the
    judge's; the candidate never holds the token or the pipe), each parsed against a strict
    schema: {"phase"}, {"fail", "message"}, {"passed"}. A pass needs a pass record from a run
    that exited 0 and no fail record. A setup error, {"error"} without a token, is believed only
    before the judge's first record: the layout writes it before any of the program's code could
    run (and the program never holds the pipe)."""
    records = []
    for line in out.result.splitlines()[:16]:
        if not records and (error := _setup_error(line)) is not None:
            raise SandboxError(error)
        record = _record(line, token)
        if record is not None and "error" not in record:
            records.append(record)
    if out.timed_out:
        return Verdict(0.0, f"timed out after {timeout_s:g} s")
    if out.overflow:
        return Verdict(0.0, f"output limit exceeded (more than {max_output_bytes} bytes on stdout and stderr)")
    fails = [record for record in records if "fail" in record]
    if exit_code == 0 and not fails and any(record.get("passed") is True for record in records):
        return Verdict(1.0, PASSED)
    if fails:
        # a partial score (standard input/output cases with `partial`): the fraction that passed
        score = next((record["score"] for record in records if "score" in record), 0.0)
        return Verdict(score if 0.0 <= score < 1.0 else 0.0, _truncate(str(fails[0].get("message", "failed"))))
    phases = [record["phase"] for record in records if "phase" in record]
    return Verdict(0.0, _truncate(_describe_exit(exit_code, phases[-1] if phases else None, stderr)))


RECORD_FIELDS = {"phase": str, "fail": str, "message": str, "passed": bool, "error": str, "score": float}


def _record(line: bytes, token: str) -> dict | None:
    """One result line as a record: a JSON object of at most RESULT_LIMIT bytes, with this run's
    token and only known fields of their own types; None for anything else."""
    if len(line) > RESULT_LIMIT:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError, MemoryError):
        return None
    if type(record) is not dict or record.pop("token", None) != token:
        return None
    if any(RECORD_FIELDS.get(key) is not type(value) for key, value in record.items()):
        return None
    return record


def _setup_error(line: bytes) -> str | None:
    """The text of a setup-error record ({"error": TEXT} and nothing else), or None."""
    if len(line) > RESULT_LIMIT:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError, MemoryError):
        return None
    if type(record) is dict and list(record) == ["error"] and type(record["error"]) is str:
        return record["error"]
    return None


def _describe_exit(exit_code: int, phase: str | None, stderr: str) -> str:
    """Feedback for a run that ended without a verdict record: it exited or was killed."""
    if exit_code > 128 and exit_code - 128 in signal.valid_signals():
        sig = signal.Signals(exit_code - 128)
        if sig == signal.SIGXCPU:
            return "CPU time limit exceeded"
        how = f"killed by {sig.name}"
    else:
        how = f"exit status {exit_code}"
    if phase == "tests":
        return f"exited during the tests ({how}) before they completed"
    if phase is None:  # the interpreter itself did not get going (e.g. memory_mb too small)
        last = stderr.strip().splitlines()[-1:] or [""]
        return f"program exited before the tests ran ({how}{': ' + last[0] if last[0] else ''})"
    return f"program exited before the tests ran ({how})"


def failed_test_feedback(condition: str, message: str = "") -> str:
    """The sandbox's feedback when `assert condition, message` in the tests fails first, for a
    verifier that judges completions it wrote itself without running them and must say exactly
    what the sandbox would. `condition` as written in the tests, without parentheses that only
    enclose it (whitespace is collapsed)."""
    return _truncate(f"failed: assert {' '.join(condition.split())}" + (f" ({message})" if message else ""))


def _truncate(text: str) -> str:
    return text if len(text) <= FEEDBACK_LIMIT else text[: FEEDBACK_LIMIT - 3] + "..."
