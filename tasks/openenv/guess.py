"""A small OpenEnv environment for the harness's own suite and tests: guess a number the
environment drew from its seed, told "Higher." or "Lower." after each guess; reward 1 for
finding it within `guesses`. Binary search finds any number from 1 to 100 in seven guesses, so
the game is won by a policy that reads its own history, and lost by one that guesses blind.

`expert` plays the demonstrations: binary search, with a seeded share of guesses anywhere
between the bounds (a detour, as ALFWorld's demonstrations have), so that the warm start does
not already win every game."""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    guess: int = Field(..., description="The number guessed")


class GuessObservation(Observation):
    message: str = Field("", description="What the environment says")


class GuessNumberEnvironment(Environment[GuessAction, GuessObservation, State]):
    """The number is drawn from `random.Random(seed)` on each reset, between 1 and `high`."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, high: int = 20, guesses: int = 5, detour_rate: float = 0.3) -> None:
        super().__init__()
        self.high, self.guesses, self.detour_rate = high, guesses, detour_rate
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.number, self.low_bound, self.high_bound, self.seed = 0, 1, high, 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self.seed = random.randrange(2**31) if seed is None else seed
        self.number = random.Random(self.seed).randint(1, self.high)
        self.low_bound, self.high_bound = 1, self.high
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return GuessObservation(message=f"Guess my number from 1 to {self.high}.", reward=0.0, done=False)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        left = self.guesses - self._state.step_count
        if action.guess == self.number:
            return GuessObservation(message="Correct!", reward=1.0, done=True)
        if action.guess < self.number:
            self.low_bound = max(self.low_bound, action.guess + 1)
            message = "Higher."
        else:
            self.high_bound = min(self.high_bound, action.guess - 1)
            message = "Lower."
        if left <= 0:
            return GuessObservation(message=f"{message} No guesses left.", reward=0.0, done=True)
        return GuessObservation(message=message, reward=0.0, done=False)

    @property
    def state(self) -> State:
        return self._state


def expert(environment: GuessNumberEnvironment, observation: GuessObservation) -> str:
    """Binary search between the bounds the answers so far leave, or, at the environment's
    `detour_rate` (seeded by the episode's seed and turn), any number between them."""
    low, high = environment.low_bound, environment.high_bound
    rng = random.Random(f"{environment.seed}/{environment.state.step_count}")
    if rng.random() < environment.detour_rate:
        return str(rng.randint(low, high))
    return str((low + high) // 2)
