"""What a task is: problems, a verifier, demonstrations for the warm start, and (by default)
single-turn rollouts. A new task family is a subclass named by class path in the YAML."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from rollout.batch import Problem, Rollouts, Verdict

if TYPE_CHECKING:
    from rollout.decoding import RolloutEngine

__all__ = ["ErrorSpans", "Problem", "Span", "Task", "Verdict"]  # the problem and verdict types live with the batch

Span = tuple[int, int]
"""Character offsets [start, end) in a completion."""


@dataclass(frozen=True)
class ErrorSpans:
    """Where a completion goes wrong, as its task can tell (`Task.error_spans`)."""

    first: Span
    """The first wrong step."""
    wrong: tuple[Span, ...]
    """Every wrong step, the first included, in order (for math: the first and what follows from it)."""


class Task(abc.ABC):
    """A task family. Splits must be deterministic in the task's arguments (seeded)."""

    version: int = 0
    """Bump when the same arguments make other problems or splits: it is part of the task's key,
    so warm starts cached for the old problems are not reused."""

    multi_turn: bool = False
    """Whether a rollout is several turns with the environment's text between them (ALFWorld):
    algorithms with step-level credit need it, and length shaping of one completion does not apply."""

    supports_chat: bool = True
    """Whether its prompts may go through a chat template (`sampling.chat`): single-turn tasks'
    can; a multi-turn task would need each turn rendered as a message of its own."""

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this task cannot run here (an optional extra not installed), or None. A suite whose
        task is unavailable is skipped with this message rather than failing the benchmark."""
        return None

    @classmethod
    def check_args(cls, args: dict) -> None:
        """Refuse `init_args` out of range before anything runs: raise ValueError("name: what is
        wrong"). By default the constructor's own checks (constructors build no data)."""
        cls(**args)

    @abc.abstractmethod
    def train_problems(self) -> Sequence[Problem]: ...

    @abc.abstractmethod
    def eval_problems(self) -> Sequence[Problem]: ...

    @abc.abstractmethod
    def verify(self, problem: Problem, completion: str) -> Verdict: ...

    def content(self, problem: Problem) -> tuple:
        """What of `problem` a run's records depend on, for the digest of the task's data
        (`harness.provenance.data_digest`): its fields, and a task whose problem points at a file
        gives the file's content in place of its path, which differs between machines."""
        return (problem.id, problem.prompt, problem.answer, problem.demonstration)

    def supervised_example(self, problem: Problem, tokenizer) -> tuple[list[int], list[int]]:
        """(input_ids, labels) of one warm-start example: prompt, demonstration and EOS, with the
        loss (labels != -100) on what the policy would generate. Multi-turn tasks exclude the
        environment's text from the loss."""
        prompt = tokenizer(problem.prompt, add_special_tokens=False).input_ids
        completion = tokenizer(problem.demonstration, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        return prompt + completion, [-100] * len(prompt) + completion

    def verify_trusted(self, problem: Problem, completion: str) -> Verdict:
        """The verdict of a completion the task wrote itself (a demonstration or a `corrupt`ion),
        for warm-start examples. Tasks whose verifier is expensive may compute it directly."""
        return self.verify(problem, completion)

    def error_spans(self, problem: Problem, completion: str) -> ErrorSpans | None:
        """Where `completion` goes wrong (for credit fidelity: does an algorithm's credit land on
        the error?), or None where the task cannot tell or finds no error. By default None."""
        return None

    def first_error(self, problem: Problem, completion: str) -> Span | None:
        """`error_spans`' first wrong step alone, all that credit fidelity reads: a task whose
        errors are costly to locate (a plan a turn, ALFWorld's) stops there."""
        errors = self.error_spans(problem, completion)
        return None if errors is None else errors.first

    def first_errors(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Span | None]:
        """`first_error` of each pair: one call, for a task that locates them in parallel."""
        return [self.first_error(problem, completion) for problem, completion in zip(problems, completions)]

    def corrupt(self, problem: Problem, rng) -> str | None:
        """A plausible failed completion of `problem` (for warm-start examples of failure), or
        None where the task has no way to make one."""
        return None

    def rollout(
        self, engine: RolloutEngine, problems: Sequence[Problem], group_size: int, greedy: bool = False
    ) -> Rollouts:
        """Stage 1 for single-turn tasks: `group_size` completions of each prompt, grouped by
        prompt (each prompt prefilled once). Multi-turn tasks override this with their environment loop."""
        repeated = [p for p in problems for _ in range(group_size)]
        return engine.generate(repeated, greedy=greedy, group_size=group_size)

    def own_work(self) -> list[tuple[object, str]]:
        """(object, method name) of each call that does the task's own work in a step: what
        `harness bench` clocks as the task's time, apart from the model's and the harness's."""
        return [(self, "verify_all")]

    def verify_all(self, rollouts: Rollouts) -> list[Verdict]:
        """Stage 2. Tasks with slow verifiers (running code) override this to work in parallel."""
        return [self.verify(p, c) for p, c in zip(rollouts.problems, rollouts.completions)]
