"""One ALFWorld game played through TextWorld's PDDL engine under alfworld's name demangler:
observations, admissible commands and `won` exactly as ALFWorld's.

    env = AlfworldEnv(max_steps=30)
    observation, task, admissible = env.reset(game)
    observation, done, won, admissible = env.step(admissible[0])"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tasks.alfworld.data import GameRecord, ResetResult, StepResult, _alfworld, _digest
from tasks.alfworld.speedups import _LRU, _fast_logic, set_speedups

# --------------------------------------------------------------------------------------------
# The environment


_BANNER = "-= Welcome to TextWorld, ALFRED! =-"


class AlfworldEnv:
    """One ALFWorld game at a time: TextWorld's PddlEnv under alfworld's AlfredDemangler, the
    engine ALFWorld itself plays. Any command is a turn: one that is not admissible gets the
    engine's answer ("Nothing happens.") and changes nothing. An episode ends when the game is
    won or after `max_steps` commands; stepping a finished episode raises.

    fast=True turns on the process-wide parse caches (`set_speedups`): a reset costs ~0.01 s
    (~0.05 s the first time the process sees the game) instead of ~0.2 s, a step ~0.005 s instead
    of ~0.02 s (default GameSize, 2 busy cores), with identical transitions. fast=False turns
    them off (for comparisons; it slows every env in the process).

    list_help=False leaves "help" out of the admissible commands (ALFWorld lists it everywhere;
    its answer is a 800-character manual). The engine still answers it if it is sent.

    plans=True asks the game's own planner (TextWorld's fast-downward `replan`) for a shortest
    plan from every state reached: `plan` after each reset and step (a few milliseconds each)."""

    def __init__(self, max_steps: int = 50, fast: bool = True, list_help: bool = True, plans: bool = False) -> None:
        _alfworld()  # a clear error if the extra is missing
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        self.max_steps = max_steps
        self.fast = fast
        self.list_help = list_help
        set_speedups(fast)
        pddl_env = _fast_pddl_env() if fast else PddlEnv
        infos = textworld.EnvInfos(admissible_commands=True, won=True, policy_commands=plans)
        self._env = AlfredDemangler(pddl_env(infos))
        self.plans = plans
        self.plan: list[str] | None = None
        self._loaded: str | None = None
        self._games = _LRU(256)  # game file contents, by path
        self.task = ""
        self.steps = 0
        self.won = False
        self.done = True
        self.admissible: list[str] = []

    def reset(self, game: GameRecord | str | Path | Mapping[str, Any]) -> ResetResult:
        """Start `game` (a record, a game.tw-pddl path, or its parsed JSON) from its beginning.
        Returns the room description, the task sentence and the admissible commands."""
        if isinstance(game, GameRecord):
            game = game.path
        if isinstance(game, Mapping):
            data, key = game, _digest(json.dumps(game, sort_keys=True))
        else:
            path = str(game)
            stamp = os.stat(path).st_mtime_ns
            data, key = self._games.get_or((path, stamp), lambda: json.loads(Path(path).read_text())), f"{path}@{stamp}"
        argv = sys.argv
        try:
            # Stock TextWorld loads on every episode; the fast env reloads only another game.
            if not self.fast or key != self._loaded:
                self._env.load(dict(data))
                self._loaded = key
            state = self._env.reset()
        finally:
            sys.argv = argv  # the PDDL translator overwrites it
        text = state.feedback
        observation, _, task = text.partition("\n\nYour task is to: ")
        observation = observation.replace(_BANNER, "", 1).strip()
        self.task = task.strip().removesuffix(".")
        self.steps, self.won, self.done = 0, bool(state["won"]), False
        self.admissible = self._admissible(state)
        self.plan = self._plan(state)
        return ResetResult(observation, self.task, list(self.admissible))

    def step(self, command: str) -> StepResult:
        """Play one command (whitespace and case normalised, as admissible commands are written)."""
        if self.done:
            raise RuntimeError("episode is over: call reset() first")
        state, _, _ = self._env.step(" ".join(command.lower().split()))
        self.steps += 1
        self.won = bool(state["won"])
        self.done = self.won or self.steps >= self.max_steps
        self.admissible = self._admissible(state)
        self.plan = self._plan(state)
        return StepResult(state.feedback.strip(), self.done, self.won, list(self.admissible))

    def _plan(self, state: Any) -> list[str] | None:
        """A shortest plan from `state` ([] once won; None without `plans` or where none exists)."""
        if not self.plans:
            return None
        if self.won:
            return []
        return list(state["policy_commands"] or []) or None

    def _admissible(self, state: Any) -> list[str]:
        commands = list(state["admissible_commands"])
        return commands if self.list_help else [c for c in commands if c != "help"]

    def display_names(self) -> dict[str, str]:
        """The loaded game's entities: PDDL name (lower-case, mangled ALFRED id) -> display name."""
        return {key: info.name.strip() for key, info in self._env._entity_infos.items()}


@functools.cache
def _fast_pddl_env() -> type:
    from textworld.envs.pddl import PddlEnv
    from textworld.envs.pddl import logic as pddl_logic

    class FastPddlEnv(PddlEnv):
        """PddlEnv that loads from parsed JSON with the cached grammar (see `_fast_logic`)."""

        def load(self, data: Mapping[str, Any]) -> None:
            self._game_file = None
            self._game_data = data
            self.walkthrough = data.get("walkthrough", None)
            self._logic = _fast_logic(data["pddl_domain"], data["grammar"])
            self._pddl_state = pddl_logic.PddlState(self.downward_lib, data["pddl_problem"], self._logic)
            self._entity_infos = self._get_entity_infos()

    return FastPddlEnv
