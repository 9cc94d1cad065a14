"""maintenance/mutants.py stays runnable: each mutant of its table (maintenance/mutants_table.py) occurs
once in the file it mutates, and each test it names exists (an entry gone stale with its code stops a whole mutation run)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "maintenance"))

import mutants  # noqa: E402


def test_every_mutant_applies_to_its_file_once_and_names_tests_that_exist():
    stale = []
    for name, path, old, new, tests in mutants.MUTANTS:
        if (ROOT / path).read_text().count(old) != 1 or old == new:
            stale.append(f"{name}: its text is not once in {path}")
        for test in tests:
            file, _, function = test.partition("::")
            if not (ROOT / file).is_file() or (function and f"def {function}" not in (ROOT / file).read_text()):
                stale.append(f"{name}: no {test}")
    assert not stale, "\n".join(stale)
