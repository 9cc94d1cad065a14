"""fast-downward's optimal walkthrough of a game, in a subprocess (`python -m
tasks.alfworld.planner GAME|-` prints it as JSON): the search has no time limit and cannot be
interrupted from Python. The module imports only the standard library at its top, so that the
subprocess starts fast."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def plan_walkthrough(game: Mapping[str, Any] | str | Path, timeout_s: float = 20.0) -> list[str] | None:
    """fast-downward's optimal plan for a game, as commands, or None if it finds none within
    `timeout_s`. Runs in a subprocess because the search has no time limit and cannot be
    interrupted from Python (a pick-two game in a big kitchen can take a minute)."""
    if isinstance(game, (str, Path)):
        payload = Path(game).read_text()
    else:
        payload = json.dumps({k: v for k, v in game.items() if k != "walkthrough"})
    try:
        out = subprocess.run(
            # As a module, not a script: a script's folder (tasks/alfworld/) would come first on
            # sys.path and shadow the alfworld package.
            [sys.executable, "-m", "tasks.alfworld.planner", "-"],
            cwd=Path(__file__).resolve().parents[2],
            # The search breaks ties between equally short plans by set order, which follows the
            # process's string hashing: fixed, a game's walkthrough (and so a warm start) is too.
            env={**os.environ, "PYTHONHASHSEED": "0"},
            input=payload,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return None
    try:
        plan = json.loads(lines[-1])  # the planner's own chatter, if any, comes before
    except json.JSONDecodeError:
        return None
    return list(plan) or None


def _plan_main(game_json: str) -> list[str]:
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs.pddl import PddlEnv

    data = json.loads(game_json)
    data.pop("walkthrough", None)  # else the env would return the stored one
    env = AlfredDemangler(PddlEnv(textworld.EnvInfos(extras=["walkthrough"])))
    env.load(data)
    return list(env.reset()["extra.walkthrough"])


def main(argv: Sequence[str] | None = None) -> int:
    # Parse first: the PDDL translator overwrites sys.argv once a game loads.
    parser = argparse.ArgumentParser(prog="python -m tasks.alfworld.planner", description=__doc__)
    parser.add_argument("game", help="game.tw-pddl path, or - for its JSON on stdin")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.game == "-" else Path(args.game).read_text()
    print(json.dumps(_plan_main(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
