"""Mathematics: generated multi-step arithmetic for the tiny model, GSM8K-format files for real ones.

Answers are checked with math-verify on the text after the last `####`, the GSM8K convention,
so one verifier serves both sources.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

from math_verify import parse, verify

from tasks.base import Problem, Task, Verdict

ANSWER_MARK = "####"


def final_answer(completion: str) -> str | None:
    """The text after the last `####` on its line, or None when there is no such mark."""
    if ANSWER_MARK not in completion:
        return None
    answer = completion.rsplit(ANSWER_MARK, 1)[1].strip().splitlines()
    return answer[0].strip().replace(",", "") if answer and answer[0].strip() else None


STEP = re.compile(r"(?<![\d=])(-?\d+)([+*-])(-?\d+)=(-?\d+)")


def first_wrong_step(completion: str) -> str | None:
    """The first worked step `a op b=c` whose arithmetic is wrong, if any."""
    for match in STEP.finditer(completion):
        a, op, b, c = match.groups()
        if {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op] != int(c):
            return match.group(0)
    return None


INTEGER = re.compile(r"-?\d+")


def equal(expected: str, answer: str) -> bool:
    """math-verify's judgement, except that two integers are compared as integers: every answer of
    the generated problems is one, math-verify's parse costs about a millisecond a call, and it
    reads "-04" as something other than -4."""
    if INTEGER.fullmatch(expected) and INTEGER.fullmatch(answer):
        return int(expected) == int(answer)
    return verify(parse(expected), parse(answer))


def check_answer(expected: str, completion: str) -> Verdict:
    """Reward 1 iff the final answer equals `expected`. The feedback also names the first wrong
    worked step where the completion shows its arithmetic: a verifier that checks the steps can
    say where a failure began, which is what the hindsight view needs."""
    answer = final_answer(completion)
    slip = first_wrong_step(completion)
    where = f"; {slip} is wrong" if slip else ""
    if answer is None:
        return Verdict(0.0, f"no final answer found (expected '{ANSWER_MARK} <number>'){where}")
    if equal(expected, answer):
        return Verdict(1.0, f"correct: {answer}")
    return Verdict(0.0, f"expected {expected}, got {answer}{where}")


@dataclass(frozen=True)
class Arithmetic:
    """Difficulty of the generated problems."""

    operands: int = 3
    """Numbers per expression; each operator is one worked step."""
    max_operand: int = 30
    """Operands of + and - are drawn from [1, max_operand]."""
    max_factor: int = 9
    """The right operand of * is drawn from [2, max_factor]."""
    operators: str = "+-*"


def generate_problem(rng: random.Random, spec: Arithmetic) -> tuple[str, str, str]:
    """(expression, worked solution, answer). Multiplications first, then left to right, one
    `a op b=c` step each, as a person would write it."""
    ops = [rng.choice(spec.operators) for _ in range(spec.operands - 1)]
    nums = [rng.randint(1, spec.max_operand)]
    for op in ops:
        nums.append(rng.randint(2, spec.max_factor) if op == "*" else rng.randint(1, spec.max_operand))
    expression = str(nums[0]) + "".join(f"{op}{n}" for op, n in zip(ops, nums[1:]))
    steps = []
    while "*" in ops:
        i = ops.index("*")
        value = nums[i] * nums[i + 1]
        steps.append(f"{nums[i]}*{nums[i + 1]}={value}")
        nums[i : i + 2], ops[i : i + 1] = [value], []
    value = nums[0]
    for op, n in zip(ops, nums[1:]):
        new = value + n if op == "+" else value - n
        steps.append(f"{value}{op}{n}={new}")
        value = new
    return expression, " ".join(steps), str(value)


class MathTask(Task):
    """Generated arithmetic (default) or a GSM8K-format JSON-lines file pair."""

    def __init__(
        self,
        difficulty: Arithmetic | dict | None = None,
        train_size: int = 20000,
        eval_size: int = 1000,
        seed: int = 1234,
        train_file: str | None = None,
        eval_file: str | None = None,
    ):
        for name, size in (("train_size", train_size), ("eval_size", eval_size)):
            if size < 1:
                raise ValueError(f"{name}: must be >= 1 (got {size})")
        self.difficulty = Arithmetic(**difficulty) if isinstance(difficulty, dict) else difficulty or Arithmetic()
        self.train_size, self.eval_size, self.seed = train_size, eval_size, seed
        self.train_file, self.eval_file = train_file, eval_file

    @classmethod
    def check_args(cls, args):
        task = cls(**args)
        if not task.train_file:
            try:  # generating them is the only sure count (milliseconds)
                task._splits
            except ValueError as error:
                raise ValueError(f"difficulty: {error}") from None

    @staticmethod
    def format_prompt(question: str) -> str:
        return f"Q: {question}\nA:"

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        if self.train_file:
            return load_gsm8k(Path(self.train_file)), load_gsm8k(Path(self.eval_file)) if self.eval_file else []
        # Held-out first, then train problems drawn from another stream with held-out ones
        # removed, so the splits are disjoint whatever the sizes.
        held_out = self._generate(random.Random(f"{self.seed}/eval"), self.eval_size, exclude=set())
        train = self._generate(random.Random(f"{self.seed}/train"), self.train_size, exclude={p.id for p in held_out})
        return train, held_out

    def _generate(self, rng: random.Random, count: int, exclude: set[str]) -> list[Problem]:
        problems: dict[str, Problem] = {}
        attempts = 0
        while len(problems) < count:
            attempts += 1
            if attempts > 50 * count:
                raise ValueError(
                    f"{self.difficulty} has too few distinct problems for {count} (widen it or ask for fewer)"
                )
            expression, steps, answer = generate_problem(rng, self.difficulty)
            if expression in exclude or expression in problems:
                continue
            problems[expression] = Problem(
                id=expression,
                prompt=self.format_prompt(expression),
                answer=answer,
                demonstration=f" {steps} {ANSWER_MARK} {answer}",
            )
        return list(problems.values())

    def train_problems(self) -> Sequence[Problem]:
        return self._splits[0]

    def eval_problems(self) -> Sequence[Problem]:
        return self._splits[1]

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return check_answer(problem.answer, completion)

    def corrupt(self, problem: Problem, rng: random.Random) -> str | None:
        """The demonstration with one step's result off by a little and every later step
        recomputed from it: the kind of slip a model makes, carried through to the answer."""
        steps = problem.demonstration.split(f" {ANSWER_MARK} ")[0].split()
        if not steps or not all(step.count("=") == 1 for step in steps):
            return None
        slip = rng.randrange(len(steps))
        values: dict[str, str] = {}
        rewritten = []
        for i, step in enumerate(steps):
            lhs, rhs = step.split("=")
            op_at = max(lhs.rfind(op, 1) for op in "+-*")  # the operator, not a leading minus
            left, op, right = lhs[:op_at], lhs[op_at], lhs[op_at + 1 :]
            left, right = values.get(left, left), values.get(right, right)
            value = {"+": int(left) + int(right), "-": int(left) - int(right), "*": int(left) * int(right)}[op]
            if i == slip:
                value += rng.choice([-10, -2, -1, 1, 2, 10])
            values[rhs] = str(value)
            rewritten.append(f"{left}{op}{right}={value}")
        return f" {' '.join(rewritten)} {ANSWER_MARK} {value}"


def load_gsm8k(path: Path) -> list[Problem]:
    """GSM8K's JSON-lines layout: {"question": ..., "answer": "... #### 42"}."""
    problems = []
    with path.open() as lines:
        for number, line in enumerate(lines):
            if not line.strip():
                continue
            row = json.loads(line)
            solution = row["answer"]
            answer = final_answer(solution)
            if answer is None:
                raise ValueError(f"{path}:{number + 1}: answer has no '{ANSWER_MARK}' line")
            problems.append(
                Problem(
                    id=f"{path.stem}-{number}",
                    prompt=MathTask.format_prompt(row["question"]),
                    answer=answer,
                    demonstration=" " + solution.strip(),
                )
            )
    return problems
