"""The same records on any x86-64 CPU: a suite run under simulated CPUs and thread counts, with the
portable kernels (rollout/kernels.py) and with the machine's own, each from an empty cache. Prints a
markdown table: each variant's starting-weights digest, the digest of its records (every metric
but times and memory), and its warm-start and training seconds (the portable kernels' cost).

    python scripts/cpu_matrix.py [--config configs/cpu-matrix.yaml] [--out docs/cpu-matrix.md]

A simulated CPU is the environment a smaller one would give: ATen's kernels at AVX2
(ATEN_CPU_CAPABILITY), MKL's at AVX2 (MKL_ENABLE_INSTRUCTIONS), oneDNN's at AVX2
(ONEDNN_MAX_CPU_ISA). Other vendors and cache sizes cannot be simulated here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.records import MEASURED  # noqa: E402  (what differs run to run on one machine)

AVX2_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
AVX512_CPU = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512"}
VARIANTS = [  # (kernels, simulated CPU, its environment, threads)
    ("native", "this CPU", {}, 1),
    ("native", "this CPU", {}, 2),
    ("native", "this CPU", {}, 4),
    ("native", "AVX2 only", AVX2_CPU, 2),
    ("portable", "this CPU", {}, 1),
    ("portable", "this CPU", {}, 2),
    ("portable", "this CPU", {}, 4),
    ("portable", "AVX2 only", AVX2_CPU, 2),
    ("portable", "AVX2 only", AVX2_CPU, 4),
    ("portable", "AVX-512 asked for", AVX512_CPU, 2),
    ("portable", "AVX-512 asked for", AVX512_CPU, 4),
]


def records_digest(results: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(results.glob("*/*/metrics.parquet")):
        frame = pl.read_parquet(path)
        frame = frame.select(c for c in frame.columns if not c.startswith(MEASURED))
        h.update(path.parent.name.encode() + repr(frame.rows()).encode())  # repr: NaN reads alike
    for path in sorted(results.glob("*/*/eval.parquet")):
        h.update(repr(pl.read_parquet(path).rows()).encode())
    return h.hexdigest()[:16]


def run_variant(config: dict, kernels: str, env: dict, threads: int) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="cpu-matrix-"))
    path = scratch / "config.yaml"
    path.write_text(yaml.safe_dump({**config, "cache_dir": str(scratch / "cache")}))
    environ = {k: v for k, v in os.environ.items() if k not in (*AVX2_CPU, *AVX512_CPU, "MKL_CBWR")}
    environ |= {**env, "HARNESS_CPU_KERNELS": kernels}
    # torch caps OMP_NUM_THREADS at the cores; set_num_threads does not (and runs no kernel before pin())
    command = (
        f"import sys, torch; torch.set_num_threads({threads}); from harness.__main__ import main; sys.exit(main())"
    )
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", command, "run", str(path), "--results", str(scratch / "runs")],
        env=environ,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    infos = [json.loads(p.read_text()) for p in sorted((scratch / "runs").glob("*/*/run.json"))]
    (recipe,) = [json.loads(p.read_text()) for p in (scratch / "cache" / "policies").glob("*/recipe.json")]
    level = infos[0]["environment"]["cpu_kernels"]
    return {
        "kernels": kernels,
        "level": f"{level['mode']}: ATen {level['aten']}, MKL_CBWR {level['mkl_cbwr']}",
        "threads": level["threads"],
        "weights": infos[0]["starting_weights_digest"],
        "records": records_digest(scratch / "runs"),
        "warm_start_s": round(recipe["report"]["seconds"], 1),
        "training_s": round(sum(i["wall_clock_s"] for i in infos), 1),
        "total_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=Path("configs/cpu-matrix.yaml"))
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    rows = []
    for kernels, cpu, env, threads in VARIANTS:
        row = {"simulated CPU": cpu, **run_variant(config, kernels, env, threads)}
        print(row, flush=True)
        rows.append(row)
    table = pl.DataFrame(rows)
    header = "| " + " | ".join(table.columns) + " |\n|" + "---|" * len(table.columns) + "\n"
    text = header + "".join("| " + " | ".join(str(v) for v in row) + " |\n" for row in table.iter_rows())
    command = f"python scripts/cpu_matrix.py --config {args.config}"
    from rollout.kernels import cpu_name

    text = f"`{command}` on {cpu_name()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}:\n\n{text}"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
