"""What a run's numbers came from beyond its settings: the content of its starting weights and of
its task's data, the CPU kernels and device it ran on, and the lock its packages came from. A run
records this when it starts (`provenance.json`) and in its summary (`run.json`); resuming, adding
runs to a published suite and pairing runs in a leaderboard compare it."""

from __future__ import annotations

import hashlib
import re
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from rollout import kernels
from tasks.base import Task

LOCK = Path(__file__).resolve().parent.parent / "constraints.txt"
"""The lock the README's commands install through (absent from an installed copy of the package)."""


def data_digest(task: Task) -> str:
    """sha256 (16 hex digits) of the task's problems, training and held-out, as `Task.content`
    gives each (a game file's bytes, say, in place of its path)."""
    h = hashlib.sha256()
    for split in (task.train_problems(), task.eval_problems()):
        h.update(b"split")
        for problem in split:
            h.update(repr(task.content(problem)).encode())
    return h.hexdigest()[:16]


@cache
def lock() -> dict[str, str | list[str] | None]:
    """The lock's digest, and the packages installed here at another release than it names
    (`differs`: `name lock -> installed`; empty when this environment is the lock's)."""
    if not LOCK.exists():
        return {"digest": None, "differs": []}
    text = LOCK.read_text()
    differs = []
    for name, pinned in pins(text).items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue  # an extra not installed here
        if installed.split("+")[0] != pinned:
            differs.append(f"{name} {pinned} -> {installed}")
    return {"digest": hashlib.sha256(text.encode()).hexdigest()[:16], "differs": differs}


def pins(text: str) -> dict[str, str]:
    """`name==version` lines of a lock, by normalised name (PEP 503: `Foo_Bar` is `foo-bar`)."""
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, _, pinned = line.partition("==")
            out[re.sub(r"[-_.]+", "-", name.strip()).lower()] = pinned.strip()
    return out


def device() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return "cpu"


def environment() -> dict:
    """The part of a run's provenance that its machine and installation decide."""
    return {"device": device(), "cpu_kernels": kernels.level(), "lock": lock()}


def environment_key(record: dict) -> tuple:
    """What two runs' environments must share for their records to agree bit for bit: the lock,
    the packages that differ from it, the device and the kernel level (portable kernels agree on
    every CPU and thread count; native ones only on the same CPU and thread count)."""
    env = record.get("environment") or {}
    cpu = env.get("cpu_kernels") or {}
    native = () if cpu.get("mode") == "portable" else (cpu.get("aten"), cpu.get("cpu"), cpu.get("threads"))
    lock_ = env.get("lock") or {}
    return (lock_.get("digest"), tuple(lock_.get("differs") or ()), env.get("device"), cpu.get("mode"), native)


def describe(record: dict) -> str:
    env = record.get("environment") or {}
    cpu, lock_ = env.get("cpu_kernels") or {}, env.get("lock") or {}
    differs = lock_.get("differs") or []
    return (
        f"{env.get('device', '?')}, {cpu.get('mode', '?')} kernels ({cpu.get('aten', '?')}, "
        f"{cpu.get('threads', '?')} threads, {cpu.get('cpu', '?')}), lock {lock_.get('digest') or 'none'}"
        + (f" with {len(differs)} packages off it" if differs else "")
    )


class OtherWeights(ValueError):
    """Runs that cannot be compared or continued: their starting weights differ in content."""


def check_same_start(records: list[tuple[str, dict]], what: str, unrecorded_pass: bool = True) -> None:
    """Refuse `records` ((run name, its summary or provenance)) that started from different weights,
    naming both digests. Runs recorded before digests were kept have none: they pass beside runs
    that have one unless `unrecorded_pass` is False (adding to published runs: the same recipe may
    have built other weights since, on other kernels or releases, and nothing can show otherwise)."""
    digests, unrecorded = {}, []
    for name, record in records:
        digest = record.get("starting_weights_digest")
        if digest is None:
            unrecorded.append(name)
        else:
            digests.setdefault(digest, name)
    if len(digests) > 1:
        (a, run_a), (b, run_b) = list(digests.items())[:2]
        raise OtherWeights(
            f"{what}: {run_a} started from weights {a}, {run_b} from {b}: runs from different starting "
            "weights never pair or merge (the same recipe built on other kernels or releases gives other "
            "weights: rollout/kernels.py)"
        )
    if digests and unrecorded and not unrecorded_pass:
        ((digest, name),) = digests.items()
        raise OtherWeights(
            f"{what}: {name} started from weights {digest}; {', '.join(unrecorded)} recorded no digest of its "
            "starting weights (made before digests were kept), so nothing shows they are the same: publish "
            "the whole suite again, or into another folder"
        )
