"""Scripted mutants over the training path, the algorithms, the tasks and the leaderboard: one
plausible bug at a time, put into a scratch copy of the tree, and the tests that concern it run
there. A mutant is killed when they fail. The list is data, in maintenance/mutants_table.py. Prints a
markdown table (docs/mutants.md holds the last one, with the command):

    python maintenance/mutants.py [--only NAME ...] [--since REV] [--out FILE]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mutants_table import MUTANTS

ROOT = Path(__file__).resolve().parents[1]


def scratch_copy() -> Path:
    """The working tree as git sees it (tracked files, and new ones it does not ignore) in a scratch
    folder (runs/ and caches left behind, and of results/ only the compact records: runs.json, which
    tests/test_leaderboard.py checks against the configs, and the studies' records, from which
    tests/test_verdicts.py measures its planning figures)."""
    folder = Path(tempfile.mkdtemp(prefix="mutants-"))
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        records = name.endswith(("/runs.json", "/steps.parquet", "/evaluations.parquet"))
        published = name.startswith("results/") and not records
        if published or not (ROOT / name).is_file():  # a tracked file deleted here
            continue
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return folder


def run(folder: Path, tests: list[str], timeout_s: int) -> tuple[bool, float]:
    """(whether the tests failed, seconds); `python -m pytest` from the copy imports the copy."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=folder,
            capture_output=True,
            timeout=timeout_s,
        )
        failed = done.returncode != 0
    except subprocess.TimeoutExpired:
        failed = True
    return failed, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutants whose name contains one of these")
    parser.add_argument("--since", help="only mutants of files changed since this git revision")
    parser.add_argument("--out", help="write the table here too")
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or any(o in m[0] for o in args.only)]
    if args.since:
        changed = subprocess.run(
            ["git", "diff", "--name-only", args.since], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        chosen = [m for m in chosen if m[1] in changed]
    folder = scratch_copy()
    probe = subprocess.run(
        [sys.executable, "-c", "import algorithms; print(algorithms.__file__)"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    assert probe.stdout.startswith(str(folder)), f"the copy does not import itself: {probe.stdout} {probe.stderr}"
    failed, _ = run(folder, sorted({t for m in chosen for t in m[4]}), args.timeout)
    assert not failed, "the tests fail on the unmutated tree"
    rows, killed = [], 0
    for name, path, old, new, tests in chosen:
        source = (folder / path).read_text()
        assert source.count(old) == 1, f"{name}: its text occurs {source.count(old)} times in {path}"
        (folder / path).write_text(source.replace(old, new))
        try:
            failed, seconds = run(folder, tests, args.timeout)
        finally:
            (folder / path).write_text(source)
        killed += failed
        rows.append(f"| {name} | `{path}` | {'killed' if failed else '**survived**'} | {seconds:.0f} |")
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"{killed} of {len(chosen)} mutants killed ({100 * killed / len(chosen):.0f}%).",
            "",
            "| mutant | file | result | test seconds |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
