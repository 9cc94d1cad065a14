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
    teach: dict[str, dict] = field(default_factory=dict)
    """Privileged contexts the warm start teaches: an algorithm's class path -> the settings of
    the examples that teach its context (the class's `teaching`, algorithms/teaching.py), e.g.
    `{algorithms.hp_rlvr.HPRLVR: {fraction: 0.3}}`, each laid out on its `fraction` of the
    examples. Every algorithm of a suite starts from the same weights, so this is part of the
    suite's base model: a suite may teach a context that only another suite's algorithm reads."""

    rl_only: NonNegativeInt = 0
    """The first `rl_only` training problems are left to RL: the warm start (and a trained
    vocabulary) never sees their demonstrations. With `schedule.prompt_pool: rl_only`, RL plays
    only problems the policy was never shown solved, so what it gains there is not recall."""

    def __post_init__(self):
        check_fields(self)
        for path, settings in self.teach.items():
            if not isinstance(settings, dict):
                raise ValueError(f"teach: {path}: expected a mapping of its teaching's settings (got {settings!r})")
        # a share out of [0, 1] is its teaching's own check to name (harness/config.py)
        shares = [f for s in self.teach.values() if isinstance(f := s.get("fraction", 0), (int, float)) and 0 <= f <= 1]
        if sum(shares) > 1:
            raise ValueError(f"teach: the fractions must sum to at most 1 (got {' + '.join(map(str, shares))})")


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


@dataclass(frozen=True)
class EstimateArgs:
    """The benchmark file's top-level `estimate:` (or `estimate: false`)."""

    enabled: bool = True
    """Measure and say the estimates before anything trains (`--no-estimate` turns it off; --smoke,
    --list and --check never measure)."""
    warm_start_steps: PositiveInt = 2
    """Warm-start optimizer steps timed at least, after one untimed warm-up step (more, up to the
    budget, until they span `harness.estimate.WINDOW_S`)."""
    train_steps: PositiveInt = 1
    """Training steps of each algorithm timed at least, after one untimed warm-up step (more as above)."""
    budget: UnitInterval = 0.05
    """A piece is measured only where its measured steps are at most this share of the steps
    they stand for (a warm start's, an algorithm's over its seeds); otherwise it is not estimated."""

    def __post_init__(self):
        check_fields(self)
