"""Standard input/output cases in the sandbox (`tasks.sandbox.StdioCases`): verdicts checked
against hand-worked answers, through both paths (the `contained` fixture also checks that every
run is over in every sense)."""

from __future__ import annotations

import pytest
import test_sandbox

from tasks.base import Verdict
from tasks.sandbox import StdioCases, run_program

pool, contained = test_sandbox.pool, test_sandbox.contained  # the fixtures: every run checked contained

SUM = StdioCases(("1 2\n", "3 4\n", "10 20\n"), ("3\n", "7", "30"), case_timeout_s=1.0)
PASSED = Verdict(1.0, "all tests passed")


def judged(contained, program: str, cases: StdioCases = SUM) -> Verdict:
    return contained(program, cases, cases.budget_s(start_s=3.0)).verdict


def test_a_correct_script_passes_reading_input_every_usual_way(contained):
    for program in (
        "a, b = map(int, input().split())\nprint(a + b)\n",
        "import sys\na, b = map(int, sys.stdin.buffer.read().split())\nsys.stdout.write(str(a + b))\n",
        "a, b = map(int, open(0).read().split())\nprint(a + b)\n",
        "import sys\nfor line in sys.stdin:\n    print(sum(map(int, line.split())))\n",
    ):
        assert judged(contained, program) == PASSED, program


def test_whitespace_around_and_between_tokens_does_not_matter(contained):
    program = "a, b = map(int, input().split())\nprint('  ', a + b, '\\n\\n\\t')\n"
    assert judged(contained, program) == PASSED
    two = StdioCases(("1 2\n",), ("1\n2\n",))
    assert judged(contained, "print('1    2')", two) == PASSED


def test_a_different_token_fails_naming_the_case_its_input_and_expected_output(contained):
    program = "a, b = map(int, input().split())\nprint(a * b if a == 3 else a + b)\n"
    assert judged(contained, program) == Verdict(0.0, "case 2 of 3: wrong answer (input '3 4\\n', expected '7')")
    # an extra or a missing token is a wrong answer too
    assert judged(contained, "print(3, 0)", SUM).feedback.startswith("case 1 of 3: wrong answer")
    assert judged(contained, "print()", SUM).feedback.startswith("case 1 of 3: wrong answer")


def test_reading_less_input_than_given_is_fine_and_more_is_an_error(contained):
    cases = StdioCases(("2\n5 6\n7 8 9\n",), ("11",))
    assert judged(contained, "input()\nprint(sum(map(int, input().split())))\n", cases) == PASSED
    assert judged(contained, "for _ in range(4):\n    input()\n", cases) == Verdict(
        0.0, "case 1 of 1: EOFError raised by the program (at line 2)"
    )


def test_a_timeout_on_one_case_of_many_names_that_case(contained):
    program = "a, b = map(int, input().split())\nwhile a == 3:\n    pass\nprint(a + b)\n"
    assert judged(contained, program) == Verdict(0.0, "case 2 of 3: timed out after 1 s")


def test_a_case_is_stopped_at_its_own_limit_not_later(contained):
    """A case that ends 1.5 limits after it started times out; the timeout tests' infinite loops
    would time out under any limit, this one only under the case's own."""
    cases = StdioCases(("",), ("1",), case_timeout_s=0.5)
    assert judged(contained, "import time\ntime.sleep(0.75)\nprint(1)\n", cases) == Verdict(
        0.0, "case 1 of 1: timed out after 0.5 s"
    )
    assert judged(contained, "print(1)\n", cases) == PASSED


def test_partial_scores_the_fraction_passed_and_still_names_the_first_failure(contained):
    cases = StdioCases(SUM.inputs, SUM.outputs, case_timeout_s=1.0, partial=True)
    program = "a, b = map(int, input().split())\nwhile a == 3:\n    pass\nprint(a + b)\n"
    assert judged(contained, program, cases) == Verdict(2 / 3, "case 2 of 3: timed out after 1 s")
    assert judged(contained, "print(3)", cases) == Verdict(
        1 / 3, "case 2 of 3: wrong answer (input '3 4\\n', expected '7')"
    )
    assert judged(contained, "print(0)", cases).reward == 0.0
    assert judged(contained, "a, b = map(int, input().split())\nprint(a + b)\n", cases) == PASSED


def test_numbers_within_the_tolerance_pass_only_when_one_is_set(contained):
    program = "print(1 / 3)\n"
    assert judged(contained, program, StdioCases(("",), ("0.333333",), float_tolerance=1e-5)) == PASSED
    assert judged(contained, program, StdioCases(("",), ("0.333333",))).reward == 0.0
    assert judged(contained, program, StdioCases(("",), ("0.3333",), float_tolerance=1e-5)).reward == 0.0
    # a token that is not a number compares as text even with a tolerance
    assert judged(contained, "print('abc')", StdioCases(("",), ("abd",), float_tolerance=0.5)).reward == 0.0


def test_how_a_script_ends_is_its_verdict(contained):
    add = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert judged(contained, add + "exit()\n") == PASSED  # `exit` works as under a normal interpreter
    assert judged(contained, add + "raise SystemExit(0)\n") == PASSED
    assert judged(contained, "import sys\nsys.exit(3)\n") == Verdict(0.0, "case 1 of 3: exit status 3")
    assert judged(contained, "x = [1]\nx[5]\n") == Verdict(
        0.0, "case 1 of 3: IndexError raised by the program (at line 2)"
    )
    assert judged(contained, "print(\n") == Verdict(0.0, "SyntaxError in the program at line 1")


def test_each_case_starts_from_a_fresh_process(contained):
    """State the program keeps in memory (here: on the builtins module) does not reach the next case."""
    program = "import builtins\nseen = getattr(builtins, 'seen', 0)\nbuiltins.seen = seen + 1\nprint(seen)\n"
    cases = StdioCases(("", "", ""), ("0", "0", "0"))
    assert judged(contained, program, cases) == PASSED


def test_the_feedback_never_holds_the_programs_output(contained):
    verdict = judged(contained, "print('I-WAS-PRINTED-BY-THE-PROGRAM')\n")
    assert verdict.reward == 0.0 and "PRINTED" not in verdict.feedback


def test_output_past_the_limit_fails():
    cases = StdioCases(("",), ("x",))
    verdict = run_program("import sys\nsys.stdout.write('x' * (5 << 20))\n", cases, cases.budget_s())
    assert verdict == Verdict(0.0, "case 1 of 1: output limit exceeded")


@pytest.mark.parametrize(
    "bad",
    [
        dict(inputs=("1",), outputs=()),
        dict(inputs=(), outputs=()),
        dict(inputs=("1",), outputs=(1,)),
        dict(inputs=("1",), outputs=("1",), case_timeout_s=0),
        dict(inputs=("1",), outputs=("1",), float_tolerance=-1e-6),
    ],
)
def test_malformed_cases_are_refused(bad):
    with pytest.raises(ValueError):
        StdioCases(**bad)


def test_the_output_rule_tokens_alike_and_numbers_within_the_tolerance_absolute_or_relative():
    """`same_output` against hand-worked cases: without a tolerance tokens compare as text (1.0 is
    not 1), with one two numbers may differ by it absolutely (near 0) or relatively (when large)."""
    from tasks.sandbox.judge import same_output

    assert same_output("3 4\n", "3  4", None) and not same_output("3 4 5", "3 4", None)
    assert not same_output("1.0", "1", None)  # no tolerance: the text itself
    assert same_output("1.0", "1", 1e-6) and not same_output("1.1", "1", 1e-6)
    assert same_output("0.0000001", "0", 1e-6)  # absolute: a relative rule never accepts anything near 0
    assert same_output("1000000.5", "1000000", 1e-6)  # relative: 0.5 off a million is within 1e-6 of it
    assert not same_output("yes", "no", 1e-6)
    # two integers are equal or not, whatever the tolerance; an integer and a decimal compare as numbers
    assert not same_output("1000000000001", "1000000000000", 1e-6)
    assert same_output("+12", "12", 1e-6) and same_output("3.0000001", "3", 1e-6)


STOPS_ITS_CLOCK = """import os, signal, sys, time
timer = os.getppid()  # the process that times this case
os.kill(timer, signal.SIGSTOP)
time.sleep({sleep})
print(1)
sys.stdout.flush()
if os.fork() == 0:  # resumes it once this script has ended, so that it finds the script done
    time.sleep(0.1)
    os.kill(timer, signal.SIGCONT)
    os._exit(0)
"""


@pytest.mark.parametrize("partial", [False, True])
def test_a_script_that_pauses_the_process_timing_it_still_times_out(contained, partial):
    """The case is timed by the judge, which the program cannot signal: stopping the candidate,
    running 2.5 limits and resuming it is a timeout; the same script within its limit passes."""
    cases = StdioCases(("",), ("1",), case_timeout_s=0.4, partial=partial)
    assert judged(contained, STOPS_ITS_CLOCK.format(sleep=1.0), cases) == Verdict(
        0.0, "case 1 of 1: timed out after 0.4 s"
    )
    assert judged(contained, STOPS_ITS_CLOCK.format(sleep=0.05), cases) == PASSED
