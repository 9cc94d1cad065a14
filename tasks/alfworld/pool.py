"""Many games stepped at once, here or in worker processes forked from the harness, which step
their shares of a turn's episodes while the policy waits."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tasks.alfworld.data import GameRecord, ResetResult, StepResult, failed_step
from tasks.alfworld.env import AlfworldEnv


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
        self, size: int = 0, max_steps: int = 50, fast: bool = True, list_help: bool = True, processes: int = 0
    ) -> None:
        self.max_steps, self.fast, self.list_help, self.processes = max_steps, fast, list_help, processes
        self.envs = [
            AlfworldEnv(max_steps=max_steps, fast=fast, list_help=list_help)
            for _ in range(size if not processes else 0)
        ]
        self.workers: list[tuple[Any, Any]] = []  # (process, connection); connection None: it died
        self.done: list[bool] = [True] * size
        self.holders: dict[str, list[int]] = {}  # game -> the workers its resets were dealt to

    def __len__(self) -> int:
        return len(self.done)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self, games: Sequence[GameRecord | str | Path]) -> list[ResetResult]:
        games = [str(g.path) if isinstance(g, GameRecord) else g for g in games]
        if any(connection is None for _, connection in self.workers):
            self.close()  # a worker died in the last episodes: start afresh
        if self.processes:
            results = self._scatter("reset", games)
            for i, game in enumerate(games):
                self.holders[str(game)] = [*dict.fromkeys([*self.holders.get(str(game), []), i % self.processes])]
        else:
            results = _reset(self.envs, games, self.max_steps, self.fast, self.list_help)
        self.done = [False] * len(games)
        return results

    def step(self, commands: Sequence[str | None]) -> list[StepResult | None]:
        if len(commands) != len(self.done):
            raise ValueError(f"{len(commands)} commands for a pool of {len(self.done)}")
        commands = [None if done else command for command, done in zip(commands, self.done)]
        results = self._scatter("step", commands) if self.processes else _step(self.envs, commands)
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
        for game in games:
            game = str(game.path) if isinstance(game, GameRecord) else str(game)
            holders = self.holders.get(game) or list(range(self.processes))
            owners.append(holders[dealt.get(game, 0) % len(holders)])
            dealt[game] = dealt.get(game, 0) + 1
        return self._scatter("call", [(function, job) for job in jobs], owners)

    def _scatter(self, kind: str, items: list, owners: Sequence[int] | None = None) -> list:
        """Deal `items` to the workers (item i to worker `owners[i]`, by default round-robin),
        run `kind` on each share, gather in order."""
        while len(self.workers) < self.processes:
            ours, theirs = multiprocessing.Pipe()
            # fork: the worker starts with this process's parsed games and translations, and
            # never touches the accelerator or torch this process may hold
            process = multiprocessing.get_context("fork").Process(
                target=_serve, args=(theirs, ours, self.fast, self.list_help), daemon=True
            )
            process.start()
            theirs.close()
            self.workers.append((process, ours))
        if owners is None:
            owners = [i % self.processes for i in range(len(items))]
        places = [[i for i, owner in enumerate(owners) if owner == w] for w in range(self.processes)]
        shares = [[items[i] for i in place] for place in places]
        sent = []
        for (_, connection), share in zip(self.workers, shares):
            try:
                sent.append(
                    bool(share) and connection is not None and connection.send((kind, share, self.max_steps)) is None
                )
            except OSError:
                sent.append(False)
        results: list = [None] * len(items)
        for w, ((process, connection), share) in enumerate(zip(self.workers, shares)):
            if not share:
                continue
            try:
                status, value = connection.recv() if sent[w] else ("died", None)
            except (EOFError, OSError):
                status, value = "died", None
            if status == "died" and kind == "step":
                # its games are gone with it: each of its episodes still going ends, failed
                self.workers[w] = (process, None)
                value = [
                    None if command is None else failed_step(f"its worker {process.pid} died") for command in share
                ]
            elif status != "ok":
                self.close()
                raise RuntimeError(value or f"the ALFWorld worker {process.pid} died")
            for i, result in zip(places[w], value):
                results[i] = result
        return results

    def close(self) -> None:
        for process, connection in self.workers:
            try:
                if connection is not None:
                    connection.send(None)
            except OSError:
                pass
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
            if connection is not None:
                connection.close()
        self.workers, self.holders = [], {}


def _reset(envs: list[AlfworldEnv], games: Sequence, max_steps: int, fast: bool, list_help: bool) -> list[ResetResult]:
    """Reset the first len(games) of `envs` to `games`, adding engines as needed."""
    while len(envs) < len(games):
        envs.append(AlfworldEnv(max_steps=max_steps, fast=fast, list_help=list_help))
    for env in envs:
        env.max_steps = max_steps
    return [env.reset(game) for env, game in zip(envs, games)]


def _step(envs: list[AlfworldEnv], commands: Sequence[str | None]) -> list[StepResult | None]:
    return [None if command is None or env.done else _step_one(env, command) for env, command in zip(envs, commands)]


def _step_one(env: AlfworldEnv, command: str) -> StepResult:
    try:
        return env.step(command)
    except Exception as error:  # noqa: BLE001 - the game's failure, not the policy's: unjudged
        env.done = True
        return failed_step(repr(error)[:200])


def _serve(connection: Any, parents_end: Any, fast: bool, list_help: bool) -> None:
    """A worker of `EnvPool`: its share of the games, until told None or the harness is gone."""
    parents_end.close()  # the fork's copy of it: held here, it would keep EOF from ever coming
    envs: list[AlfworldEnv] = []
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        kind, items, max_steps = message
        try:
            if kind == "reset":
                reply = ("ok", _reset(envs, items, max_steps, fast, list_help))
            elif kind == "call":
                reply = ("ok", [function(*job) for function, job in items])
            else:
                reply = ("ok", _step(envs, items))
        except Exception as error:  # noqa: BLE001 - the harness process raises it
            reply = ("error", f"ALFWorld worker {os.getpid()}: {error!r}")
        connection.send(reply)


def forked_starmap(function: Callable, jobs: Sequence[tuple], processes: int) -> list:
    """`function(*job)` of each job, in order, in `processes` processes forked from this one,
    which are let finish and joined, never terminated: `Pool.terminate` sends SIGTERM, and a
    worker forked inside a trainer's `fit` inherits the trainer's SIGTERM handler (Lightning's),
    survives it and blocks on the pool's queue, so the join hangs for good. The workers get the
    default handler back as well."""
    with multiprocessing.get_context("fork").Pool(processes, initializer=_default_sigterm) as pool:
        results = pool.starmap(function, jobs, chunksize=1)
        pool.close()
        pool.join()
    return results


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
