"""Ship a benchmark's starting weights with the project (weights/<key>/, harness/shipped.py), or
check that those shipped are the ones its config builds today.

    python maintenance/ship_weights.py [--config benchmarks.yaml] [--cache .cache]   # copy from the cache
    python maintenance/ship_weights.py --check                                       # what tests run

Run the benchmark first (it builds the weights into the cache), then this; commit weights/ with
the results made from them. When the recipe or the lock moves, the keys or the builds change:
build again (HARNESS_BUILD_WEIGHTS=1 python -m harness run benchmarks.yaml), ship again, and
republish. Folders of keys the config no longer builds are removed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.config import load_benchmark  # noqa: E402
from harness.shipped import MANIFEST, SHIPPED, check, ship  # noqa: E402
from harness.start import StartingWeights  # noqa: E402


def keys(config: Path) -> dict[str, str]:
    """The starting weights' key of each suite of a benchmark that builds its own, by suite."""
    found = {}
    for suite in load_benchmark(config).suites:
        if key := StartingWeights.of(suite).key:
            found[suite.name] = key
    return found


def problems(config: Path, into: Path = SHIPPED) -> list[str]:
    """What is wrong with the shipped weights for this config: a suite's key not shipped, a
    folder whose files changed, one no suite builds."""
    wanted, found = keys(config), []
    for suite, key in wanted.items():
        if not (into / key / MANIFEST).is_file():
            found.append(f"{suite}: its starting weights {key} are not shipped")
            continue
        try:
            check(into / key)
        except ValueError as error:
            found.append(str(error))
    extra = (
        sorted(p.name for p in into.iterdir() if p.is_dir() and p.name not in wanted.values()) if into.is_dir() else []
    )
    return found + [f"{key}: shipped, but no suite of {config} builds it" for key in extra]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "benchmarks.yaml")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache", help="the cache the weights were built in")
    parser.add_argument("--check", action="store_true", help="check, copy nothing")
    args = parser.parse_args(argv)
    if not args.check:
        wanted = keys(args.config)
        for suite, key in wanted.items():
            entry = args.cache / "policies" / key
            if not (entry / "recipe.json").is_file():
                print(f"{suite}: {entry} is not built; run the benchmark first", file=sys.stderr)
                return 2
            built = json.loads((entry / "recipe.json").read_text()).get("built_with")
            print(f"{suite}: shipped {ship(entry)} (built with {built})")
        for folder in SHIPPED.iterdir():
            if folder.is_dir() and folder.name not in wanted.values():
                shutil.rmtree(folder)
                print(f"removed {folder}: no suite builds it")
    wrong = problems(args.config)
    for line in wrong:
        print(line, file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
