"""Reading games from disk: generated ones from the cache, or the official ALFWorld games under
$ALFWORLD_DATA, unchanged."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from tasks.alfworld.data import TASK_TYPES, GameRecord

# --------------------------------------------------------------------------------------------
# Reading games (generated or official)


_TASK_RE = re.compile(r"Your task is to: (.*?)\.?\"")


def _goal_of(grammar: str) -> str:
    match = _TASK_RE.search(grammar)
    return match.group(1) if match else ""


def _read_game_dir(folder: Path, split: str, game_id: str) -> GameRecord | None:
    """The record of a game folder (game.tw-pddl + traj_data.json), or None when it is absent,
    incomplete or known unsolvable."""
    game_file, traj_file = folder / "game.tw-pddl", folder / "traj_data.json"
    if not (game_file.is_file() and traj_file.is_file()):
        return None
    data = json.loads(game_file.read_text())
    if not data.get("solvable", False):
        return None
    traj = json.loads(traj_file.read_text())
    return GameRecord(
        game_id=game_id,
        path=str(game_file),
        task_type=traj["task_type"],
        goal=_goal_of(data["grammar"]),
        walkthrough=tuple(data.get("walkthrough") or ()),
        scene=str(traj.get("scene", {}).get("floor_plan", "")),
        split=split,
    )


def load_official_games(
    root: str | Path | None = None,
    task_types: Sequence[str] = TASK_TYPES,
    splits: Sequence[str] | None = None,
) -> list[GameRecord]:
    """Games of an official ALFWorld data tree (root, or $ALFWORLD_DATA, holding json_2.1.1/ or
    being it): every folder with traj_data.json and game.tw-pddl whose task type is asked for and
    whose game is marked solvable, skipping movable-receptacle and sliced trials as alfworld's
    AlfredTWEnv does. `split` is the first folder under the tree (train, valid_seen,
    valid_unseen); `splits` keeps only those. Sorted by path; game_id is the path in the tree."""
    if root is None:
        root = os.environ.get("ALFWORLD_DATA")
        if not root:
            raise FileNotFoundError("no ALFWorld data: pass root or set ALFWORLD_DATA")
    base = Path(os.path.expandvars(str(root))).expanduser()
    if (base / "json_2.1.1").is_dir():
        base = base / "json_2.1.1"
    if not base.is_dir():
        raise FileNotFoundError(f"ALFWorld data folder not found: {base}")
    wanted = set(task_types)
    games = []
    for dirpath, _, files in sorted(os.walk(base)):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        folder = Path(dirpath)
        relative = folder.relative_to(base)
        if "movable" in relative.as_posix() or "Sliced" in relative.as_posix():
            continue
        split = relative.parts[0] if len(relative.parts) > 1 else ""
        if splits is not None and split not in splits:
            continue
        traj = json.loads((folder / "traj_data.json").read_text())
        if traj.get("task_type") not in wanted:
            continue
        record = _read_game_dir(folder, split=split, game_id=relative.as_posix())
        if record is not None:
            games.append(record)
    return games
