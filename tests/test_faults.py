"""What the harness does when the machine misbehaves (docs/results.md, "When the machine fails"):
a publication interrupted by a full disk or a signal, two publishers at once, records that
disagree or were damaged, SIGTERM in a run and in a warm start, checkpoints and cached weights
with flipped bytes, a small /tmp."""

import errno
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from test_e2e import suite

from harness.__main__ import main
from harness.records import (
    BackgroundCheckpointIO,
    load_runs,
    name_of,
    write_json,
    write_parquet,
)

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


# ---- runs: signals, damaged checkpoints and caches, damaged records, TMPDIR


def config(folder: Path, cache: Path, steps: int = 3, **settings) -> Path:
    """A one-run benchmark file (math, GRPO, the tiny model), checkpointed after every step."""
    spec = suite("math", "tasks.math.MathTask", steps=steps, trainer={"checkpoint_every_s": 0}, **settings)
    path = folder / "b.yaml"
    path.write_text(json.dumps({"cache_dir": str(cache), "suites": [spec]}))
    return path


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """(a results folder holding math/grpo-seed0 interrupted after step 2 of 3, its cache)."""
    from algorithms.base import RLVRModule

    folder = tmp_path_factory.mktemp("interrupted")
    original = RLVRModule.training_step

    def crashing(self, batch, batch_idx):
        if self.rl_step == 2:
            raise RuntimeError("killed")
        return original(self, batch, batch_idx)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RLVRModule, "training_step", crashing)
        with pytest.raises(RuntimeError, match="killed"):
            main(["run", str(config(folder, folder / "cache")), "--results", str(folder / "runs")])
    assert (folder / "runs" / "math" / "grpo-seed0" / "checkpoints" / "last.ckpt").is_file()
    return folder / "runs", folder / "cache"


def flip(path: Path, at: float = 0.5, count: int = 8) -> None:
    """`count` bytes of a file inverted, `at` of the way into it."""
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + count] = bytes(b ^ 0xFF for b in data[start : start + count])
    path.write_bytes(bytes(data))


@pytest.mark.slow
def test_a_checkpoint_with_flipped_bytes_is_refused_not_resumed(interrupted, tmp_path, capsys):
    runs, cache = interrupted
    shutil.copytree(runs, tmp_path / "runs")
    checkpoint = tmp_path / "runs" / "math" / "grpo-seed0" / "checkpoints" / "last.ckpt"
    flip(checkpoint, at=0.6)
    capsys.readouterr()
    assert main(["run", str(config(tmp_path, cache)), "--results", str(tmp_path / "runs")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{checkpoint}: its sha256" in error[0] and "damaged" in error[0], error
    assert checkpoint.is_file()  # nothing removed: the user decides


@pytest.mark.slow
def test_cached_starting_weights_with_flipped_bytes_are_refused(interrupted, tmp_path, capsys):
    _, cache = interrupted
    shutil.copytree(cache, tmp_path / "cache")
    (entry,) = (tmp_path / "cache" / "policies").iterdir()
    flip(entry / "model.safetensors", at=0.9)
    capsys.readouterr()
    assert main(["run", str(config(tmp_path, tmp_path / "cache")), "--results", str(tmp_path / "runs")]) == 2
    error = [
        line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("Loading weights")
    ]
    assert len(error) == 1 and f"{entry}: the cached starting weights have digest" in error[0], error
    assert not (tmp_path / "runs" / "math" / "grpo-seed0").exists()


def test_the_step_zero_evaluation_is_keyed_by_the_weights_digest_not_their_path(tmp_path):
    """A cache entry rebuilt with other weights at the same path must not reuse the old step-0
    accuracy."""
    from types import SimpleNamespace

    from algorithms.settings import EvalArgs
    from harness.step_zero import start_evaluation
    from rollout.settings import SamplingArgs

    def key(digest):
        module = SimpleNamespace(eval_args=EvalArgs(), sampling=SamplingArgs(), starting_weights_digest=digest)
        return start_evaluation(tmp_path, tmp_path / "weights", module, {"task": "t"})[0]

    assert key("0123456789abcdef") == key("0123456789abcdef")
    assert key("0123456789abcdef") != key("fedcba9876543210")


@pytest.mark.slow
def test_a_truncated_metrics_file_does_not_block_a_resume(interrupted, tmp_path, capsys):
    runs, cache = interrupted
    shutil.copytree(runs, tmp_path / "runs")
    run_dir = tmp_path / "runs" / "math" / "grpo-seed0"
    metrics = run_dir / "metrics.parquet"
    metrics.write_bytes(metrics.read_bytes()[:100])
    assert main(["run", str(config(tmp_path, cache)), "--results", str(tmp_path / "runs")]) == 0
    assert "its metrics.parquet cannot be read: written again from it" in capsys.readouterr().out
    assert pl.read_parquet(metrics)["step"].to_list() == [1, 2, 3]


def test_a_damaged_finished_run_is_named_and_set_aside_not_failing_its_neighbours(tmp_path, capsys, no_plots):
    """`leaderboard` leaves it out of the tables, saying which; `run` moves it aside and runs it
    again, as it does a folder of other settings."""
    from harness.records import with_added_settings
    from harness.resume import prepare

    runs = run_folders(tmp_path / "runs", short_runs(2))
    damaged = runs / "math" / "hp_rlvr-seed0"
    metrics = damaged / "metrics.parquet"
    metrics.write_bytes(metrics.read_bytes()[:200])
    capsys.readouterr()
    assert main(["leaderboard", str(runs)]) == 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{metrics}: cannot be read" in error[0] and "left out" in error[0], error
    assert pl.read_parquet(runs / "math" / "leaderboard.parquet")["algorithm"].to_list() == ["grpo"]
    spec = with_added_settings(json.loads((damaged / "run.json").read_text())["spec"])
    write_json(spec, damaged / "spec.json")
    said, truncated = [], metrics.read_bytes()
    assert prepare(damaged, spec, said.append) == "start"
    (aside,) = (runs / "math" / ".damaged").iterdir()
    assert (aside / "metrics.parquet").read_bytes() == truncated  # kept as it was, beside
    assert "its records are damaged" in said[0] and str(aside) in said[0]
    # a finished run whose spec.json cannot be read is moved aside too, not a traceback
    ok = runs / "math" / "grpo-seed0"
    (ok / "spec.json").write_text('{"seed": ')
    assert prepare(ok, spec, said.append) == "start" and "it recorded no settings" in said[-1]


def test_checkpoints_are_written_in_the_run_folder_not_through_tmpdir(tmp_path, monkeypatch):
    """Lightning's own save writes to TMPDIR and copies: a small /tmp failed checkpoints the
    results disk had room for. Here TMPDIR is a folder that does not exist."""
    import tempfile

    import torch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    io = BackgroundCheckpointIO()
    path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.arange(1000.0)}, "rlvr": {"records": []}}, path)
    io.teardown()
    assert torch.load(path, weights_only=False)["state_dict"]["w"].equal(torch.arange(1000.0))


def test_a_checkpoint_carries_its_checksum_and_a_flipped_byte_is_caught(tmp_path):
    import torch

    from harness.records import Damaged, check_checkpoint

    io = BackgroundCheckpointIO()
    path = tmp_path / "last.ckpt"
    for value in (1.0, 2.0):
        io.save_checkpoint({"state_dict": {"w": torch.full((256,), value)}}, path)
    io.teardown()
    check_checkpoint(path)  # the one on disk is the one recorded
    lines = (tmp_path / "last.ckpt.sha256").read_text().splitlines()
    assert len(lines) == 2 and all(line.endswith("  last.ckpt") for line in lines)
    flip(path, at=0.5, count=1)
    with pytest.raises(Damaged, match="its sha256 .* is not the one recorded"):
        check_checkpoint(path)


def test_records_reach_the_disk_before_their_name(tmp_path, monkeypatch):
    """write_atomic flushes the new file before the rename and the folder after it: a power loss
    cannot leave a name on unwritten data."""
    import harness.records

    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd))
    )
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(b))), real_replace(a, b)))
    harness.records.write_json({"a": 1}, tmp_path / "run.json")
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"], events
    assert events[0][1].startswith(str(tmp_path / ".run.json.")) and events[2][1] == str(tmp_path)


def test_a_lock_leaves_no_file_and_is_held_by_one_at_a_time(tmp_path):
    from harness.locks import Lock

    first, second = Lock(tmp_path / ".x.lock"), Lock(tmp_path / ".x.lock")
    assert first.acquire(wait=False) and not second.acquire(wait=False)
    first.release()
    assert not (tmp_path / ".x.lock").exists()
    assert second.acquire(wait=False) and (tmp_path / ".x.lock").exists()
    second.release()
    assert list(tmp_path.iterdir()) == []


def started(config: Path, results: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(config), "--results", str(results)],
        cwd=TESTS.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(condition, job: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert job.poll() is None, job.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_in_a_run_exits_143_after_a_clean_stop_and_the_run_resumes(interrupted, tmp_path):
    _, cache = interrupted  # its starting weights are built
    results = tmp_path / "runs"
    run_dir = results / "math" / "grpo-seed0"
    job = started(config(tmp_path, cache, steps=200), results)
    wait_for(lambda: (run_dir / "checkpoints" / "last.ckpt").exists(), job)
    job.send_signal(signal.SIGTERM)
    output = job.communicate(timeout=120)[0]
    assert job.returncode == 128 + 15, output[-3000:]
    assert "stopped by SIGTERM" in output
    assert not (run_dir / "run.json").exists() and (run_dir / "checkpoints" / "last.ckpt").exists()
    assert not list(results.rglob("*.lock")) and not list(cache.rglob("*.lock"))
    done = pl.read_parquet(run_dir / "metrics.parquet").height
    assert done >= 1 and torch_steps(run_dir / "checkpoints" / "last.ckpt") == done  # the step in flight kept


def torch_steps(checkpoint: Path) -> int:
    import torch

    return len(torch.load(checkpoint, weights_only=False)["rlvr"]["records"])


@pytest.mark.slow
def test_sigterm_in_a_warm_start_exits_143_and_leaves_nothing_half_built(tmp_path):
    cache, results = tmp_path / "cache", tmp_path / "runs"
    spec = config(tmp_path, cache)
    settings = json.loads(spec.read_text())
    settings["suites"][0]["model"]["warm_start"]["steps"] = 5000
    spec.write_text(json.dumps(settings))
    job = started(spec, results)
    wait_for(lambda: any((cache / "policies").glob("*.partial/tokenizer.json")), job)
    time.sleep(1.0)  # into the warm start's training
    job.send_signal(signal.SIGTERM)
    output = job.communicate(timeout=120)[0]
    assert job.returncode == 128 + 15, output[-3000:]
    assert list((cache / "policies").iterdir()) == []  # no half-built weights, no lock
    assert not (results / "math" / "grpo-seed0").exists() and not list(results.rglob("*.lock"))
