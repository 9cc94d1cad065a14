"""The tree stays clean under the linter and formatter configured in pyproject.toml (ruff)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
ruff = shutil.which("ruff")


@pytest.mark.skipif(ruff is None, reason="ruff is in the dev extra: pip install -e '.[dev]'")
@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(command):
    done = subprocess.run([ruff, *command], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
