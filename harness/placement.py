"""Where a suite's processes run: Lightning's Trainer arguments, for training and `evaluate`."""

from __future__ import annotations

from harness.config import TrainerArgs
from rollout import distributed
from rollout.sharding import FSDP2


def placement(args: TrainerArgs) -> dict:
    """Where a suite's processes run, as Lightning's Trainer arguments (training and `evaluate`)."""
    return {
        "accelerator": args.accelerator,
        "devices": args.devices,
        "num_nodes": args.num_nodes,
        "strategy": strategy(args),
        "precision": args.precision,
    }


def strategy(args: TrainerArgs):
    """The Lightning strategy for a suite's `trainer.strategy`."""
    if args.strategy == "fsdp":
        return FSDP2(args.processes, cpu_offload=args.cpu_offload)
    if args.strategy == "ddp" or args.processes > 1:
        return distributed.RolloutDDP(process_group_backend="gloo" if args.accelerator == "cpu" else None)
    return "auto"
