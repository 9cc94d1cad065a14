"""The child process that holds reasoning-gym's generators: it draws their problems and runs their
scorers, so that neither runs in the harness's process.

Why a process of its own:
- several generators make other problems under another PYTHONHASHSEED (the parent starts this one
  with a fixed hash seed), and one reseeds numpy's global generator;
- several scorers `eval` the policy's answer (n_queens, spiral_matrix, binary_matrix,
  string_insertion; countdown and puzzle24 through sympy's parse_expr). Before its first score
  this process confines itself: no new process or program, no socket, no file opened for writing,
  made, removed or changed (modes, times, owners), no signal to another process, a cap on its
  memory (`confine`). Those scorers read answers through tasks/reasoning_gym/answers.py, which
  runs none of an answer's code. The parent kills it when one answer takes too long
  (tasks/reasoning_gym/task.py).

Protocol: one JSON object a line each way. Requests: {"op": "draw", "g": k, "start": i, "count": n}
-> {"items": [[question, answer], ...]}; {"op": "score", "items": [[k, i, answer], ...]} -> one
{"score": x} line per item, as each is scored (so the parent knows which answer hung);
{"op": "probe", "g": k, "pairs": [[i, j], ...]} -> {"right": [...], "empty": [...], "other": [...]}:
each problem i scored with its own answer, an empty one and problem j's. The first line the parent
sends is the setup, {"generators": [{"name", "config", "level"}, ...], "seeds": [...], "size": n};
it is answered {"ok": true} or {"error": "..."}.

    python -m tasks.reasoning_gym.worker    (started by ScorerProcess, never by hand)
"""

from __future__ import annotations

import errno
import json
import os
import resource
import sys

from tasks.reasoning_gym.answers import read_safely

MEMORY_LIMIT = 4 << 30
"""Address space the confined scorer may hold (an answer that builds a huge value fails there)."""
WRITE_FLAGS = (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND)
"""An `open` with any of these is refused: reading stays allowed (imports are lazy)."""
PROCESSES = ("execve", "execveat", "fork", "vfork")
NETWORK = ("socket", "socketpair", "connect", "bind")
FILES = ("unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat")
FILES += ("symlink", "symlinkat", "chmod", "fchmodat", "chown", "fchownat", "truncate", "creat")
FILES += ("mknod", "mknodat", "fchmod", "fchmodat2", "fchown", "lchown", "ftruncate")
FILES += ("utime", "utimes", "utimensat", "futimesat", "setxattr", "lsetxattr", "fsetxattr")
FILES += ("removexattr", "lremovexattr", "fremovexattr")
CLONE_THREAD = 0x00010000


def build(spec: dict, seed: int, size: int):
    """A generator's dataset from its name, config and optional curriculum level."""
    from importlib.metadata import version

    from reasoning_gym.factory import DATASETS, create_curriculum, has_curriculum

    name = spec["name"]
    if name not in DATASETS:  # the package's own __version__ lags its release (0.1.19 in 0.1.25)
        raise ValueError(f"no generator named {name!r} in reasoning-gym {version('reasoning-gym')}")
    dataset_cls, config_cls = DATASETS[name]
    config = dict(spec.get("config") or {})
    if spec.get("level") is not None:  # the curriculum's config at that level, then the named fields over it
        if not has_curriculum(name):
            raise ValueError(f"level: {name} has no curriculum")
        curriculum = create_curriculum(name)
        curriculum.set_global_level(spec["level"])
        config = {**vars(curriculum.generate_configuration()), **config}
    config.update(seed=seed, size=size)
    try:
        made = config_cls(**config)
    except TypeError as error:
        raise ValueError(f"config: {error}") from None
    if hasattr(made, "validate"):
        try:
            made.validate()
        except AssertionError as error:
            raise ValueError(f"config: {error or 'refused by its validate()'}") from None
    return dataset_cls(config=made)


def confine() -> None:
    """No process, program, socket, write or signal to another process from here on (seccomp, refused
    with EPERM), and a memory cap. Where libseccomp is missing, only the cap applies."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    try:
        import pyseccomp as seccomp
    except ImportError:
        return
    from tasks.sandbox.syscall_filter import REFUSED

    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    refuse = seccomp.ERRNO(errno.EPERM)

    def add(action, name: str, *args) -> None:
        try:
            rules.add_rule(action, name, *args)
        except (ValueError, RuntimeError, OSError):  # a call this libseccomp or architecture lacks
            pass

    for name in (*REFUSED, *PROCESSES, *NETWORK, *FILES):
        add(refuse, name)
    add(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))  # threads only
    add(seccomp.ERRNO(errno.ENOSYS), "clone3")  # libc falls back to clone, whose flags a filter reads
    add(seccomp.ERRNO(errno.ENOSYS), "openat2")  # its flags sit in a struct: Python falls back to openat
    for name, position in (("open", 1), ("openat", 2)):
        for flag in WRITE_FLAGS:
            add(refuse, name, seccomp.Arg(position, seccomp.MASKED_EQ, flag, flag))
    for name in ("kill", "tkill", "tgkill"):
        add(refuse, name, seccomp.Arg(0, seccomp.NE, os.getpid()))
    rules.load()


def main() -> None:
    sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)  # replies; a generator's print goes to stderr
    os.dup2(2, 1)
    reply = lambda obj: sys.stdout.write(json.dumps(obj) + "\n")  # noqa: E731
    setup = json.loads(sys.stdin.readline())
    datasets = []
    for k, spec in enumerate(setup["generators"]):
        try:
            datasets.append(build(spec, setup["seeds"][k], setup["size"]))
        except Exception as error:  # named for the parent, which adds the field
            reply({"error": f"generators[{k}] ({spec['name']}): {error}"})
            return
    reply({"ok": True})
    entries: dict[tuple[int, int], dict] = {}

    def entry(k: int, i: int) -> dict:
        if (k, i) not in entries:
            entries[k, i] = datasets[k][i]
        return entries[k, i]

    def score(k: int, i: int, answer: str) -> float:
        dataset = datasets[k]
        scorer = (type(dataset).score_answer.__globals__, vars(sys.modules[type(dataset).__module__]))
        try:
            item = entry(k, i)
            with read_safely(*scorer):
                return float(dataset.score_answer(answer, entry=item))
        except Exception:  # noqa: BLE001 - an answer the scorer cannot read scores nothing, as the library's own do
            return 0.0

    confined = False
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "draw":
            k, start = request["g"], request["start"]
            items = [entry(k, i) for i in range(start, start + request["count"])]
            reply({"items": [[e["question"], str(e["answer"])] for e in items]})
        elif request["op"] == "probe":
            k, pairs = request["g"], request["pairs"]
            right = [score(k, i, str(entry(k, i)["answer"])) for i, _ in pairs]
            empty = [score(k, i, "") for i, _ in pairs]
            other = [score(k, i, str(entry(k, j)["answer"])) for i, j in pairs]
            reply({"right": right, "empty": empty, "other": other})
        elif request["op"] == "score":
            if not confined:
                confine()
                confined = True
            for k, i, answer in request["items"]:
                reply({"score": score(k, i, answer)})


if __name__ == "__main__":
    main()
