"""What `rollout.memory.estimate_mb` predicts one process holds for Qwen3 0.6B, 1.7B, 4B and 8B at
the GPU protocol's math settings (benchmarks-gpu.yaml: GRPO, G = 8, 128 prompts a step, 1024 new
tokens, bf16-mixed, gradient checkpointing): on eight GPUs under FSDP with 4 mini-batches (32 rows
an update a process) and on one GPU with 32 mini-batches and `sampling.batch_size: 128` (the same
32 rows an update, 128 sampled at once), full weights and LoRA (r = 16 on every projection; under
DDP, as LoRA is refused with FSDP). The shapes are the published configs; nothing is built or
downloaded. docs/gpu.md shows the table with this command:

    python scripts/memory_table.py [--prompt-tokens 256]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.memory import estimate_mb  # noqa: E402

# hidden, intermediate, layers, query heads, key-value heads, tied embeddings (head_dim 128, vocabulary 151,936)
QWEN3 = {
    "0.6B": (1024, 3072, 28, 16, 8, True),
    "1.7B": (2048, 6144, 28, 16, 8, True),
    "4B": (2560, 9728, 36, 32, 8, True),
    "8B": (4096, 12288, 36, 32, 8, False),
}
VOCABULARY, HEAD_DIM, RANK = 151_936, 128, 16
PROMPTS, GROUP, NEW_TOKENS = 128, 8, 1024
SETUPS = {"8 (FSDP)": (8, 4, 1024), "1": (1, 32, 128)}  # GPUs, mini-batches, sampling batch


def shape(name: str) -> tuple[SimpleNamespace, int, int]:
    """(a config with what the estimate reads, parameters, LoRA parameters at rank RANK)."""
    h, inter, layers, heads, kv, tied = QWEN3[name]
    config = SimpleNamespace(
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=HEAD_DIM,
        vocab_size=VOCABULARY,
    )
    q, k = heads * HEAD_DIM, kv * HEAD_DIM
    # each projection (in, out): q, k, v, o, gate, up, down
    projections = [(h, q), (h, k), (h, k), (q, h), (h, inter), (h, inter), (inter, h)]
    per_layer = sum(i * o for i, o in projections) + 2 * h + 2 * HEAD_DIM  # + the norms
    embeddings = VOCABULARY * h * (1 if tied else 2)
    lora = layers * sum(RANK * (i + o) for i, o in projections)
    return config, layers * per_layer + embeddings + h, lora


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=256, help="a prompt's tokens, chat template included")
    args = parser.parse_args()
    length = args.prompt_tokens + NEW_TOKENS
    print(
        "| model | parameters | GPUs | weights, gradients, optimizer | activations | KV cache | total GiB "
        "| LoRA: total GiB |\n|---|---|---|---|---|---|---|---|"
    )
    for name in QWEN3:
        config, parameters, lora = shape(name)
        for label, (gpus, minibatches, batch) in SETUPS.items():
            prompts = PROMPTS // gpus
            common = dict(
                rows_per_update=prompts // minibatches * GROUP,
                rows_per_generate=min(prompts * GROUP, batch),
                length=length,
                scored=NEW_TOKENS,
                bf16=True,
                checkpointing=True,
            )
            full = estimate_mb(parameters, config, shards=gpus, **common)
            adapters = estimate_mb(parameters + lora, config, trainable=lora, **common)
            states = sum(full[k] for k in ("weights", "gradients", "optimizer", "compute_copy"))
            print(
                f"| Qwen3-{name} | {parameters / 1e9:.2f} B | {label} | {states / 1024:.1f} "
                f"| {full['activations'] / 1024:.1f} | {full['kv_cache'] / 1024:.1f} | {full['total'] / 1024:.1f} "
                f"| {adapters['total'] / 1024:.1f} |"
            )


if __name__ == "__main__":
    main()
