"""Starting weights that ship with the project (weights/<key>/): the default benchmark's warm
starts, built once and checked by their files' sha256 before use, so that a first command skips
its warm starts and starts from the same weights on every machine. A shipped folder is a cache
entry (harness/models.py) plus `shipped.json`, the sha256 of each of its files;
`python maintenance/ship_weights.py` writes them from a cache, and `HARNESS_BUILD_WEIGHTS=1` builds
the weights here instead."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "weights"
MANIFEST = "shipped.json"


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file of a folder but the manifest, by name."""
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(folder.iterdir())
        if f.is_file() and f.name != MANIFEST
    }


def shipped(key: str) -> Path | None:
    """The shipped folder of these starting weights, or None: none ships, or the user asked to
    build them (HARNESS_BUILD_WEIGHTS=1)."""
    folder = SHIPPED / key
    if os.environ.get("HARNESS_BUILD_WEIGHTS", "0") not in ("", "0") or not (folder / MANIFEST).is_file():
        return None
    return folder


def check(folder: Path) -> None:
    """Raise if a shipped folder's files are not those its manifest names, byte for byte."""
    expected = json.loads((folder / MANIFEST).read_text())
    found = file_digests(folder)
    if found != expected:
        bad = sorted(n for n in expected.keys() | found.keys() if expected.get(n) != found.get(n))
        raise ValueError(
            f"{folder}: shipped starting weights changed since they were shipped ({', '.join(bad)}); restore them "
            "with git, or build them here with HARNESS_BUILD_WEIGHTS=1"
        )


def copy_into(folder: Path, staging: Path) -> None:
    """The shipped weights, checked, copied to `staging` (without their manifest)."""
    check(folder)
    shutil.copytree(folder, staging, ignore=shutil.ignore_patterns(MANIFEST))


def ship(entry: Path, into: Path = SHIPPED) -> Path:
    """A cache entry copied to the shipped folder under its key, with its manifest."""
    target = into / entry.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(entry, target)
    (target / MANIFEST).write_text(json.dumps(file_digests(target), indent=2) + "\n")
    return target
