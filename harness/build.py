"""The algorithm's LightningModule on the suite's starting weights, built (and cached) on first use
and checked against the digest they were built with."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import lightning as L

from harness.config import Suite
from harness.models import load_policy
from harness.records import Damaged
from harness.start import StartingWeights, weights_digest
from rollout.lora import add_adapters
from rollout.scoring import activation_checkpointing


def build_module(
    suite: Suite, algorithm: str, seed: int, cache_dir: Path, weights: Path | None = None, **setting_changes
):
    """(the algorithm's module on the suite's starting weights, where those weights are). The
    weights are built and cached on first use; `weights` names other ones (a checkpoint to
    evaluate). `setting_changes` replace fields of the suite's settings (e.g. schedule={"steps":
    5}) for this module only."""
    task = suite.task.build()
    weights = weights or StartingWeights.of(suite).build(task, cache_dir)
    L.seed_everything(seed, verbose=False)
    policy, tokenizer = load_policy(weights, suite.model.dtype)
    digest = weights_digest(policy)  # of the weights as loaded, before any adapter
    check_cached_digest(weights, digest)
    if suite.model.lora is not None:
        add_adapters(policy, suite.model.lora)
    if suite.model.gradient_checkpointing:
        activation_checkpointing(policy, enable=True)
    policy.train()
    own, settings = suite.algorithm_settings(algorithm)
    for name, changes in setting_changes.items():
        settings[name] = type(settings[name])(**{**asdict(settings[name]), **changes})
    module = suite.algorithms[algorithm].resolve()(
        policy=policy, tokenizer=tokenizer, task=task, seed=seed, **own, **settings
    )
    module.starting_weights_digest = digest
    return module, weights


def check_cached_digest(weights: Path, digest: str) -> None:
    """Raise `Damaged` where cached starting weights are not those that were built there: their
    digest, recorded in the entry's recipe.json when it was built, differs from the weights' as
    loaded (bytes flipped, or other weights put in their place). Entries built before the digest
    was recorded, and weights outside the cache, are not checked."""
    recipe = Path(weights) / "recipe.json"
    recorded = json.loads(recipe.read_text()).get("weights_digest") if recipe.is_file() else None
    if recorded is not None and recorded != digest:
        raise Damaged(
            f"{weights}: the cached starting weights have digest {digest}, not the {recorded} they were built with "
            "(damaged or replaced); delete the folder to build them again"
        )
