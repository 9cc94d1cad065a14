"""Several processes on one step (Lightning's DDP strategy, `trainer: {devices: N}` in a suite).

The step is split by prompt: rank r samples, verifies and credits a contiguous share of the
step's prompts (a GRPO group never straddles two processes), every rank computes gradients on its
own rollouts, and the gradients are averaged across ranks before clipping, so every rank takes the
same optimizer step and the weights stay identical. What must describe the whole step (the
per-step record, HP-RLVR's per-prompt baseline, the held-out accuracy) is gathered across ranks.

Why not DistributedDataParallel's own reducer: it expects one backward per forward of the wrapped
module, and an RLVR step makes several (one per mini-batch and epoch) inside one `training_step`;
`RolloutDDP` therefore leaves the module unwrapped and `RLVRModule.update` averages the gradients
itself (`average_gradients`). Launching, the process group, barriers and rank-0-only checkpoints
and loggers stay Lightning's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from lightning.pytorch.strategies import DDPStrategy

T = TypeVar("T")


class RolloutDDP(DDPStrategy):
    """DDP without the DistributedDataParallel wrapper: the module averages its own gradients."""

    strategy_name = "rollout_ddp"

    def _setup_model(self, model):
        return model


def initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def world_size() -> int:
    return torch.distributed.get_world_size() if initialized() else 1


def rank() -> int:
    """This process's rank; before the process group exists, the rank its launcher gave it
    (torchrun's RANK, srun's SLURM_PROCID, or on one machine Lightning's LOCAL_RANK), so that only
    rank 0 prints or writes."""
    if initialized():
        return torch.distributed.get_rank()
    launched = os.environ.get("RANK") or (os.environ.get("SLURM_PROCID") if "SLURM_NTASKS" in os.environ else None)
    return int(launched or os.environ.get("LOCAL_RANK", "0"))


def shard(items: Sequence[T], rank_: int | None = None, world: int | None = None) -> list[T]:
    """This rank's contiguous share: concatenating the shares in rank order gives `items` back."""
    rank_ = rank() if rank_ is None else rank_
    world = world_size() if world is None else world
    size = len(items) // world
    return list(items[rank_ * size : (rank_ + 1) * size])


def unstride(shares: Sequence[Sequence[T]], total: int) -> list[T]:
    """Items taken every world-th by rank (`items[rank::world]`), gathered as one list a rank,
    back in their own order."""
    return [shares[i % len(shares)][i // len(shares)] for i in range(total)]


def gather(obj: Any) -> list[Any]:
    """`obj` from every rank, in rank order (a one-element list without a process group)."""
    if not initialized():
        return [obj]
    out: list[Any] = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def total(value: float) -> float:
    """The sum of `value` over ranks."""
    if not initialized():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(t)
    return float(t)


def average_gradients(parameters: Sequence[torch.nn.Parameter]) -> None:
    """Replace each gradient by its mean over ranks (one all-reduce of the flattened gradients).
    A parameter without a gradient on this rank contributes zeros, so every rank ends equal."""
    params = [p for p in parameters if p.requires_grad]
    if not initialized() or world_size() == 1 or not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    flat /= world_size()
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def from_first(value: T) -> T:
    """Rank 0's `value`, on every rank (this process's own without a process group)."""
    if not initialized():
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def main_first(build: Callable[[], T]) -> T:
    """Run `build` on rank 0 first (it may write a cache), then on the others (which find it)."""
    if not initialized():
        return build()
    if rank() == 0:
        result = build()
        torch.distributed.barrier()
        return result
    torch.distributed.barrier()
    return build()
