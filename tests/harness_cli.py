"""`python -m harness run` in a fresh process, as a user runs it: a multi-device run needs it, since
Lightning launches the other processes by running the same command again."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def run_harness(
    config: Path, results: Path, *options: str, command: str = "run", **env: str
) -> subprocess.CompletedProcess:
    """The outcome of `python -m harness COMMAND CONFIG --results RESULTS [OPTIONS]` (stdout and
    stderr captured); `env`: variables set for it, on top of this process's with the test-only
    crash switch removed."""
    environ = {k: v for k, v in os.environ.items() if k != "RLVR_TEST_CRASH_AT"}
    environ |= {"PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)]), **env}
    return subprocess.run(
        [sys.executable, "-m", "harness", command, str(config), "--results", str(results), *options],
        cwd=TESTS.parent,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
