"""Peak memory: the accelerator's allocator peak on a GPU, else the process's peak resident set
(of live memory only with RLVR_LIVE_MEMORY=1), reset at the start of each stage of a step (Linux
lets a process reset its own high-water mark through /proc/self/clear_refs); and an estimate of
it, for planning a run."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
from pathlib import Path

import torch

try:
    LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    LIBC.malloc_trim  # glibc's; absent elsewhere
except (OSError, AttributeError):
    LIBC = None


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return
    # The resident set keeps what the C allocator freed but did not give back. Giving it back
    # first (RLVR_LIVE_MEMORY=1, as scripts/gpu_bench.py sets) makes the peak that of live memory,
    # not of the largest stage before; it costs page faults afterwards (10-25% of a tiny step).
    if LIBC is not None and os.environ.get("RLVR_LIVE_MEMORY") == "1":
        LIBC.malloc_trim(0)
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # not Linux, or not allowed: the peak then covers the whole process


def peak_mb() -> float:
    """MiB: CUDA's max allocated when a GPU is in use, else VmHWM (ru_maxrss where /proc is absent)."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def estimate_mb(
    parameters: int,
    config,
    rows_per_update: int,
    rows_per_generate: int,
    length: int,
    scored: int,
    shards: int = 1,
    bf16: bool = False,
    checkpointing: bool = False,
    offload: bool = False,
    trainable: int | None = None,
) -> dict[str, float]:
    """What one process holds at its peak, in MiB, by part: float32 weights, gradients and AdamW's
    two moments with the temporary its foreach step makes (each divided by `shards` under FSDP, on the host with `offload`); a full copy of
    the weights at compute precision (FSDP gathers it for decoding, bf16 autocast caches its casts);
    the training pass's activations for `rows_per_update` rows of `length` tokens (a layer's
    inputs, its attention and MLP intermediates, or only each layer's input when checkpointed)
    and the vocabulary projection of the `scored` tokens of a row; the KV cache for
    `rows_per_generate` rows.
    `config`: the model's transformers config. `trainable`: the parameters that train (LoRA's
    adapters), whose gradients and optimizer state are kept; None: all. An estimate for planning,
    not a bound."""
    mib = 2**20
    compute = 2 if bf16 else 4
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * getattr(config, "head_dim", h // config.num_attention_heads)
    tokens = rows_per_update * length
    per_layer = (h if checkpointing else 8 * h + 2 * kv + 3 * inter) * compute  # bytes a token
    states = 0.0 if offload else parameters * 4 / shards / mib
    trained = states if trainable is None else 0.0 if offload else trainable * 4 / shards / mib
    parts = {
        "weights": states,
        "gradients": trained,
        "optimizer": 3 * trained,  # AdamW's two moments, and the step's temporary of their size
        "compute_copy": parameters * compute / mib if (bf16 or shards > 1) else 0.0,
        "activations": (tokens * layers * per_layer + rows_per_update * scored * config.vocab_size * (compute + 4))
        / mib,
        "kv_cache": 2 * layers * kv * compute * rows_per_generate * length / mib,
    }
    parts["total"] = sum(parts.values())
    return parts
