"""Time suites' warm starts from empty caches: each task's problems (ALFWorld: its games and their
demonstrations) and the warm start's build, one suite after the other, then list the files of the
weights built so that two builds (two commits) can be compared byte for byte.

    python scripts/warm_start_bench.py --out /tmp/ws-new benchmarks.yaml:math benchmarks.yaml:code configs/zoo.yaml:zoo-alfworld

Only a suite's name, task and model are read, so code from an earlier commit that lacks later
settings can build the same suites: `PYTHONPATH=<a checkout of it> python scripts/warm_start_bench.py ...`
(the script's directory is not put on the path, so the checkout's code is what runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import yaml

from harness.config import load_benchmark
from harness.start import StartingWeights


def suites_alone(specs: list[str], out: Path) -> Path:
    """A config of the named suites (CONFIG:SUITE), caches under `out`; what else a config must
    have is filled with the smallest valid values."""
    suites = []
    for spec in specs:
        config, name = spec.rsplit(":", 1)
        raw = yaml.safe_load(Path(config).read_text())
        suite = next(s for s in raw["suites"] if s["name"] == name)
        suites.append(
            {
                "name": name,
                "task": suite["task"],  # as written (it is in the key); relative paths land under `out`
                "model": suite["model"],
                "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
                "seeds": [0],
                "schedule": {"steps": 1, "prompts_per_step": 1},
            }
        )
    out.mkdir(parents=True, exist_ok=True)
    config = out / "warm-starts.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": ".cache", "suites": suites}, sort_keys=False))
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suites", nargs="+", help="CONFIG:SUITE, built in this order")
    parser.add_argument("--out", type=Path, required=True, help="an empty folder: the config and its caches")
    args = parser.parse_args()
    benchmark = load_benchmark(suites_alone(args.suites, args.out))
    for suite in benchmark.suites:
        started = time.perf_counter()
        task = suite.task.build()
        task.train_problems(), task.eval_problems()
        problems = time.perf_counter()
        weights = StartingWeights.of(suite).build(task, benchmark.cache_dir)
        built = time.perf_counter()
        files = {f.name: hashlib.sha256(f.read_bytes()).hexdigest()[:16] for f in sorted(weights.iterdir())}
        print(
            json.dumps(
                {
                    "suite": suite.name,
                    "problems_s": round(problems - started, 1),
                    "warm_start_s": round(built - problems, 1),
                    "key": weights.name,
                    "sha256": {name: digest for name, digest in files.items() if name != "recipe.json"},
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
