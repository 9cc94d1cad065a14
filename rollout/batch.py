"""The rollout batch: one row per rollout, the prompt (left-padded) followed by what the policy
generated (right-padded), so that column t of every tensor speaks of the same token. `eligible`
marks the tokens the policy itself produced: the learning signal touches nothing else. Also the
problem and verdict types that travel with it, and left padding."""

from __future__ import annotations

import unicodedata
from array import array
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch
from torch import Tensor

FEEDBACK_LIMIT = 1000
"""Characters of a verdict's feedback kept (the sandbox's own limit is lower)."""


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of one rollout: reward in [0, 1] and feedback a model can read."""

    reward: float
    feedback: str
    """Untrusted text (a program's value may be quoted in it): made valid UTF-8 text (a lone
    surrogate becomes '?'), with no control or format character but newline and tab (each
    becomes '?'), and cut to FEEDBACK_LIMIT here, so no tokenizer, record or hindsight block that
    takes it can fail on it or be steered by it. Where it is tokenized, `as_text` keeps a special
    token's string in it from becoming that token."""
    judged: bool = True
    """False where the verifier itself failed (its sandbox, an environment), not the rollout: the
    reward then means nothing. Such a rollout's group is left out of the update (`trainable`) and
    counted (`verify/unjudged`); a broken verifier must not teach the policy that its work fails."""

    def __post_init__(self):
        if type(self.feedback) is not str:
            raise TypeError(f"feedback: must be text (got {type(self.feedback).__name__})")
        text = self.feedback.encode("utf-8", "replace").decode("utf-8")
        if not text.isprintable():  # control and format characters (escapes, bidi overrides) become '?'
            text = "".join(c if c in "\n\t" or unicodedata.category(c)[0] != "C" else "?" for c in text)
        if len(text) > FEEDBACK_LIMIT:
            text = text[: FEEDBACK_LIMIT - 3] + "..."
        if text != self.feedback:
            object.__setattr__(self, "feedback", text)


def as_text(text: str, tokenizer) -> str:
    """`text` with every special token's string (end-of-text, pad, chat markers) taken out, so
    that it tokenizes as the text it is: untrusted text quoted in a context must not end or
    restructure it."""
    specials = [s for s in tokenizer.all_special_tokens if s]
    while any(s in text for s in specials):  # until none is left: removing one may join another
        for s in specials:
            text = text.replace(s, "")
    return text


def solved(reward):
    """Whether a reward (a float, or a tensor of them) is a pass: the full reward. A partial score,
    some of a problem's tests passed, is not one (pass@k, the paired tests, HP-RLVR's outcome)."""
    return reward >= 1.0


@dataclass(frozen=True)
class Problem:
    """One prompt. `answer` is for the verifier only; `demonstration` is a worked completion for
    the warm start (empty where the task has none)."""

    id: str
    prompt: str
    answer: str
    demonstration: str = ""


@dataclass
class Rollouts:
    problems: list[Problem]
    input_ids: Tensor  # [N, L] prompt then completion
    attention_mask: Tensor  # [N, L]
    eligible: Tensor  # [N, L] bool: tokens the policy generated, EOS included
    sample_logprobs: Tensor  # [N, L] log-prob of each eligible token when it was sampled, 0 elsewhere
    completions: list[str]
    verdicts: list[Verdict] = field(default_factory=list)
    token_data: dict[str, Tensor] = field(default_factory=dict)
    """Further [N, L] tensors aligned with input_ids (advantages, old log-probs, values)."""
    truncated: list[bool] = field(default_factory=list)
    """Per rollout, whether a limit cut it (a multi-turn episode's turn limit); empty: a
    single-turn completion is cut when it has no EOS."""
    turn_states: list[list[str]] = field(default_factory=list)
    """Per rollout of a multi-turn task, the environment's state (observation text) before each of
    its turns, in order; turn k's tokens are the k-th contiguous run of eligible tokens of the row.
    Empty for single-turn tasks."""
    turn_valid: list[list[bool]] = field(default_factory=list)
    """Per rollout of a multi-turn task, whether the environment took each turn's command (ALFWorld:
    any answer but "Nothing happens."), in the order of `turn_states`. Empty where not recorded."""

    def __len__(self) -> int:
        return len(self.problems)

    def truncations(self, eos_token_id: int) -> list[bool]:
        """Per rollout, whether a length or turn limit ended it rather than the policy or the game."""
        if self.truncated:
            return list(self.truncated)
        return (~((self.input_ids == eos_token_id) & self.eligible).any(-1)).tolist()

    @property
    def rewards(self) -> Tensor:
        return torch.tensor([v.reward for v in self.verdicts], dtype=torch.float32, device=self.input_ids.device)

    @property
    def judged(self) -> Tensor:
        """[N] bool: whether the verifier could judge each rollout (`Verdict.judged`)."""
        return torch.tensor([v.judged for v in self.verdicts], dtype=torch.bool, device=self.input_ids.device)

    def trainable(self, group_size: int) -> "Rollouts":
        """The same rollouts with no eligible token in a group that holds an unjudged rollout: a
        group's statistics need every reward of it, so the whole group is left out of the update."""
        if not self.verdicts or all(v.judged for v in self.verdicts):
            return self
        whole = self.judged.view(-1, group_size).all(-1).repeat_interleave(group_size)
        return replace(self, eligible=self.eligible & whole[:, None])

    def select(self, index: Tensor) -> "Rollouts":
        """The rows in `index`, trimmed of columns that are padding in all of them."""
        rows = index.tolist()
        mask = self.attention_mask[index]
        used = mask.any(0).nonzero()
        lo, hi = int(used.min()), int(used.max()) + 1
        return Rollouts(
            problems=[self.problems[i] for i in rows],
            input_ids=self.input_ids[index, lo:hi],
            attention_mask=mask[:, lo:hi],
            eligible=self.eligible[index, lo:hi],
            sample_logprobs=self.sample_logprobs[index, lo:hi],
            completions=[self.completions[i] for i in rows],
            verdicts=[self.verdicts[i] for i in rows] if self.verdicts else [],
            token_data={k: v[index, lo:hi] for k, v in self.token_data.items()},
            truncated=[self.truncated[i] for i in rows] if self.truncated else [],
            turn_states=[self.turn_states[i] for i in rows] if self.turn_states else [],
            turn_valid=[self.turn_valid[i] for i in rows] if self.turn_valid else [],
        )


def concatenate(parts: Sequence[Rollouts], pad_id: int) -> Rollouts:
    """Stack rollouts of different lengths, aligning the prompt/completion boundary."""
    prompt_lens = [int((~r.eligible).cumprod(-1).sum(-1).max()) for r in parts]
    left = max(prompt_lens)
    right = max(r.input_ids.shape[1] - p for r, p in zip(parts, prompt_lens))

    def pad(t: Tensor, p: int, value) -> Tensor:
        return torch.nn.functional.pad(t, (left - p, right - (t.shape[1] - p)), value=value)

    return Rollouts(
        problems=[x for r in parts for x in r.problems],
        input_ids=torch.cat([pad(r.input_ids, p, pad_id) for r, p in zip(parts, prompt_lens)]),
        attention_mask=torch.cat([pad(r.attention_mask, p, 0) for r, p in zip(parts, prompt_lens)]),
        eligible=torch.cat([pad(r.eligible, p, False) for r, p in zip(parts, prompt_lens)]),
        sample_logprobs=torch.cat([pad(r.sample_logprobs, p, 0.0) for r, p in zip(parts, prompt_lens)]),
        completions=[x for r in parts for x in r.completions],
        verdicts=[x for r in parts for x in r.verdicts],
        token_data={
            key: torch.cat([pad(r.token_data[key], p, 0) for r, p in zip(parts, prompt_lens)])
            for key in parts[0].token_data
            if all(key in r.token_data for r in parts)
        },
        truncated=[x for r in parts for x in r.truncated] if all(r.truncated for r in parts) else [],
        turn_states=[x for r in parts for x in r.turn_states] if all(r.turn_states for r in parts) else [],
        turn_valid=[x for r in parts for x in r.turn_valid] if all(r.turn_valid for r in parts) else [],
    )


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions that skip left padding, as `generate` computes them, so that a training
    forward pass scores exactly what was sampled."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def repeats_in_groups(input_ids: Tensor, attention_mask: Tensor, group_size: int) -> bool:
    """Whether each consecutive group of `group_size` rows is one row repeated (tokens and mask);
    False for a group of 1 or rows that do not divide into groups."""
    if group_size < 2 or input_ids.shape[0] % group_size:
        return False
    ids, mask = (
        input_ids.view(-1, group_size, input_ids.shape[1]),
        attention_mask.view(-1, group_size, input_ids.shape[1]),
    )
    return bool((ids == ids[:, :1]).all() and (mask == mask[:, :1]).all())


def left_padded(rows: Sequence[list[int]], pad: int, device) -> tuple[Tensor, Tensor]:
    """(token ids [N, W], attention mask [N, W]) of rows left-padded to the longest."""
    ids = stacked_left(rows, pad, torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    mask = (torch.arange(ids.shape[1]) >= ids.shape[1] - lengths[:, None]).long()
    return ids.to(device), mask.to(device)


_TYPECODES = {torch.long: "q", torch.float32: "f", torch.bool: "B"}


def stacked_left(rows: Sequence[Sequence], value, dtype: torch.dtype) -> Tensor:
    """[N, W] CPU tensor of rows (lists of ints, floats or bools) left-padded with `value` to the
    longest, through one flat array: a tensor from nested lists costs several times more
    (docs/performance.md)."""
    width = max(map(len, rows))
    flat = array(_TYPECODES[dtype])
    for row in rows:
        flat.extend([value] * (width - len(row)))
        flat.extend(row)
    if not flat:
        return torch.empty((len(rows), width), dtype=dtype)
    as_stored = torch.uint8 if dtype == torch.bool else dtype
    return torch.frombuffer(flat, dtype=as_stored).view(len(rows), width).to(dtype, copy=True)


def completed(
    problems: Sequence[Problem],
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion: Tensor,
    generated: Tensor,
    logprobs: Tensor,
    tokenizer,
) -> Rollouts:
    """Single-turn `Rollouts` from left-padded prompts and their completions: `generated` marks
    each row's own tokens (up to and including its stop token), which are the eligible ones."""
    prompt_mask = prompt_mask.bool()
    zeros = torch.zeros_like(prompt_mask)
    return Rollouts(
        problems=list(problems),
        input_ids=torch.cat([prompt_ids, completion], 1),
        attention_mask=torch.cat([prompt_mask, generated], 1).long(),
        eligible=torch.cat([zeros, generated], 1),
        sample_logprobs=torch.cat([zeros.float(), logprobs.masked_fill(~generated, 0.0)], 1),
        completions=tokenizer.batch_decode(
            completion.masked_fill(~generated, tokenizer.pad_token_id), skip_special_tokens=True
        ),
    )
