"""The weights' loading, and the supervised warm start that builds a suite's starting weights
(harness/start.py) from the task's demonstrations: its examples, laid out by the teachings the
suite's warm start names (algorithms/teaching.py), packed into batches, and its training loop."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import rollout.attention
from algorithms.teaching import Teaching
from harness.progress import bar_shown, progress
from harness.settings import WarmStartArgs
from tasks.base import Problem, Task


def load_policy(directory: str | Path, dtype: str = "float32", attention: str = rollout.attention.IMPLEMENTATION):
    """(model, tokenizer) from a directory; `attention`: the model's `attn_implementation`."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype), attn_implementation=attention)
    return model, tokenizer


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
    """Endless seeded batches of prompt + completion + EOS (labels -100 on the prompt), each
    teaching's `fraction` of them in its own layout instead (algorithms/teaching.py)."""

    def __init__(
        self, task: Task, tokenizer, batch_size: int, seed: int, teachings: Sequence[Teaching] = (), rl_only: int = 0
    ):
        self.task, self.tokenizer, self.batch_size, self.seed = task, tokenizer, batch_size, seed
        self.teachings, self.rl_only = list(teachings), rl_only
        self.batches_s = 0.0  # time spent making batches (the rest of a warm start is arithmetic)

    def __iter__(self):
        rng = random.Random(self.seed)
        tok = TokenMemo(self.tokenizer)
        problems = [p for p in demonstrated(self.task, self.rl_only) if p.demonstration]
        while True:
            started = time.perf_counter()
            rows = [
                self.example(problem, tok, rng) for problem in rng.sample(problems, min(self.batch_size, len(problems)))
            ]
            parts = layout(rows, tok.pad_token_id)
            self.batches_s += time.perf_counter() - started
            yield {"parts": parts}

    def example(self, problem: Problem, tok, rng: random.Random) -> tuple[list[int], list[int]]:
        """One example: the first teaching whose share, summed with those before it, passes one
        draw lays it out, else the task's own."""
        layout_draw, bound = rng.random(), 0.0  # one draw either way: a base that teaches nothing is unchanged
        for teaching in self.teachings:
            bound += teaching.fraction
            if layout_draw < bound:
                return teaching.example(self.task, problem, tok, rng)
        return self.task.supervised_example(problem, tok)


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


def warm_start(policy, tokenizer, task: Task, args: WarmStartArgs, teachings: Sequence[Teaching] = ()) -> dict:
    """Train `policy` on the task's demonstrations, `teachings` (harness.start.teachings(args))
    laid out on their shares of the examples."""
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
    examples = Demonstrations(task, tokenizer, args.batch_size, args.seed, teachings, args.rl_only)
    data = torch.utils.data.DataLoader(examples, batch_size=None)
    started = time.perf_counter()
    trainer.fit(module, data)
    return {
        "seconds": time.perf_counter() - started,
        "batches_s": examples.batches_s,
        "final_loss": float(trainer.callback_metrics["loss"]),
    }
