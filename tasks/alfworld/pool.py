"""Many games stepped at once, here or in worker processes forked from the harness, which step
their shares of a turn's episodes while the policy waits."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.alfworld.data import GameRecord, ResetResult, StepResult, failed_step
from tasks.alfworld.env import AlfworldEnv
from tasks.workers import Posted, Workers


class EnvPool:
    """Games stepped in lockstep: in this process one after another (`processes=0`), or dealt
    round-robin to `processes` worker processes that step their shares at the same time: a
    step is CPU-bound Python (mostly TextWorld deriving the text of every admissible command),
    so on a rollout of many episodes the environment costs about what the policy's decoding
    does (docs/tasks.md). Workers are forked from this process on first use, so they
    start with the games it has already parsed, and they keep their own caches from call to
    call. A finished game is skipped: give it None as its command and get None back.

    `reset` takes any number of games; the pool then has that many. Transitions are those of an
    `AlfworldEnv` in this process (the engine is deterministic; tested). A step whose game raises,
    or whose worker died, ends that episode with a `failed` result (the rollout is then unjudged,
    not lost); a game that cannot be reset raises."""

    def __init__(
        self,
        size: int = 0,
        max_steps: int = 50,
        fast: bool = True,
        list_help: bool = True,
        processes: int = 0,
        listed: bool = True,
    ) -> None:
        self.max_steps, self.fast, self.list_help, self.processes = max_steps, fast, list_help, processes
        self.listed = listed  # results list the admissible commands (`AlfworldEnv`); may change between resets
        self.envs = [
            AlfworldEnv(max_steps=max_steps, fast=fast, list_help=list_help, listed=listed)
            for _ in range(size if not processes else 0)
        ]
        self.forked = Workers(processes, _handle, "ALFWorld")
        self.done: list[bool] = [True] * size
        self.holders: dict[str, set[int]] = {}  # game -> the workers its resets were dealt to
        self.started: dict[int, str] = {}  # episode -> command, stepping in its worker (`start`)
        self.posted: list[tuple[list[int], Posted]] = []  # (episodes, their call), not yet gathered

    @property
    def workers(self) -> list[tuple[Any, Any]]:
        """(process, connection) of each worker; connection None where it died."""
        return self.forked.workers

    def __len__(self) -> int:
        return len(self.done)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self, games: Sequence[GameRecord | str | Path]) -> list[ResetResult]:
        games = [_path(g) for g in games]
        for _, posted in self.posted:  # steps started and never gathered: their answers are read off
            self.forked.gather(posted, died=lambda pid, share: share)
        self.posted, self.started = [], {}
        if self.forked.any_dead:
            self.close()  # a worker died in the last episodes: start afresh
        if self.processes:
            results = self.forked.scatter("reset", games, self._settings())
            for i, game in enumerate(games):  # dealt round-robin
                self.holders.setdefault(str(game), set()).add(i % self.processes)
        else:
            results = _reset(self.envs, games, *self._settings())
        self.done = [False] * len(games)
        return results

    def start(self, commands: Mapping[int, str]) -> None:
        """Begin stepping these episodes (index -> command) in their workers while this process
        goes on (the policy decodes the other episodes' commands); the next `step` gathers them
        and must give each the same command. Without workers nothing starts early."""
        if not self.processes:
            return
        fresh = [i for i in sorted(commands) if not self.done[i] and i not in self.started]
        if fresh:
            items = [(i // self.processes, commands[i]) for i in fresh]  # (place in its worker, command)
            owners = [i % self.processes for i in fresh]  # where its reset was dealt
            self.posted.append((fresh, self.forked.post("step", items, self._settings(), owners)))
            self.started.update({i: commands[i] for i in fresh})

    def step(self, commands: Sequence[str | None]) -> list[StepResult | None]:
        if len(commands) != len(self.done):
            raise ValueError(f"{len(commands)} commands for a pool of {len(self.done)}")
        commands = [None if done else command for command, done in zip(commands, self.done)]
        if self.processes:
            if any(commands[i] != command for i, command in self.started.items()):
                raise ValueError("an episode stepped with another command than the one it was started with")
            self.start({i: c for i, c in enumerate(commands) if c is not None})
            results: list[StepResult | None] = [None] * len(commands)
            # a dead worker's games are gone with it: each of its episodes still going ends, failed
            died = lambda pid, share: [failed_step(f"its worker {pid} died") for _ in share]  # noqa: E731
            for indices, posted in self.posted:
                for i, result in zip(indices, self.forked.gather(posted, died)):
                    results[i] = result
            self.posted, self.started = [], {}
        else:
            results = _step(self.envs, commands)
        self.done = [done if result is None else result.done for done, result in zip(self.done, results)]
        return results

    @property
    def active(self) -> list[bool]:
        return [not done for done in self.done]

    def call(self, function: Callable, games: Sequence[GameRecord | str | Path], jobs: Sequence[tuple]) -> list:
        """`function(*job)` for each job, in a worker that has loaded the job's game (it keeps the
        game's PDDL translation, ~0.1 s to make anew), the jobs of one game dealt among its
        holders; in this process where the pool has no workers. `function` must be importable."""
        if not self.processes:
            return [function(*job) for job in jobs]
        dealt: dict[str, int] = {}
        owners = []
        for game in map(str, map(_path, games)):
            holders = sorted(self.holders.get(game) or range(self.processes))
            owners.append(holders[dealt.get(game, 0) % len(holders)])
            dealt[game] = dealt.get(game, 0) + 1
        return self.forked.scatter("call", [(function, job) for job in jobs], owners=owners)

    def _settings(self) -> tuple[int, bool, bool, bool]:
        return self.max_steps, self.fast, self.list_help, self.listed

    def close(self) -> None:
        self.forked.close()
        self.holders, self.posted, self.started = {}, [], {}


def _path(game: GameRecord | str | Path) -> str | Path:
    return str(game.path) if isinstance(game, GameRecord) else game


def _reset(
    envs: list[AlfworldEnv], games: Sequence, max_steps: int, fast: bool, list_help: bool, listed: bool
) -> list[ResetResult]:
    """Reset the first len(games) of `envs` to `games`, adding engines as needed."""
    while len(envs) < len(games):
        envs.append(AlfworldEnv(max_steps=max_steps, fast=fast, list_help=list_help, listed=listed))
    for env in envs:
        env.max_steps, env.listed = max_steps, listed
    return [env.reset(game) for env, game in zip(envs, games)]


def _step(envs: list[AlfworldEnv], commands: Sequence[str | None]) -> list[StepResult | None]:
    return [None if command is None or env.done else _step_one(env, command) for env, command in zip(envs, commands)]


def _step_one(env: AlfworldEnv, command: str) -> StepResult:
    try:
        return env.step(command)
    except Exception as error:  # noqa: BLE001 - the game's failure, not the policy's: unjudged
        env.done = True
        return failed_step(repr(error)[:200])


def _handle(envs: list[AlfworldEnv] | None, kind: str, items: list, settings: tuple[int, bool, bool, bool]) -> tuple:
    """A worker's share of a call (`Workers`): its games, kept from call to call."""
    envs = [] if envs is None else envs
    if kind == "reset":
        return envs, _reset(envs, items, *settings)
    if kind == "call":
        return envs, [function(*job) for function, job in items]
    # items: (the episode's place in this worker, its command)
    return envs, [None if envs[j].done else _step_one(envs[j], command) for j, command in items]
