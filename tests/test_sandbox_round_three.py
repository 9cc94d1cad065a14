"""Round three of the red team (issue #48), through the public contract and both paths (`contained`
checks every run is over in every sense): a stdin/stdout case's limit bounds everything it starts,
honest programs of the field's shapes pass (and each broken variant fails), feedback never
carries text a consumer cannot take, and the channels left between runs."""

from __future__ import annotations

import ctypes
import os

import pytest
import test_sandbox

from tasks.base import Verdict
from tasks.sandbox import StdioCases

pool, contained = test_sandbox.pool, test_sandbox.contained  # the fixtures
PASSED = Verdict(1.0, "all tests passed")


def judged(contained, program: str, cases: StdioCases) -> Verdict:
    return contained(program, cases, cases.budget_s(start_s=3.0)).verdict


# --- 1. a case's limit bounds every process it starts ----------------------------------------------

LEFTOVER = """
import os, time
n = int(input())
if n == 1:  # starts the slow work outside its process group and session, and ends at once
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(0.8)  # the work no case may take this long for
            open("done", "w").write("done")
        os._exit(0)
    print("ok")
elif n == 2:
    time.sleep(0.45)
    print("wait")
else:  # reads what the work left, as if it had computed it itself
    for _ in range(45):
        if os.path.exists("done"):
            break
        time.sleep(0.01)
    print(open("done").read() if os.path.exists("done") else "missing")
"""


def test_work_left_running_by_a_case_does_not_reach_the_next_one(contained):
    """Passed on main before #48: the setsid() grandchild outlived case 1 and wrote case 3's answer."""
    cases = StdioCases(("1\n", "2\n", "3\n"), ("ok", "wait", "done"), case_timeout_s=0.5)
    assert judged(contained, LEFTOVER, cases) == Verdict(
        0.0, "case 3 of 3: wrong answer (input '3\\n', expected 'done')"
    )


def test_a_case_cannot_choose_the_judges_words_through_its_report_pipe(contained):
    """The fork that runs a case holds its report pipe, so the program does too: what it writes
    there is a broken protocol, not "timed out" (before #48 the judge said what it wrote)."""
    program = (
        "import os\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, b'{\"timeout\":1}')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(3)\n"
    )
    verdict = judged(contained, program, StdioCases(("1 2\n",), ("3",)))
    assert verdict.reward == 0.0 and "timed out" not in verdict.feedback


# --- 2. honest stdin/stdout programs: every common shape passes, each broken variant fails ---------

PYRIVAL_FAST_IO = """
import os, sys
from io import BytesIO, IOBase

BUFSIZE = 8192


class FastIO(IOBase):
    newlines = 0

    def __init__(self, file):
        self._fd = file.fileno()
        self.buffer = BytesIO()
        self.writable = "x" in file.mode or "r" not in file.mode
        self.write = self.buffer.write if self.writable else None

    def read(self):
        while True:
            b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
            if not b:
                break
            ptr = self.buffer.tell()
            self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
        self.newlines = 0
        return self.buffer.read()

    def readline(self):
        while self.newlines == 0:
            b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
            self.newlines = b.count(b"\\n") + (not b)
            ptr = self.buffer.tell()
            self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
        self.newlines -= 1
        return self.buffer.readline()

    def flush(self):
        if self.writable:
            os.write(self._fd, self.buffer.getvalue())
            self.buffer.truncate(0), self.buffer.seek(0)


class IOWrapper(IOBase):
    def __init__(self, file):
        self.buffer = FastIO(file)
        self.flush = self.buffer.flush
        self.writable = self.buffer.writable
        self.write = lambda s: self.buffer.write(s.encode("ascii"))
        self.read = lambda: self.buffer.read().decode("ascii")
        self.readline = lambda: self.buffer.readline().decode("ascii")


sys.stdin, sys.stdout = IOWrapper(sys.stdin), IOWrapper(sys.stdout)
input = lambda: sys.stdin.readline().rstrip("\\r\\n")

a, b = map(int, input().split())
print(a + b)
"""

# each reads "A B" and prints A + B; its broken variant prints A - B
HONEST_STDIO = {
    "thread-for-deep-recursion": (
        "import sys, threading\n"
        "sys.setrecursionlimit(1 << 20)\n"
        "threading.stack_size(1 << 26)\n"
        "def depth(n):\n"
        "    return 0 if n == 0 else 1 + depth(n - 1)\n"
        "def main():\n"
        "    a, b = map(int, input().split())\n"
        "    print(a + b + depth(20000) - 20000)\n"
        "threading.Thread(target=main).start()\n"
    ),
    "output-at-exit": (
        "import atexit, io, sys\n"
        "out = io.StringIO()\n"
        "atexit.register(lambda: sys.__stdout__.write(out.getvalue()))\n"
        "a, b = map(int, input().split())\n"
        "out.write(str(a + b) + '\\n')\n"
    ),
    "readline-as-input": (
        "import sys\ninput = sys.stdin.readline\na, b = map(int, input().split())\nsys.stdout.write(f'{a + b}\\n')\n"
    ),
    "buffer-readline": ("import sys\na, b = map(int, sys.stdin.buffer.readline().split())\nprint(a + b)\n"),
    "whole-input-at-once": (
        "import sys\ndata = sys.stdin.buffer.read().split()\na, b = int(data[0]), int(data[1])\nprint(a + b)\n"
    ),
    "os-read-bytesio": (
        "import io, os\n"
        "input = io.BytesIO(os.read(0, os.fstat(0).st_size)).readline\n"
        "a, b = map(int, input().split())\n"
        "print(a + b)\n"
    ),
    "join-then-write": (
        "import sys\nanswers = []\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n"
        "    answers.append(a + b)\nsys.stdout.write('\\n'.join(map(str, answers)))\n"
    ),
    "print-sep-newline": ("a, b = map(int, input().split())\nprint(*[a + b], sep='\\n')\n"),
    "main-guard": (
        "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()\n"
    ),
    "pyrival-fast-io": PYRIVAL_FAST_IO,
}
SUMS = StdioCases(("1 2\n", "30 4\n", "-5 5\n"), ("3", "34", "0"), case_timeout_s=2.0)


@pytest.mark.parametrize("shape", HONEST_STDIO)
def test_honest_stdio_programs_of_every_common_shape_pass_and_their_broken_variants_fail(contained, shape):
    """Failed on main before #48: thread-for-deep-recursion and output-at-exit (their output lost)."""
    program = HONEST_STDIO[shape]
    assert judged(contained, program, SUMS) == PASSED
    broken = program.replace("a + b", "a - b")
    assert broken != program
    assert judged(contained, broken, SUMS).feedback.startswith("case 1 of 3: wrong answer")


# --- 4. feedback is text any consumer takes ----------------------------------------------------------


def test_feedback_echoing_the_programs_value_is_valid_bounded_text_a_hindsight_block_takes(contained):
    """Before #48 the program's lone surrogate reached the feedback and the tokenizer raised on it
    (so would HP-RLVR's hindsight block, and the step with it)."""
    from algorithms.hp_rlvr import HindsightTemplate, block_feedback, render_block
    from harness.tiny import build_tokenizer

    program = "def f(x):\n    return '\\ud800' + 'x' * 5000\n"
    verdict = contained(program, "assert f(1) == 'ok', f(1)\n").verdict
    assert verdict.reward == 0.0 and verdict.feedback.startswith("failed: assert f(1) == 'ok' (?xxx")
    verdict.feedback.encode("utf-8")  # raises on a lone surrogate
    tokenizer = build_tokenizer()
    block = render_block(tokenizer, HindsightTemplate(), [5, 6], block_feedback(verdict, "full"))
    assert "?xxx" in tokenizer.decode(block)


def test_any_verdicts_feedback_is_made_valid_text_and_bounded():
    from rollout.batch import FEEDBACK_LIMIT

    assert Verdict(0.0, "a\ud800b\udfffc").feedback == "a?b?c"
    assert Verdict(0.0, "€ ok").feedback == "€ ok"  # valid text as it was
    long = Verdict(0.0, "y" * (FEEDBACK_LIMIT + 1)).feedback
    assert len(long) == FEEDBACK_LIMIT and long.endswith("...")
    with pytest.raises(TypeError, match="^feedback:"):
        Verdict(0.0, None)


# --- 5. channels between runs ----------------------------------------------------------------------

HOST_WIDE = {
    "open files (file-nr)": "open('/proc/sys/fs/file-nr').read().split()[0]",
    "threads (loadavg)": "open('/proc/loadavg').read().split()[3].split('/')[1]",
    "forks (stat)": "[l for l in open('/proc/stat') if l.startswith('processes')][0].split()[1]",
    "free memory (meminfo)": "open('/proc/meminfo').readline().split()[1]",
}


@pytest.mark.parametrize("counter", HOST_WIDE)
def test_the_machines_counters_that_a_concurrent_run_moves_are_not_in_view(contained, counter):
    """Each passed on main before #48 (a concurrent run holding many files showed in file-nr)."""
    if test_sandbox.isolation().view is None:
        pytest.skip("no minimal view here")
    program = f"def f():\n    return int({HOST_WIDE[counter]})\n"
    assert contained(program, "assert f() > 0\n").verdict.reward == 0.0


@pytest.mark.skipif(not test_sandbox.isolation().syscall_filter, reason="no system-call filter here")
def test_whether_a_page_is_cached_cannot_be_asked_without_waiting(contained):
    """preadv2(RWF_NOWAIT) fails on a page not in the shared page cache: one run could tell which
    file another read. Refused by the filter (passed on main before #48)."""
    program = (
        "import os, sys\n"
        "def f():\n"
        "    fd = os.open(sys.executable, os.O_RDONLY)\n"
        "    return os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)\n"
    )
    assert contained(program, "assert f() == 1\n").verdict == Verdict(
        0.0, "PermissionError (EPERM) raised by the program (in test: assert f() == 1)"
    )


def test_out_of_memory_the_candidate_goes_first_then_its_judge_never_the_worker_before_them(contained, pool):
    """The candidate 1000, the judge (pid 1 of the run) 500, the outer process or the worker that
    serves the next job as it was (0: before #48 an idle worker and a judge were alike)."""
    if "pid" not in test_sandbox.isolation().unshare:
        pytest.skip("no PID namespace here: pid 1 is not the judge")
    program = "def f(pid):\n    return int(open(f'/proc/{pid}/oom_score_adj').read())\n"
    assert contained(program, "assert f('self') == 1000 and f(1) == 500\n").verdict == PASSED
    for worker in pool.worker_pids():
        with open(f"/proc/{worker}/oom_score_adj") as f:
            assert int(f.read()) == 0


# --- 3. honest function-call programs: the standard library's values come back as the judge's ------

# name: (program, tests, a broken variant of the program); each failed on main before #48 (its
# value was "not plain data"), except where said
HONEST_CALLS = {
    "counter (MBPP 88)": (
        "import collections\ndef freq_count(list1):\n    return collections.Counter(list1)\n",
        "assert freq_count([10, 10, 20, 40, 10]) == {10: 3, 20: 1, 40: 1}\n"
        "assert freq_count('aab').most_common(1) == [('a', 2)]\n",
        "import collections\ndef freq_count(list1):\n    return collections.Counter(list1[1:])\n",
    ),
    "defaultdict": (
        "from collections import defaultdict\n"
        "def group(words):\n    out = defaultdict(list)\n    for w in words:\n        out[w[0]].append(w)\n    return out\n",
        "assert group(['ab', 'ac', 'b']) == {'a': ['ab', 'ac'], 'b': ['b']}\nassert group([])['z'] == []\n",
        "from collections import defaultdict\n"
        "def group(words):\n    out = defaultdict(list)\n    for w in words:\n        out[w[-1]].append(w)\n    return out\n",
    ),
    "ordereddict": (
        "from collections import OrderedDict\ndef first_seen(s):\n    return OrderedDict((c, s.count(c)) for c in s)\n",
        "assert list(first_seen('bcab').items()) == [('b', 2), ('c', 1), ('a', 1)]\n",
        "from collections import OrderedDict\ndef first_seen(s):\n    return OrderedDict((c, s.count(c)) for c in sorted(s))\n",
    ),
    "namedtuple": (
        "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\n"
        "def mid(a, b):\n    return Point((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)\n",
        "p = mid((0, 0), (2, 4))\nassert p == (1, 2) and p.y == 2 and type(p).__name__ == 'Point'\n",
        "from collections import namedtuple\nPoint = namedtuple('Point', 'y x')\n"
        "def mid(a, b):\n    return Point((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)\n",
    ),
    "fraction": (
        "from fractions import Fraction\ndef harmonic(n):\n    return sum(Fraction(1, k) for k in range(1, n + 1))\n",
        "from fractions import Fraction\nassert harmonic(3) == Fraction(11, 6)\nassert harmonic(3).denominator == 6\n",
        "from fractions import Fraction\ndef harmonic(n):\n    return sum(Fraction(1, k) for k in range(1, n))\n",
    ),
    "decimal": (
        "from decimal import Decimal\ndef total(prices):\n    return sum(map(Decimal, prices))\n",
        "from decimal import Decimal\nassert total(['0.10', '0.20']) == Decimal('0.30')\n",
        "def total(prices):\n    return sum(map(float, prices))\n",  # 0.30000000000000004: a float, not the Decimal
    ),
    "complex": (
        "import cmath\ndef roots(a, b, c):\n    d = cmath.sqrt(b * b - 4 * a * c)\n"
        "    return ((-b + d) / (2 * a), (-b - d) / (2 * a))\n",
        "assert roots(1, 0, 4) == (2j, -2j)\n",
        "import cmath\ndef roots(a, b, c):\n    d = cmath.sqrt(b * b - 4 * a * c)\n    return ((-b + d) / a, (-b - d) / a)\n",
    ),
    "generator": (
        "def squares(n):\n    for i in range(n):\n        yield i * i\n",
        "assert list(squares(3)) == [0, 1, 4]\ng = squares(2)\nassert next(g) == 0 and next(g) == 1\n",
        "def squares(n):\n    for i in range(1, n + 1):\n        yield i * i\n",
    ),
    "map object": (
        "def as_text(xs):\n    return map(str, xs)\n",
        "assert list(as_text([1, 2])) == ['1', '2']\n",
        "def as_text(xs):\n    return map(repr, map(str, xs))\n",
    ),
    "deque": (
        "from collections import deque\ndef last(xs, k):\n    return deque(xs, maxlen=k)\n",
        "from collections import deque\nd = last([1, 2, 3], 2)\nassert d == deque([2, 3]) and d.maxlen == 2\n",
        "from collections import deque\ndef last(xs, k):\n    return deque(xs[:k], maxlen=k)\n",
    ),
    "range": (
        "def evens(n):\n    return range(0, n, 2)\n",
        "assert evens(5) == range(0, 6, 2) and list(evens(5)) == [0, 2, 4]\n",
        "def evens(n):\n    return range(0, n + 2, 2)\n",
    ),
    "dict views": (
        "def index(xs):\n    d = {x: i for i, x in enumerate(xs)}\n    return d.keys(), d.items()\n",
        "keys, items = index('ab')\nassert keys == {'a', 'b'} and sorted(items) == [('a', 0), ('b', 1)]\n",
        "def index(xs):\n    d = {x: i for i, x in enumerate(xs)}\n    return d.values(), d.items()\n",
    ),
    "bytearray": (
        "def flipped(b):\n    return bytearray(reversed(b))\n",
        "assert flipped(b'ab') == bytearray(b'ba')\n",
        "def flipped(b):\n    return bytearray(b)\n",
    ),
    "in-place change expected (passed on main too)": (
        "def sort_in_place(xs):\n    xs.sort()\n",
        "xs = [3, 1, 2]\nassert sort_in_place(xs) is None and xs == [1, 2, 3]\n",
        "def sort_in_place(xs):\n    xs = sorted(xs)\n",
    ),
    "a generator that raises (as the tests expect)": (
        "def checked(xs):\n    for x in xs:\n        if x < 0:\n            raise ValueError(x)\n        yield x\n",
        "try:\n    list(checked([1, -1]))\n    raised = False\nexcept ValueError:\n    raised = True\nassert raised\n",
        "def checked(xs):\n    for x in xs:\n        yield x\n",
    ),
}


@pytest.mark.parametrize("shape", HONEST_CALLS)
def test_honest_function_call_programs_of_the_standard_librarys_values_pass_and_their_broken_variants_fail(
    contained, shape
):
    program, tests, broken = HONEST_CALLS[shape]
    assert contained(program, tests).verdict == PASSED
    assert contained(broken, tests).verdict.reward == 0.0


def test_an_endless_iterator_the_program_keeps_as_data_does_not_hold_up_its_start(contained):
    """Module-level data is read for the tests before they run: an iterator there is left unread."""
    program = "import itertools\nnumbers = itertools.count()\ndef f():\n    return 1\n"
    assert contained(program, "assert f() == 1\n").verdict == PASSED


# --- 3. the program's own classes, and the tests' callables, across the boundary -------------------

LINKED_LIST = """
class ListNode:
    def __init__(self, val=0, next=None):
        self.val, self.next = val, next

class Solution:
    def reverseList(self, head):
        previous = None
        while head:
            head.next, previous, head = previous, head, head.next
        return previous
"""
LINKED_LIST_TESTS = """
def build(values):
    head = None
    for value in reversed(values):
        head = ListNode(value, head)
    return head

def values(node):
    out = []
    while node:
        out.append(node.val)
        node = node.next
    return out

assert values(Solution().reverseList(build([1, 2, 3]))) == [3, 2, 1]
assert Solution().reverseList(None) is None
"""
VECTOR = """
class Vector:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __add__(self, other):
        return Vector(self.x + other.x, self.y + other.y)
    def __eq__(self, other):
        return isinstance(other, Vector) and (self.x, self.y) == (other.x, other.y)
    def __hash__(self):
        return hash((self.x, self.y))
    def __lt__(self, other):
        return (self.x, self.y) < (other.x, other.y)
    def __len__(self):
        return 2
    def __iter__(self):
        return iter((self.x, self.y))
    def __repr__(self):
        return f"Vector({self.x}, {self.y})"
"""
VECTOR_TESTS = """
a, b = Vector(1, 2), Vector(3, 4)
assert a + b == Vector(4, 6) and (a + b).x == 4 and list(a + b) == [4, 6] and len(a) == 2
assert sorted([b, a]) == [a, b] and len({Vector(1, 2), Vector(1, 2)}) == 1 and repr(a) == "Vector(1, 2)"
a.x = 7
assert a.x == 7 and a != b
"""

# name: (program, tests, a broken variant); each failed on main before #48 (a value not plain data,
# or an argument the judge could not send)
HONEST_OBJECTS = {
    "the tests build the program's objects (MBPP 601)": (
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
        "def max_chain_length(arr, n):\n    count, end = 0, float('-inf')\n"
        "    for p in sorted(arr, key=lambda p: p.b):\n        if p.a > end:\n            count, end = count + 1, p.b\n"
        "    return count\n",
        "assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)], 4) == 3\n"
        "assert max_chain_length([Pair(1, 2), Pair(3, 4), Pair(5, 6), Pair(7, 8)], 4) == 4\n",
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
        "def max_chain_length(arr, n):\n    return n - 1\n",
    ),
    "a LeetCode-style Solution()": (
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n",
        "assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]\nassert Solution().twoSum([3, 2, 4], 6) == [1, 2]\n",
        "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n",
    ),
    "a linked list the tests build and read": (
        LINKED_LIST,
        LINKED_LIST_TESTS,
        LINKED_LIST.replace("head.next, previous, head = previous, head, head.next", "head = head.next").replace(
            "return previous", "return ListNode(0)"
        ),
    ),
    "a class with operators": (VECTOR, VECTOR_TESTS, VECTOR.replace("self.y + other.y", "self.y - other.y")),
    "a lambda passed in": (
        "def apply(f, xs):\n    return [f(x) for x in xs]\n",
        "assert apply(lambda x: x * 2, [1, 2]) == [2, 4]\n",
        "def apply(f, xs):\n    return [f(f(x)) for x in xs]\n",
    ),
    "a builtin passed in, by keyword": (
        "def sort_by(xs, key):\n    return sorted(xs, key=key)\n",
        "assert sort_by(['ccc', 'a', 'bb'], key=len) == ['a', 'bb', 'ccc']\nassert sort_by([-3, 1], key=abs) == [1, -3]\n",
        "def sort_by(xs, key):\n    return sorted(xs)\n",
    ),
    "the tests' callable raises, and the program handles it": (
        "def safe(f, xs):\n    out = []\n    for x in xs:\n        try:\n            out.append(f(x))\n"
        "        except ZeroDivisionError:\n            out.append(None)\n    return out\n",
        "assert safe(lambda x: 1 // x, [1, 0, 2]) == [1, None, 0]\n",
        "def safe(f, xs):\n    return [f(x) for x in xs if x]\n",
    ),
}


@pytest.mark.parametrize("shape", HONEST_OBJECTS)
def test_honest_programs_with_their_own_classes_or_the_tests_callables_pass_and_their_broken_variants_fail(
    contained, shape
):
    program, tests, broken = HONEST_OBJECTS[shape]
    assert contained(program, tests).verdict == PASSED
    assert contained(broken, tests).verdict.reward == 0.0


LIAR = """
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __lt__(self, other):
        return True
    __le__ = __gt__ = __ge__ = __lt__
    def __sub__(self, other):
        return 0
    __rsub__ = __add__ = __radd__ = __sub__
    def __hash__(self):
        return 0

def f(pair):
    return Anything()
"""


@pytest.mark.parametrize(
    "tests",
    [
        "assert f(Pair(1, 2)) == 5\n",
        "assert 5 == f(Pair(1, 2))\n",
        "assert f(Pair(1, 2)) in [5, 6]\n",
        "assert abs(f(Pair(1, 2)) - 0.5) < 1e-6\n",
        "assert not f(Pair(1, 2)) != 5\n",
        "assert f(Pair(1, 2)) <= 3 and f(Pair(1, 2)) >= 3\n",
    ],
)
def test_an_object_of_the_programs_never_decides_a_comparison_with_a_value_of_the_tests(contained, tests):
    """Once the tests use the program's classes its objects come back as stand-ins, but one that
    says it equals anything (or that its difference from anything is 0) still passes nothing."""
    assert contained(LIAR, tests).verdict.reward == 0.0


def test_an_object_of_the_programs_is_refused_while_the_tests_use_none_of_its_classes(contained):
    """HumanEval's and MBPP's function tests call no class of the program's: there a value that is
    not plain data stays refused, in the judge's words, as before #48."""
    program = "class Box:\n    pass\ndef f(x):\n    return Box()\n"
    assert contained(program, "assert f(1) == 5\n").verdict == Verdict(
        0.0, "f returned a value that is not plain data (in test: assert f(1) == 5)"
    )


def test_the_program_gets_a_stand_in_for_the_tests_callable_not_the_callable(contained):
    program = "def look(fn):\n    return (fn.__name__, fn.__code__.co_consts[:1], fn.__defaults__)\n"
    tests = "secret = 'TOKEN'\nname, consts, defaults = look(lambda x=secret: 'TOKEN')\nassert 'TOKEN' in repr((name, consts, defaults))\n"
    assert contained(program, tests).verdict.reward == 0.0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
def test_without_procfs_subsets_the_machines_counters_are_masked_one_by_one(tmp_path):
    """The fallback of `kernel._mount_process_view` for kernels before 5.8, in a mount namespace
    of a child process: an empty /proc/sys, /dev/null over each counter, the processes kept."""
    from tasks.sandbox import kernel

    target = tmp_path / "proc"
    target.mkdir()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            kernel._unshare(["mount"])
            kernel._libc_call("mount", None, b"/", None, ctypes.c_ulong(kernel.MS_REC | kernel.MS_PRIVATE), None)
            call = kernel._libc_call

            def no_subsets(name, *args):
                if name == "mount" and args[-1] == b"subset=pid":
                    raise OSError(22, "EINVAL")
                return call(name, *args)

            kernel._libc_call = no_subsets
            kernel._mount_process_view(str(target), (str(target / "loadavg"),))
            with open(target / "loadavg") as f:
                masked = f.read() == ""
            status = 0 if masked and os.listdir(target / "sys") == [] and (target / "self" / "fd").is_dir() else 2
        finally:
            os._exit(status)
    assert os.waitpid(pid, 0)[1] == 0
