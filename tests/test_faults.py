"""What the harness does when the machine misbehaves (docs/results.md, "When the machine fails"):
a publication interrupted by a full disk or a signal, two publishers at once, records that
disagree or were damaged, SIGTERM in a run and in a warm start, checkpoints and cached weights
with flipped bytes, a small /tmp."""

import errno
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from harness.__main__ import main
from harness.records import load_runs, name_of, write_json, write_parquet

TESTS = Path(__file__).parent
PUBLISHED = TESTS.parent / "results" / "math"  # real records, cut short below


def short_runs(steps: int, names=("grpo-seed0", "hp_rlvr-seed0")) -> list:
    """Runs of the published math suite cut to their first `steps` steps, their summaries made to
    agree (steps, final accuracy): a small but real suite."""
    runs = []
    for info, metrics, evals in load_runs(PUBLISHED):
        if name_of((info, metrics, evals)) in names:
            evals = evals.filter(pl.col("step") <= steps)
            runs.append(({**info, "steps": steps, "accuracy_after": evals["accuracy"][-1]}, metrics.head(steps), evals))
    return runs


def run_folders(folder: Path, runs: list) -> Path:
    """`runs` as finished run folders under folder/math; returns `folder`."""
    for info, metrics, evals in runs:
        run_dir = folder / "math" / name_of((info, metrics, evals))
        write_json(info, run_dir / "run.json")
        write_parquet(metrics, run_dir / "metrics.parquet")
        write_parquet(evals, run_dir / "eval.parquet")
    return folder


def contents(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` by its relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def no_plots(monkeypatch):
    """Publishing without drawing the plots (seconds each; written as every other file is)."""
    import harness.plots

    monkeypatch.setattr(harness.plots, "plot_suite", lambda suite_dir, runs: [])


@pytest.fixture
def publication(tmp_path, no_plots):
    """(a published folder holding a 4-step publication of two runs, its contents, a folder of
    2-step runs of the same names to publish over it)."""
    old = run_folders(tmp_path / "old", short_runs(4))
    out = tmp_path / "published"
    assert main(["leaderboard", str(old), "--publish", str(out)]) == 0
    return out, contents(out), run_folders(tmp_path / "new", short_runs(2))


def test_a_publish_that_runs_out_of_disk_between_its_files_leaves_the_old_publication_whole(
    publication, monkeypatch, capsys
):
    """A full disk after the first record file: the published folder is the old publication,
    not the new summaries beside the old steps (4 steps against 2), and nothing is left beside it."""
    import harness.records

    out, before, new = publication
    real = harness.records.write_parquet

    def full(frame, path):
        if path.name == "steps.parquet":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(frame, path)

    monkeypatch.setattr(harness.records, "write_parquet", full)
    capsys.readouterr()
    assert main(["leaderboard", str(new), "--publish", str(out)]) == 1
    error = capsys.readouterr().err.strip()
    assert "No space left on device" in error and "left as it was" in error and len(error.splitlines()) == 1
    assert contents(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["new", "old", "published"]
    monkeypatch.setattr(harness.records, "write_parquet", real)
    assert main(["leaderboard", str(new), "--publish", str(out)]) == 0
    assert [info["steps"] for info, _, _ in load_runs(out / "math")] == [2, 2]
    assert sorted(p.name for p in out.parent.iterdir()) == ["new", "old", "published"]


KILLED_IN_PUBLISH = """
import os, signal, sys
import harness.records
real = harness.records.write_parquet
def killed(frame, path):
    if path.name == "steps.parquet":
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    real(frame, path)
harness.records.write_parquet = killed
from harness.__main__ import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sent", ["SIGTERM", "SIGINT"])
def test_a_publish_killed_between_its_files_leaves_the_old_publication_whole(publication, sent):
    out, before, new = publication
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IN_PUBLISH, sent, "leaderboard", str(new), "--publish", str(out)],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode != 0, killed.stdout
    assert contents(out) == before
    assert main(["leaderboard", str(new), "--publish", str(out)]) == 0  # what it left beside OUT is cleared
    assert [info["steps"] for info, _, _ in load_runs(out / "math")] == [2, 2]
    assert sorted(p.name for p in out.parent.iterdir()) == ["new", "old", "published"]


def mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if done.returncode:
        pytest.skip(f"a small tmpfs cannot be mounted here ({done.stderr.decode().strip() or 'mount failed'})")


@pytest.mark.slow
def test_a_publish_on_a_full_disk_leaves_the_old_publication_whole(tmp_path):
    """The same on a real full disk: a small tmpfs holds the published folder, filled so that the
    new summaries fit and the rest of the publication does not."""
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "4m")
    try:
        out = disk / "published"
        assert main(["leaderboard", str(run_folders(tmp_path / "old", short_runs(4))), "--publish", str(out)]) == 0
        before = contents(out)
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        room = 64 * 1024  # the summaries (16 KiB) fit, the steps and plots do not
        with open(disk / "filler", "wb") as f:
            f.write(b"\0" * (free - room))
        new = run_folders(tmp_path / "new", short_runs(2))
        assert main(["leaderboard", str(new), "--publish", str(out)]) == 1
        assert contents(out) == before
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "published"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_records_that_disagree_are_refused_naming_the_run_and_the_field(tmp_path, capsys, no_plots):
    """An edited figure in run.json, and published files of two publications: one line, exit 2,
    and the published folder as it was."""
    runs = run_folders(tmp_path / "runs", short_runs(2))
    summary = runs / "math" / "hp_rlvr-seed0" / "run.json"
    info = json.loads(summary.read_text())
    summary.write_text(json.dumps({**info, "accuracy_after": info["accuracy_after"] + 0.001}))
    capsys.readouterr()
    assert main(["leaderboard", str(runs), "--publish", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "hp_rlvr-seed0: its accuracy_after differs" in error[0], error
    assert not (tmp_path / "out").exists()
    summary.write_text(json.dumps(info))
    # a published suite whose summaries and steps come from two publications (4 steps and 2)
    out = tmp_path / "out"
    assert main(["leaderboard", str(runs), "--publish", str(out)]) == 0
    other = tmp_path / "other"
    assert main(["leaderboard", str(run_folders(tmp_path / "four", short_runs(4))), "--publish", str(other)]) == 0
    shutil.copy(other / "math" / "runs.json", out / "math" / "runs.json")
    capsys.readouterr()
    assert main(["leaderboard", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "grpo-seed0: its steps differs between its summary (4)" in error[0], error


def add_with_a_rendezvous(runs: str, out: str, barrier, codes) -> None:
    """`leaderboard RUNS --publish OUT --add` that, once it has read what OUT holds, waits (a
    while at most) for the other publisher to have read it too: the worst timing for a merge
    without a lock."""
    import threading

    import harness.leaderboard
    import harness.plots

    harness.plots.plot_suite = lambda suite_dir, runs: []
    real = harness.leaderboard.load_runs

    def load_runs(folder):
        found = real(folder)
        if not str(folder).startswith(runs):
            try:
                barrier.wait(timeout=3)
            except threading.BrokenBarrierError:
                pass
        return found

    harness.leaderboard.load_runs = load_runs
    codes.put(main(["leaderboard", runs, "--publish", out, "--add"]))


@pytest.mark.slow
def test_two_publishers_adding_at_once_keep_both_runs(tmp_path):
    grpo, hp = short_runs(2)
    out = tmp_path / "published"
    assert main(["leaderboard", str(run_folders(tmp_path / "first", [grpo])), "--publish", str(out)]) == 0
    ppo = next(run for run in load_runs(PUBLISHED) if run[0]["algorithm"] == "ppo")
    ppo = ({**ppo[0], "steps": 2, "accuracy_after": ppo[2]["accuracy"][0]}, ppo[1].head(2), ppo[2].head(1))
    parts = [run_folders(tmp_path / name, [run]) for name, run in (("hp", hp), ("ppo", ppo))]
    context = multiprocessing.get_context("spawn")
    barrier, codes = context.Barrier(2), context.Queue()
    jobs = [context.Process(target=add_with_a_rendezvous, args=(str(p), str(out), barrier, codes)) for p in parts]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=300)
    assert sorted(codes.get(timeout=5) for _ in jobs) == [0, 0]
    assert sorted(name_of(run) for run in load_runs(out / "math")) == ["grpo-seed0", "hp_rlvr-seed0", "ppo-seed0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first", "hp", "ppo", "published"]  # no lock left


def test_a_read_only_results_folder_is_published_elsewhere(tmp_path, capsys, no_plots):
    runs = run_folders(tmp_path / "runs", short_runs(2))
    view = tmp_path / "view"
    view.mkdir()
    if os.geteuid() == 0:  # root writes through permissions: a read-only mount
        bound = subprocess.run(["mount", "--bind", "-o", "ro", str(runs), str(view)], capture_output=True)
        if bound.returncode:
            pytest.skip(f"no read-only bind mount here ({bound.stderr.decode().strip()})")
    else:
        view.rmdir()
        shutil.copytree(runs, view)
        for folder in [view, *view.rglob("*")]:
            if folder.is_dir():
                folder.chmod(0o555)
    try:
        before = contents(view)
        assert main(["leaderboard", str(view), "--publish", str(tmp_path / "out")]) == 0
        assert "is read-only" in capsys.readouterr().err
        assert contents(view) == before
        assert (tmp_path / "out" / "math" / "runs.json").is_file()
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(view)], check=False)
