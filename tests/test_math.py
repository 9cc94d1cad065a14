import json
import random

import pytest

from tasks.base import Verdict
from tasks.math import Arithmetic, MathTask, check_answer, final_answer, generate_problem, value_of


@pytest.mark.parametrize(
    "completion, reward",
    [
        (" 3*4=12 5+12=17 #### 17", 1.0),  # right
        (" 3*4=12 5+12=18 #### 18", 0.0),  # wrong
        (" #### 17.0", 1.0),  # numerically equal forms
        (" #### 34/2", 1.0),
        (" #### 1,7", 1.0),  # thousands separator stripped: 17
        (" #### seventeen", 0.0),  # malformed
        (" 5+12=17", 0.0),  # no final answer
        ("", 0.0),
        (" #### ", 0.0),
    ],
)
def test_verifier_rewards(completion, reward):
    assert check_answer("17", completion).reward == reward


def test_feedback_says_what_was_wrong_without_repeating_the_completion():
    assert check_answer("73", " #### 71") == Verdict(0.0, "wrong: expected 73")
    assert check_answer("73", " 70+3=73").feedback.startswith("no final answer found")
    assert check_answer("-4", " #### -4") == Verdict(1.0, "correct")
    # the first wrong step by its number and the value it should give, not by its text
    assert check_answer("70", " 3*9=26 44+26=70 #### 70") == Verdict(1.0, "correct")
    assert check_answer("71", " 3*9=26 44+26=70 #### 70") == Verdict(0.0, "wrong: expected 71; step 1 should give 27")
    assert check_answer("71", " 3*9=27 44+27=70 #### 70").feedback == "wrong: expected 71; step 2 should give 71"
    # a step written as one chain is read whole, as arithmetic reads it
    assert check_answer("84", " 26*3+5=83 #### 83").feedback == "wrong: expected 84"
    assert check_answer("84", " 26*3+6=83 #### 83").feedback == "wrong: expected 84; step 1 should give 84"


def test_a_chain_is_valued_as_python_values_it():
    """`value_of` against a direct computation: Python's own arithmetic on random chains."""
    rng = random.Random(0)
    for _ in range(2000):
        terms = [str(rng.randint(-30, 30)) for _ in range(rng.randint(2, 5))]
        chain = terms[0] + "".join(rng.choice("+-*") + t for t in terms[1:])
        assert value_of(chain) == eval(chain.replace("--", "- -")), chain  # noqa: S307 - digits and operators only


def test_final_answer_takes_the_last_mark_and_its_line():
    assert final_answer("#### 1\n#### 2\nmore text") == "2"
    assert final_answer("no mark") is None


def test_boxed_answer_is_the_last_box_braces_matched():
    completion = "First try \\boxed{5}, no: 2+3=6, so \\boxed{\\frac{12}{2}} is it."
    assert final_answer(completion, "boxed") == "\\frac{12}{2}"
    assert final_answer("\\boxed{1} then \\boxed{2}", "boxed") == "2"
    assert final_answer("no box here", "boxed") is None
    assert check_answer("6", completion, "boxed").reward == 1.0
    assert check_answer("5", completion, "boxed").reward == 0.0  # the first box is a draft


def test_worked_solution_is_correct_arithmetic():
    import random

    rng = random.Random(0)
    for _ in range(500):
        expression, steps, answer = generate_problem(rng, Arithmetic(operands=4))
        assert int(answer) == eval(expression)  # the generator's own arithmetic, checked by Python
        for step in steps.split():
            lhs, rhs = step.rsplit("=", 1)
            assert eval(lhs) == int(rhs)


def test_splits_are_seeded_and_disjoint():
    a, b = MathTask(train_size=3000, eval_size=1000, seed=7), MathTask(train_size=3000, eval_size=1000, seed=7)
    assert [p.id for p in a.eval_problems()] == [p.id for p in b.eval_problems()]
    assert [p.id for p in a.train_problems()] == [p.id for p in b.train_problems()]
    assert not {p.id for p in a.train_problems()} & {p.id for p in a.eval_problems()}
    assert len(a.eval_problems()) == 1000
    other = MathTask(train_size=3000, eval_size=1000, seed=8)
    assert [p.id for p in other.eval_problems()] != [p.id for p in a.eval_problems()]


def test_demonstrations_verify():
    task = MathTask(train_size=200, eval_size=50)
    assert all(task.verify(p, p.demonstration).reward == 1.0 for p in task.train_problems())


def test_gsm8k_loader(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
        {"question": "Big", "answer": "#### 1,200"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = MathTask(train_file=str(path), eval_file=str(path))
    problems = task.train_problems()
    assert [p.answer for p in problems] == ["7", "1200"]
    assert problems[0].prompt == "Q: Tom has 3 apples and buys 4. How many?\nA:"
    assert problems[0].demonstration == " 3+4=<<3+4=7>>7\n#### 7"
    assert task.verify(problems[1], "so #### 1200").reward == 1.0


def test_parquet_with_named_fields_and_boxed_answers(tmp_path):
    import polars as pl

    path = tmp_path / "math.parquet"
    pl.DataFrame(
        {"problem": ["What is 1/2 + 1/4?", "2+2?"], "solution": ["1/2+1/4 = 3/4, so \\boxed{\\frac{3}{4}}", "4"]}
    ).write_parquet(path)
    task = MathTask(train_file=str(path), question_field="problem", answer_field="solution", answer_format="boxed")
    first, second = task.train_problems()
    assert (first.answer, second.answer) == ("\\frac{3}{4}", "4")
    assert first.prompt == "What is 1/2 + 1/4?\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert task.verify(first, "The sum is \\boxed{0.75}.").reward == 1.0  # math-verify: the same number
    assert task.verify(first, "The sum is 0.75 #### 0.75").reward == 0.0  # not where this format looks
    assert task.verify(second, second.demonstration).reward == 1.0
    with pytest.raises(
        ValueError, match="question_field: .*math.parquet has no field 'question' \\(it has: problem, solution\\)"
    ):
        MathTask.check_args({"train_file": str(path)})


@pytest.mark.parametrize("expected", ["73", "-4", "0", "1200"])
@pytest.mark.parametrize("answer", ["73", "073", "-4", "0", "-0", "1200", "1,200", "12", "x", "73.0", "1200.00"])
def test_integer_fast_path_agrees_with_math_verify(expected, answer):
    from math_verify import parse, verify

    from tasks.math import equal

    assert equal(expected, answer.replace(",", "")) == verify(parse(expected), parse(answer.replace(",", "")))


def test_integer_fast_path_reads_a_padded_negative_as_its_value():
    from tasks.math import equal

    assert equal("-4", "-04")  # where math-verify's parse says otherwise
