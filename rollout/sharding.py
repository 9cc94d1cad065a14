"""Sharded training (`trainer: {strategy: fsdp}`): PyTorch's FSDP2 (`fully_shard`) through
Lightning's ModelParallelStrategy, on GPUs over NCCL or on CPUs over gloo.

Each decoder layer is one unit (gathered for its forward and backward, freed after), and the
rest of the policy (embeddings, final norm, output head, tied or not) is the root unit. The
parameters, their gradients and the optimizer state stay float32 and sharded; `bf16-mixed`
gathers them as bf16 for compute and reduces gradients in float32.

Our passes call the trunk (`base_model`) and the output head separately, so that only the scored
positions are projected to the vocabulary. FSDP only hooks a module's `forward`; `trunk(model)`
is the trunk called through a method registered with FSDP, so the root unit is gathered for it
(and, being the root, stays gathered until the backward pass is over, which the head needs).
Decoding calls the model once per token, and HP-RLVR's and SDPO's scoring passes differ in
number between processes: `gathered(model)` gathers every unit once for the whole block, so no
forward inside it is a collective (a process with fewer passes would leave the others waiting).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor

from rollout.lora import has_adapters, merged_weights


class FSDP2(ModelParallelStrategy):
    """FSDP2 over every process of the run (no tensor parallelism). The module's
    `configure_model` calls `shard` on each model it holds."""

    strategy_name = "rlvr_fsdp2"

    def __init__(self, devices: int, cpu_offload: bool = False, process_group_backend: str | None = None):
        super().__init__(
            data_parallel_size=devices, tensor_parallel_size=1, process_group_backend=process_group_backend
        )
        self.cpu_offload = cpu_offload

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None):
        # Lightning 2.6 drops fit's `weights_only` when it restores after setup, as this strategy
        # does; the checkpoint is the run's own, with its records and RNG states in it.
        return super().load_checkpoint(checkpoint_path, weights_only=False if weights_only is None else weights_only)

    def shard(self, model: torch.nn.Module) -> None:
        """Shard a transformers causal LM in place: one unit per decoder layer, the rest as the root."""
        mesh = self.device_mesh["data_parallel"]
        bf16 = str(self.precision_plugin.precision).startswith("bf16")
        options = {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if bf16
            else MixedPrecisionPolicy(),
        }
        if self.cpu_offload:
            options["offload_policy"] = CPUOffloadPolicy()
        for layer in model.base_model.layers:
            fully_shard(layer, **options)
        model.rlvr_trunk = types.MethodType(lambda self, **kwargs: self.base_model(**kwargs), model)
        fully_shard(model, **options)
        register_fsdp_forward_method(model, "rlvr_trunk")


def trunk(model):
    """The model's decoder stack, as a callable: `base_model`, or under FSDP the method that
    gathers the root unit first."""
    return getattr(model, "rlvr_trunk", None) or model.base_model


def is_sharded(model: torch.nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextmanager
def gathered(model: torch.nn.Module):
    """Under FSDP, every unit is gathered on entering the block (a full copy of the weights at
    compute precision, as a colocated sampler holds) and freed at its end: forward passes inside
    need no collective, so each process may run as many as its own rows need (none included)."""
    if not is_sharded(model):
        yield
        return
    units = [m for m in model.modules() if isinstance(m, FSDPModule) and m is not model]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
    for unit in [model, *units]:
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True, recurse=False)
        model.reshard()  # the root too: a model without a backward pass to come (a teacher) is not freed otherwise


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole state on the CPU: under FSDP gathered from the shards onto the first
    process (a collective: every process calls it; the others get an empty dict)."""
    if has_adapters(model):  # not sharded (refused with FSDP): the adapters merged in
        return {k: v.cpu() for k, v in merged_weights(model)}
    if not is_sharded(model):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's state one whole tensor at a time, on its device: under FSDP each gathered from
    the shards as it is reached (a collective a tensor, so every process walks the same names in
    the same order, and never holds more than one gathered tensor at once)."""
    if has_adapters(model):
        yield from merged_weights(model)
        return
    for name, tensor in model.state_dict().items():
        yield name, (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach()
