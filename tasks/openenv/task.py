"""Any OpenEnv environment as a multi-turn task (docs/tasks.md#openenv): named by class path,
played on the episode loop ALFWorld plays (`rollout.episodes`), in worker processes forked from
the harness (`worker.py`).

What the protocol leaves to its user, and what this task does about it:
- a split is a range of seeds or a split of the environment's own task API (`reset(split=,
  index=)`); seed ranges must not overlap, nor the index ranges of one split;
- some environments drop their seed, which breaks a group's shared start: each problem's start is
  reset twice when the splits are made, and an environment whose two resets differ is refused;
  an episode whose reset differs from its problem's start is unjudged;
- an exception inside the environment is its failure: the episode is unjudged, not lost; an
  action its model refuses is the policy's failure, answered as such, and the episode goes on;
- there are no demonstrations by contract: `expert` names a function that plays one."""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Sequence

from rollout.episodes import Answer, answer_text, play, split_demonstration, transcript_example
from rollout.ranges import NonNegativeInt, PositiveInt, check_fields
from tasks.base import Problem, Task, Verdict
from tasks.openenv.worker import Spec, handle
from tasks.workers import Workers

if TYPE_CHECKING:
    from rollout.batch import Rollouts
    from rollout.decoding import RolloutEngine


@dataclass(frozen=True)
class Episodes:
    """Where one split's episodes start: a range of seeds, or a split of the environment's task API."""

    seeds: list[NonNegativeInt] | None = None
    """[first, last + 1): each episode is `reset(seed=s)`."""
    split: str | None = None
    """A split of the environment's own task API (`list_splits`): each episode is `reset(split=, index=)`."""
    first: NonNegativeInt = 0
    """With `split`: the index of its first episode."""
    size: PositiveInt | None = None
    """With `split`: how many episodes, from `first` (the split's `num_tasks` must cover them)."""

    def __post_init__(self):
        check_fields(self)
        if (self.seeds is None) == (self.split is None):
            raise ValueError("give `seeds: [first, last + 1]` or `split` (with `size`), not both or neither")
        if self.seeds is not None and (len(self.seeds) != 2 or self.seeds[0] >= self.seeds[1]):
            raise ValueError(f"seeds: [first, last + 1] with first < last + 1 (got {list(self.seeds)})")
        if self.split is not None and self.size is None:
            raise ValueError("size: how many of the split's episodes (from `first`)")
        if self.seeds is not None and (self.first or self.size is not None):
            raise ValueError("first and size go with `split`; a seed range says its own")

    @property
    def span(self) -> range:
        return range(*self.seeds) if self.seeds is not None else range(self.first, self.first + self.size)

    def starts(self) -> list[dict]:
        """Each episode's `reset` arguments."""
        if self.seeds is not None:
            return [{"seed": s} for s in self.span]
        return [{"split": self.split, "index": i} for i in self.span]

    def overlaps(self, other: Episodes) -> bool:
        same_kind = (self.seeds is None) == (other.seeds is None) and self.split == other.split
        return same_kind and bool(set(self.span) & set(other.span))


def problem_id(start: dict) -> str:
    return f"seed/{start['seed']}" if "seed" in start else f"{start['split']}/{start['index']}"


class OpenEnvTask(Task):
    """Episodes of an OpenEnv `Environment` (reset/step), rewarded by the environment's own rewards."""

    multi_turn = True
    supports_chat = False  # its turns are plain text after the first prompt

    def __init__(
        self,
        environment: str,
        train_episodes: dict | Episodes,
        eval_episodes: dict | Episodes,
        init_args: dict | None = None,
        action: str | None = None,
        action_field: str = "message",
        observation_field: str | None = None,
        max_turns: PositiveInt = 10,
        expert: str | None = None,
        env_processes: PositiveInt | None = None,
    ):
        """environment: its class path (package.module.Name), built with `init_args`. action: the
        action class's path, by default the environment's declared one (`Environment[Action, ...]`);
        the policy's command fills its `action_field`. observation_field: the field the policy
        reads, by default every field of the environment's own as `name: value` lines. expert: the
        path of a function (environment, observation) -> command that plays the demonstrations.
        env_processes: worker processes the environments run in (never the harness's own)."""
        if not isinstance(environment, str) or "." not in environment:
            raise ValueError(f"environment: a class path, package.module.Name (got {environment!r})")
        splits = {}
        for name, value in (("train_episodes", train_episodes), ("eval_episodes", eval_episodes)):
            try:
                splits[name] = value if isinstance(value, Episodes) else Episodes(**value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"{name}: {error}") from None
        if splits["eval_episodes"].overlaps(splits["train_episodes"]):
            raise ValueError("eval_episodes: overlaps train_episodes (held-out episodes must not be trained on)")
        if max_turns < 1:
            raise ValueError(f"max_turns: must be >= 1 (got {max_turns})")
        if env_processes is not None and env_processes < 1:
            raise ValueError(
                f"env_processes: must be >= 1 (got {env_processes}): environments never run in the harness"
            )
        for name, path in (("action", action), ("expert", expert)):
            if path is not None and (not isinstance(path, str) or "." not in path):
                raise ValueError(f"{name}: a path, package.module.name (got {path!r})")
        if not isinstance(action_field, str) or not action_field:
            raise ValueError(f"action_field: the action's field the command fills (got {action_field!r})")
        self.spec = Spec(environment, dict(init_args or {}), action, action_field, observation_field, expert, max_turns)
        self.train_episodes, self.eval_episodes = splits["train_episodes"], splits["eval_episodes"]
        self.max_turns = max_turns
        self.env_processes = min(os.cpu_count() or 1, 8) if env_processes is None else env_processes
        self._trusted: dict[tuple[str, str], Verdict] = {}

    @classmethod
    def check_args(cls, args: dict) -> None:
        """The environment built in a worker and its first training episode reset twice: an
        environment that drops its seed (two different starts) is refused."""
        task = cls(**args)
        task.starts(task.train_episodes.starts()[:1])

    # ---- problems

    @property
    def workers(self) -> Workers:
        return workers(self.env_processes, self.spec)

    def call(self, kind: str, items: list) -> list:
        try:
            return self.workers.scatter(kind, items, self.spec)
        except RuntimeError as error:
            raise ValueError(f"environment: {error}") from None

    def starts(self, starts: list[dict]) -> list[str]:
        """The first observation of each start, as text; raises where two resets of one differ."""
        texts = []
        for start, (text, first, again) in zip(starts, self.call("start", starts)):
            if first != again:
                raise ValueError(
                    f"environment: two resets of {start} gave two starts: it drops its seed, so a group's "
                    "episodes would not share one"
                )
            texts.append(text)
        return texts

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        made = []
        for episodes, demonstrated in ((self.train_episodes, True), (self.eval_episodes, False)):
            starts = episodes.starts()
            prompts = [answer_text(text, False) for text in self.starts(starts)]
            demonstrations = [""] * len(starts)
            if demonstrated and self.spec.expert:
                for k, (_, turns, reward) in enumerate(self.call("demonstrate", starts)):
                    demonstrations[k] = "".join(f"{command}\n{answer}" for command, answer in turns)
                    self._trusted[(problem_id(starts[k]), demonstrations[k])] = outcome(reward, len(turns), None)
            made.append(
                [
                    Problem(id=problem_id(s), prompt=p, answer=json.dumps(s), demonstration=d)
                    for s, p, d in zip(starts, prompts, demonstrations)
                ]
            )
        return made[0], made[1]

    def train_problems(self) -> Sequence[Problem]:
        return self._splits[0]

    def eval_problems(self) -> Sequence[Problem]:
        return self._splits[1]

    def supervised_example(self, problem: Problem, tokenizer) -> tuple[list[int], list[int]]:
        return transcript_example(problem.prompt, problem.demonstration, tokenizer)

    # ---- rollouts

    def rollout(
        self, engine: RolloutEngine, problems: Sequence[Problem], group_size: int, greedy: bool = False
    ) -> Rollouts:
        episodes = [p for p in problems for _ in range(group_size)]
        environments = _Environments(self)
        unjudged = environments.reset(episodes)
        rollouts, answers = play(engine, episodes, environments, self.max_turns, group_size, greedy)
        failed = [
            why or next((a.failed for a in own if a.failed is not None), None) for why, own in zip(unjudged, answers)
        ]
        rollouts.verdicts = [outcome(sum(a.reward for a in own), len(own), why) for own, why in zip(answers, failed)]
        return rollouts

    def own_work(self) -> list[tuple[object, str]]:
        return [*super().own_work(), (_Environments, "step"), (_Environments, "reset")]

    # ---- verification

    def verify_all(self, rollouts: Rollouts) -> list[Verdict]:
        """The outcomes the environment gave while the episodes were played."""
        return list(rollouts.verdicts)

    def verify_trusted(self, problem: Problem, completion: str) -> Verdict:
        key = (problem.id, completion)
        if key not in self._trusted:
            self._trusted[key] = self.verify(problem, completion)
        return self._trusted[key]

    def verify(self, problem: Problem, completion: str) -> Verdict:
        """Replay a transcript's commands from its start, in a worker (the environment, reset
        with the same seed, plays them as it did)."""
        turns = split_demonstration(completion)
        if turns[-1] == ("", ""):  # it ends on the policy's turn, not played
            turns.pop()
        commands = [command.strip() for command, _ in turns]
        ((reward, turns, _, why),) = self.call("replay", [(json.loads(problem.answer), commands)])
        return outcome(reward, turns, why)


_WORKERS: dict[tuple[int, str], Workers] = {}


def workers(processes: int, spec: Spec) -> Workers:
    """The worker processes of one environment's runs, made once per process and kept for every
    run of it (each run builds a task: the same environment's workers keep their instances)."""
    key = (processes, json.dumps(dataclasses.asdict(spec), sort_keys=True, default=str))
    if key not in _WORKERS:
        _WORKERS[key] = Workers(processes, handle, "OpenEnv")
        atexit.register(_WORKERS[key].close)
    return _WORKERS[key]


def outcome(reward: float, turns: int, failed: str | None) -> Verdict:
    """The environment's rewards summed, clipped to [0, 1] (a verdict's range); the outcome alone,
    as ALFWorld's: the turns' own commands are in the episode already."""
    if failed is not None:
        return Verdict(0.0, failed, judged=False)
    return Verdict(min(max(reward, 0.0), 1.0), f"reward {reward:g} after {turns} turns")


class _Environments:
    """The task's workers as the episode loop's environments, episode i in worker i % processes."""

    def __init__(self, task: OpenEnvTask) -> None:
        self.task = task
        self.done: list[bool] = []

    @property
    def active(self) -> list[bool]:
        return [not done for done in self.done]

    def reset(self, episodes: Sequence[Problem]) -> list[str | None]:
        """Each episode reset to its problem's start; why one is unjudged from the start, or None."""
        task = self.task
        if task.workers.any_dead:
            task.workers.close()  # a worker died in the last episodes: start afresh
        firsts = task.call("reset", [json.loads(p.answer) for p in episodes])
        why = [
            str(first)
            if isinstance(first, Exception)
            else None
            if answer_text(first, False) == p.prompt
            else "the environment's reset gave another start than the problem's: it drops its seed"
            for p, first in zip(episodes, firsts)
        ]
        self.done = [reason is not None for reason in why]
        return why

    def step(self, commands: Sequence[str | None]) -> list[Answer | None]:
        commands = [None if done else command for command, done in zip(commands, self.done)]
        results = self.task.workers.scatter(
            "step",
            commands,
            self.task.spec,
            died=lambda pid, share: [
                None if c is None else Answer("\n", "", True, failed=f"its worker {pid} died") for c in share
            ],
        )
        self.done = [done if result is None else result.done for done, result in zip(self.done, results)]
        return results
