"""Step time, generated tokens per second and peak memory per algorithm on a Qwen3-0.6B-shaped
model with random weights: the one short script to run when a GPU machine is lent (issue #8).
Nothing is downloaded: the model is built from its shape (Qwen3-0.6B's published config), and its
tokenizer covers every one of the 151,936 ids (the printable characters, then filler tokens), so
whatever a random model samples decodes.

    python scripts/gpu_bench.py                          # 0.6B shape, bf16-mixed on a GPU, 3 measured steps
    python scripts/gpu_bench.py --shape tiny --steps 1   # the same path at a CPU-sized shape
    python scripts/gpu_bench.py --devices 2 --strategy fsdp --precision bf16-mixed   # sharded
    python scripts/gpu_bench.py --devices 2 --strategy fsdp --cpu-offload            # shards on the host
    python scripts/gpu_bench.py --backend vllm                                       # sampled by vLLM

One device runs in this process (`harness bench`, each stage timed). More than one runs the
benchmark as `python -m harness run` does (Lightning launches the other processes) and reports
each step's time from the records, the peak memory of the fullest process and the estimate the
run printed before it started.

A random policy never writes a stop token, so every rollout runs to `--max-new-tokens`: the work
of a step is fixed. The verifier rewards nothing, so GRPO's groups carry no signal; its update
still runs a backward pass over every rollout (the loss is zero, not skipped). The table goes to
results/gpu/<shape>-<device>[-<strategy>N][-vllm]-<precision>.md with this command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl
import torch
import yaml

from algorithms.base import STAGES
from harness.bench import run_bench, write_report
from harness.config import load_benchmark
from harness.tiny import TinyConfig, build_model, build_tokenizer

SHAPES = {
    # Qwen3-0.6B: 28 layers, hidden 1024, 16 query heads of 128, 8 key-value heads, tied embeddings
    "0.6b": (
        TinyConfig(
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=40960,
        ),
        151_936,
    ),
    "tiny": (TinyConfig(), 512),
}


def write_model(shape: str, directory: Path) -> None:
    config, vocabulary = SHAPES[shape]
    tokenizer = build_tokenizer(fill_to=vocabulary)
    model = build_model(config, tokenizer)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def suite(model_dir: Path, args) -> dict:
    fsdp = args.strategy == "fsdp"
    algorithms = {
        "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 8}},
        "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 4}},
        "ppo": {
            "class_path": "algorithms.ppo.PPO",
            # under FSDP the critic is a probe on the policy's features (config.py says why)
            "init_args": {"gamma": 1.0, "lam": 0.95, "value_coef": 0.1, "value_trunk_gradient": not fsdp},
        },
    }
    return {
        "name": f"math-{args.shape}",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 2000, "eval_size": 10}},
        "model": {"preset": None, "path": str(model_dir), "warm_start": None},
        "algorithms": {name: algorithms[name] for name in args.algorithms},
        "seeds": [0],
        "schedule": {"steps": args.steps + 1, "prompts_per_step": args.prompts},
        "sampling": {"temperature": 1.0, "max_new_tokens": args.max_new_tokens, "backend": args.backend},
        "optim": {"lr": 1.0e-6},
        "update": {"minibatches": 1},
        "evaluation": {"every": 10**9, "limit": 0},  # no held-out evaluation: it is not part of a step
        # checkpointed as a run is: once 30 s have passed, and at the end
        "trainer": {
            "accelerator": "auto",
            "devices": args.devices,
            "strategy": args.strategy,
            "precision": args.precision,
            "cpu_offload": args.cpu_offload,
        },
    }


def run_sharded(config: Path, results: Path, steps: int) -> pl.DataFrame:
    """The benchmark through `python -m harness run`; a row per algorithm from its records."""
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        [sys.executable, "-m", "harness", "run", str(config), "--results", str(results)],
        cwd=root,
        check=True,
        env={**os.environ, "RLVR_LIVE_MEMORY": "1"},  # peaks of live memory on a CPU (rollout/memory.py)
    )
    rows = []
    for info_path in sorted(results.glob("*/*/run.json")):
        info = json.loads(info_path.read_text())
        every = pl.read_parquet(info_path.parent / "metrics.parquet")
        step_s = every["wall_clock_s"].diff()[1:]  # wall_clock_s is cumulative
        metrics = every[1:]  # the first step is a warm-up
        rows.append(
            {
                "suite": info["suite"],
                "algorithm": info["algorithm"],
                "devices": info["devices"],
                "rollouts/step": int(metrics["rollouts"][0]),
                "step_s": float(step_s.median()),
                **{f"{s}_s": float(metrics[f"timing_s/{s}"].median()) for s in STAGES},
                "generated_tokens_per_s": float((metrics["tokens/generated"] / metrics["timing_s/sample"]).median()),
                "peak_mb": float(metrics["memory/peak_mb"].max()),
                **{f"peak_mb_{s}": float(metrics[f"memory/peak_mb/{s}"].max()) for s in STAGES},
                "estimate_mb": info["memory_estimate_mb"],
            }
        )
    return pl.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.6b")
    parser.add_argument("--steps", type=int, default=3, help="measured steps per algorithm (after one warm-up)")
    parser.add_argument("--prompts", type=int, default=16, help="prompts a step (GRPO: x 8 rollouts)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--algorithms", nargs="+", default=["grpo", "hp_rlvr", "ppo"])
    parser.add_argument(
        "--precision",
        choices=["32-true", "bf16-mixed"],
        default="bf16-mixed" if torch.cuda.is_available() else "32-true",
    )
    parser.add_argument("--backend", choices=["ours", "vllm"], default="ours", help="the sampler")
    parser.add_argument("--devices", type=int, default=1, help="processes per run")
    parser.add_argument("--strategy", choices=["auto", "ddp", "fsdp"], default="auto")
    parser.add_argument("--cpu-offload", action="store_true", help="fsdp: shards in host memory (needs a GPU)")
    parser.add_argument(
        "--out", type=Path, help="default: results/gpu/<shape>-<device>[-<strategy>N][-vllm]-<precision>.md"
    )
    args = parser.parse_args(argv)
    device = torch.cuda.get_device_name(0).replace(" ", "-") if torch.cuda.is_available() else "cpu"
    layout = (f"-{args.strategy}{args.devices}" if args.devices > 1 else "") + (
        "-vllm" if args.backend == "vllm" else ""
    )
    out = args.out or Path("results/gpu") / f"{args.shape}-{device}{layout}-{args.precision}.md"
    with tempfile.TemporaryDirectory() as scratch:
        model_dir, config = Path(scratch) / "model", Path(scratch) / "bench.yaml"
        write_model(args.shape, model_dir)
        config.write_text(
            yaml.safe_dump({"cache_dir": str(Path(scratch) / "cache"), "suites": [suite(model_dir, args)]})
        )
        if args.devices > 1:
            board = run_sharded(config, Path(scratch) / "runs", args.steps)
        else:
            board = run_bench(load_benchmark(config), args.steps)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_report(board, "python scripts/gpu_bench.py " + " ".join(sys.argv[1:] if argv is None else argv), out)
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
