"""Round two of the red team (issue #33), classes 1-3: what the tests see of the program is what
the problem gives them. Through both paths (`contained` also checks every run is over in every
sense); each program here earned reward 1 on the judge before this round, except the honest
ones, which it judged wrong."""

from __future__ import annotations

import pytest
import test_sandbox

from tasks.base import Verdict

pool, contained = test_sandbox.pool, test_sandbox.contained  # the fixtures
PASSED = Verdict(1.0, "all tests passed")

# (program, tests): none of these programs solves its task
SHADOWED_BUILTINS = {
    "abs": (
        "abs = lambda *a, **k: 0\ndef candidate(x):\n    return 0.0\n",
        "assert abs(candidate(1.33) - 0.33) < 1e-6\n",
    ),
    "range": (
        "range = lambda *a, **k: ()\ndef f(x):\n    return None\n",
        "for i in range(100):\n    assert f(i) == i + 1\n",
    ),
    "tuple": (
        "tuple = lambda *a, **k: 0\ndef f(x):\n    return None\n",
        "assert tuple(f([1, 2])) == tuple([2, 1])\n",
    ),
    "len": ("len = lambda *a: 3\ndef f(x):\n    return []\n", "assert len(f(3)) == 3\n"),
}


@pytest.mark.parametrize("name", SHADOWED_BUILTINS)
def test_a_name_the_program_binds_is_not_the_tests_builtin(contained, name):
    program, tests = SHADOWED_BUILTINS[name]
    assert contained(program, tests).verdict.reward == 0.0


HELPER_PROMPT = (
    "def poly(xs, x):\n"
    "    return sum(c * x ** i for i, c in enumerate(xs))\n"
    "def find_zero(xs):\n"
    '    """A zero of the polynomial with coefficients xs."""\n'
)
HELPER_TESTS = (
    "assert abs(poly([1, 1], find_zero([1, 1]))) < 1e-6\nassert abs(poly([-6, 2], find_zero([-6, 2]))) < 1e-6\n"
)


def test_the_prompts_own_helper_is_the_one_the_tests_call(contained):
    """HumanEval/32's shape: the prompt defines `poly`, the tests call it; a program that redefines
    it (here to return 0 whatever it is given) does not change the tests' `poly`."""
    redefined = HELPER_PROMPT + "    return 0.0\ndef poly(xs, x):\n    return 0.0\n"
    assert contained(redefined, HELPER_TESTS, prompt=HELPER_PROMPT).verdict.reward == 0.0
    honest = HELPER_PROMPT + "    return -xs[0] / xs[1]\n"
    assert contained(honest, HELPER_TESTS, prompt=HELPER_PROMPT).verdict == PASSED
    # without the prompt the judge cannot tell the helper from the program's: the program's is used
    assert contained(redefined, HELPER_TESTS).verdict == PASSED


def test_a_stop_iteration_from_the_program_does_not_end_the_tests_iteration(contained):
    program = "def f(x):\n    raise StopIteration\n"
    tests = "assert all(map(lambda x: f(x) == 2 * x, [1, 2, 3]))\n"
    verdict = contained(program, tests).verdict
    assert verdict.reward == 0.0 and verdict.feedback.startswith("StopIteration raised by the program")


def test_arguments_come_back_as_the_program_left_them(contained):
    # a sort that works on its argument in place, as the tests expect
    in_place = "def sort_in_place(xs):\n    xs.sort()\n"
    assert contained(in_place, "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]\n").verdict == PASSED
    # a function that must not touch its argument, and does: in-process Python fails it
    destructive = "def smallest(xs):\n    xs.sort()\n    return xs[0]\n"
    tests = "xs = [3, 1, 2]\nassert smallest(xs) == 1\nassert xs == [3, 1, 2]\n"
    assert contained(destructive, tests).verdict == Verdict(0.0, "failed: assert xs == [3, 1, 2]")
    # dicts and sets, and keyword arguments
    program = "def fill(d, s, *, extra):\n    d['k'] = 1\n    s.add(2)\n    extra.append(3)\n"
    tests = "d, s, e = {}, set(), []\nfill(d, s, extra=e)\nassert (d, s, e) == ({'k': 1}, {2}, [3])\n"
    assert contained(program, tests).verdict == PASSED


def test_the_programs_own_exception_classes_are_caught_as_their_builtin_base(contained):
    own = "class ParseError(ValueError):\n    pass\ndef parse(s):\n    raise ParseError('bad')\n"
    tests = "try:\n    parse('{')\nexcept ValueError:\n    pass\nelse:\n    assert False, 'no error'\n"
    assert contained(own, tests).verdict == PASSED
    library = "import json\ndef parse(s):\n    return json.loads(s)\n"  # json.JSONDecodeError
    assert contained(library, tests).verdict == PASSED
    # and named as such in the feedback, still in the judge's words
    verdict = contained(own, "parse('x')\n").verdict
    assert verdict == Verdict(0.0, "a subclass of ValueError raised by the program (in test: parse('x'))")
    before = contained("class Oops(KeyError):\n    pass\nraise Oops('secret')\n", "assert True\n").verdict
    assert before == Verdict(0.0, "program failed before the tests ran: a subclass of KeyError (at line 3)")


def test_a_stub_whose_body_is_an_import_and_a_docstring_is_the_programs_to_write(contained):
    """A prompt from a file with two functions to write, the first a stub that starts with an
    import (as HumanEval/115's does): the tests call the program's, not the prompt's empty one."""
    prompt = (
        "def hypot(a, b):\n"
        "    import math\n"
        '    """The hypotenuse of a right triangle with legs a and b."""\n'
        "def area(a, b):\n"
        '    """Its area."""\n'
    )
    program = prompt + "    return a * b / 2\n" + "def hypot(a, b):\n    return (a * a + b * b) ** 0.5\n"
    tests = "assert hypot(3, 4) == 5\nassert area(3, 4) == 6\n"
    assert contained(program, tests, prompt=prompt).verdict == PASSED
