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
from collections.abc import Mapping, Sequence
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

    listed=False leaves the admissible commands out of every result ([]), for a player that is not
    shown them: a fast env then derives a command's text only up to the one a step plays (TextWorld
    derives every applicable command's at every step, most of a step's cost), with the same
    transitions. `admissible` still lists them when read.

    plans=True asks the game's own planner (TextWorld's fast-downward `replan`) for a shortest
    plan from every state reached: `plan` after each reset and step (a few milliseconds each)."""

    def __init__(
        self, max_steps: int = 50, fast: bool = True, list_help: bool = True, plans: bool = False, listed: bool = True
    ) -> None:
        _alfworld()  # a clear error if the extra is missing
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        self.max_steps = max_steps
        self.fast = fast
        self.list_help, self.listed = list_help, listed
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
        self._state: Any = None

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
        self._state = state
        self.plan = self._plan(state)
        return ResetResult(observation, self.task, self.admissible if self.listed else [])

    def step(self, command: str) -> StepResult:
        """Play one command (whitespace and case normalised, as admissible commands are written)."""
        if self.done:
            raise RuntimeError("episode is over: call reset() first")
        state, _, _ = self._env.step(" ".join(command.lower().split()))
        self.steps += 1
        self.won = bool(state["won"])
        self.done = self.won or self.steps >= self.max_steps
        self._state = state
        self.plan = self._plan(state)
        return StepResult(state.feedback.strip(), self.done, self.won, self.admissible if self.listed else [])

    def _plan(self, state: Any) -> list[str] | None:
        """A shortest plan from `state` ([] once won; None without `plans` or where none exists)."""
        if not self.plans:
            return None
        if self.won:
            return []
        return list(state["policy_commands"] or []) or None

    @property
    def admissible(self) -> list[str]:
        """The commands the game carries out from where it is (sorted, as ALFWorld lists them)."""
        if self._state is None:
            return []
        state = self._state
        # the fast env's state derives them when read (`_Commands`); stock's lists them
        commands = sorted(set(state["_valid_commands"])) if self.fast else list(state["admissible_commands"])
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

        def _gather_infos(self) -> None:
            """Stock's, but each applicable action's command is derived when first read (`_Commands`)."""
            state = self._pddl_state
            actions = state.all_applicable_actions()  # also where `apply` finds the operators
            state.all_applicable_actions = list  # stock's loop over the actions finds none
            try:
                super()._gather_infos()
            finally:
                del state.all_applicable_actions
            self.state["_valid_actions"] = actions
            self.state["_valid_commands"] = _Commands(self, actions)
            del self.state["admissible_commands"]  # `AlfworldEnv.admissible` reads the commands

    return FastPddlEnv


class _Commands(Sequence):
    """The applicable actions' commands in their order, each derived from the game's grammar when
    first read: a step looks for its command (`index`) and stops at the first equal one, so it
    derives only the commands up to it. The derivation reads the state it was listed at, which no
    step has changed yet when they are read (a derivation is deterministic: the first rule that
    applies)."""

    def __init__(self, env: Any, actions: list) -> None:
        self.env, self.actions, self.derived = env, actions, []
        self.names = {key: info.name for key, info in env._entity_infos.items()}
        self.facts = list(env._pddl_state.facts)

    def __len__(self) -> int:
        return len(self.actions)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        while len(self.derived) <= (i if i >= 0 else len(self) + i):
            action = self.actions[len(self.derived)]
            context = {
                "state": self.env._pddl_state,
                "facts": self.facts,
                "variables": {ph.name: self.env._entity_infos[var.name] for ph, var in action.mapping.items()},
                "mapping": action.mapping,
                "entity_infos": self.env._entity_infos,
            }
            action.command_template = self.env._logic.grammar.derive(action.command_template, context)
            self.derived.append(action.format_command(self.names))
        return self.derived[i]

    def index(self, command: str) -> int:  # type: ignore[override]
        for i in range(len(self)):
            if self[i] == command:
                return i
        raise ValueError(f"{command!r} is not admissible")
