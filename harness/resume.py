"""Whether a run folder is skipped, resumed or run again: the settings that determine a run's
records (`spec.json`) compared with the folder's, and on resume its provenance with what it
started from."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from harness.config import Suite
from harness.provenance import (
    check_same_start,
    describe,
    environment_key,
)
from harness.records import (
    NOT_IN_SPEC,
    Damaged,
    read_run,
    resume_point,
    with_added_settings,
    write_json,
)
from harness.start import StartingWeights
from rollout import distributed


def run_spec(suite: Suite, algorithm: str, seed: int) -> dict:
    """Everything that determines a run's records, as JSON values: what its folder records in
    `spec.json` and a later invocation compares with."""
    own, settings = suite.algorithm_settings(algorithm)
    spec = {
        "task": suite.task_key(),
        "model": asdict(suite.model),
        "starting_weights": StartingWeights.of(suite).key or suite.model.path,
        "algorithm": {"class_path": suite.algorithms[algorithm].class_path, "init_args": own},
        "seed": seed,
        **{name: asdict(value) for name, value in settings.items()},
        "trainer": {k: v for k, v in asdict(suite.trainer).items() if k not in NOT_IN_SPEC["trainer"]},
    }
    return json.loads(json.dumps(spec, default=str))


def changed_settings(before: dict, now: dict, prefix: str = "") -> list[str]:
    """`key: old -> new` for every setting that differs, by dotted path."""
    out = []
    for key in sorted(set(before) | set(now), key=str):
        a, b = before.get(key, "(unset)"), now.get(key, "(unset)")
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_settings(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a} -> {b}")
    return out


def prepare(run_dir: Path, spec: dict, say) -> str:
    """What to do with a run folder: "skip" (finished with these settings), "resume" (interrupted,
    same settings) or "start". A folder whose recorded settings differ from `spec` (or cannot be
    read) is moved aside first to `.replaced/`, and a finished one whose records cannot be read
    or disagree to `.damaged/`: never reused or deleted, and run again."""
    recorded = run_dir / "spec.json"
    if run_dir.exists() and any(run_dir.iterdir()):
        try:
            before = with_added_settings(json.loads(recorded.read_text())) if recorded.exists() else None
        except ValueError:  # unreadable: as good as unrecorded
            before = None
        if before != spec:
            aside = run_dir.parent / ".replaced" / f"{run_dir.name}-{datetime.now():%Y%m%dT%H%M%S}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            run_dir.rename(aside)
            why = changed_settings(before, spec) if before is not None else ["it recorded no settings (spec.json)"]
            shown = "; ".join(why[:4]) + (f"; and {len(why) - 4} more" if len(why) > 4 else "")
            say(f"settings changed since it ran ({shown}): the earlier run moved to {aside}, running again")
    if (run_dir / "run.json").exists():
        try:
            read_run(run_dir)
        except Damaged as error:  # set aside and run again, as a run of other settings is
            aside = run_dir.parent / ".damaged" / f"{run_dir.name}-{datetime.now():%Y%m%dT%H%M%S}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            run_dir.rename(aside)
            say(f"its records are damaged ({error}): the run moved to {aside}, running again")
    if (run_dir / "run.json").exists():
        return "skip"
    write_json(spec, recorded)
    return "resume" if resume_point(run_dir) is not None else "start"


def continued(run_dir: Path, origin: dict, resume: bool, say) -> dict:
    """A run's provenance (`harness.provenance`): written when it starts; on resume, checked against
    what it started from (other starting weights are refused, naming both digests) and returned as
    recorded then, with any other environment it was resumed in added under `resumed_in`."""
    path = run_dir / "provenance.json"
    if not resume or not path.exists():  # a run started before provenance was kept: from here on
        if distributed.rank() == 0:
            write_json(origin, path)
        return origin
    recorded = json.loads(path.read_text())
    check_same_start([("the run", recorded), ("its resume", origin)], run_dir.name)
    if environment_key(recorded) != environment_key(origin):
        say(f"resumed in another environment ({describe(origin)}; it started in {describe(recorded)})")
        recorded = {**recorded, "resumed_in": [*recorded.get("resumed_in", []), origin["environment"]]}
        if distributed.rank() == 0:
            write_json(recorded, path)
    return recorded
