"""What a run produced: atomic parquet/JSON writes, the callback that persists each step's row
right after the checkpoint that contains it, and reading finished runs back, from their run
folders or from the compact records that publishing keeps of them."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lightning as L
import polars as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning_utilities.core.apply_func import apply_to_collection
from polars.exceptions import PolarsError

from harness.plan import run_name
from harness.provenance import check_same_start


def _umask() -> int:
    mask = os.umask(0o022)  # Python has no getter before 3.13: set, read, restore
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()
"""What `open` would give a new file: the harness's files are as readable as the user's umask says
(a shared results folder is read by the group), not mkstemp's private 0600."""
DIR_MODE = 0o777 & ~_umask()
"""What `mkdir` would give a new folder (not mkdtemp's 0700)."""


def write_atomic(path: Path, write) -> None:
    """Write through a temporary file of its own in the same folder, then rename: readers see the
    old file or the new one, never half of one, and two processes writing the same file at once
    leave one of their files whole. The file's data reach the disk before the rename, and the
    rename before this returns (fsync), so a power loss cannot leave the name on unwritten data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        fsync(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
        fsync(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def fsync(path: Path) -> None:
    """Flush a file's data, or a folder's entries, to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parquet(frame: pl.DataFrame, path: Path) -> None:
    write_atomic(path, frame.write_parquet)


def write_json(data: Any, path: Path) -> None:
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2, default=str)))


def records_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.from_dicts(rows, infer_schema_length=None) if rows else pl.DataFrame()


def snapshot_of(key: str, value: Any) -> Any:
    """A copy of one checkpoint entry that later training cannot change. The module's own entry
    ("rlvr") is built fresh by `on_save_checkpoint` from lists whose rows are never changed once
    appended, so a shallow copy is enough (a deep copy of every record would grow with the run).
    Tensors are copied to host memory: a copy on the accelerator would double the memory that the
    weights and optimizer state take there."""
    if key in ("state_dict", "optimizer_states"):
        return apply_to_collection(value, torch.Tensor, lambda t: t.detach().to("cpu", copy=True))
    if key == "rlvr":
        return dict(value)
    return copy.deepcopy(value)


class BackgroundCheckpointIO(TorchCheckpointIO):
    """Checkpoints written by one background thread, in order, each atomically (temporary file,
    then rename), so that a step does not wait for the disk. The caller's thread takes the
    snapshot: tensors are cloned and containers copied before `save_checkpoint` returns, so the
    next optimizer step cannot change what is being written. `after_write(checkpoint)` runs on
    the same thread once a checkpoint is on disk (the records derived from it), so that no file
    runs ahead of the state it came from. A failed write is raised on the next save, on `flush`
    or at teardown (the end of `fit`)."""

    def __init__(self, after_write=None):
        super().__init__()
        self.after_write = after_write
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        snapshot = {key: snapshot_of(key, value) for key, value in checkpoint.items()}
        self._raise_failures(wait=False)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending.append(self._executor.submit(self._write, snapshot, Path(path)))

    def _write(self, checkpoint: dict[str, Any], path: Path) -> None:
        # Straight into the run folder: Lightning's own save goes through a file in TMPDIR
        # (fsspec's transaction), so a small /tmp failed checkpoints that the results disk had room for.
        def write(tmp: Path) -> None:
            torch.save(checkpoint, tmp)
            record_checksum(path, file_sha256(tmp))

        write_atomic(path, write)
        if self.after_write is not None:
            self.after_write(checkpoint)

    def _raise_failures(self, wait: bool) -> None:
        done = [f for f in self._pending if wait or f.done()]
        self._pending = [f for f in self._pending if f not in done]
        for future in done:
            future.result()  # re-raises the writer's exception here

    def flush(self) -> None:
        """Wait until every checkpoint saved so far is on disk."""
        self._raise_failures(wait=True)

    def teardown(self) -> None:
        self.flush()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class StepRecorder(L.Callback):
    """A checkpoint once `every_s` seconds have passed since the last one (0: after every step) and
    at the last step, then metrics.parquet and eval.parquet from the records inside it, written in
    the background in that order: a kill loses at most the steps since the last checkpoint, and
    the files never run ahead of the state. Pass `recorder.checkpoint_io` to the Trainer's
    `plugins`."""

    def __init__(self, run_dir: Path, every_s: float = 0.0):
        self.run_dir, self.every_s = run_dir, every_s
        self.checkpoint_io = BackgroundCheckpointIO(after_write=self.write_records)
        self._last_checkpoint = time.perf_counter()

    @property
    def checkpoint_path(self) -> Path:
        return resume_point(self.run_dir) or self.run_dir / "checkpoints" / "last.ckpt"

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        due = (
            module.rl_step >= module.schedule.steps
            or time.perf_counter() - self._last_checkpoint >= self.every_s
            or getattr(trainer, "received_sigterm", False)  # stopping after this step: keep it
        )
        # Saving is collective: every process follows the first one's clock.
        if trainer.strategy.broadcast(due, src=0):
            if isinstance(trainer.strategy, ModelParallelStrategy):
                self.save_sharded(trainer, module)
            else:
                trainer.save_checkpoint(self.run_dir / "checkpoints" / "last.ckpt", weights_only=False)
            self._last_checkpoint = time.perf_counter()

    def save_sharded(self, trainer, module) -> None:
        """FSDP's checkpoint: a folder in which each process writes its own shards (no process
        holds a full copy), written beside the last one and swapped in when complete; then the
        records, as the background writer does for whole checkpoints."""
        folder = self.run_dir / "checkpoints"
        staging, last, previous = folder / "next.ckpt", folder / "last.ckpt", folder / "previous.ckpt"
        trainer.save_checkpoint(staging, weights_only=False)  # collective, ends in a barrier
        if trainer.is_global_zero:
            shutil.rmtree(previous, ignore_errors=True)
            if last.exists():
                last.rename(previous)
            staging.rename(last)
            shutil.rmtree(previous, ignore_errors=True)
            self.write_records(
                {
                    "rlvr": {
                        "records": module.records,
                        "evaluations": module.evaluations,
                        "completions": module.completions,
                        "eval_completions": module.eval_completions,
                    }
                }
            )
        trainer.strategy.barrier()

    def write_records(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["rlvr"]
        write_parquet(records_frame(state["records"]), self.run_dir / "metrics.parquet")
        write_parquet(records_frame(state["evaluations"]), self.run_dir / "eval.parquet")
        for name in ("completions", "eval_completions"):
            if state.get(name):
                write_parquet(records_frame(state[name]), self.run_dir / f"{name}.parquet")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def checksum_file(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + ".sha256")


def record_checksum(checkpoint: Path, digest: str) -> None:
    """`<checkpoint>.sha256`: the sha256 of the checkpoint about to be renamed into place, then of
    the one it replaces, so that a kill between this write and that rename leaves a checkpoint
    the file names."""
    path = checksum_file(checkpoint)
    before = path.read_text().split()[:1] if path.exists() else []
    lines = [f"{d}  {checkpoint.name}\n" for d in [digest, *before]]
    write_atomic(path, lambda tmp: tmp.write_text("".join(lines)))


class Damaged(ValueError):
    """Records or a checkpoint that cannot be used as they are: unreadable, altered since they were
    written, or disagreeing with each other. Its text is one line naming the file or the field."""


class Unreadable(Damaged):
    """A file of a finished run that cannot be read (truncated, say)."""


class Disagree(Damaged):
    """Records of one run that say different things (an edited figure, files of two publications)."""


def check_checkpoint(checkpoint: Path) -> None:
    """Raise `Damaged` where a checkpoint's bytes are not those written (its `.sha256`). A
    checkpoint without one (written before checksums were kept, or a sharded folder) passes."""
    recorded = checksum_file(checkpoint)
    if not checkpoint.is_file() or not recorded.is_file():
        return
    digests = recorded.read_text().split()[::2]
    digest = file_sha256(checkpoint)
    if digest not in digests:
        raise Damaged(
            f"{checkpoint}: its sha256 ({digest[:16]}) is not the one recorded when it was written "
            f"({recorded.name}: {digests[0][:16]}): the checkpoint is damaged; move {checkpoint.parent} "
            "aside to run the run again from its start"
        )


def resume_point(run_dir: Path) -> Path | None:
    """The checkpoint an interrupted run resumes from, if any: the last one, or the one before it
    where a kill fell between the two renames of a sharded save."""
    for name in ("last.ckpt", "previous.ckpt"):
        if (run_dir / "checkpoints" / name).exists():
            return run_dir / "checkpoints" / name
    return None


# ---- finished runs, read back

Run = tuple[dict, pl.DataFrame, pl.DataFrame]
"""(run.json's summary, its metrics.parquet: a row a step, its eval.parquet: a row an evaluation)"""

# A published suite keeps its runs as three files instead of a folder each (`publish_records`).
PUBLISHED = ("runs.json", "steps.parquet", "evaluations.parquet")
KEPT = "completions.parquet"  # and a sample of the rollouts its runs kept, with a `run` column (`kept_completions`)
STEPS_KEPT = 10
"""Steps whose kept rollouts a published suite keeps, the same steps for every run: the first,
the last and evenly between, so that a page of nine runs stays a few MB (harness/report.py)."""


def suite_folders(directory: Path) -> list[Path]:
    """The suite folders at or one level below `directory` that hold finished runs."""
    directory = Path(directory)
    if is_suite(directory):
        return [directory]
    return sorted(d for d in directory.iterdir() if d.is_dir() and is_suite(d)) if directory.is_dir() else []


def is_suite(folder: Path) -> bool:
    return any(folder.glob("*/run.json")) or (folder / PUBLISHED[0]).is_file()


def load_runs(suite_dir: Path) -> list[Run]:
    """Every finished run of a suite, by run name: from its run folders (`<run>/run.json`), or,
    in a published suite folder, from its compact records. A run folder whose files cannot be
    read is named on stderr and left out (its neighbours are read); records that disagree with
    each other, or published records that cannot be read, raise `Damaged`."""
    suite_dir = Path(suite_dir)
    summaries = sorted(suite_dir.glob("*/run.json"))
    if summaries:
        runs = []
        for summary in summaries:
            try:
                runs.append(read_run(summary.parent))
            except Unreadable as error:
                if str(error) not in _told:  # once a process, however often the suite is read
                    _told.add(str(error))
                    print(f"warning: {error}; the run is left out", file=sys.stderr)
        return runs
    if not (suite_dir / PUBLISHED[0]).is_file():
        return []
    infos = read_file(suite_dir / PUBLISHED[0], lambda p: json.loads(p.read_text()))
    steps, evals = (read_file(suite_dir / name, pl.read_parquet) for name in PUBLISHED[1:])
    runs = [(current(info), rows_of(steps, name), rows_of(evals, name)) for name, info in sorted(infos.items())]
    for (name, _), run in zip(sorted(infos.items()), runs):
        check_records(f"{suite_dir}: {name}", run)
    return runs


_told: set[str] = set()


def read_file(path: Path, read):
    """`read(path)`, or `Unreadable` naming the file and what is wrong with it, in one line."""
    try:
        return read(path)
    except (OSError, ValueError, PolarsError) as error:
        what = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise Unreadable(f"{path}: cannot be read ({what})") from None


def read_run(run_dir: Path) -> Run:
    """A finished run's records from its folder, checked against each other (`check_records`)."""
    run = (
        current(read_file(run_dir / "run.json", lambda p: json.loads(p.read_text()))),
        read_file(run_dir / "metrics.parquet", pl.read_parquet),
        read_file(run_dir / "eval.parquet", pl.read_parquet),
    )
    check_records(str(run_dir), run)
    return run


def check_records(where: str, run: Run) -> None:
    """Raise `Disagree`, naming the run and the field, where a run's summary, its steps and its
    evaluations say different things about the same figure: the steps run, their numbering,
    the rollouts counted, the group size, and the held-out accuracy at the start and the end."""
    info, metrics, evals = run

    def differs(field: str, summary, records, source: str) -> None:
        raise Disagree(
            f"{where}: its {field} differs between its summary ({summary}) and its {source} ({records}): "
            "its records were altered or mixed; refused"
        )

    if info.get("steps") is not None and metrics.height != info["steps"]:
        differs("steps", info["steps"], f"{metrics.height} rows", "steps")
    if "step" in metrics.columns and metrics["step"].to_list() != list(range(1, metrics.height + 1)):
        differs("step", f"1..{metrics.height}", metrics["step"].to_list(), "steps")
    if {"rollouts", "rollouts_total"} <= set(metrics.columns) and metrics.height:
        if metrics["rollouts_total"][-1] != metrics["rollouts"].sum():
            differs("rollouts", metrics["rollouts_total"][-1], int(metrics["rollouts"].sum()), "steps (summed)")
    if "group_size" in metrics.columns and info.get("group_size") is not None:
        if set(metrics["group_size"].drop_nulls().to_list()) - {info["group_size"]}:
            differs("group_size", info["group_size"], sorted(set(metrics["group_size"].to_list())), "steps")
    if evals.height and "accuracy" in evals.columns:
        if evals["accuracy"][0] != info.get("accuracy_before"):
            differs("accuracy_before", info.get("accuracy_before"), evals["accuracy"][0], "evaluations")
        if evals["accuracy"][-1] != info.get("accuracy_after"):
            differs("accuracy_after", info.get("accuracy_after"), evals["accuracy"][-1], "evaluations")
    if "eval/accuracy" in metrics.columns:
        logged = metrics["eval/accuracy"].drop_nulls()
        if len(logged) and logged[-1] != info.get("accuracy_after"):
            differs("accuracy_after", info.get("accuracy_after"), logged[-1], "steps (eval/accuracy)")


def current(info: dict) -> dict:
    """A run's summary under today's names and settings: runs recorded before the reference
    algorithm of a pair was called `reference` named it `baseline`; see also `with_added_settings`."""
    if "baseline" in info and "reference" not in info:
        info = {("reference" if k == "baseline" else k): v for k, v in info.items()}
    return with_added_settings(info)


ADDED_SETTINGS = {"update": {"skip_zero_advantage": False}}
"""Settings added after runs were recorded, each with the value those runs ran as. A record
without one reads as having it, so adding a setting neither reruns earlier runs nor tells them
apart from new ones in a leaderboard's `own_settings`."""


MEASURED = ("wall_clock_s", "timing_s/", "memory/", "machine/", "measure_s")
"""A step's columns that measure the machine rather than the run: they differ from run to run
on one machine, and the rest of a record does not."""

NOT_IN_SPEC = {"trainer": ("checkpoint_every_s", "completions", "loggers", "keep_policy")}
"""Settings no record depends on: left out of a run's spec (and out of one recorded with them),
so that changing one neither reruns a finished run nor tells runs apart in a leaderboard. A
finished run sends its records to loggers named later, and replays itself to keep a policy
asked for later (`harness.finished.finished_afterwards`)."""


def with_added_settings(record: dict) -> dict:
    """`record` (a run's `spec.json`, or its summary, which holds its spec too) with the
    ADDED_SETTINGS it lacks filled in and the NOT_IN_SPEC ones it has left out."""
    out = dict(record)
    for group, values in ADDED_SETTINGS.items():
        if isinstance(out.get(group), dict):
            out[group] = {**values, **out[group]}
    for group, names in NOT_IN_SPEC.items():
        if isinstance(out.get(group), dict):
            out[group] = {k: v for k, v in out[group].items() if k not in names}
    if isinstance(out.get("spec"), dict):
        out["spec"] = with_added_settings(out["spec"])
    return out


def rows_of(frame: pl.DataFrame, run: str) -> pl.DataFrame:
    """One run's rows of a suite's records, without the columns only other runs have."""
    mine = frame.filter(pl.col("run") == run).drop("run")
    return mine.select(c for c in mine.columns if mine[c].null_count() < mine.height)


# What makes two runs parts of one suite: the same task, starting weights and schedule.
SAME_SUITE = ("suite", "task_spec", "model", "steps", "schedule", "sampling", "evaluation", "accuracy_before")


class NotOneSuite(ValueError):
    """Runs added to a published suite that are not parts of it (`added`)."""


def name_of(run: Run) -> str:
    return run_name(run[0]["algorithm"], run[0]["seed"])


def replaced(new: list[Run], published: list[Run]) -> list[str]:
    """The names of the `published` runs that `added(new, published)` replaces with `new`'s."""
    names = {name_of(run) for run in new}
    return sorted(name_of(run) for run in published if name_of(run) in names)


def added(new: list[Run], published: list[Run]) -> list[Run]:
    """`published` runs whose names `new` lacks, and `new`: a suite finished in parts (other
    sessions, other clusters). Refused when a kept run is not a part of the same suite, or when
    any run, kept or replaced, started from other weights than the runs added (both digests named)."""
    names = {name_of(run) for run in new}
    kept = [run for run in published if name_of(run) not in names]
    check_same_start(
        [(f"{name_of(run)} (added)", run[0]) for run in new] + [(name_of(run), run[0]) for run in published],
        "--add",
        unrecorded_pass=False,
    )
    for run in kept if new else []:
        info, reference = run[0], new[0][0]
        differs = next((field for field in SAME_SUITE if info.get(field) != reference.get(field)), None)
        if differs is not None:
            raise NotOneSuite(
                f"{name_of(run)}: its {differs} differs from the runs added ({info.get(differs)!r} vs "
                f"{reference.get(differs)!r}); publish into another folder"
            )
    return sorted(kept + new, key=name_of)


def publish_records(runs: list[Run], out_dir: Path) -> None:
    """Write a suite's finished runs as the compact records `load_runs` reads: what the
    leaderboard and plots need, without checkpoints and logs. Replaces what `out_dir` held."""
    names = [run_name(info["algorithm"], info["seed"]) for info, _, _ in runs]
    write_json(dict(zip(names, (info for info, _, _ in runs))), out_dir / PUBLISHED[0])
    for index, name in ((1, "steps"), (2, "evaluations")):
        frames = [run[index].with_columns(run=pl.lit(label)) for label, run in zip(names, runs)]
        write_parquet(pl.concat(frames, how="diagonal_relaxed"), out_dir / PUBLISHED[index])


def kept_completions(suite_dir: Path, runs: set[str] | None = None) -> pl.DataFrame | None:
    """The rollouts a suite's runs kept (`<run>/completions.parquet`, or a published suite's
    sample of them), a `run` column added, on at most STEPS_KEPT steps that every run kept (a
    pair's runs see the same prompts at a step); only `runs` where named. None where none kept any."""
    suite_dir = Path(suite_dir)
    frames = [
        pl.read_parquet(path).with_columns(run=pl.lit(path.parent.name))
        for path in sorted(suite_dir.glob(f"*/{KEPT}"))
        if (path.parent / "run.json").is_file()
    ]
    if not frames and (suite_dir / KEPT).is_file():
        frames = [pl.read_parquet(suite_dir / KEPT)]
    kept = pl.concat(frames, how="diagonal_relaxed") if frames else None
    if kept is not None and runs is not None:
        kept = kept.filter(pl.col("run").is_in(sorted(runs)))
    if kept is None or kept.height == 0:
        return None
    common = sorted(set.intersection(*(set(g["step"]) for _, g in kept.group_by("run"))))
    if len(common) > STEPS_KEPT:
        common = [common[round(i * (len(common) - 1) / (STEPS_KEPT - 1))] for i in range(STEPS_KEPT)]
    return kept.filter(pl.col("step").is_in(common)).sort("run", "step", "rollout")


def publish_completions(suite_dir: Path, out_dir: Path, runs: list[Run], add: bool = False) -> None:
    """Write the sample `kept_completions` takes of `suite_dir`'s runs to `out_dir` (with `add`,
    beside what `out_dir` kept of its other published `runs`); remove a stale one where none is kept."""
    names = {name_of(run) for run in runs}
    new = kept_completions(suite_dir)
    frames = [new] if new is not None else []
    if add and (out_dir / KEPT).is_file():
        fresh = set() if new is None else set(new["run"])
        old = pl.read_parquet(out_dir / KEPT).filter(~pl.col("run").is_in(sorted(fresh)))
        frames.append(old)
    if frames:
        write_parquet(pl.concat(frames, how="diagonal_relaxed"), out_dir / KEPT)
        kept = kept_completions(out_dir, names)
        if kept is not None:
            write_parquet(kept, out_dir / KEPT)
            return
    (out_dir / KEPT).unlink(missing_ok=True)
