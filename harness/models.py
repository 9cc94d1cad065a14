"""Where a run's starting weights come from: the tiny preset or a local directory, optionally
warm-started by supervised learning on the task's demonstrations, cached under a hash of
everything that determines the result so that every run of a pair starts from the same weights
and only the first pays for it."""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import lightning as L
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import rollout.attention
from harness.locks import exclusive
from harness.progress import bar_shown, progress
from harness.provenance import lock, weights_digest
from harness.settings import ModelArgs, TinyConfig, WarmStartArgs
from harness.shipped import copy_into, shipped
from harness.tiny import save_tiny
from rollout import kernels
from tasks.base import Problem, Task

# Bump when the warm-start recipe or its arithmetic changes, to invalidate caches. What changes
# one task's problems or demonstrations is that task's `version`, in its key.
WARM_START_VERSION = 4


def load_policy(directory: str | Path, dtype: str = "float32", attention: str = rollout.attention.IMPLEMENTATION):
    """(model, tokenizer) from a directory; `attention`: the model's `attn_implementation`."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype), attn_implementation=attention)
    return model, tokenizer


def weights_recipe(model: ModelArgs, task_key: dict) -> tuple[dict, str] | None:
    """(what determines a run's starting weights, its hash: the cache key), or None when they
    are `model.path` as it is."""
    if model.preset is None and model.warm_start is None:
        return None
    recipe = {
        "version": WARM_START_VERSION,
        "base": model.path if model.preset is None else {"tiny": tiny_key(model.tiny)},
        "task": task_key,
        "warm_start": warm_start_key(model.warm_start) if model.warm_start else None,
    }
    if model.warm_start and model.warm_start.hindsight_fraction > 0:
        from algorithms.hp_rlvr import HindsightTemplate

        recipe["hindsight_template"] = asdict(HindsightTemplate())
    if model.warm_start and model.warm_start.teacher_fraction > 0:
        from algorithms.sdpo import Reprompt

        recipe["teacher_template"] = asdict(Reprompt())
    return recipe, hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def starting_weights(model: ModelArgs, task: Task, task_key: dict, cache_dir: Path) -> Path:
    """The directory of the weights RL starts from, building and caching them if needed (or copying
    them from those the project ships, harness/shipped.py). Processes
    that need the same weights at once build them once: the first holds the entry's file lock
    while it builds, the others wait for it and load what it wrote."""
    recipe = weights_recipe(model, task_key)
    if recipe is None:
        return Path(model.path)
    recipe, key = recipe
    target = cache_dir / "policies" / key
    if (target / "recipe.json").exists():
        return built_elsewhere_warning(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(target.with_name(key + ".lock")):
        if (target / "recipe.json").exists():  # built by another process while this one waited
            return target
        staging = target.with_name(key + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            build(model, task, recipe, staging, key)
        except BaseException:  # SIGTERM, Ctrl-C, a failure: nothing half-built stays
            shutil.rmtree(staging, ignore_errors=True)
            raise
        staging.rename(target)  # atomic: a cache entry is complete or absent
    return built_elsewhere_warning(target)


def build(model: ModelArgs, task: Task, recipe: dict, staging: Path, key: str) -> None:
    """The starting weights into `staging`, copied from the project's or built, with their
    recipe.json written last: the recipe, and the digest of the weights as they load (checked
    whenever they are loaded, harness/driver.py)."""
    if folder := shipped(key):
        copy_into(folder, staging)
        print(
            f"starting weights {key}: shipped with the project ({folder}, files checked); "
            "HARNESS_BUILD_WEIGHTS=1 builds them here instead"
        )
        recipe = json.loads((staging / "recipe.json").read_text())
        recipe["weights_digest"] = weights_digest(load_policy(staging, model.dtype)[0])
        (staging / "recipe.json").write_text(json.dumps(recipe, indent=2))
        return
    target = staging.with_name(key)
    print(f"building the starting weights {target} (cached for every run that needs them)")
    rl_only = model.warm_start.rl_only if model.warm_start else 0
    started = time.perf_counter()
    demonstrated(task, rl_only)  # the task's problems and demonstrations, timed on their own
    report = {"problems_s": time.perf_counter() - started}
    if model.preset == "tiny":
        started = time.perf_counter()
        save_tiny(model.tiny, staging, corpus=task_corpus(task, rl_only) if model.tiny.vocabulary else None)
        report["vocabulary_s"] = time.perf_counter() - started
        base = staging
    else:
        base = Path(model.path)
    if model.warm_start is not None:
        policy, tokenizer = load_policy(base, model.dtype)
        report |= warm_start(policy, tokenizer, task, model.warm_start)
        policy.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        recipe["report"] = report
        print(
            f"starting weights built: problems {report['problems_s']:.1f} s, "
            + (f"vocabulary {report['vocabulary_s']:.1f} s, " if "vocabulary_s" in report else "")
            + f"training {report['seconds']:.1f} s ({report['batches_s']:.1f} s of it making batches)"
        )
    recipe["built_with"] = built_with()
    recipe["weights_digest"] = weights_digest(load_policy(staging, model.dtype)[0])
    (staging / "recipe.json").write_text(json.dumps(recipe, indent=2))


def built_with() -> dict:
    """What a warm start's weights depend on besides their recipe (the cache key): the CPU kernels'
    mode and the lock (rollout/kernels.py, harness/provenance.py)."""
    return {"cpu_kernels": kernels.level()["mode"], "lock": lock()["digest"]}


def built_elsewhere_warning(target: Path) -> Path:
    """`target`, saying so once when its weights were built on other kernels or another lock than
    this process runs (or before either was recorded): the same recipe then gives other weights,
    so runs from these will not reproduce records made with the weights built here."""
    recorded = json.loads((target / "recipe.json").read_text()).get("built_with")
    now = built_with()
    if recorded != now and target not in _warned:
        _warned.add(target)
        print(
            f"warning: the starting weights {target} were built with {recorded or 'kernels and a lock not recorded'}, "
            f"this process runs {now}: records from them differ from those of weights built here "
            f"(delete the folder to build them again)"
        )
    return target


_warned: set[Path] = set()


def tiny_key(config: TinyConfig) -> dict:
    # A default that did not exist when earlier caches were written stays out of their key.
    return {
        k: v
        for k, v in asdict(config).items()
        if not ((k == "vocabulary" and v == 0) or (k == "split_digits" and not v))
    }


def warm_start_key(args: WarmStartArgs) -> dict:
    # As tiny_key: a default that did not exist when earlier caches were written stays out.
    return {k: v for k, v in asdict(args).items() if not (k in ("rl_only", "teacher_fraction") and v == 0)}


def demonstrated(task: Task, rl_only: int = 0) -> Sequence[Problem]:
    """The training problems the warm start learns from: all but the first `rl_only`."""
    return task.train_problems()[rl_only:]


def task_corpus(task: Task, rl_only: int = 0) -> list[str]:
    """The texts a tiny model's trained vocabulary is built from: the demonstrated problems."""
    return [p.prompt + p.demonstration for p in demonstrated(task, rl_only)]


class TokenMemo:
    """`tokenizer`, with `tokenizer(text, add_special_tokens=False)` tokenised once per text: the
    warm start draws the same demonstrations step after step, and tokenising their texts again
    was most of its data time (docs/performance.md). Each call gets a list of its own."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids = tokenizer, {}

    def __getattr__(self, name):
        if "tokenizer" not in self.__dict__:  # mid-unpickling: no recursion through self.tokenizer
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def __call__(self, text, add_special_tokens: bool = True, **kwargs):
        if add_special_tokens or kwargs or not isinstance(text, str):
            return self.tokenizer(text, add_special_tokens=add_special_tokens, **kwargs)
        if text not in self.ids:
            self.ids[text] = tuple(self.tokenizer(text, add_special_tokens=False).input_ids)
        return Encoded(input_ids=list(self.ids[text]))


class Encoded(dict):
    """What a tokenizer's call gives, as cheap to make as a dict (a BatchEncoding cost more than
    the lookup): `encoded.input_ids` or `encoded["input_ids"]`."""

    @property
    def input_ids(self) -> list[int]:
        return self["input_ids"]


class Demonstrations(torch.utils.data.IterableDataset):
    """Endless seeded batches of prompt + completion + EOS (labels -100 on the prompt), a
    `hindsight_fraction` of them in HP-RLVR's hindsight layout instead and a `teacher_fraction`
    in SDPO's teacher layout."""

    def __init__(
        self,
        task: Task,
        tokenizer,
        batch_size: int,
        seed: int,
        hindsight_fraction: float = 0.0,
        segments: int = 4,
        feedback: tuple[str, ...] = ("full",),
        rl_only: int = 0,
        teacher_fraction: float = 0.0,
    ):
        self.task, self.tokenizer, self.batch_size, self.seed = task, tokenizer, batch_size, seed
        self.hindsight_fraction, self.segments, self.feedback = hindsight_fraction, segments, tuple(feedback)
        self.rl_only, self.teacher_fraction = rl_only, teacher_fraction
        self.batches_s = 0.0  # time spent making batches (the rest of a warm start is arithmetic)

    def __iter__(self):
        from algorithms.hp_rlvr import HindsightTemplate, hindsight_example
        from algorithms.sdpo import Reprompt, teacher_example

        rng = random.Random(self.seed)
        tok, template, reprompt = TokenMemo(self.tokenizer), HindsightTemplate(), Reprompt()
        problems = [p for p in demonstrated(self.task, self.rl_only) if p.demonstration]
        while True:
            started = time.perf_counter()
            rows = []
            for problem in rng.sample(problems, min(self.batch_size, len(problems))):
                layout_draw = rng.random()  # one draw either way: a base without teacher examples is unchanged
                if layout_draw < self.hindsight_fraction:
                    mode = self.feedback[0] if len(self.feedback) == 1 else rng.choice(self.feedback)
                    rows.append(hindsight_example(self.task, problem, tok, template, self.segments, rng, mode))
                elif layout_draw < self.hindsight_fraction + self.teacher_fraction:
                    rows.append(teacher_example(self.task, problem, tok, reprompt, rng))
                else:
                    rows.append(self.task.supervised_example(problem, tok))
            parts = layout(rows, tok.pad_token_id)
            self.batches_s += time.perf_counter() - started
            yield {"parts": parts}


PACKED_SLOT_COST = 1.15
"""A packed line's token slot costs about this much more than a padded row's: its attention
needs an explicit block mask, so the kernel cannot skip the causal upper triangle
(docs/performance.md)."""


def layout(rows: list[tuple[list[int], list[int]]], pad_id: int) -> list[dict[str, torch.Tensor]]:
    """The parts one batch of rows is run as: packed end to end, or sorted by length and split in
    two halves each padded to its own longest row, whichever has fewer token slots (packed ones
    weighted by PACKED_SLOT_COST). Batches mixing short plain examples with long hindsight-layout
    ones (math, ALFWorld) pack; batches of long rows of similar length (code) do not."""
    rows = sorted(rows, key=lambda row: len(row[0]))
    half = (len(rows) + 1) // 2
    halves = [part for part in (rows[:half], rows[half:]) if part]
    width = len(rows[-1][0])
    lines = first_fit(rows, width)
    if len(lines) * width * PACKED_SLOT_COST < sum(len(part) * len(part[-1][0]) for part in halves):
        return [packed_lines(lines, width, pad_id)]
    return [padded(part, pad_id) for part in halves]


def padded(rows: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Rows right-padded to the longest (positions start at 0), each tensor made in one call."""
    width = max(len(ids) for ids, _ in rows)
    return {
        "input_ids": torch.tensor([ids + [pad_id] * (width - len(ids)) for ids, _ in rows]),
        "attention_mask": torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows]),
        "labels": torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows]),
    }


def first_fit(rows: list[tuple[list[int], list[int]]], width: int) -> list[list[tuple[list[int], list[int]]]]:
    """Rows assigned to lines of `width` token slots, longest first, each to the first line with room."""
    lines: list[list[tuple[list[int], list[int]]]] = []
    room: list[int] = []  # free slots of each line
    for row in sorted(rows, key=lambda row: -len(row[0])):
        line = next((i for i, free in enumerate(room) if free >= len(row[0])), len(lines))
        if line == len(lines):
            lines.append([])
            room.append(width)
        lines[line].append(row)
        room[line] -= len(row[0])
    return lines


def packed_lines(lines: list[list[tuple[list[int], list[int]]]], width: int, pad_id: int) -> dict[str, torch.Tensor]:
    """Rows (as `first_fit` lays them out) packed end to end into lines of `width`, each row's
    positions starting at 0. With no attention mask, transformers reads the position restarts as
    sequence boundaries and attends within each row only, so the loss is that of the rows padded
    one per line (tested) on fewer token slots. A row's first label is dropped, as the shift drops
    it when the row starts a line, so nothing is learnt across a boundary."""
    input_ids, labels, positions = [], [], []
    for line in lines:
        line_ids, line_labels, line_positions = [], [], []
        for ids, lab in line:
            line_ids += ids
            line_labels += [-100] + lab[1:] + [-100] * (len(ids) - len(lab))
            line_positions += range(len(ids))
        tail = width - len(line_ids)
        input_ids.append(line_ids + [pad_id] * tail)
        labels.append(line_labels + [-100] * tail)
        positions.append(line_positions + list(range(tail)))  # the tail of padding is a row of its own
    return {
        "input_ids": torch.tensor(input_ids),
        "labels": torch.tensor(labels),
        "position_ids": torch.tensor(positions),
    }


class SupervisedWarmStart(L.LightningModule):
    def __init__(self, policy, args: WarmStartArgs):
        super().__init__()
        self.policy, self.args = policy, args

    def training_step(self, batch, batch_idx):
        # The mean over every label token of the batch, whatever part it is in (each part's
        # loss is its own token mean, so weigh it by its count of predicted labels). No cache:
        # transformers only reads packed rows from the positions when there is none.
        parts = batch["parts"]
        counts = [int((part["labels"][:, 1:] != -100).sum()) for part in parts]
        loss = sum(self.policy(**part, use_cache=False).loss * n for part, n in zip(parts, counts)) / max(
            sum(counts), 1
        )
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.policy.parameters(), lr=self.args.lr, weight_decay=0.01)
        warmup, floor = max(1, self.args.steps // 20), self.args.min_lr_ratio

        def factor(step: int) -> float:
            cosine = 0.5 * (1 + math.cos(math.pi * min(step, self.args.steps) / self.args.steps))
            return min(1.0, (step + 1) / warmup) * (floor + (1 - floor) * cosine)

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return [optimizer], [{"scheduler": schedule, "interval": "step"}]


def warm_start(policy, tokenizer, task: Task, args: WarmStartArgs) -> dict:
    if not any(p.demonstration for p in demonstrated(task, args.rl_only)):
        raise ValueError("warm_start: the task has no demonstrations" + (" after rl_only" if args.rl_only else ""))
    L.seed_everything(args.seed, verbose=False)
    policy.train()
    module = SupervisedWarmStart(policy, args)
    trainer = L.Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=50,
        callbacks=progress("warm start", args.steps, refresh_rate=20),
        enable_progress_bar=bar_shown(),
    )
    examples = Demonstrations(
        task,
        tokenizer,
        args.batch_size,
        args.seed,
        args.hindsight_fraction,
        args.hindsight_segments,
        args.hindsight_feedback,
        args.rl_only,
        args.teacher_fraction,
    )
    data = torch.utils.data.DataLoader(examples, batch_size=None)
    started = time.perf_counter()
    trainer.fit(module, data)
    return {
        "seconds": time.perf_counter() - started,
        "batches_s": examples.batches_s,
        "final_loss": float(trainer.callback_metrics["loss"]),
    }
