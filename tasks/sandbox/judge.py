"""pid 3 of a sandbox run, trusted: run the tests against the candidate.

`_run_judge` reads the run's secret part, sends the candidate (pid 2, started and confined by
`layout.py`) its program, then runs the tests in this process with each of the program's
functions bound to a proxy that calls it across the process boundary and gets data back
(the canonical form of `candidate.py`, parsed here against a strict schema). The candidate never
holds the tests, the token or the result pipe. Standard library only: this runs under `python -S`.
"""

import contextlib
import json
import os
import select
import signal
import time

from .candidate import CALLBACK, FACTORIES, HANDLE
from .candidate import STANDARD as STANDARD_MARKER
from .kernel import (
    PR_SET_DUMPABLE,
    _apply_rlimits,
    _exit_code,
    _libc_call,
    _oom_kills,
)

CASE_OVERHEAD_S = 0.25
"""What the candidate's own work around one stdio case (input, fork, output) may add to the case's
limit as the judge times it: milliseconds alone, a scheduler's delay on a loaded machine."""
MESSAGE_LIMIT = 2000  # the harness truncates further; this only bounds the record's size


def _line(source_lines, lineno):
    if lineno and 0 < lineno <= len(source_lines):
        return source_lines[lineno - 1].strip()
    return ""


def _assert_conditions(tests):
    """Line number -> condition of the assert statement on that line, as written (whitespace
    collapsed, the message expression left out: "This prints if this assert fails" says less
    than `candidate(2, 3) == 5`)."""
    import ast

    conditions = {}
    for node in ast.walk(ast.parse(tests)):
        if isinstance(node, ast.Assert):
            text = " ".join((ast.get_source_segment(tests, node.test) or "").split())
            for lineno in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                conditions.setdefault(lineno, text)
    return conditions


def _free_names(tests):
    """Names the tests read but never bind, less the builtins: what they expect the program (or
    the prompt) to define. Only these are bound from the program, so a name the program binds
    for itself (`abs = ...`, `range = ...`) never reaches the tests, whose builtins are the judge's."""
    import ast
    import builtins

    loaded, bound = set(), set()
    for node in ast.walk(ast.parse(tests)):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound - set(dir(builtins))


def _run_prompt(prompt, namespace):
    """Run the problem's prompt (trusted, the task's own text) in the tests' namespace, so the
    helpers it defines (HumanEval's `poly`) are the prompt's, whatever the program redefines;
    return the names of the functions it leaves to write, which come from the program: the last
    one (a completion continues it) and any whose body is only docstrings, imports, `pass` or
    `...` (HumanEval/115's starts with `import math`). None if the prompt does not run here (then
    nothing of it is kept)."""
    import ast

    try:
        tree = ast.parse(prompt)
        exec(compile(tree, "<prompt>", "exec", dont_inherit=True), namespace)  # noqa: S102 - the task's own text
    except BaseException:  # noqa: BLE001 - a prompt that is not whole code (a fragment): not used
        return None
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    bare = (ast.Pass, ast.Import, ast.ImportFrom)
    stubs = {
        n.name
        for n in functions
        if n is functions[-1]
        or all(isinstance(b, bare) or (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)) for b in n.body)
    }
    for name in stubs:
        namespace.pop(name, None)
    return stubs


def _put_back(original, changed):
    """What the program did to a list, dict or set argument, done to the tests' own object."""
    if type(original) is not type(changed) or original == changed:
        return
    if type(original) is list:
        original[:] = changed
    else:
        original.clear()
        original.update(changed)


class CandidateGone(BaseException):
    """The candidate process ended (or broke the protocol) while the tests called it. A
    BaseException, so that a test's `except Exception` cannot take it for a wrong answer."""


def _frames(tb):
    """(file name, line number) of each frame of a traceback, outermost first: what the judge
    needs of `traceback.extract_tb`, without importing it (and linecache, tokenize) in every run."""
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _describe(exc, tests_lines, conditions):
    """(kind, message) for an exception that ended the tests. A failed assert in the tests is
    named by its condition and message (`tasks.sandbox.failed_test_feedback` builds the same text):
    that names the first failing test. Other exceptions by their class and the test line only:
    their text may hold a value the program chose (int("...") quotes its argument)."""
    if isinstance(exc, CandidateGone):
        return "exit", str(exc.args[0])
    entries = _frames(exc.__traceback__)
    in_tests = [line for name, line in entries if name == "<tests>"]
    test_line = _line(tests_lines, in_tests[-1]) if in_tests else ""
    if isinstance(exc, AssertionError) and entries and entries[-1][0] == "<tests>":
        condition = conditions.get(entries[-1][1])
        what = f"assert {condition}" if condition else test_line
        try:
            text = str(exc)[:MESSAGE_LIMIT]  # the tests' own message
        except Exception:  # noqa: BLE001
            text = ""
        if what:
            return "assert", f"failed: {what}" + (f" ({text})" if text else "")
    if isinstance(exc, SystemExit):
        return "exit", "the tests exited before they completed"
    name = type(exc).__name__
    if getattr(exc, "judge_says", None):
        error = exc.judge_says
    elif getattr(exc, "from_program", None) is not None:
        said = exc.from_program
        error = f"{said} raised by the program" if said else "an exception of the program's own class"
    else:
        error = name
    return "error", error + (f" (in test: {test_line})" if test_line else "")


def _run_judge(job, secret_fd, fd, candidate, requests_w, answers_r):
    """pid 1 of the run's PID namespace, trusted: read the run's secret part (program, tests,
    prompt, token) from `secret_fd`, send the candidate (its child, `candidate.py`, already
    confined) the program, then run the tests in this process with each of the program's
    functions replaced by a proxy that calls it across the process boundary and gets plain data
    back. Every record carries the run's token; the candidate never sees it, the tests, or the
    result pipe. When this process exits, the kernel kills whatever else is left of the run."""
    import builtins
    import errno
    import marshal

    _apply_rlimits({k: v for k, v in job["rlimits"].items() if k in ("cpu", "as", "core")})
    _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)  # the candidate (same uid without root) cannot read our memory
    try:
        with os.fdopen(secret_fd, "rb") as f:
            secret = json.loads(f.read())
        tag, tests, program = secret["token"], secret["tests"], secret["program"]
    except Exception as exc:  # noqa: BLE001 - the sandbox's failure: no record can carry a token
        os.write(fd, (json.dumps({"error": f"sandbox setup failed: {exc!r}"}) + "\n").encode())
        os.kill(candidate, signal.SIGKILL)
        os._exit(70)
    tests_lines = tests.splitlines()
    oom_before = _oom_kills(job.get("cgroup"))

    def write_record(**fields):
        data = (json.dumps({"token": tag, **fields}) + "\n").encode()
        while data:
            data = data[os.write(fd, data) :]

    def finish(status, **fields):
        write_record(**fields)
        stop_candidate()
        os._exit(status)

    def candidate_status(timeout_s=None):
        """The candidate's exit status once it has exited; None if not within `timeout_s`."""
        if gone_status:
            return gone_status[0]
        if timeout_s is not None and not select.select([exit_fd], [], [], timeout_s)[0]:
            return None
        gone_status.append(_exit_code(os.waitpid(candidate, 0)[1]))
        return gone_status[0]

    def stop_candidate():
        """Close its requests and give it CANDIDATE_EXIT_S to flush its output and exit; then kill it."""
        with contextlib.suppress(OSError):
            os.close(requests_w)
        if candidate_status(CANDIDATE_EXIT_S) is None:
            with contextlib.suppress(OSError):
                os.kill(candidate, signal.SIGKILL)
            candidate_status()

    gone_status = []
    exit_fd = os.pidfd_open(candidate)  # readable once it has exited
    cases = secret.get("cases")
    try:
        tests_code = compile(tests, "<tests>", "exec", dont_inherit=True, optimize=0)
        conditions = _assert_conditions(tests)
    except (SyntaxError, ValueError) as exc:
        where = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        finish(1, fail="syntax", message=f"{type(exc).__name__} in the tests{where}")

    pending = bytearray()
    gone = []  # how the candidate ended, once it has

    def ended():
        """Why the candidate is gone: its own last word, or its exit status."""
        if gone:
            return gone[0]
        with contextlib.suppress(OSError):
            os.kill(candidate, signal.SIGKILL)  # it broke the protocol, or was done: make sure
        status = candidate_status()
        if status > 128 and status - 128 == signal.SIGKILL and _oom_kills(job.get("cgroup")) > oom_before:
            how = "memory limit exceeded"
        elif status > 128 and status - 128 == signal.SIGXCPU:
            how = "CPU time limit exceeded"
        elif status > 128 and status - 128 in signal.valid_signals():
            how = f"killed by {signal.Signals(status - 128).name}"
        else:
            how = f"exit status {status}"
        gone.append(how)
        return how

    def send(body):
        """One length-prefixed message to the candidate; False once it is gone (EPIPE)."""
        try:
            data = memoryview(len(body).to_bytes(4, "big") + body)
            while data:
                data = data[os.write(requests_w, data) :]
        except OSError:
            return False
        return True

    def call(request):
        """The candidate's answer to one request (parsed, not yet checked), or None once it is gone."""
        if gone:
            return None
        try:
            body = marshal.dumps(request)
        except ValueError as exc:  # a value marshal cannot carry: not plain
            raise NotPlain("argument") from exc
        return next_answer() if send(body) else None

    def next_answer():
        """The candidate's next answer line, parsed (not yet checked); None once it is gone."""
        try:
            line = _read_answer(answers_r, pending, ANSWER_LIMIT)
        except NotPlain:  # past the size bound
            return {"malformed": 1}
        if line is None:
            return None
        answer = _parse_answer(line)
        return answer if answer is not None else {"malformed": 1}

    write_record(phase="program")
    mode = "program" if cases is None else "script"
    ready = call((mode, program, job["block_network"], job["block_processes"]))
    lines = program.count("\n") + 1

    def at_line(answer):
        line = answer.get("line")
        return f" (at line {line})" if type(line) is int and 0 < line <= lines else ""

    def exception_class(answer):
        """The builtin exception class the candidate named (the nearest builtin base of a class
        of the program's own), or None."""
        name = answer.get("raised")
        cls = getattr(builtins, name, None) if type(name) is str else None
        return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None

    def exception_name(answer):
        """That class's name, with an OSError's errno by its symbol (a fixed vocabulary, never
        text of the program's); "a subclass of X" for the program's own; None if none was named."""
        cls, code = exception_class(answer), answer.get("errno")
        if cls is None:
            return None
        name = (
            f"{cls.__name__} ({errno.errorcode[code]})"
            if type(code) is int and code in errno.errorcode
            else cls.__name__
        )
        return f"a subclass of {name}" if answer.get("own") is True else name

    if ready is None or type(ready.get("ready")) is not list:
        answer = ready or {}
        if "syntax" in answer:
            kind = answer.get("kind") if answer.get("kind") in ("SyntaxError", "IndentationError", "TabError") else None
            line = answer.get("syntax")
            where = f" at line {line}" if type(line) is int and 0 < line <= lines else ""
            finish(1, fail="syntax", message=f"{kind or 'SyntaxError'} in the program{where}")
        if "raised" in answer:
            what = exception_name(answer) or "an exception of the program's own class"
            finish(1, fail="error", message=f"program failed before the tests ran: {what}{at_line(answer)}")
        if "exit" in answer:
            finish(1, fail="exit", message="program exited before the tests ran (sys.exit)")
        if "memory" in answer:
            finish(1, fail="memory", message="memory limit exceeded")
        if "malformed" in answer:
            finish(
                1, fail="protocol", message="the program's process broke the sandbox's protocol before the tests ran"
            )
        how = ended()
        if how in ("memory limit exceeded", "CPU time limit exceeded"):
            finish(1, fail="limit", message=how)
        finish(1, fail="exit", message=f"program exited before the tests ran ({how})")

    if cases is not None:
        write_record(phase="tests")
        _judge_cases(cases, call, ended, exception_name, at_line, write_record, finish)

    callbacks = []  # the tests' callables the program was given, by number
    objects_on = []  # not empty once the tests have called one of the program's classes

    def marked(value):
        """`value` with each Remote as (HANDLE, ID) and each other callable as (CALLBACK, N)."""
        kind = type(value)
        if kind is Remote:
            return (HANDLE, object.__getattribute__(value, "_remote_id"))
        if kind in (list, tuple, set, frozenset):
            return kind([marked(item) for item in value])
        if kind is dict:
            return {marked(k): marked(v) for k, v in value.items()}
        standard = _standard_marker(value, kind)
        if standard is not None:
            return (STANDARD_MARKER, standard[0], marked(standard[1]))
        if callable(value):
            callbacks.append(value)
            return (CALLBACK, len(callbacks) - 1)
        return value

    def message(kind, *parts):
        """A request with its flags (1: markers in it, 2: handles may come back), marshalled."""
        on = 2 if objects_on else 0
        try:
            return marshal.dumps((kind, *parts, on))
        except ValueError:  # a Remote or a callable in it (anything else marshal cannot carry: not plain)
            try:
                return marshal.dumps((kind, *marked(parts), on | 1))
            except ValueError as exc:
                raise NotPlain("argument") from exc

    def answered(body):
        """Send a request and read its answer, serving the program's calls of the tests' callables
        meanwhile; the answer (parsed, not yet checked), or None once the candidate is gone."""
        if gone or not send(body):
            return None
        while True:
            answer = next_answer()
            if answer is None or "callback" not in answer:
                return answer
            if not send(run_callback(answer)):
                return None

    def run_callback(answer):
        """The reply to the program's call of one of the tests' callables: called here, in the
        tests' process, with the program's arguments as the judge's own values."""
        try:
            number, args, named = answer["callback"], answer["args"], answer["kwargs"]
            function = callbacks[number] if type(number) is int and number >= 0 else None
            args = [_decode(a) for a in args]
            kwargs = {}
            for key, value in named:
                key = _decode(key)
                if type(key) is not str:
                    raise NotPlain("malformed")
                kwargs[key] = _decode(value)
        except (NotPlain, RecursionError, IndexError, KeyError, TypeError, ValueError):
            raise CandidateGone("the program's process broke the protocol") from None
        if function is None:
            raise CandidateGone("the program's process broke the protocol")
        try:
            result = function(*args, **kwargs)
        except CandidateGone:
            raise
        except BaseException as exc:  # noqa: BLE001 - the tests' callable raised: the program sees its class
            base = next((c for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c), Exception)
            return marshal.dumps(("raise", base.__name__, 0))
        try:
            return message("return", result)
        except NotPlain:
            return marshal.dumps(("raise", "TypeError", 0))

    def result_of(answer, label, args=(), kwargs=None, stop=False):
        """The value the program answered with, or raise what it raised (`stop`: a StopIteration
        ends the tests' iteration, for next(); elsewhere it is a RuntimeError, PEP 479)."""
        if answer is None:
            raise CandidateGone(f"the program's process ended during the tests ({ended()})")
        for given, moved in ((args, answer.get("args")), (kwargs or {}, answer.get("kwargs"))):
            for entry in moved if type(moved) is list else []:
                try:
                    key, value = entry
                    key = _decode(key) if given is kwargs else key
                    if (type(key) is int and 0 <= key < len(given)) or (type(key) is str and key in given):
                        _put_back(given[key], _decode(value))
                except (NotPlain, RecursionError, TypeError, ValueError):
                    raise CandidateGone("the program's process broke the protocol") from None
        if "value" in answer:
            try:
                return _decode(answer["value"])
            except (NotPlain, RecursionError):
                raise CandidateGone("the program's process broke the protocol") from None
        if "nonplain" in answer:
            error = TypeError(f"{label} returned a value that is not plain data")
            error.judge_says = str(error)
        elif "raised" in answer:
            cls = exception_class(answer) or Exception
            if cls in (StopIteration, StopAsyncIteration) and not stop:
                cls = RuntimeError  # PEP 479: it must not end the tests' own iteration
            try:
                error = cls("raised by the program")
            except Exception:  # noqa: BLE001 - a class that needs other arguments (UnicodeError's)
                error = Exception("raised by the program")
            error.from_program = exception_name(answer) or ""
        elif "exit" in answer:
            gone.append("sys.exit")
            raise CandidateGone("exited during the tests (sys.exit) before they completed")
        elif "memory" in answer:
            gone.append("memory limit exceeded")
            raise CandidateGone("memory limit exceeded")
        else:
            raise CandidateGone("the program's process broke the protocol")
        raise error

    def ask(kind, *parts, label, args=(), kwargs=None, stop=False):
        """Send one request about the program's names or objects; its value, or raise."""
        try:
            body = message(kind, *parts)
        except NotPlain:
            error = TypeError(f"an argument to {label} is not plain data")
            error.judge_says = str(error)
            raise error from None
        return result_of(answered(body), label, args, kwargs, stop)

    def remote(number, kind_name):
        # a class is named in feedback only where the tests name it: never text the program chose
        return Remote(number, kind_name if kind_name in wanted else None, ask)

    _handles.append(remote)  # functions the program returns come back held; its objects once `objects_on`

    def objects_come_back():
        if not objects_on:
            objects_on.append(True)  # the tests use the program's classes: its objects may come back

    def proxy_for(name, is_class=False):
        if is_class:
            return RemoteClass(name, ask, objects_come_back)

        def proxy(*args, **kwargs):
            return ask("call", name, args, kwargs, label=name, args=args, kwargs=kwargs)

        proxy.__name__ = proxy.__qualname__ = name
        return proxy

    namespace = {"__builtins__": builtins}
    wanted = _free_names(tests)
    prompt, stubs = secret.get("prompt"), None
    if prompt:
        stubs = _run_prompt(prompt, namespace)
        if stubs is None:
            namespace = {"__builtins__": builtins}
    for entry in ready["ready"]:
        try:
            name, kind = _decode(entry[0]), entry[1]
            if type(name) is not str or not name.isidentifier() or name not in wanted:
                continue
            if stubs is not None and name in namespace:
                continue  # the prompt's own helper
            if kind in ("function", "class"):
                namespace[name] = proxy_for(name, kind == "class")
            elif kind == "module" and _decode(entry[2]) in SAFE_MODULES:
                namespace[name] = __import__(_decode(entry[2]))  # a top-level module: SAFE_MODULES
            elif kind == "data":
                namespace[name] = _decode(entry[2])
        except (NotPlain, RecursionError, IndexError, KeyError, TypeError):
            continue  # a malformed entry binds nothing
    write_record(phase="tests")
    try:
        exec(tests_code, namespace)  # noqa: S102 - the task's own tests
    except MemoryError:
        finish(1, fail="memory", message="memory limit exceeded (in the tests)")
    except BaseException as exc:  # noqa: BLE001 - whatever ended the tests is a failure
        try:
            kind, message = _describe(exc, tests_lines, conditions)
        except BaseException:  # noqa: BLE001
            kind, message = "error", "the tests failed (their exception could not be described)"
        finish(1, fail=kind, message=message[:MESSAGE_LIMIT])
    finish(0, passed=True)


def _judge_cases(cases, call, ended, exception_name, at_line, write_record, finish):
    """Standard input/output: each case's input to a fresh run of the script, its output compared
    with the expected one (`same_output`). Passes only if every case does; with `partial`, every
    case runs and the score is the fraction that passed. The feedback names the first failing
    case, its input and expected output (the problem's, never the program's output)."""
    inputs, outputs, limit_s = cases["inputs"], cases["outputs"], cases["case_timeout_s"]
    tolerance, partial, total = cases["float_tolerance"], cases["partial"], len(inputs)
    passed, first = 0, None
    for number, (given, expected) in enumerate(zip(inputs, outputs), 1):
        start = time.monotonic()
        answer = call(("stdin", given, limit_s))
        if answer is not None and time.monotonic() - start > limit_s + CASE_OVERHEAD_S:
            answer = {"timeout": 1}  # timed here: the program can pause the candidate's clock, not ours
        if answer is None:
            kind, what = "exit", f"the program's process ended ({ended()})"
        elif "stdout" in answer:
            try:
                got = _decode(answer["stdout"])
            except (NotPlain, RecursionError):
                got = None
            if type(got) is str and same_output(got, expected, tolerance):
                passed += 1
                continue
            kind, what = "wrong", f"wrong answer (input {_excerpt(given)}, expected {_excerpt(expected)})"
        elif "timeout" in answer:
            kind, what = "timeout", f"timed out after {limit_s:g} s"
        elif "raised" in answer:
            raised = exception_name(answer) or "an exception of the program's own class"
            kind, what = "error", f"{raised} raised by the program{at_line(answer)}"
        elif "memory" in answer:
            kind, what = "memory", "memory limit exceeded"
        elif type(answer.get("exit")) is int:
            kind, what = "exit", f"exit status {answer['exit']}"
        elif answer.get("signal") in (signal.SIGKILL, signal.SIGXCPU, signal.SIGSEGV, signal.SIGXFSZ):
            sig = signal.Signals(answer["signal"])
            kind, what = "exit", "CPU time limit exceeded" if sig == signal.SIGXCPU else f"killed by {sig.name}"
        elif "overflow" in answer:
            kind, what = "exit", "output limit exceeded"
        else:
            kind, what = "protocol", "the program's process broke the sandbox's protocol"
        first = first or (kind, f"case {number} of {total}: {what}")
        if not partial or answer is None or kind == "protocol":
            break
    if first is None:
        finish(0, passed=True)
    if partial:
        write_record(score=passed / total)
    finish(1, fail=first[0], message=first[1][:MESSAGE_LIMIT])


def same_output(got, expected, tolerance):
    """The field's rule: the same whitespace-separated tokens; with a tolerance, two tokens that
    both read as numbers may differ by that much (absolute, or relative to the larger), except two
    integers, which must be equal (as the field's checkers compare them: a relative 1e-6 would
    take 1000000000001 for 1000000000000)."""
    import math

    mine, theirs = got.split(), expected.split()
    if len(mine) != len(theirs):
        return False
    for a, b in zip(mine, theirs):
        if a == b:
            continue
        if tolerance is None:
            return False
        if _integer(a) and _integer(b):
            if int(a) != int(b):
                return False
            continue
        try:
            x, y = float(a), float(b)
        except ValueError:
            return False
        if not math.isclose(x, y, rel_tol=tolerance, abs_tol=tolerance):
            return False
    return True


def _integer(token):
    """Whether a token is an integer as the field writes one (digits, an optional sign)."""
    digits = token[1:] if token[:1] in "+-" else token
    return digits.isdigit() and digits.isascii() and len(digits) <= 4300


def _excerpt(text, limit=60):
    """A case's text for feedback: its repr, cut to `limit` characters."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


class Remote:
    """The judge's stand-in for one of the program's objects, which stays in the candidate: the
    tests' attribute reads and writes, calls and operators on it are requests there, answered with
    the judge's own values (or further stand-ins). Only given once the tests have called one of
    the program's classes (`Pair(5, 24)`, `Solution()`): the tests then take its behaviour as the
    program defines it, as they would in one interpreter. Compared with anything but another
    stand-in it is unequal, unordered, so a program's object never decides a comparison with a
    value of the judge's (the always-equal object)."""

    __slots__ = ("_remote_id", "_remote_kind", "_remote_named", "_remote_ask")

    def __init__(self, number, kind, ask):
        """`kind`: the class's name where the tests name that class, else None ("object")."""
        object.__setattr__(self, "_remote_id", number)
        object.__setattr__(self, "_remote_kind", kind if type(kind) is str else "object")
        object.__setattr__(self, "_remote_named", type(kind) is str)
        object.__setattr__(self, "_remote_ask", ask)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # the interpreter's own look-ups (copy, pickle): none of the program's
        label = f"{self._remote_kind}.{name}"
        return self._remote_ask("get", self._remote_id, name, label=label)

    def __setattr__(self, name, value):
        self._remote_ask("set", self._remote_id, name, value, label=f"{self._remote_kind}.{name}")

    def __call__(self, *args, **kwargs):
        label = self._remote_kind
        return self._remote_ask("callobj", self._remote_id, args, kwargs, label=label, args=args, kwargs=kwargs)

    def __iter__(self):
        return _operation("iter", self)

    def __next__(self):
        return _operation("next", self, stop=True)

    def __contains__(self, item):
        """Membership as the program defines it for a class the tests name (`"a" in trie`);
        otherwise Python's own rule over the object's items, compared here, so that an object
        the program returned cannot answer yes to everything (as it cannot equal everything)."""
        if self._remote_named:
            return bool(_operation("contains", self, item))
        return any(element is item or element == item for element in self)


class RemoteClass:
    """The judge's stand-in for one of the program's classes that the tests name: calling it makes
    an object there (`Vector(1, 2)`), its attributes are read there (static and class methods, class
    attributes: `Vector.zero()`, `Vector.dims`), and `isinstance(x, Vector)` asks there about one of
    its objects (a value of the judge's is never an instance of the program's class)."""

    __slots__ = ("_class_name", "_class_ask", "_class_used")

    def __init__(self, name, ask, used):
        object.__setattr__(self, "_class_name", name)
        object.__setattr__(self, "_class_ask", ask)
        object.__setattr__(self, "_class_used", used)

    def __call__(self, *args, **kwargs):
        self._class_used()
        name = self._class_name
        return self._class_ask("call", name, args, kwargs, label=name, args=args, kwargs=kwargs)

    def __getattr__(self, attribute):
        if attribute == "__name__":
            return self._class_name
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        self._class_used()
        return self._class_ask("classget", self._class_name, attribute, label=f"{self._class_name}.{attribute}")

    def __instancecheck__(self, instance):
        if type(instance) is not Remote:
            return False
        return (
            self._class_ask("isinstance", instance, self._class_name, label=f"isinstance(..., {self._class_name})")
            is True
        )


def _operation(name, *operands, stop=False):
    """Python's operator `name` applied to `operands` in the candidate (one of them a Remote).
    A value of the tests' goes with it only to an object of a class the tests name: an object the
    program returned on its own never sees what the tests hold (`abs(r - expected)` would hand
    it the expected value)."""
    first = next(o for o in operands if type(o) is Remote)
    label = f"{first._remote_kind} ({name})"
    if any(type(o) is Remote and not o._remote_named for o in operands) and any(
        type(o) is not Remote for o in operands
    ):
        error = TypeError(f"{label}: a value of the tests' is not given to an object of a class they do not name")
        error.judge_says = str(error)
        raise error
    return first._remote_ask("op", name, operands, label=label, stop=stop)


def _add_operators():
    def comparison(name):
        def compare(self, other):
            return _operation(name, self, other) if type(other) is Remote else NotImplemented

        return compare

    def forward(name):
        return lambda self, *rest: _operation(name, self, *rest)

    def reflected(name):
        return lambda self, other: _operation(name, other, self)

    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(Remote, f"__{name}__", comparison(name))
    for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "lshift", "rshift"):
        setattr(Remote, f"__{name}__", forward(name))
        setattr(Remote, f"__r{name}__", reflected(name))
    for name in ("and", "or", "xor"):
        setattr(Remote, f"__{name}__", forward(name + "_"))
        setattr(Remote, f"__r{name}__", reflected(name + "_"))
    for name in ("neg", "pos", "invert", "abs", "len", "hash", "int", "float", "index", "str", "repr", "round"):
        setattr(Remote, f"__{name}__", forward(name))
    Remote.__format__ = lambda self, spec: str(self) if spec == "" else _operation("format", self, spec)
    for name in ("getitem", "setitem", "delitem"):
        setattr(Remote, f"__{name}__", forward(name))
    Remote.__bool__ = forward("truth")


_add_operators()
_handles = []  # [a Remote's maker] once the run's tests have called one of the program's classes


ANSWER_LIMIT = 16 << 20  # bytes of one answer from the candidate
CANDIDATE_EXIT_S = 1.0  # after the verdict, how long the candidate may take to flush its output and exit
MAX_DEPTH = 64  # nesting of one value


class NotPlain(Exception):
    """Data outside the canonical form (`candidate.py` defines it)."""


def _parse_answer(line):
    """An answer line as a dict, or None (too long, not JSON, nested deeper than the JSON parser
    allows, not an object): the candidate wrote it."""
    if not line or len(line) > ANSWER_LIMIT:
        return None
    try:
        answer = json.loads(line)
    except (ValueError, RecursionError, MemoryError):
        return None
    return answer if type(answer) is dict else None


def _decode(data, depth=0):
    """The value of a canonical form (`candidate.py`), or NotPlain: a strict schema."""
    if depth > MAX_DEPTH:
        raise NotPlain("too deep")
    if data is None or type(data) is bool:
        return data
    if type(data) is not list or len(data) != 2 or type(data[0]) is not str:
        raise NotPlain("malformed")
    tag, body = data
    try:
        if tag == "u" and type(body) is str:
            return bytes.fromhex(body).decode("utf-8", "surrogatepass")
        if tag == "i" and type(body) is str and len(body) <= 4300:
            return int(body)
        if tag == "f" and type(body) is str:
            return float.fromhex(body)
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag in ("l", "t", "s", "z") and type(body) is list:
            items = [_decode(item, depth + 1) for item in body]
            return {"l": list, "t": tuple, "s": set, "z": frozenset}[tag](items)
        if tag == "d" and type(body) is list:
            return _decode_pairs(body, depth)
        if tag in STANDARD:
            return _decode_standard(tag, body, depth)
        if tag == "h" and _handles and type(body) is list and len(body) == 2 and type(body[0]) is int:
            return _handles[0](body[0], _decode(body[1], depth + 1))
    except (TypeError, ValueError, OverflowError, UnicodeError, ArithmeticError) as exc:  # unhashable keys, bad hex
        raise NotPlain("malformed") from exc
    raise NotPlain("malformed")


def _standard_marker(value, kind):
    """(TAG, BODY) for a standard-library value of the tests' that marshal cannot carry, which the
    candidate rebuilds (`candidate._rebuilt`); None for anything else. An iterator of the tests'
    (a generator expression, map, filter, zip) is read here and goes as its items."""
    import collections
    import decimal
    import fractions

    if kind is range:
        return "r", (value.start, value.stop, value.step)
    if kind is fractions.Fraction:
        return "q", (value.numerator, value.denominator)
    if kind is decimal.Decimal:
        return "m", str(value)
    if kind is collections.deque:
        return "Q", (value.maxlen, list(value))
    fields = getattr(kind, "_fields", None)
    if isinstance(value, tuple) and type(fields) is tuple and all(type(f) is str for f in fields):
        return "n", (kind.__name__, list(fields), list(value))
    if iter(value) is value if hasattr(value, "__next__") else False:
        return "g", list(value)
    return None


def _decode_pairs(body, depth):
    if type(body) is not list:
        raise NotPlain("malformed")
    out = {}
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise NotPlain("malformed")
        out[_decode(pair[0], depth + 1)] = _decode(pair[1], depth + 1)
    return out


def _decode_items(body, depth):
    if type(body) is not list:
        raise NotPlain("malformed")
    return [_decode(item, depth + 1) for item in body]


STANDARD = frozenset("c y r K V I C O D Q q m n g".split())
"""Tags of the standard library's values (`candidate._standard`), rebuilt here as the judge's own."""
_named_tuples = {}  # (name, fields) -> the judge's class: one a shape, so two values' types compare equal


def _decode_standard(tag, body, depth):
    """A standard-library value from its tagged form: an object of the judge's own classes."""
    import builtins
    import collections

    if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) is str for x in body):
        return complex(float.fromhex(body[0]), float.fromhex(body[1]))
    if tag == "y" and type(body) is str:
        return bytearray.fromhex(body)
    if tag == "r" and type(body) is list and len(body) == 3:
        return range(*[_integer_value(x, depth) for x in body])
    if tag == "K":
        return dict.fromkeys(_decode_items(body, depth)).keys()
    if tag == "V":
        return dict(enumerate(_decode_items(body, depth))).values()
    if tag == "I":
        return _decode_pairs(body, depth).items()
    if tag == "C":
        return collections.Counter(_decode_pairs(body, depth))
    if tag == "O":
        return collections.OrderedDict(_decode_pairs(body, depth))
    if tag == "D" and type(body) is list and len(body) == 2:
        factory = None if body[0] is None else _decode(body[0], depth + 1)
        if type(factory) is str and factory in FACTORIES:
            factory = getattr(builtins, factory)
        elif factory is not None and type(factory) is not Remote:  # a held factory is called there
            raise NotPlain("malformed")
        return collections.defaultdict(factory, _decode_pairs(body[1], depth))
    if tag == "Q" and type(body) is list and len(body) == 2:
        maxlen = None if body[0] is None else _integer_value(body[0], depth)
        return collections.deque(_decode_items(body[1], depth), maxlen)
    if tag == "q" and type(body) is list and len(body) == 2:
        import fractions

        return fractions.Fraction(_integer_value(body[0], depth), _integer_value(body[1], depth))
    if tag == "m":
        import decimal

        text = _decode(body, depth + 1)
        if type(text) is not str or len(text) > 4300:
            raise NotPlain("malformed")
        return decimal.Decimal(text)
    if tag == "n" and type(body) is list and len(body) in (3, 4):
        name, fields = _decode(body[0], depth + 1), _decode_items(body[1], depth)
        items = _decode_items(body[2], depth)
        held = _decode(body[3], depth + 1) if len(body) == 4 else None
        if held is not None and type(held) is not Remote:
            raise NotPlain("malformed")
        shape = (name, tuple(fields), held is not None)
        if shape not in _named_tuples:
            if len(_named_tuples) > 256:
                raise NotPlain("too many kinds of named tuple")
            made = collections.namedtuple(name, fields)  # checks the names itself
            _named_tuples[shape] = type(name, (made,), {"__getattr__": _held_attribute}) if held else made
        value = _named_tuples[shape](*items)
        if held is not None:
            value._held = held
        return value
    if tag == "g":
        return iter(_decode_items(body, depth))
    raise NotPlain("malformed")


def _held_attribute(self, name):
    """A named tuple's attribute that is not a field: the program's method, asked of its object."""
    if name.startswith("_"):
        raise AttributeError(name)
    return getattr(self.__dict__["_held"], name)


def _integer_value(data, depth):
    value = _decode(data, depth + 1)
    if type(value) is not int:
        raise NotPlain("malformed")
    return value


def _read_answer(fd, pending, limit):
    """The next line from `fd` without its newline; None at EOF, NotPlain past `limit` bytes."""
    while b"\n" not in pending:
        if len(pending) > limit:
            raise NotPlain("an answer past the size bound")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line


SAFE_MODULES = frozenset(
    "math cmath re string collections itertools functools operator heapq bisect statistics fractions decimal"
    " random typing hashlib copy datetime json array struct numbers textwrap unicodedata".split()
)
"""Standard-library modules the judge binds for a name the program bound to one (the tests may
use a module the prompt imported, `math.fabs`): imported by the judge itself, never the program's
object; any other module name is left unbound."""
