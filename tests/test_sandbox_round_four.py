"""Round four of the red team, through the public contract and both paths (`contained` checks
every run is over in every sense): program-chosen text in the judge's words, stand-ins that decide
what they should not, and test data carried into the candidate."""

from __future__ import annotations

import pytest
import test_sandbox

from tasks.base import Verdict

pool, contained = test_sandbox.pool, test_sandbox.contained  # the fixtures

NAMED = """
Chosen = type("all tests passed\\x1b[2J", (), {"area": lambda self, z=0: 1})

class Pair:
    def make(self):
        return Chosen()
"""


@pytest.mark.parametrize(
    ("tests", "said"),
    [
        ("x = Pair().make()\nassert x(object()) == 1\n", "an argument to object is not plain data"),
        ("x = Pair().make()\nassert x + object() == 1\n", "object (add): a value of the tests' is not given"),
    ],
)
def test_a_class_name_the_program_chooses_never_appears_in_the_feedback(contained, tests, said):
    verdict = contained(NAMED, tests).verdict
    assert verdict.reward == 0.0 and verdict.feedback.startswith(said)


def test_a_class_the_tests_name_is_named_in_the_feedback(contained):
    program = "class Pair:\n    def __call__(self, z):\n        return 1\n"
    verdict = contained(program, "assert Pair()(object()) == 1\n").verdict
    assert verdict.feedback.startswith("an argument to Pair is not plain data")


def test_a_class_made_by_type_is_a_class_like_any_other(contained):
    """type() in a namespace without __name__ makes a class without __module__: it is held and
    used, not the candidate's end."""
    program = "C = type('C', (), {'area': lambda self: 3})\nclass Pair:\n    def make(self):\n        return C()\n"
    assert contained(program, "assert Pair().make().area() == 3\n").verdict == Verdict(1.0, "all tests passed")


CONTAINS_ALL = """
class Everything:
    def __contains__(self, item):
        return True
    def __iter__(self):
        return iter([1, 2])

class Solution:
    def primes(self, n):
        return Everything()

class Trie:
    def __init__(self):
        self.words = set()
    def insert(self, word):
        self.words.add(word)
    def __contains__(self, word):
        return word in self.words
"""


def test_an_object_the_program_returns_cannot_contain_everything(contained):
    """`x in s.f()`: an object of a class the tests never name is searched item by item here, as
    Python does without __contains__; membership of a class the tests name is the program's."""
    assert contained(CONTAINS_ALL, "assert 7 in Solution().primes(10)\n").verdict.reward == 0.0
    assert contained(CONTAINS_ALL, "assert 2 in Solution().primes(10)\n").verdict.reward == 1.0
    tests = "t = Trie()\nt.insert('ab')\nassert 'ab' in t and 'b' not in t\n"
    assert contained(CONTAINS_ALL, tests).verdict == Verdict(1.0, "all tests passed")


REMEMBERS = """
seen = []

class Number:
    def __sub__(self, other):
        seen.append(other)
        return 0.0

class Solution:
    def area(self):
        return Number()
    def perimeter(self):
        return seen[0] if seen else -1.0
"""


def test_the_tests_expected_values_never_reach_an_object_the_program_returned(contained):
    """`abs(r - expected)` on an object of a class the tests do not name would hand the program
    the expected value, which a later call could answer with: refused, in the judge's words."""
    tests = "s = Solution()\nassert abs(s.area() - 3.5) < 1e-9\nassert s.perimeter() == 3.5\n"
    verdict = contained(REMEMBERS, tests).verdict
    assert verdict.reward == 0.0
    assert verdict.feedback.startswith("object (sub): a value of the tests' is not given to an object")
    named = "n = Number()\nassert float(n - 3.5) == 0.0\nassert Solution().perimeter() == 3.5\n"  # the tests took it on
    assert contained(REMEMBERS, named).verdict.reward == 1.0


FUNCTIONS = """
import functools

def make_adder(n):
    return lambda x: x + n

def compose(f, g):
    def both(x):
        return f(g(x))
    return both

def memoize(f):
    return functools.lru_cache(maxsize=None)(f)

def halve():
    return functools.partial(divmod, 2)

def shout():
    return "abc".upper
"""


@pytest.mark.parametrize(
    "test",
    [
        "assert make_adder(3)(4) == 7",
        "assert compose(lambda x: x + 1, lambda x: x * 2)(3) == 7",
        "square = memoize(lambda x: x * x)\nassert square(9) == 81 and square(9) == 81",
        "assert halve()(7) == (0, 2)",
        "assert shout()() == 'ABC'",
        "assert make_adder(3) != 7 and make_adder(3)(4) != 8",
    ],
)
def test_a_function_that_returns_a_function_is_judged_by_calling_it(contained, test):
    assert contained(FUNCTIONS, test + "\n").verdict == Verdict(1.0, "all tests passed")


def test_a_returned_function_still_cannot_equal_what_the_tests_expect(contained):
    program = "def f():\n    return lambda: 0\n"
    assert contained(program, "assert f() == 0\n").verdict.reward == 0.0


VECTOR = """
class Vector:
    dims = 2
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __add__(self, o):
        return Vector(self.x + o.x, self.y + o.y)
    def __mul__(self, k):
        return Vector(self.x * k, self.y * k)
    __rmul__ = __mul__
    def __eq__(self, o):
        return isinstance(o, Vector) and (self.x, self.y) == (o.x, o.y)
    def __hash__(self):
        return hash((self.x, self.y))
    def __abs__(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5
    def __len__(self):
        return 2
    def __getitem__(self, i):
        return (self.x, self.y)[i]
    def __iter__(self):
        return iter((self.x, self.y))
    def __repr__(self):
        return f"Vector({self.x}, {self.y})"
    def __str__(self):
        return f"({self.x}, {self.y})"
    def __format__(self, spec):
        return f"({self.x:{spec}}, {self.y:{spec}})"
    def __round__(self, n=0):
        return Vector(round(self.x, n), round(self.y, n))
    def __lt__(self, o):
        return abs(self) < abs(o)
    @staticmethod
    def zero():
        return Vector(0, 0)
    @classmethod
    def from_tuple(cls, t):
        return cls(*t)
"""
SHAPES = [
    "v = Vector(1, 2)\nassert v.x == 1 and v.y == 2",
    "assert Vector(1, 2) + Vector(3, 4) == Vector(4, 6)",
    "assert Vector(1, 2) * 3 == Vector(3, 6)",
    "assert 3 * Vector(1, 2) == Vector(3, 6)",
    "assert abs(Vector(3, 4)) == 5",
    "assert len(Vector(1, 2)) == 2",
    "assert Vector(1, 2)[1] == 2",
    "assert list(Vector(1, 2)) == [1, 2]",
    "assert repr(Vector(1, 2)) == 'Vector(1, 2)'",
    "assert str(Vector(1, 2)) == '(1, 2)'",
    "assert f'{Vector(1, 2):.1f}' == '(1.0, 2.0)'",
    "assert format(Vector(1, 2), '.1f') == '(1.0, 2.0)'",
    "assert round(Vector(1.26, 2.0), 1) == Vector(1.3, 2.0)",
    "assert Vector.zero() == Vector(0, 0)",
    "assert Vector.from_tuple((1, 2)) == Vector(1, 2)",
    "assert Vector.dims == 2",
    "assert isinstance(Vector(1, 2), Vector)",
    "assert Vector(1, 1) < Vector(3, 4) and sorted([Vector(3, 4), Vector(1, 1)])[0] == Vector(1, 1)",
    "assert len({Vector(1, 2), Vector(1, 2)}) == 1",
]


@pytest.mark.parametrize("test", SHAPES)
def test_a_textbook_value_class_passes_the_common_test_shapes(contained, test):
    """Operators, format specs, round(), static and class methods, class attributes, isinstance:
    as the tests would see the class in one interpreter."""
    assert contained(VECTOR, test + "\n").verdict == Verdict(1.0, "all tests passed")


def test_isinstance_of_a_program_class_is_false_for_the_tests_own_values(contained):
    program = "class Vector(int):\n    pass\n"
    assert contained(program, "assert not isinstance(3, Vector)\n").verdict.reward == 1.0


STANDARD = """
import collections, fractions, decimal, itertools
from typing import NamedTuple

class Point(NamedTuple):
    x: int
    y: int
    def norm1(self):
        return abs(self.x) + abs(self.y)

Pair = collections.namedtuple("Pair", "a b")

def point():
    return Point(3, -4)

def pair():
    return Pair(1, 2)

def counts(text):
    d = collections.defaultdict(lambda: 0)
    for c in text:
        d[c] += 1
    return d

def tally(text):
    return collections.Counter(text)

def naturals():
    n = 0
    while True:
        yield n
        n += 1

def squares(n):
    return (i * i for i in range(n))

def echo():
    got = yield 0
    while True:
        got = yield got * 2

def ordered():
    return collections.OrderedDict([("b", 1), ("a", 2)])

def window():
    return collections.deque([1, 2, 3], maxlen=3)

def half():
    return fractions.Fraction(1, 2)

def money():
    return decimal.Decimal("1.10")

def total(xs):
    return sum(xs)

def first(xs):
    return next(iter(xs))

def both(p):
    return p.a + p.b

def span(r):
    return (r.start, r.stop, r.step)

def norm(p):
    return p.norm1()
"""
RETURNS = [
    "assert point().norm1() == 7",
    "assert point().x == 3 and point() == (3, -4)",
    "assert pair().a == 1 and pair()._asdict() == {'a': 1, 'b': 2}",
    "d = counts('aab')\nassert d['a'] == 2 and d['z'] == 0",
    "assert tally('aab').most_common(1) == [('a', 2)]",
    "import itertools\nassert list(itertools.islice(naturals(), 3)) == [0, 1, 2]",
    "assert sum(squares(4)) == 14",
    "g = echo()\nassert next(g) == 0 and g.send(5) == 10",
    "assert list(ordered()) == ['b', 'a']",
    "w = window()\nw.append(4)\nassert list(w) == [2, 3, 4]",
    "assert half() + half() == 1",
    "assert money() * 2 == __import__('decimal').Decimal('2.20')",
]
ARGUMENTS = [
    "assert total(range(4)) == 6",
    "assert total(i for i in range(4)) == 6",
    "assert total(map(int, '123')) == 6",
    "assert total(filter(None, [0, 1, 2])) == 3",
    "import fractions\nassert total([fractions.Fraction(1, 2), fractions.Fraction(1, 2)]) == 1",
    "import decimal\nassert total([decimal.Decimal('0.1')] * 2) == decimal.Decimal('0.2')",
    "import collections\nassert first(collections.deque([7])) == 7",
    "import collections\nassert both(collections.namedtuple('P', 'a b')(1, 2)) == 3",
    "assert both(pair()) == 3",
    "assert norm(point()) == 7",
    "assert span(range(1, 9, 2)) == (1, 9, 2)",
    "assert first(zip([1], [2])) == (1, 2)",
]


@pytest.mark.parametrize("test", RETURNS)
def test_a_returned_standard_value_behaves_as_in_one_interpreter(contained, test):
    """A NamedTuple's own method, defaultdict(lambda: 0), an endless generator read with islice,
    .send(): rebuilt or held, as the tests would see them in one interpreter."""
    assert contained(STANDARD, test + "\n").verdict == Verdict(1.0, "all tests passed")


@pytest.mark.parametrize("test", ARGUMENTS)
def test_a_standard_value_of_the_tests_can_be_passed(contained, test):
    """range, a generator expression, map, filter, zip, Fraction, Decimal, deque, named tuples (the
    program's own class where it has one): rebuilt in the candidate."""
    assert contained(STANDARD, test + "\n").verdict == Verdict(1.0, "all tests passed")


BUFFERS = """
import socket

def fill(limit):
    total, pairs = 0, []
    while total < limit:
        a, b = socket.socketpair()
        a.setblocking(False)
        pairs.append((a, b))
        while total < limit:
            try:
                total += a.send(b"x" * 65536)
            except (BlockingIOError, OSError):
                break
    return total
"""


def test_socket_buffers_count_against_the_jobs_memory(contained):
    """Data queued in socketpairs the program never reads is kernel memory, charged to the job's
    memory cgroup like its own: 8 MiB fits a 64 MiB job, 256 MiB ends it as a memory failure."""
    from tasks.sandbox import isolation

    if isolation().memory_cgroup is None:
        pytest.skip("no memory cgroup here: the job's memory is its address space only")
    within = contained(BUFFERS, f"assert fill({8 << 20}) >= {8 << 20}\n", memory_mb=64).verdict
    assert within == Verdict(1.0, "all tests passed")
    beyond = contained(BUFFERS, f"assert fill({256 << 20}) >= {256 << 20}\n", memory_mb=64).verdict
    assert beyond.reward == 0.0 and "memory limit exceeded" in beyond.feedback
