"""Rollouts on transformers `generate`: batched, KV-cached, temperature / top-p, stop at EOS.

A `Rollouts` holds one row per rollout: the prompt (left-padded) followed by what the policy
generated (right-padded), so that column t of every tensor speaks of the same token. `eligible`
marks the tokens the policy itself produced: the learning signal touches nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from tasks.base import Problem, Verdict


@dataclass
class SamplingArgs:
    """How rollouts are drawn (evaluation is always greedy)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    batch_size: int = 512
    """Rollouts per generate call; more rows than this are generated in chunks. Generation on a
    small model is bound by the token-by-token loop, not the batch, so larger is faster."""


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

    def __len__(self) -> int:
        return len(self.problems)

    @property
    def rewards(self) -> Tensor:
        return torch.tensor([v.reward for v in self.verdicts], dtype=torch.float32)

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
        )


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions that skip left padding, as `generate` computes them, so that a training
    forward pass scores exactly what was sampled."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float = 1.0, chunk: int = 256) -> Tensor:
    """log softmax(logits / T)[token] per position, without a [B, T, V] log-softmax: the
    sampled token's logit minus a logsumexp, computed over chunks of positions."""
    out = torch.empty(tokens.shape, dtype=torch.float32, device=logits.device)
    for start in range(0, tokens.shape[-1], chunk):
        scaled = logits[:, start : start + chunk].float() / temperature
        picked = scaled.gather(-1, tokens[:, start : start + chunk, None]).squeeze(-1)
        out[:, start : start + chunk] = picked - scaled.logsumexp(-1)
    return out


def sequence_logprobs(model, input_ids: Tensor, attention_mask: Tensor, temperature: float, positions: Tensor | None = None) -> Tensor:
    """[N, L] log-prob of each token given the ones before it (column 0, which has no
    context, is 0). Gradients flow when called outside no_grad.

    With `positions` ([N, L] bool, e.g. the eligible tokens) only those columns are computed
    (0 elsewhere): the trunk runs once and only the hidden states that predict them are projected
    to the vocabulary, so no [N, L, V] logits exist (a prompt of 500 tokens and a vocabulary of
    151,936 would otherwise cost 300 MB a row in float32). The projection is the model's output
    head as is: a model that post-processes its logits (soft-capping) needs `positions=None`."""
    if positions is None:
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
        ).logits
        logp = token_logprobs(logits[:, :-1], input_ids[:, 1:], temperature)
        return torch.nn.functional.pad(logp, (1, 0))
    hidden = model.base_model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
    ).last_hidden_state
    return logprobs_at(model.get_output_embeddings(), hidden, input_ids, positions, temperature)


def logprobs_at(head, hidden: Tensor, input_ids: Tensor, positions: Tensor, temperature: float) -> Tensor:
    """[N, L] log-probs of the tokens at `positions` from the trunk's hidden states (the state at
    column t - 1 predicts token t), projecting only those states; 0 elsewhere."""
    rows, cols = positions[:, 1:].nonzero(as_tuple=True)
    cols = cols + 1
    logits = head(hidden[rows, cols - 1])  # [M, V]
    picked = token_logprobs(logits[None], input_ids[rows, cols][None], temperature)[0]
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    return out.index_put((rows, cols), picked)


def generate_kwargs(sampling: SamplingArgs, greedy: bool) -> dict:
    """`generate`'s decoding arguments: greedy, or sampling at T / top-p with no top-k."""
    if greedy:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}


class RolloutEngine:
    def __init__(self, model, tokenizer, sampling: SamplingArgs):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling

    @torch.no_grad()
    def generate(self, problems: Sequence[Problem], greedy: bool = False) -> Rollouts:
        chunks = [
            self._generate_chunk(problems[i : i + self.sampling.batch_size], greedy)
            for i in range(0, len(problems), self.sampling.batch_size)
        ]
        return chunks[0] if len(chunks) == 1 else concatenate(chunks, self.tokenizer.pad_token_id)

    def _generate_chunk(self, problems: Sequence[Problem], greedy: bool) -> Rollouts:
        tokenizer, sampling = self.tokenizer, self.sampling
        was_training = self.model.training
        self.model.eval()
        prompts = tokenizer(
            [p.prompt for p in problems], return_tensors="pt", padding=True, padding_side="left",
            add_special_tokens=False,
        ).to(self.model.device)
        out = self.model.generate(
            **prompts,
            **generate_kwargs(sampling, greedy),
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            return_dict_in_generate=True,
            output_scores=not greedy,
        )
        self.model.train(was_training)
        prompt_len = prompts.input_ids.shape[1]
        completion = out.sequences[:, prompt_len:]
        # Eligible: every generated token up to and including the first EOS.
        is_eos = completion == tokenizer.eos_token_id
        after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
        generated = ~after_eos
        if greedy:
            logprobs = torch.zeros(completion.shape)
        else:
            # scores are the processed logits (temperature, top-p) the sample was drawn from.
            scores = torch.stack(out.scores, 1).float()
            logprobs = token_logprobs(scores, completion)
            logprobs = logprobs.masked_fill(~generated, 0.0)
        prompt_mask = prompts.attention_mask.bool()
        zeros = torch.zeros_like(prompt_mask)
        return Rollouts(
            problems=list(problems),
            input_ids=out.sequences,
            attention_mask=torch.cat([prompt_mask, generated], 1).long(),
            eligible=torch.cat([zeros, generated], 1),
            sample_logprobs=torch.cat([zeros.float(), logprobs], 1),
            completions=tokenizer.batch_decode(completion.masked_fill(~generated, tokenizer.pad_token_id), skip_special_tokens=True),
        )


@dataclass
class Turn:
    """What the policy generated after one context: its tokens (up to and including the first
    stop token) and the log-prob each had when sampled (zeros when greedy)."""

    tokens: list[int]
    logprobs: list[float]


@torch.no_grad()
def extend(
    engine: RolloutEngine, contexts: Sequence[list[int]], stop_ids: Sequence[int], max_new_tokens: int, greedy: bool = False
) -> list[Turn]:
    """One turn of a multi-turn rollout for a batch of episodes: each context (token ids so far)
    continued until a stop token or `max_new_tokens`. Continuing the same token ids, not a
    re-tokenised text, keeps the episode's row exactly what the policy saw and sampled."""
    model, tokenizer, sampling = engine.model, engine.tokenizer, engine.sampling
    width = max(map(len, contexts))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(c)) + list(c) for c in contexts], device=model.device)
    attention_mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=model.device)
    was_training = model.training
    model.eval()
    out = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, **generate_kwargs(sampling, greedy), max_new_tokens=max_new_tokens,
        eos_token_id=list(stop_ids), pad_token_id=pad, return_dict_in_generate=True, output_scores=not greedy,
    )
    model.train(was_training)
    generated = out.sequences[:, width:]
    logprobs = None if greedy else token_logprobs(torch.stack(out.scores, 1).float(), generated)
    turns = []
    for i, row in enumerate(generated.tolist()):
        end = next((t + 1 for t, token in enumerate(row) if token in stop_ids), len(row))
        turns.append(Turn(row[:end], [0.0] * end if greedy else logprobs[i, :end].tolist()))
    return turns


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
    )
