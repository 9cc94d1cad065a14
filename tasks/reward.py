"""A task from a data file and a reward function, as TRL's `reward_funcs` make one: the file holds
one problem a row (JSON lines or parquet), the function scores a completion.

    # my_reward.py, beside the config
    def reward(prompt, completion, answer, **row):
        return float(completion.strip().split()[-1:] == [answer])

    task:
      class_path: tasks.reward.RewardTask
      init_args: {train_file: data.jsonl, reward: my_reward.reward, eval_size: 50, demonstration_field: solution}

The function is called as `reward(prompt=..., completion=..., **row)`: the row's prompt field as
written in the file, the completion, and every other field of the row by its name. It returns a
float in [0, 1], a `(float, feedback)` pair, or a `tasks.base.Verdict`; feedback is the text
HP-RLVR's hindsight block and SDPO's teacher read (empty: the outcome alone).

A row on which the function raises is unjudged, not wrong (its rollouts are left out of the update
and counted in `verify/unjudged`; the first is named in one warning line); a value that is none of
the three, or a reward outside [0, 1], stops the run with one line naming the row (exit 2). `run
CONFIG --check` calls the function on a few rows first (with their demonstration, or an empty
completion) and refuses it in one line where it raises or gives such a value.

It is the user's own code and runs in the harness process. A completion that must be executed
(a program) goes through the sandbox instead: call `tasks.code.run_program(program, tests,
timeout_s)` inside the function and return its verdict, or use `tasks.code.CodeTask`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import math
import random
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path

from rollout.ranges import ConfigPath, NonNegativeInt
from tasks.base import Problem, Task, Verdict

log = logging.getLogger(__name__)
CHECKED_ROWS = 8
"""Rows `--check` calls the reward function on."""


class RewardError(ValueError):
    """The reward function gave what no reward can be: the run stops, naming the row."""


def import_reward(path: str) -> Callable:
    """The function named `module.function` (or `module:function`); ValueError naming `reward`."""
    module, _, name = path.replace(":", ".").rpartition(".")
    if not module:
        raise ValueError(f"reward: expected module.function (got {path!r})")
    try:
        function = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as error:
        raise ValueError(
            f"reward: no module {error.name!r} (a module beside the config imports as its file name)"
        ) from None
    except AttributeError:
        raise ValueError(f"reward: module {module!r} has no {name!r}") from None
    if not callable(function):
        raise ValueError(f"reward: {path} is not callable")
    return function


def read_rows(path: Path, option: str) -> list[dict]:
    """The rows of a JSON lines or parquet file."""
    import polars as pl

    if not path.is_file():
        raise ValueError(f"{option}: no such file: {path}")
    if path.stat().st_size == 0:
        raise ValueError(f"{option}: {path} is empty")
    try:
        frame = pl.read_parquet(path) if path.suffix == ".parquet" else pl.read_ndjson(path)
    except Exception as error:  # polars' own parse errors, in one line
        raise ValueError(f"{option}: {path} is not JSON lines or parquet ({str(error).splitlines()[0]})") from None
    return frame.to_dicts()


class RewardTask(Task):
    """Problems from a data file, judged by a reward function (module docstring)."""

    def __init__(
        self,
        train_file: ConfigPath,
        reward: str,
        eval_file: ConfigPath | None = None,
        eval_size: NonNegativeInt = 0,
        prompt_field: str = "prompt",
        demonstration_field: str | None = None,
        prompt_template: str = "{prompt}",
        seed: int = 0,
    ):
        """train_file, eval_file: JSON lines or parquet, one problem a row. reward: the function,
        `module.function`. eval_size: without an eval_file, this many rows of train_file held out
        (drawn with `seed`; the rest train). prompt_field: the row's text to prompt with, through
        `prompt_template` (its `{prompt}`). demonstration_field: a worked completion of the row, for
        the warm start (none: the warm start has nothing to learn from; use `model.warm_start: null`)."""
        if eval_file is None and eval_size < 1:
            raise ValueError("eval_size: must be >= 1 without an eval_file (the held-out rows come from train_file)")
        if "{prompt}" not in prompt_template:
            raise ValueError(f"prompt_template: must hold {{prompt}} (got {prompt_template!r})")
        self.train_file, self.eval_file, self.eval_size, self.seed = train_file, eval_file, eval_size, seed
        self.reward, self.prompt_field, self.demonstration_field = reward, prompt_field, demonstration_field
        self.prompt_template = prompt_template

    @classmethod
    def check_args(cls, args: dict) -> None:
        task = cls(**args)
        if not Path(task.train_file).is_file() or (task.eval_file and not Path(task.eval_file).is_file()):
            return  # the config names the missing file
        task._splits  # the fields and sizes
        function = import_reward(task.reward)
        try:
            inspect.signature(function).bind(prompt="", completion="", **dict.fromkeys(task.fields))
        except TypeError as error:
            raise ValueError(
                f"reward: {task.reward} cannot take prompt, completion and the row's fields ({error})"
            ) from None
        for problem in task.train_problems()[:CHECKED_ROWS]:
            try:
                said = function(completion=problem.demonstration, **json.loads(problem.answer))
            except Exception as error:  # noqa: BLE001 - the user's function: named, in one line
                raise ValueError(f"reward: {task.reward} raised {error!r:.120} on row {problem.id}") from None
            task.read(said, problem.id)

    @cached_property
    def fields(self) -> list[str]:
        """The fields every row passes to the reward besides the prompt."""
        return [k for k in self._train_rows[0] if k != self.prompt_field]

    @cached_property
    def _train_rows(self) -> list[dict]:
        return read_rows(Path(self.train_file), "train_file")

    @cached_property
    def _reward(self) -> Callable:
        return import_reward(self.reward)

    def problems(self, rows: list[dict], path: Path, numbers: Sequence[int]) -> list[Problem]:
        named = {"prompt_field": self.prompt_field, "demonstration_field": self.demonstration_field}
        for setting, field in named.items():
            if field is not None and field not in rows[0]:
                raise ValueError(f"{setting}: {path} has no field {field!r} (it has: {', '.join(rows[0])})")
        return [
            Problem(
                id=f"{path.stem}-{n}",
                prompt=self.prompt_template.format(prompt=rows[n][self.prompt_field]),
                # what the reward is called with: the verifier's data, in the task's data digest too
                answer=json.dumps(
                    {"prompt": rows[n][self.prompt_field]}
                    | {k: v for k, v in rows[n].items() if k != self.prompt_field},
                    default=str,
                ),
                demonstration=str(rows[n][self.demonstration_field]) if self.demonstration_field else "",
            )
            for n in numbers
        ]

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        path, rows = Path(self.train_file), self._train_rows
        if self.eval_file:
            eval_path = Path(self.eval_file)
            eval_rows = read_rows(eval_path, "eval_file")
            held_out = self.problems(eval_rows, eval_path, range(len(eval_rows)))
            return self.problems(rows, path, range(len(rows))), held_out
        if self.eval_size >= len(rows):
            raise ValueError(f"eval_size: {self.eval_size} of {path}'s {len(rows)} rows would leave none to train on")
        order = list(range(len(rows)))
        random.Random(self.seed).shuffle(order)
        held = sorted(order[: self.eval_size])
        train = sorted(order[self.eval_size :])
        return self.problems(rows, path, train), self.problems(rows, path, held)

    def train_problems(self) -> Sequence[Problem]:
        return self._splits[0]

    def eval_problems(self) -> Sequence[Problem]:
        return self._splits[1]

    def verify(self, problem: Problem, completion: str) -> Verdict:
        try:
            said = self._reward(completion=completion, **json.loads(problem.answer))
        except Exception as error:  # noqa: BLE001 - the function's failure, not the completion's
            if not self._told:
                self._told.append(problem.id)
                log.warning(
                    "reward: %s raised %r on row %s; the rows it raises on are unjudged "
                    "(left out of the update, counted in verify/unjudged)",
                    self.reward,
                    error,
                    problem.id,
                )
            return Verdict(0.0, f"the reward function raised {type(error).__name__}", judged=False)
        return self.read(said, problem.id)

    @cached_property
    def _told(self) -> list[str]:
        return []

    def read(self, said, row: str) -> Verdict:
        """The verdict of what the function returned, or RewardError naming the row."""
        number = lambda x: isinstance(x, (int, float)) and not isinstance(x, complex)  # noqa: E731
        if isinstance(said, Verdict):
            verdict = said
        elif isinstance(said, tuple) and len(said) == 2 and number(said[0]) and isinstance(said[1], str):
            verdict = Verdict(float(said[0]), said[1])
        elif number(said):
            verdict = Verdict(float(said), "")
        else:
            raise RewardError(
                f"reward: {self.reward} returned {said!r:.60} ({type(said).__name__}) for row {row}; "
                "a reward is a number in [0, 1], a (number, feedback) pair or a Verdict"
            )
        if math.isnan(verdict.reward) or not 0.0 <= verdict.reward <= 1.0:
            raise RewardError(f"reward: {self.reward} gave {verdict.reward} for row {row}; a reward is in [0, 1]")
        return verdict
