"""How rollouts are drawn and which weights train: plain settings, importable without torch
(the benchmark file is checked before anything heavy loads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from rollout.prompting import ChatFormat
from rollout.ranges import PositiveFloat, PositiveInt, Probability, Range, check_fields


@dataclass
class SamplingArgs:
    """How rollouts are drawn (evaluation is always greedy)."""

    temperature: PositiveFloat = 1.0
    """Evaluation is greedy whatever this is."""
    top_p: Probability = 1.0
    max_new_tokens: PositiveInt = 48
    batch_size: PositiveInt = 512
    """Rollouts per generate call; more rows than this are generated in chunks. Generation on a
    small model is bound by the token-by-token loop, not the batch, so larger is faster."""
    backend: Literal["ours", "vllm"] = "ours"
    """ours: the KV-cached loop below, on the policy itself. vllm: vLLM's engine in the training
    process (`rollout.vllm_engine`), the policy's weights pushed into it after every update."""
    vllm_memory_share: Probability = 0.3
    """vllm: the share of the accelerator's memory its engine may take (its
    `gpu_memory_utilization`), the rest left to training. On a CPU, the most of the machine's
    memory its KV cache may take (sized for one batch of `batch_size` rows at full length)."""
    chat: ChatFormat | None = None
    """Render each prompt through the tokenizer's chat template (a real instruction-tuned
    checkpoint's format); None: the prompt as plain text."""

    def __post_init__(self):
        check_fields(self)


@dataclass
class LoraArgs:
    """Low-rank adapters on the policy's linear layers (PEFT's LoraConfig)."""

    r: PositiveInt = 16
    """The adapters' rank."""
    alpha: PositiveFloat = 32.0
    """Their scale is alpha / r (PEFT's lora_alpha)."""
    dropout: Annotated[float, Range(0, 1, high_open=True)] = 0.0
    """Dropout on the adapters' input in every forward pass the policy makes (sampling included):
    0 keeps sampling, scoring and vLLM's merged weights in agreement."""
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    """Names of the linear layers that get adapters (every projection of Qwen3's decoder layers)."""

    def __post_init__(self):
        check_fields(self)
        if not self.target_modules:
            raise ValueError("target_modules: name at least one layer")

    def config(self, base: str | None = None):
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            base_model_name_or_path=base,
        )
