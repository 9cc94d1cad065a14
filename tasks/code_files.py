"""Code problems from local data files (JSON lines or parquet, through `datasets`' local loaders;
nothing is downloaded), in the two formats code RL trains and is measured on:

- `function`: tests that call the program's functions. HumanEval's rows (`prompt`: the function's
  signature and docstring, `test`: code defining `check`, `entry_point`: the function `check` is
  called with) or MBPP's (`text`: the task in words, `test_list`: asserts, `code`: a solution;
  no entry point).
- `stdio`: the program reads standard input and writes standard output, judged case by case
  (`tasks.sandbox.StdioCases`). The cases in any of the field's shapes: APPS and TACO's
  `input_output` ({"inputs": [...], "outputs": [...]}, often as JSON text), CodeContests'
  `public_tests`/`private_tests`/`generated_tests` ({"input": [...], "output": [...]}, several
  fields may be named), LiveCodeBench's `public_test_cases` (a list of {"input", "output"}, as
  JSON text). Rows whose cases call a function (APPS' `fn_name`, LiveCodeBench's "functional")
  belong to the other format and are skipped, with a count in the log.

docs/tasks.md shows a five-line example file of each.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tasks.base import Problem

log = logging.getLogger(__name__)

TestFormat = Literal["function", "stdio"]

# The field names of each format's best-known dataset: HumanEval's and APPS'.
DEFAULT_FIELDS = {
    "function": {"prompt": "prompt", "tests": ["test"], "entry_point": "entry_point", "solution": "canonical_solution"},
    "stdio": {"prompt": "question", "tests": ["input_output"], "entry_point": None, "solution": "solutions"},
}
PYTHON3 = 3  # CodeContests' language code of a Python 3 solution


@dataclass(frozen=True)
class CodeRow:
    """One problem as read from a file, before the task words its prompt."""

    id: str
    text: str
    """The prompt field: a function's code (with an entry point) or the problem in words."""
    tests: str | tuple[tuple[str, ...], tuple[str, ...]]
    """function: the test code to run (`check(<entry point>)` appended); stdio: (inputs, outputs)."""
    solution: str
    """A reference solution (the warm start's demonstration), or empty."""
    example: str = ""
    """function problems without an entry point: the first assert, which the prompt shows."""


def load_rows(path: Path, test_format: TestFormat, fields: dict[str, Any], option: str = "train_file") -> list[CodeRow]:
    """The problems of one local file. `fields`: the names of the prompt, tests (a list: their
    cases are joined), entry_point (None: no entry point) and solution (None: none) fields.
    Raises ValueError("<option or field setting>: what is wrong") for a file that cannot serve."""
    from datasets import load_dataset

    if path.stat().st_size == 0:
        raise ValueError(f"{option}: {path} is empty")
    kind = "parquet" if path.suffix == ".parquet" else "json"
    table = load_dataset(kind, data_files=str(path), split="train")
    named = {"fields.prompt": [fields["prompt"]], "fields.tests": fields["tests"]}
    named |= {f"fields.{key}": [fields[key]] for key in ("entry_point", "solution") if fields[key] is not None}
    for setting, names in named.items():
        for name in names:
            if name not in table.column_names:
                raise ValueError(f"{setting}: {path} has no field {name!r} (it has: {', '.join(table.column_names)})")
    rows, skipped = [], 0
    for number, record in enumerate(table):
        row_id = f"{path.stem}-{number}"
        solution = first_solution(record.get(fields["solution"])) if fields["solution"] else ""
        if test_format == "function":
            rows.append(function_row(row_id, record, fields, solution))
            continue
        try:
            cases = [stdio_cases(record[name]) for name in fields["tests"]]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"fields.tests: {path} row {number}: cases in no known shape ({error!r})") from None
        if any(c is None for c in cases):
            skipped += 1
            continue
        inputs = tuple(i for c in cases for i in c[0])
        outputs = tuple(o for c in cases for o in c[1])
        if not inputs:
            skipped += 1
            continue
        rows.append(CodeRow(row_id, str(record[fields["prompt"]]), (inputs, outputs), solution))
    if skipped:
        log.warning("%s: %d of %d rows skipped (no standard input/output cases)", path, skipped, len(table))
    if not rows:
        raise ValueError(f"{option}: {path} has no problem with {test_format} tests")
    return rows


def function_row(row_id: str, record: dict, fields: dict[str, Any], solution: str) -> CodeRow:
    """HumanEval's shape (test code and an entry point) or MBPP's (a list of asserts, no entry point)."""
    parts, example = [], ""
    for name in fields["tests"]:
        value = record[name]
        if isinstance(value, list):  # MBPP's test_list
            asserts = [str(line) for line in value]
            example = example or (asserts[0] if asserts else "")
            parts.append("\n".join(asserts))
        else:
            parts.append(str(value))
    tests = "\n".join(parts) + "\n"
    entry_point = record[fields["entry_point"]] if fields["entry_point"] else None
    if entry_point:
        tests += f"\ncheck({entry_point})\n"
    return CodeRow(row_id, str(record[fields["prompt"]]), tests, solution, example)


def stdio_cases(value: Any) -> tuple[list[str], list[str]] | None:
    """(inputs, outputs) of a tests field in any shape the module docstring names; None for cases
    that call a function instead."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if isinstance(value, dict):
        if value.get("fn_name"):
            return None
        inputs, outputs = value.get("inputs", value.get("input", [])), value.get("outputs", value.get("output", []))
        return [as_text(i) for i in inputs], [as_text(o) for o in outputs]
    if isinstance(value, list):
        if any(isinstance(case, dict) and case.get("testtype") == "functional" for case in value):
            return None
        return [as_text(case["input"]) for case in value], [as_text(case["output"]) for case in value]
    return [], []


def as_text(value: Any) -> str:
    """A case's input or output as text (TACO and APPS sometimes hold a list of lines)."""
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def first_solution(value: Any) -> str:
    """The first reference solution in a solution field: text, a list (or JSON text of one, as
    APPS stores them), or CodeContests' {"language": [...], "solution": [...]} (its first Python 3
    one); empty where there is none."""
    if value is None:
        return ""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        languages, solutions = value.get("language", []), value.get("solution", [])
        value = [s for lang, s in zip(languages, solutions) if lang == PYTHON3]
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value)


def to_problem(row: CodeRow, prompt: str, demonstration: str) -> Problem:
    """The row as a problem: its tests travel in `answer` (stdio cases as JSON), so a problem
    carries everything its verdict needs."""
    answer = row.tests if isinstance(row.tests, str) else json.dumps({"inputs": row.tests[0], "outputs": row.tests[1]})
    return Problem(id=row.id, prompt=prompt, answer=answer, demonstration=demonstration)
