"""LoRA adapters on the policy, through PEFT (`model.lora`): the adapters are injected into the
model's own linear layers (`peft.inject_adapter_in_model`), so the model keeps its class, its
trunk (`base_model`) and its output head, and every pass of the harness runs on it unchanged.
Only the adapters train; the base weights stay those the run started from.

What else reads the weights sees them merged (W + B A scaled, `merged_weights`): vLLM's engine
after every update and the kept policy's full copy. The starting policy (a KL reference) is the
same model with its adapters switched off (`adapters_disabled`), not a second copy. The adapter
alone is saved as PEFT saves one (`save_adapter`), to load with `PeftModel.from_pretrained`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from rollout.settings import LoraArgs

ADAPTER = "default"  # PEFT's name for a model's one adapter


def add_adapters(model: torch.nn.Module, args: LoraArgs) -> torch.nn.Module:
    """`model` with adapters injected (in place: the same object) and every other weight frozen.
    PEFT initialises B at zero, so the model computes what it did before."""
    try:
        from peft import inject_adapter_in_model
    except ModuleNotFoundError:
        raise ModuleNotFoundError('model.lora needs PEFT: pip install -e ".[lora]"') from None
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in args.target_modules if t not in present]
    if missing:
        raise ValueError(f"target_modules: the model has no layer named {', '.join(missing)}")
    inject_adapter_in_model(args.config(getattr(model, "name_or_path", None)), model, adapter_name=ADAPTER)
    return model  # PEFT freezes every weight but the adapters


def adapter_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The layers that carry an adapter, by their name in the model."""
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def has_adapters(model: torch.nn.Module) -> bool:
    return getattr(model, "peft_config", None) is not None


def merged_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's state under its base names (what the model was before the adapters), each
    adapted layer's weight with its adapter folded in: W + scale * B @ A."""
    layers = adapter_layers(model)
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        owner, _, leaf = name.rpartition(".base_layer.")
        if owner in layers:
            if leaf == "weight":
                tensor = tensor + layers[owner].get_delta_weight(ADAPTER).to(tensor.dtype)
            yield f"{owner}.{leaf}", tensor.detach()
        else:
            yield name, tensor.detach()


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module):
    """The base model (the starting policy) for the duration: every adapter switched off."""
    layers = list(adapter_layers(model).values())
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def save_adapter(model: torch.nn.Module, directory: Path, base: str) -> None:
    """The adapter as PEFT saves one (adapter_config.json, adapter_model.safetensors), for
    `PeftModel.from_pretrained(<the base at base>, directory)`."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = model.peft_config[ADAPTER]
    config.base_model_name_or_path = base
    config.save_pretrained(directory)
    state = get_peft_model_state_dict(model, adapter_name=ADAPTER)
    # a PeftModel's names: its wrapper ("base_model") around the model ("model")
    save_file(
        {f"base_model.model.{k}": v.detach().cpu().contiguous() for k, v in state.items()},
        directory / "adapter_model.safetensors",
    )
