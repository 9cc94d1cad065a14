"""Code problems from local files (`CodeTask(source: files)`): small sample files in each shape the
field uses, made here (nothing downloaded), read into problems and judged by the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml
from test_e2e import TINY

from harness.__main__ import main
from tasks.code import CodeTask
from tasks.code_files import first_solution, stdio_cases

HUMANEVAL_ROWS = [
    {
        "task_id": "Sample/0",
        "prompt": 'def add(a, b):\n    """Return a + b."""\n',
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
        "entry_point": "add",
    },
    {
        "task_id": "Sample/1",
        "prompt": 'def double(xs):\n    """Each value twice."""\n',
        "canonical_solution": "    return [2 * x for x in xs]\n",
        "test": "def check(candidate):\n    assert candidate([1, 2]) == [2, 4]\n",
        "entry_point": "double",
    },
]
MBPP_ROWS = [
    {
        "task_id": 2,
        "text": "Write a function to find the shared elements of two lists, sorted.",
        "code": "def similar(a, b):\n    return sorted(set(a) & set(b))",
        "test_list": ["assert similar([3, 4, 5], [5, 4, 9]) == [4, 5]", "assert similar([1], [2]) == []"],
    },
]
# APPS / TACO: the cases as JSON text; a call-based row (fn_name) belongs to the other format
APPS_ROWS = [
    {
        "question": "Read two integers and print their sum.",
        "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
        "input_output": json.dumps({"inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7\n"]}),
    },
    {
        "question": "Call-based.",
        "solutions": "[]",
        "input_output": json.dumps({"fn_name": "f", "inputs": [[1]], "outputs": [[2]]}),
    },
]
SUM_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_humaneval_shaped_rows_run_as_humaneval_does(tmp_path):
    task = CodeTask(source="files", train_file=write_jsonl(tmp_path / "he.jsonl", HUMANEVAL_ROWS))
    add, double = task.train_problems()
    assert add.id == "train/he-0" and add.prompt == HUMANEVAL_ROWS[0]["prompt"]
    assert add.demonstration == "    return a + b\n"
    assert task.verify(add, "    return a + b\n").reward == 1.0
    assert task.verify(add, "    return a - b\n").feedback == "failed: assert candidate(1, 2) == 3"
    assert task.verify(double, "    return xs + xs\n").reward == 0.0
    assert task.eval_problems() == []


def test_mbpp_shaped_rows_show_one_test_and_run_the_whole_answer(tmp_path):
    fields = {"prompt": "text", "tests": "test_list", "entry_point": None, "solution": "code"}
    task = CodeTask(
        source="files",
        train_file=write_jsonl(tmp_path / "mbpp.jsonl", MBPP_ROWS),
        fields=fields,
        answer_format="fenced",
    )
    (problem,) = task.train_problems()
    assert MBPP_ROWS[0]["text"] in problem.prompt
    assert MBPP_ROWS[0]["test_list"][0] in problem.prompt and MBPP_ROWS[0]["test_list"][1] not in problem.prompt
    assert task.verify(problem, problem.demonstration).reward == 1.0
    wrong = "```python\ndef similar(a, b):\n    return [4, 5]\n```"
    assert task.verify(problem, wrong).feedback == "failed: assert similar([1], [2]) == []"
    assert task.verify(problem, "def similar(a, b): ...").feedback == "no ```python code block in the answer"


def test_a_prose_problem_needs_a_fenced_answer():
    with pytest.raises(ValueError, match="^answer_format:"):
        CodeTask(source="files", train_file="x.jsonl", test_format="stdio")
    with pytest.raises(ValueError, match="^answer_format:"):
        CodeTask(source="files", train_file="x.jsonl", fields={"entry_point": None})


def test_apps_shaped_rows_are_stdio_problems_and_call_based_ones_are_skipped(tmp_path):
    task = CodeTask(
        source="files",
        train_file=write_jsonl(tmp_path / "apps.jsonl", APPS_ROWS),
        eval_file=write_jsonl(tmp_path / "apps_test.jsonl", APPS_ROWS[:1]),
        test_format="stdio",
        answer_format="fenced",
    )
    (problem,) = task.train_problems()
    assert (
        problem.prompt.startswith("Solve the problem below in Python 3") and APPS_ROWS[0]["question"] in problem.prompt
    )
    assert problem.demonstration == SUM_PROGRAM
    assert task.verify(problem, SUM_PROGRAM).reward == 1.0
    product = SUM_PROGRAM.replace("a + b", "a * b")
    assert task.verify(problem, product).feedback == "case 1 of 2: wrong answer (input '1 2\\n', expected '3\\n')"
    (held_out,) = task.eval_problems()
    assert held_out.id == "eval/apps_test-0" and held_out.prompt == problem.prompt


def test_partial_and_tolerance_reach_the_verdict(tmp_path):
    rows = [
        {"question": "Print a third of n.", "input_output": {"inputs": ["1\n", "3\n"], "outputs": ["0.333333", "1.0"]}}
    ]
    path = write_jsonl(tmp_path / "third.jsonl", rows)
    common = dict(
        source="files", train_file=path, test_format="stdio", answer_format="fenced", fields={"solution": None}
    )
    third = "```python\nprint(int(input()) / 3)\n```"
    assert CodeTask(**common).verify(CodeTask(**common).train_problems()[0], third).reward == 0.0
    loose = CodeTask(**common, float_tolerance=1e-5)
    assert loose.verify(loose.train_problems()[0], third).reward == 1.0
    partial = CodeTask(**common, partial=True)
    assert partial.verify(partial.train_problems()[0], third).reward == 0.5


def test_a_stdio_runs_whole_limit_grows_with_its_cases(tmp_path):
    """`timeout_s` is what a stdio run may take besides its cases, each of which may take
    `case_timeout_s`: 6 cases of 0.4 s pass under timeout_s 1 (a whole limit of 1 + 6 * 0.6 s)."""
    rows = [
        {
            "question": "Wait, then echo.",
            "input_output": {"inputs": [f"{i}\n" for i in range(6)], "outputs": list("012345")},
        }
    ]
    task = CodeTask(
        source="files",
        train_file=write_jsonl(tmp_path / "slow.jsonl", rows),
        test_format="stdio",
        answer_format="fenced",
        fields={"solution": None},
        timeout_s=1.0,
        case_timeout_s=0.6,
    )
    (problem,) = task.train_problems()
    assert task.run_timeout_s(task.tests(problem.answer)) == pytest.approx(1.0 + 6 * 0.6)
    slow = "```python\nimport time\ntime.sleep(0.4)\nprint(input())\n```"
    assert task.verify(problem, slow).reward == 1.0


def test_codecontests_shaped_parquet_joins_its_test_fields_and_takes_a_python3_solution(tmp_path):
    rows = [
        {
            "description": "Print the sum of two integers.",
            "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
            "private_tests": {"input": ["5 5\n", "0 0\n"], "output": ["10\n", "0\n"]},
            "solutions": {"language": [2, 3], "solution": ["int main() {}", "print(sum(map(int, input().split())))"]},
        }
    ]
    path = tmp_path / "cc.parquet"
    pl.DataFrame(rows).write_parquet(path)
    task = CodeTask(
        source="files",
        train_file=str(path),
        test_format="stdio",
        answer_format="fenced",
        fields={"prompt": "description", "tests": ["public_tests", "private_tests"]},
    )
    (problem,) = task.train_problems()
    assert json.loads(problem.answer) == {"inputs": ["1 2\n", "5 5\n", "0 0\n"], "outputs": ["3\n", "10\n", "0\n"]}
    assert problem.demonstration == "```python\nprint(sum(map(int, input().split())))\n```"
    assert task.verify(problem, problem.demonstration).reward == 1.0
    # one case of three wrong: the third
    assert task.verify(problem, "```python\nprint(sum(map(int, input().split())) or 1)\n```").feedback.startswith(
        "case 3 of 3: wrong answer"
    )


def test_livecodebench_shaped_cases_and_the_shapes_of_a_solution():
    lcb = json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}])
    assert stdio_cases(lcb) == (["2\n"], ["4\n"])
    assert stdio_cases(json.dumps([{"input": "f(1)", "output": "2", "testtype": "functional"}])) is None
    assert stdio_cases({"inputs": [["1", "2"]], "outputs": [["3"]]}) == (["1\n2"], ["3"])  # TACO's lists of lines
    assert first_solution('["a", "b"]') == "a" and first_solution("print(1)") == "print(1)"
    assert first_solution({"language": [2], "solution": ["int main() {}"]}) == "" and first_solution(None) == ""


def test_a_missing_field_or_an_unknown_one_is_named(tmp_path):
    path = write_jsonl(tmp_path / "he.jsonl", HUMANEVAL_ROWS)
    with pytest.raises(ValueError, match=r"^fields.tests: .* has no field 'tests'"):
        CodeTask.check_args({"source": "files", "train_file": path, "fields": {"tests": "tests"}})
    with pytest.raises(ValueError, match=r"^fields: unknown \['question'\]"):
        CodeTask(source="files", train_file=path, fields={"question": "q"})
    with pytest.raises(ValueError, match="^train_file:"):
        CodeTask(source="files")
    with pytest.raises(ValueError, match="^train_file:"):
        CodeTask(train_file=path)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "input_output": "not json"}])
    with pytest.raises(ValueError, match="^fields.tests: .* row 0"):
        CodeTask.check_args(
            {
                "source": "files",
                "train_file": bad,
                "test_format": "stdio",
                "answer_format": "fenced",
                "fields": {"solution": None},
            }
        )


FORMATS = {
    "function-jsonl": ({"train_file": "he.jsonl"}, HUMANEVAL_ROWS * 4),
    "stdio-jsonl": ({"train_file": "apps.jsonl", "test_format": "stdio", "answer_format": "fenced"}, APPS_ROWS * 4),
    "stdio-parquet": ({"train_file": "apps.parquet", "test_format": "stdio", "answer_format": "fenced"}, APPS_ROWS * 4),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", FORMATS)
def test_a_suite_trains_a_few_steps_on_a_local_file(tmp_path, name):
    args, rows = FORMATS[name]
    path = tmp_path / args["train_file"]
    if path.suffix == ".parquet":
        pl.DataFrame(rows).write_parquet(path)
    else:
        write_jsonl(path, rows)
    args = args | {"source": "files", "train_file": str(path), "eval_file": str(path)}
    spec = {
        "name": name,
        "task": {"class_path": "tasks.code.CodeTask", "init_args": args},
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 4, "batch_size": 4}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
        "seeds": [0],
        "schedule": {"steps": 2, "prompts_per_step": 2},
        "sampling": {"max_new_tokens": 8},
        "evaluation": {"every": 2},
    }
    config = tmp_path / "suite.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    metrics = pl.read_parquet(tmp_path / "runs" / name / "grpo-seed0" / "metrics.parquet")
    evaluations = pl.read_parquet(tmp_path / "runs" / name / "grpo-seed0" / "eval.parquet")
    assert metrics.height == 2 and evaluations["step"].to_list() == [0, 2]


EXAMPLES = Path(__file__).parent.parent / "examples" / "code"
EXAMPLE_TASKS = {
    "humaneval.jsonl": {},
    "mbpp.jsonl": {"fields": {"prompt": "text", "tests": "test_list", "entry_point": None, "solution": "code"}},
    "stdio.jsonl": {"test_format": "stdio", "float_tolerance": 1e-6},
}


@pytest.mark.parametrize("name", EXAMPLE_TASKS)
def test_the_documented_example_files_are_read_and_their_solutions_pass(name):
    """docs/tasks.md shows these files verbatim with the settings that read them."""
    fenced = {"answer_format": "fenced"} if name != "humaneval.jsonl" else {}
    task = CodeTask(source="files", train_file=str(EXAMPLES / name), **fenced, **EXAMPLE_TASKS[name])
    problems = task.train_problems()
    assert len(problems) == 5 and all(p.demonstration for p in problems)
    assert [task.verify(p, p.demonstration).reward for p in problems] == [1.0] * 5
    assert (EXAMPLES / name).read_text() in (Path(__file__).parent.parent / "docs" / "tasks.md").read_text()
