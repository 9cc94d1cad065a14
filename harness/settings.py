"""Where a suite's runs start from (the model, its warm start): plain settings, importable
without torch (the benchmark file is checked before anything heavy loads)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.ranges import ConfigPath, NonNegativeInt, PositiveFloat, PositiveInt, UnitInterval, check_fields
from rollout.settings import LoraArgs


@dataclass(frozen=True)
class TinyConfig:
    """Shape of the embedded Qwen3. Defaults give about 0.4M parameters: small enough that a
    100-step GRPO run fits a 2-core CPU, large enough to learn multi-digit arithmetic."""

    hidden_size: PositiveInt = 128
    intermediate_size: PositiveInt = 384
    num_hidden_layers: PositiveInt = 3
    num_attention_heads: PositiveInt = 4
    num_key_value_heads: PositiveInt = 2
    head_dim: PositiveInt = 32
    max_position_embeddings: PositiveInt = 1024
    init_seed: int = 0
    vocabulary: NonNegativeInt = 0
    """0: one token per character. N > 0: a BPE of N tokens trained on the task's own texts
    (prompts and demonstrations), for tasks whose text is long and repetitive (ALFWorld's
    observations: a turn is hundreds of characters, tens of such tokens). Merges never cross a
    newline, so a line of text ends where a token ends."""
    split_digits: bool = False
    """With `vocabulary`: every digit stays a token of its own (as Qwen's tokenizer keeps them),
    so a constant reads the same wherever it stands instead of fusing with the words around it."""

    def __post_init__(self):
        check_fields(self)


@dataclass
class WarmStartArgs:
    """Supervised phase on (prompt, demonstration) pairs; loss on the completion only."""

    steps: PositiveInt = 2000
    batch_size: PositiveInt = 64
    lr: PositiveFloat = 1e-3
    min_lr_ratio: UnitInterval = 0.1
    """Cosine decay ends at this fraction of `lr`, not at 0: RL then continues at a learning
    rate below the one the warm start ended on, instead of re-warming out of a basin that a
    decay to zero had settled into (which costs points before RL has done anything)."""
    seed: int = 0
    hindsight_fraction: UnitInterval = 0.0
    """Share of examples laid out in HP-RLVR's hindsight format (algorithms.hp_rlvr), so that a
    tiny model learns to read the privileged block. Every algorithm of a suite starts from the
    same weights, so this is part of the suite's base model, not of HP-RLVR's run."""
    hindsight_segments: PositiveInt = 4
    hindsight_feedback: list[str] = field(default_factory=lambda: ["full"])
    """What of the verdict the hindsight examples' blocks hold (HP-RLVR's `feedback`), one drawn
    per example: a base meant for the feedback ablation reads every mode it will be given."""

    teacher_fraction: UnitInterval = 0.0
    """Share of examples laid out in SDPO's teacher format (`algorithms.sdpo.teacher_example`:
    a solution or a failure's feedback in the block before the prompt), so that a tiny model
    learns to read SDPO's teacher block. Part of the suite's base model, as `hindsight_fraction`."""

    rl_only: NonNegativeInt = 0
    """The first `rl_only` training problems are left to RL: the warm start (and a trained
    vocabulary) never sees their demonstrations. With `schedule.prompt_pool: rl_only`, RL plays
    only problems the policy was never shown solved, so what it gains there is not recall."""

    def __post_init__(self):
        check_fields(self)
        if self.hindsight_fraction + self.teacher_fraction > 1:
            raise ValueError(
                f"teacher_fraction: hindsight_fraction + teacher_fraction must be <= 1 "
                f"(got {self.hindsight_fraction} + {self.teacher_fraction})"
            )
        modes = ("full", "outcome", "none")
        if not self.hindsight_feedback or any(m not in modes for m in self.hindsight_feedback):
            raise ValueError(
                f"hindsight_feedback: expected a list of {', '.join(modes)} (got {self.hindsight_feedback})"
            )


@dataclass
class ModelArgs:
    preset: str | None = "tiny"
    """'tiny' builds the embedded Qwen3 from `tiny`; None loads `path`."""
    path: ConfigPath | None = None
    """A local directory that AutoModelForCausalLM / AutoTokenizer load (e.g. Qwen3-8B, or a run's
    kept policy, `runs/<suite>/<run>/policy`). Given in a config, `preset` and `warm_start`
    default to null: the weights start as they are."""
    tiny: TinyConfig = field(default_factory=TinyConfig)
    warm_start: WarmStartArgs | None = field(default_factory=WarmStartArgs)
    """None: start RL from the weights as they are."""
    dtype: str = "float32"
    """The weights' storage type: float32, so that AdamW keeps every update (in bf16 an update of
    1e-6 relative to a weight of 0.02 is below its resolution and is lost). bf16 compute is
    `trainer.precision: bf16-mixed`."""
    lora: LoraArgs | None = None
    """Train low-rank adapters (PEFT) instead of every weight: `{r, alpha, dropout,
    target_modules}` (`rollout.settings.LoraArgs`); None: full weights."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them
    (transformers' gradient checkpointing): less memory for long rows, about a third more compute.
    The training pass then runs every row whole (no shared-prompt pass, which needs a cache)."""

    def __post_init__(self):
        if self.dtype != "float32":
            raise ValueError(
                f"dtype: {self.dtype} weights under AdamW lose updates below its resolution; keep float32 and set "
                "trainer.precision: bf16-mixed (float32 master weights, bf16 compute)"
            )
