"""The sampler/policy log-prob mismatch through vLLM under each precision, with the engine in the
run's dtype (now) and in float32 whatever the precision (before #36): docs/gpu.md's figures.

    python scripts/vllm_precision.py [--steps 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import polars as pl
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.base import RLVRModule  # noqa: E402
from harness.__main__ import main  # noqa: E402

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "head_dim": 32}


def mismatch(root: Path, precision: str, steps: int) -> tuple[float, float]:
    spec = {
        "name": "m",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 200, "eval_size": 8}},
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 20, "batch_size": 8}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "schedule": {"steps": steps, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 16, "temperature": 0.7, "backend": "vllm", "vllm_memory_share": 0.05},
        "evaluation": {"every": steps},
        "trainer": {"precision": precision},
    }
    config = root / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(root / "runs")]) == 0
    metrics = pl.read_parquet(root / "runs" / "m" / "grpo-seed0" / "metrics.parquet")
    return float(metrics["sampler/logprob_diff_mean"].mean()), float(metrics["sampler/logprob_diff_max"].max())


def main_(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    rows = []
    for precision in ("32-true", "bf16-mixed"):
        rows.append(
            ("engine in the run's dtype", precision, *mismatch(Path(tempfile.mkdtemp()), precision, args.steps))
        )
    configure = RLVRModule.configure_model

    def float32_engine(self):  # the engine as it was: float32 whatever the precision
        configure(self)
        self.engine.precision = "32-true"

    RLVRModule.configure_model = float32_engine
    rows.append(
        ("engine in float32 (before)", "bf16-mixed", *mismatch(Path(tempfile.mkdtemp()), "bf16-mixed", args.steps))
    )
    print("| engine | trainer.precision | sampler/logprob_diff_mean (mean over steps) | _max (max over steps) |")
    print("|---|---|---|---|")
    for engine, precision, mean, most in rows:
        print(f"| {engine} | {precision} | {mean:.2e} | {most:.2e} |")


if __name__ == "__main__":
    main_()
