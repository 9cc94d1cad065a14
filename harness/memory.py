"""How much memory one process of a run should need, printed before it starts and recorded."""

from __future__ import annotations

from harness.config import Suite
from rollout.memory import estimate_mb


def fmt_mb(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.1f} MiB"


def memory_estimate(suite: Suite, module) -> dict[str, float]:
    """`rollout.memory.estimate_mb` for one process of this run. The length of a row is the
    longest of the first 256 training prompts plus what the sampler may add: `max_new_tokens`
    for each of a multi-turn task's turns (`max_turns`; the environment's text between them is
    not counted)."""
    t = suite.trainer
    prompts = [module.engine.prompt_ids(p.prompt) for p in list(module.task.train_problems())[:256]]
    new_tokens = module.sampling.max_new_tokens * getattr(module.task, "max_turns", 1)
    per_process = module.schedule.prompts_per_step // t.processes
    return estimate_mb(
        sum(p.numel() for p in module.parameters()),
        module.policy.config,
        rows_per_update=per_process // module.update_args.minibatches * module.group_size,
        rows_per_generate=min(per_process * module.group_size, module.sampling.batch_size),
        length=max(map(len, prompts), default=0) + new_tokens,
        scored=new_tokens,
        shards=t.processes if t.strategy == "fsdp" else 1,
        bf16=t.precision == "bf16-mixed",
        checkpointing=suite.model.gradient_checkpointing,
        offload=t.cpu_offload,
        trainable=sum(p.numel() for p in module.parameters() if p.requires_grad),
    )
