"""Mathematics: generated multi-step arithmetic for the tiny model, local data files (JSON lines or
parquet, GSM8K's fields or others named) for real ones.

The final answer is the text after the last `####` (GSM8K's convention, the tiny model's) or the
last `\boxed{...}` (`answer_format: boxed`, as real models write it), checked with math-verify.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal, Sequence

from math_verify import parse, verify

from rollout.ranges import ConfigPath, PositiveInt, Range, check_fields
from tasks.base import ErrorSpans, Problem, Task, Verdict

ANSWER_MARK = "####"
BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def final_answer(completion: str, answer_format: str = "####") -> str | None:
    """The final answer a completion states, or None: the text after the last `####` on its
    line, or the contents of the last `\boxed{...}` (`answer_format="boxed"`)."""
    if answer_format == "boxed":
        return last_boxed(completion)
    if ANSWER_MARK not in completion:
        return None
    answer = completion.rsplit(ANSWER_MARK, 1)[1].strip().splitlines()
    return answer[0].strip().replace(",", "") if answer and answer[0].strip() else None


def last_boxed(text: str) -> str | None:
    """The contents of the last `\boxed{...}`, braces matched (`\boxed{\frac{1}{2}}`), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for i in range(begin - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i].strip() or None
    return None  # unclosed


STEP = re.compile(r"(?<![\d=+*-])(-?\d+(?:[+*-]-?\d+)+)=(-?\d+)")
"""A worked step as written: a chain of integers and operators, `=`, its value (`26*3+5=83` is one
step, not the step `3+5=83`)."""
OPERATION = re.compile(r"([+*-])(-?\d+)")


def value_of(chain: str) -> int:
    """A chain's value as arithmetic reads it: products first, then sums left to right."""
    first = re.match(r"-?\d+", chain)
    terms, product = [], int(first.group())
    for op, number in OPERATION.findall(chain[first.end() :]):
        if op == "*":
            product *= int(number)
        else:
            terms.append(product)
            product = int(number) if op == "+" else -int(number)
    return sum(terms) + product


def worked_steps(completion: str) -> list[tuple[re.Match, int]]:
    """Each worked step, with the value its own expression has."""
    return [(match, value_of(match.group(1))) for match in STEP.finditer(completion)]


def wrong_steps(completion: str) -> tuple[tuple[int, int], ...] | None:
    """The character spans of the first worked step whose arithmetic is wrong given what it wrote
    (`a op b=c`, or a chain of several, `a op b op c=d`), and of everything that follows from it:
    every later step and the final answer after the last `####`. None if every step is right, or
    there are none to check."""
    steps = worked_steps(completion)
    for k, (match, value) in enumerate(steps):
        if value != int(match.group(2)):
            spans = [step.span() for step, _ in steps[k:]]
            mark = completion.rfind(ANSWER_MARK)
            if mark > spans[-1][1]:
                answer = completion[mark + len(ANSWER_MARK) :]
                start = mark + len(ANSWER_MARK) + len(answer) - len(answer.lstrip())
                if answer.strip():
                    spans.append((start, start + len(answer.strip())))
            return tuple(spans)
    return None


def first_wrong_step(completion: str) -> tuple[int, int] | None:
    """(its number, counting from 1; the value it should give) of the first worked step whose
    arithmetic is wrong, if any."""
    for number, (match, value) in enumerate(worked_steps(completion), 1):
        if value != int(match.group(2)):
            return number, value
    return None


INTEGER = re.compile(r"-?\d+")


def equal(expected: str, answer: str) -> bool:
    """math-verify's judgement, except that two integers are compared as integers: every answer of
    the generated problems is one, math-verify's parse costs about a millisecond a call, and it
    reads "-04" as something other than -4."""
    if INTEGER.fullmatch(expected) and INTEGER.fullmatch(answer):
        return int(expected) == int(answer)
    return verify(parse(expected), parse(answer))


def check_answer(expected: str, completion: str, answer_format: str = "####") -> Verdict:
    """Reward 1 iff the final answer equals `expected`. The feedback says what the verifier knows
    and never repeats the completion (HP-RLVR's hindsight block holds it, DESIGN section 3): the
    outcome, the expected answer, and where the completion shows its arithmetic, which worked step
    went wrong first and what it should have given: where a failure began."""
    answer = final_answer(completion, answer_format)
    slip = first_wrong_step(completion)
    where = f"; step {slip[0]} should give {slip[1]}" if slip else ""
    if answer is None:
        shape = "\\boxed{<answer>}" if answer_format == "boxed" else f"{ANSWER_MARK} <number>"
        return Verdict(0.0, f"no final answer found (expected '{shape}'){where}")
    if equal(expected, answer):
        return Verdict(1.0, "correct")
    return Verdict(0.0, f"wrong: expected {expected}{where}")


@dataclass(frozen=True)
class Arithmetic:
    """Difficulty of the generated problems."""

    operands: PositiveInt = 3
    """Numbers per expression; each operator is one worked step."""
    max_operand: PositiveInt = 30
    """Operands of + and - are drawn from [1, max_operand]."""
    max_factor: Annotated[int, Range(2)] = 9
    """The right operand of * is drawn from [2, max_factor]."""
    operators: str = "+-*"

    def __post_init__(self):
        check_fields(self)


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
    """Generated arithmetic (default) or local data files: JSON lines or parquet, one problem a row."""

    def __init__(
        self,
        difficulty: Arithmetic | dict | None = None,
        train_size: PositiveInt = 20000,
        eval_size: PositiveInt = 1000,
        seed: int = 1234,
        train_file: ConfigPath | None = None,
        eval_file: ConfigPath | None = None,
        question_field: str = "question",
        answer_field: str = "answer",
        answer_format: Literal["####", "boxed"] = "####",
    ):
        """train_file, eval_file: `.jsonl`/`.json` or `.parquet`, read with the `datasets`
        library's local loaders. question_field: the problem's text. answer_field: its reference,
        either a worked solution ending in `#### <answer>` (GSM8K) or in `\\boxed{<answer>}`
        (MATH), or the answer alone. answer_format: how the policy is asked to state its final
        answer and where the verifier looks for it: `Q: ...\\nA:` prompts and `####` (the tiny
        model's), or the question with an instruction to put the answer in `\\boxed{}` (what
        instruction-tuned models write; pair it with `sampling.chat`)."""
        for name, size in (("train_size", train_size), ("eval_size", eval_size)):
            if size < 1:
                raise ValueError(f"{name}: must be >= 1 (got {size})")
        self.difficulty = Arithmetic(**difficulty) if isinstance(difficulty, dict) else difficulty or Arithmetic()
        self.train_size, self.eval_size, self.seed = train_size, eval_size, seed
        self.train_file, self.eval_file = train_file, eval_file
        self.question_field, self.answer_field, self.answer_format = question_field, answer_field, answer_format

    @classmethod
    def check_args(cls, args):
        task = cls(**args)
        if any(f and not Path(f).is_file() for f in (task.train_file, task.eval_file)):
            return  # the config names the missing file
        try:  # generating them is the only sure count (milliseconds); files: their fields
            task._splits
        except ValueError as error:
            text = str(error)
            raise ValueError(text if text.split(":")[0].isidentifier() else f"difficulty: {text}") from None

    def format_prompt(self, question: str) -> str:
        if self.answer_format == "boxed":
            return f"{question}\n{BOXED_INSTRUCTION}"
        return f"Q: {question}\nA:"

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        if self.train_file:
            train = self.load(Path(self.train_file))
            return train, self.load(Path(self.eval_file)) if self.eval_file else []
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
                demonstration=f" {steps} {ANSWER_MARK} {answer}"
                if self.answer_format == "####"
                else f" {steps} \\boxed{{{answer}}}",
            )
        return list(problems.values())

    def train_problems(self) -> Sequence[Problem]:
        return self._splits[0]

    def eval_problems(self) -> Sequence[Problem]:
        return self._splits[1]

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return check_answer(problem.answer, completion, self.answer_format)

    def error_spans(self, problem: Problem, completion: str) -> ErrorSpans | None:
        """The first worked step whose arithmetic is wrong, and what follows from it (`wrong_steps`)."""
        spans = wrong_steps(completion)
        return ErrorSpans(spans[0], spans) if spans else None

    def corrupt(self, problem: Problem, rng: random.Random) -> str | None:
        """The demonstration with one step's result off by a little and every later step
        recomputed from it: the kind of slip a model makes, carried through to the answer."""
        if ANSWER_MARK not in problem.demonstration:
            return None
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

    def load(self, path: Path) -> list[Problem]:
        """The problems of a local data file, one a row, with the named fields."""
        from datasets import load_dataset

        kind = "parquet" if path.suffix == ".parquet" else "json"
        if path.stat().st_size == 0:
            raise ValueError(f"{'train' if str(path) == self.train_file else 'eval'}_file: {path} is empty")
        rows = load_dataset(kind, data_files=str(path), split="train")
        for option, name in (("question_field", self.question_field), ("answer_field", self.answer_field)):
            if name not in rows.column_names:
                raise ValueError(f"{option}: {path} has no field {name!r} (it has: {', '.join(rows.column_names)})")
        problems = []
        for number, row in enumerate(rows):
            solution = str(row[self.answer_field]).strip()
            answer = final_answer(solution) or last_boxed(solution) or solution
            if self.answer_format == "####":
                demonstration = f" {solution}" if ANSWER_MARK in solution else f" {ANSWER_MARK} {answer}"
            else:
                demonstration = f" {solution}" if "\\boxed{" in solution else f" \\boxed{{{answer}}}"
            problems.append(
                Problem(
                    id=f"{path.stem}-{number}",
                    prompt=self.format_prompt(str(row[self.question_field])),
                    answer=answer,
                    demonstration=demonstration,
                )
            )
        return problems
