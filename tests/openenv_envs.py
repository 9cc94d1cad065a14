"""Small environments with OpenEnv's protocol (reset/step, pydantic observations and actions) for
tests/test_openenv.py: each a way an environment behaves, well or badly. They need pydantic
alone; the protocol is structural, so the task never imports openenv itself."""

from __future__ import annotations

import itertools
import random
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

A = TypeVar("A")
O = TypeVar("O")  # noqa: E741


class Action(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metadata: dict = {}


class Observation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    done: bool = False
    reward: float | None = None
    metadata: dict = {}


class Environment(Generic[A, O]):
    """As openenv.core.env_server.interfaces.Environment declares its action and observation types."""


class Say(Action):
    message: str


class Text(Observation):
    text: str = ""


class Count(Action):
    times: int


class SayGo(Environment[Say, Text]):
    """Say "go" as many times as the start asks (1 to 3, from the seed): reward 1 on the last."""

    def __init__(self, most: int = 3) -> None:
        self.most, self.left = most, 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Text:
        self.left = random.Random(seed).randint(1, self.most)
        return Text(text=f"Say go {self.left} times.")

    def step(self, action: Say, timeout_s: float | None = None, **kwargs: Any) -> Text:
        if action.message != "go":
            return Text(text="No.", reward=0.0)
        self.left -= 1
        if self.left == 0:
            return Text(text="Done!", reward=1.0, done=True)
        return Text(text=f"{self.left} more.", reward=0.0)


def say_go(environment: SayGo, observation: Text) -> str:
    """SayGo's expert."""
    return "go"


_STARTS = itertools.count()


class DropsSeed(SayGo):
    """Takes a seed and ignores it (the known upstream issue): each reset another start."""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Text:
        self.left = 1
        return Text(text=f"Start number {next(_STARTS)}.")


class NoSeed(SayGo):
    """As many library examples: a reset that takes no seed."""

    def reset(self) -> Text:  # type: ignore[override]
        self.left = 1
        return Text(text="Say go once.")


class Raises(SayGo):
    """Its step raises on "boom": the environment's failure, not the policy's."""

    def step(self, action: Say, timeout_s: float | None = None, **kwargs: Any) -> Text:
        if action.message == "boom":
            raise RuntimeError("the environment broke")
        return super().step(action)


class Reseeds(SayGo):
    """Reseeds the process's global generator on every reset, as TextArena's and GEM's do."""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Text:
        random.seed(seed)
        return super().reset(seed)


class Counts(Environment[Count, Text]):
    """An action with an int field: text that is not a number is an action its model refuses."""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Text:
        return Text(text="How many?")

    def step(self, action: Count, timeout_s: float | None = None, **kwargs: Any) -> Text:
        return Text(text=f"{action.times}.", reward=1.0, done=True)


class Splits(SayGo):
    """Episodes by OpenEnv's task API (`reset(split=, index=)`), with no seed."""

    def list_splits(self) -> list[str]:
        return ["train", "test"]

    def num_tasks(self, split: str) -> int:
        return 50

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Text:
        split, index = kwargs["split"], kwargs["index"]
        if index >= self.num_tasks(split):
            raise IndexError(f"{split} has {self.num_tasks(split)} tasks")
        self.left = 1 + index % self.most
        return Text(text=f"Task {split}/{index}: say go {self.left} times.")
