"""The worker side of `OpenEnvTask`: OpenEnv environments built, reset, stepped and played by an
expert inside worker processes forked from the harness (`tasks.workers`), never in the harness's
own process (an environment may reseed global generators or hold threads).

An environment is any class with OpenEnv's `Environment` protocol: `reset(seed=, episode_id=,
**kwargs) -> Observation` and `step(action) -> Observation`, where an observation is a pydantic
model with `done` and `reward` beside fields of the environment's own, and an action a pydantic
model whose `action_field` the policy's command fills."""

from __future__ import annotations

import importlib
import inspect
import typing
from dataclasses import dataclass, field
from typing import Any

from rollout.episodes import Answer, answer_text

BASE_FIELDS = ("done", "reward", "metadata")
"""Fields every OpenEnv observation has: the rest are the environment's own, what the policy reads."""


@dataclass(frozen=True)
class Spec:
    """What a worker needs to build and drive the task's environments (sent with every call)."""

    environment: str
    init_args: dict = field(default_factory=dict)
    action: str | None = None
    action_field: str = "message"
    observation_field: str | None = None
    expert: str | None = None
    max_turns: int = 10


def load(path: str) -> Any:
    """The object a class path names ("package.module.Name")."""
    module, _, name = path.rpartition(".")
    if not module:
        raise ValueError(f"{path!r} is not a class path (package.module.Name)")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import {path} ({error}): install the package that provides it") from None


def action_class(spec: Spec, environment_class: type) -> type:
    """`spec.action`, or the action type the environment declares (`Environment[Action, ...]`)."""
    if spec.action:
        return load(spec.action)
    for klass in environment_class.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            arguments = typing.get_args(base)
            if arguments and isinstance(arguments[0], type):
                return arguments[0]
    raise ValueError(f"action: {spec.environment} declares no action type (Environment[Action, ...]): name it")


def observation_text(spec: Spec, observation: Any) -> str:
    """What the policy reads of an observation: `observation_field`, or each field of the
    environment's own as `name: value` lines (the value alone where there is one)."""
    if spec.observation_field:
        return str(getattr(observation, spec.observation_field))
    own = {k: v for k, v in observation.model_dump().items() if k not in BASE_FIELDS}
    if len(own) == 1:
        return str(next(iter(own.values())))
    return "\n".join(f"{k}: {v}" for k, v in own.items())


def refusal(error: Exception) -> str:
    """The first reason an action's model gave for refusing it: "guess: Input should be a valid integer"."""
    errors = getattr(error, "errors", None)
    if callable(errors) and errors():
        first = errors()[0]
        return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    return (str(error).splitlines() or [type(error).__name__])[0]


def start_signature(observation: Any) -> Any:
    """An observation as `check_args` compares two resets of one seed (metadata left out: ids)."""
    return {k: v for k, v in observation.model_dump().items() if k != "metadata"}


class Episode:
    """One environment instance and the episode it plays."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        klass = load(spec.environment)
        self.environment = klass(**spec.init_args)
        self.action = action_class(spec, klass)
        self.done, self.turns, self.reward = True, 0, 0.0
        self.observation: Any = None

    def reset(self, start: dict) -> str:
        parameters = inspect.signature(self.environment.reset).parameters.values()
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            for key in set(start) - {p.name for p in parameters}:
                raise ValueError(
                    f"{self.spec.environment}.reset takes no {key}: its episodes cannot be drawn reproducibly"
                )
        self.observation = self.environment.reset(**start)
        self.done, self.turns, self.reward = bool(self.observation.done), 0, 0.0
        return observation_text(self.spec, self.observation)

    def step(self, command: str) -> Answer:
        """The environment's answer to `command`; an action the environment's model refuses is the
        policy's failure (an answer saying so, nothing changed); an exception inside the
        environment is the environment's (the episode ends, unjudged)."""
        self.turns += 1
        try:
            action = self.action(**{self.spec.action_field: command})
        except Exception as error:  # noqa: BLE001 - pydantic's ValidationError, or a field it lacks
            self.done = self.turns >= self.spec.max_turns
            text = f"Invalid action ({refusal(error)})."
            return Answer(answer_text(text, self.done), text, self.done, truncated=self.done, valid=False)
        try:
            self.observation = self.environment.step(action)
        except Exception as error:  # noqa: BLE001 - the environment's failure, not the policy's
            self.done = True
            return Answer("\n", "", True, failed=f"the environment raised {error!r}"[:200])
        reward = float(self.observation.reward or 0.0)
        self.reward += reward
        ended = bool(self.observation.done)
        self.done = ended or self.turns >= self.spec.max_turns
        text = observation_text(self.spec, self.observation)
        return Answer(answer_text(text, self.done), text, self.done, truncated=not ended and self.done, reward=reward)

    def close(self) -> None:
        close = getattr(self.environment, "close", None)
        if close is not None:
            close()


@dataclass
class State:
    """A worker's environments: the rollout's episodes (reused from call to call) and one for the
    task's own plays (problems, demonstrations, replays)."""

    spec: Spec
    episodes: list[Episode] = field(default_factory=list)
    own: Episode | None = None


def handle(state: State | None, kind: str, items: list, spec: Spec) -> tuple[State, list]:
    """A worker's share of a call (`Workers`)."""
    if state is None or state.spec != spec:
        for episode in [*state.episodes, state.own] if state else ():
            if episode is not None:
                episode.close()
        state = State(spec)
    if kind == "reset":
        while len(state.episodes) < len(items):
            state.episodes.append(Episode(spec))
        return state, [_reset(episode, start) for episode, start in zip(state.episodes, items)]
    if kind == "step":
        return state, [
            None if command is None or episode.done else episode.step(command)
            for episode, command in zip(state.episodes, items)
        ]
    if state.own is None:
        state.own = Episode(spec)
    if kind == "start":
        return state, [_start(state.own, start) for start in items]
    if kind == "demonstrate":
        return state, [_demonstrate(state.own, start, load(spec.expert)) for start in items]
    if kind == "replay":
        return state, [_replay(state.own, start, commands) for start, commands in items]
    raise ValueError(f"unknown call {kind!r}")


def _reset(episode: Episode, start: dict) -> str | Exception:
    try:
        return episode.reset(start)
    except Exception as error:  # noqa: BLE001 - the episode is unjudged, the others go on
        episode.done = True
        return RuntimeError(f"the environment's reset raised {error!r}"[:200])


def _start(episode: Episode, start: dict) -> tuple[str, Any, Any]:
    """The first observation of `start`, as text, and two resets' signatures (equal where the
    environment keeps its seeds)."""
    text = episode.reset(start)
    first = start_signature(episode.observation)
    episode.reset(start)
    return text, first, start_signature(episode.observation)


def _demonstrate(episode: Episode, start: dict, expert: Any) -> tuple[str, list[tuple[str, str]], float]:
    """The expert's play of `start`: (first observation, [(command, answer text)], reward)."""
    text = episode.reset(start)
    turns = []
    while not episode.done:
        command = " ".join(str(expert(episode.environment, episode.observation)).split())
        answer = episode.step(command)
        if answer.failed is not None:
            raise RuntimeError(f"the expert's play of {start}: {answer.failed}")
        turns.append((command, answer.text))
    return text, turns, episode.reward


def _replay(episode: Episode, start: dict, commands: list[str]) -> tuple[float, int, bool, str | None]:
    """`commands` played from `start`: (reward, turns, done, the environment's failure or None)."""
    episode.reset(start)
    for command in commands:
        if episode.done:
            break
        answer = episode.step(command)
        if answer.failed is not None:
            return episode.reward, episode.turns, True, answer.failed
    return episode.reward, episode.turns, episode.done, None
