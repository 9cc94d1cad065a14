"""Rollouts: batched, KV-cached sampling at temperature / top-p, stopping at EOS.

A `Rollouts` holds one row per rollout: the prompt (left-padded) followed by what the policy
generated (right-padded), so that column t of every tensor speaks of the same token. `eligible`
marks the tokens the policy itself produced: the learning signal touches nothing else.

Sampling is our own decoding loop on the model's forward pass and KV cache (`decode`), not
transformers' `generate`, for two savings that `generate` cannot make and that a group of G
rollouts of one prompt (GRPO's) invites:
- the prompt is prefilled once per group and its cache repeated G times, not prefilled G times;
- a row that has stopped leaves the batch (its cache rows are dropped), so the cost of a step is
  the rows still generating, not the longest completion times the batch.
The same sharing applies to the training forward pass (`sequence_logprobs(..., group=G)`): the
prompt's trunk runs once per group, with gradient, and its keys and values are repeated for the
completions. Both are exact: the tokens and log-probs equal those of the unshared computation up to
floating-point summation order (tested).
"""

from __future__ import annotations

import functools
import inspect
from array import array
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

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
        return torch.tensor([v.reward for v in self.verdicts], dtype=torch.float32, device=self.input_ids.device)

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


def sequence_logprobs(
    model, input_ids: Tensor, attention_mask: Tensor, temperature: float, positions: Tensor | None = None, group: int = 1
) -> Tensor:
    """[N, L] log-prob of each token given the ones before it (column 0, which has no
    context, is 0). Gradients flow when called outside no_grad.

    `group` > 1: rows come in consecutive groups of that size that share their prompt (the
    columns before the first position of `positions`); the prompt then runs through the trunk
    once per group (`shared_prefix_hidden`). Rows that do not share it are scored unshared.

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
    prefix = shared_prefix_length(model, input_ids, attention_mask, positions, group)
    if prefix:
        hidden = shared_prefix_hidden(model, input_ids, attention_mask, group, prefix)
    else:
        hidden = model.base_model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
        ).last_hidden_state
    return logprobs_at(model.get_output_embeddings(), hidden, input_ids, positions, temperature)


def shared_prefix_length(model, input_ids: Tensor, attention_mask: Tensor, positions: Tensor, group: int) -> int:
    """The number of leading columns that every consecutive group of `group` rows has in common
    (tokens and mask), cut before the first scored position; 0 when there is nothing to share."""
    if not positions.any():
        return 0
    if activation_checkpointing(model) and torch.is_grad_enabled():
        return 0  # checkpointed layers keep no cache to share
    prefix = int(positions.any(0).nonzero().min())
    if prefix and repeats_in_groups(input_ids[:, :prefix], attention_mask[:, :prefix], group):
        return prefix
    return 0


def activation_checkpointing(model, enable: bool = False) -> bool:
    """Whether the model recomputes its layers' activations in backward (transformers calls it
    activation checkpointing since 5.x, gradient checkpointing before); `enable` turns it on."""
    if enable:
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))


def repeats_in_groups(input_ids: Tensor, attention_mask: Tensor, group: int) -> bool:
    """Whether each consecutive group of `group` rows is one row repeated (tokens and mask);
    False for a group of 1 or rows that do not divide into groups."""
    if group < 2 or input_ids.shape[0] % group:
        return False
    ids, mask = input_ids.view(-1, group, input_ids.shape[1]), attention_mask.view(-1, group, input_ids.shape[1])
    return bool((ids == ids[:, :1]).all() and (mask == mask[:, :1]).all())


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` that appends in place: its keys and values are views of buffers with room
    to spare, which grow by half again when full (a crop leaves the cropped columns as room).
    `DynamicLayer` concatenates the whole cache with each new token, a copy that grows with the
    context (GROWING_CACHE_FROM has what it saved here). Only for decoding without gradient: the
    writes are in place."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.key_buffer: Tensor | None = None
        self.value_buffer: Tensor | None = None

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, new = self.get_seq_length(), key_states.shape[-2]
        if self.key_buffer is None or self.key_buffer.shape[-2] < length + new:
            self._grow(key_states, value_states, length, capacity=length + new + max(64, (length + new) // 2))
        self.key_buffer[..., length : length + new, :] = key_states
        self.value_buffer[..., length : length + new, :] = value_states
        self.keys, self.values = self.key_buffer[..., : length + new, :], self.value_buffer[..., : length + new, :]
        return self.keys, self.values

    def _grow(self, key_states: Tensor, value_states: Tensor, length: int, capacity: int) -> None:
        def larger(states: Tensor, old: Tensor | None) -> Tensor:
            buffer = states.new_empty((*states.shape[:-2], capacity, states.shape[-1]))
            if length:
                buffer[..., :length, :] = old[..., :length, :]
            return buffer

        self.key_buffer = larger(key_states, self.key_buffer)
        self.value_buffer = larger(value_states, self.value_buffer)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            rows = self.key_buffer.shape[0]
            self._rebatch(torch.arange(rows, device=self.key_buffer.device).repeat_interleave(repeats))

    def batch_select_indices(self, indices: Tensor) -> None:
        if self.get_seq_length() > 0:
            self._rebatch(indices)

    def reorder_cache(self, beam_idx: Tensor) -> None:
        self.batch_select_indices(beam_idx)

    def _rebatch(self, rows: Tensor) -> None:
        """Keep `rows` (in that order), copying only the used columns into buffers with the same
        room: rows leave the batch at most steps of a decode, and copying the room with them made
        sampling slower than concatenation."""
        length = self.get_seq_length()
        rows = rows.to(self.key_buffer.device)

        def select(buffer: Tensor) -> Tensor:
            kept = buffer.new_empty((len(rows), *buffer.shape[1:]))
            torch.index_select(buffer[..., :length, :], 0, rows, out=kept[..., :length, :])
            return kept

        self.key_buffer, self.value_buffer = select(self.key_buffer), select(self.value_buffer)
        self.keys, self.values = self.key_buffer[..., :length, :], self.value_buffer[..., :length, :]

    def reset(self) -> None:
        self.key_buffer = self.value_buffer = None
        super().reset()


GROWING_CACHE_FROM = 128
"""Rows expected to reach this many tokens decode with `GrowingLayer`s; shorter ones with the
concatenating cache. Measured on the CPU with the tiny model: at ~60 tokens (math) the growing
cache sampled 9% slower (attention reads strided views, and rows leave the batch most steps), at
~200 (code) 10% faster, at ~400 (ALFWorld episodes) 11% faster."""


def decoding_cache(model, length: int | None = None) -> Cache:
    """An empty KV cache for `model` to decode rows that reach about `length` tokens (None: long,
    as multi-turn episodes are). Full-attention layers grow in place (`GrowingLayer`) from
    GROWING_CACHE_FROM tokens on; other layer kinds (sliding windows, linear attention) keep the
    model's own."""
    cache = DynamicCache(config=model.config)
    if length is not None and length < GROWING_CACHE_FROM:
        return cache
    if not cache.layers:
        return Cache(layer_class_to_replicate=GrowingLayer)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def prefill(model, input_ids: Tensor, attention_mask: Tensor, group: int = 1, length: int | None = None):
    """(KV cache, logits after the last column [N, V]) of left-padded contexts, each consecutive
    group of `group` identical rows computed once and its cache repeated for the group. `length`:
    about how long the rows will grow (`decoding_cache`)."""
    shared = group if repeats_in_groups(input_ids, attention_mask, group) else 1
    ids, mask = input_ids[::shared], attention_mask[::shared]
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True, logits_to_keep=1,
        **cache_argument(model, decoding_cache(model, length)),
    )
    cache, logits = returned_cache(out), out.logits[:, -1]
    if shared > 1:
        cache.batch_repeat_interleave(shared)
        logits = logits.repeat_interleave(shared, 0)
    return cache, logits


def shared_prefix_hidden(model, input_ids: Tensor, attention_mask: Tensor, group: int, prefix: int) -> Tensor:
    """The trunk's last hidden states [N, L, H] with the first `prefix` columns computed once per
    group: the prefix's keys and values (with their graph) are repeated for the group's rows, and
    the rest of each row attends to them as a cache."""
    head_ids, head_mask = input_ids[::group, :prefix], attention_mask[::group, :prefix]
    head = model.base_model(
        input_ids=head_ids, attention_mask=head_mask, position_ids=position_ids(head_mask), use_cache=True
    )
    cache = returned_cache(head)
    cache.batch_repeat_interleave(group)
    tail = model.base_model(
        input_ids=input_ids[:, prefix:],
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask)[:, prefix:],
        **cache_argument(model.base_model, cache),
        use_cache=False,
    )
    return torch.cat([head.last_hidden_state.repeat_interleave(group, 0), tail.last_hidden_state], 1)


def logprobs_at(head, hidden: Tensor, input_ids: Tensor, positions: Tensor, temperature: float) -> Tensor:
    """[N, L] log-probs of the tokens at `positions` from the trunk's hidden states (the state at
    column t - 1 predicts token t), projecting only those states; 0 elsewhere."""
    rows, cols = positions[:, 1:].nonzero(as_tuple=True)
    cols = cols + 1
    logits = head(hidden[rows, cols - 1])  # [M, V]
    picked = token_logprobs(logits[None], input_ids[rows, cols][None], temperature)[0]
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    return out.index_put((rows, cols), picked)


def cache_argument(model, cache) -> dict:
    """The KV cache as a forward() keyword: `cache` since transformers 5 (which deprecates
    `past_key_values`), `past_key_values` before."""
    return {_cache_keyword(type(model)): cache}


@functools.cache
def _cache_keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def returned_cache(output):
    return output.cache if hasattr(output, "cache") else output.past_key_values


def sample_next(logits: Tensor, temperature: float, top_p: float, greedy: bool) -> tuple[Tensor, Tensor]:
    """(next token [B], its log-prob [B]) from last-position logits [B, V]. Sampling draws from
    softmax(logits / T) restricted to the top-p nucleus (the smallest set of most likely tokens
    whose probability reaches top_p; the most likely token always stays), and the log-prob is
    the token's under that same distribution. Greedy: the argmax, log-prob 0."""
    if greedy:
        return logits.argmax(-1), torch.zeros(logits.shape[0], device=logits.device)
    scores = logits.float() / temperature
    if top_p < 1.0:
        ordered, order = scores.sort(-1, descending=True)
        probs = ordered.softmax(-1)
        outside = (probs.cumsum(-1) - probs) >= top_p  # mass before this token already reaches top_p
        scores = scores.scatter(-1, order, ordered.masked_fill(outside, float("-inf")))
    logp = scores.log_softmax(-1)
    # argmax of p / E with E ~ Exp(1) i.i.d. is a draw from p (the exponential race), and
    # several times cheaper on CPU than torch.multinomial
    token = (logp.exp() / torch.empty_like(logp).exponential_()).argmax(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


@torch.no_grad()
def decode(
    model,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    stop_ids: Sequence[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    group: int = 1,
    pad_id: int = 0,
) -> tuple[Tensor, Tensor]:
    """Continue each left-padded row until it emits a stop token or `max_new_tokens`.

    Returns (tokens, logprobs), both [N, M] with M the longest continuation: each row's tokens up
    to and including its stop token, then `pad_id` (log-prob 0). `group` > 1: consecutive groups
    of that many rows with identical context are prefilled once. Rows leave the batch as they
    stop. The model is put in eval mode for the call and restored after."""
    rows, device = input_ids.shape[0], input_ids.device
    was_training = model.training
    model.eval()
    try:
        cache, logits = prefill(model, input_ids, attention_mask, group, length=input_ids.shape[1] + max_new_tokens)
        stops = torch.tensor(list(stop_ids), device=device)
        tokens = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((rows, max_new_tokens), device=device)
        live = torch.arange(rows, device=device)  # which rows the batch still holds
        mask = attention_mask
        steps = 0
        for step in range(max_new_tokens):
            token, logp = sample_next(logits, temperature, top_p, greedy)
            tokens[live, step], logprobs[live, step] = token, logp
            steps = step + 1
            going = ~torch.isin(token, stops)
            if step == max_new_tokens - 1 or not going.any():
                break
            if not going.all():
                keep = going.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                live, mask, token = live[keep], mask[keep], token[keep]
            mask = torch.cat([mask, mask.new_ones(len(live), 1)], 1)
            out = model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=(mask.sum(-1, keepdim=True) - 1),
                **cache_argument(model, cache),
                use_cache=True,
            )
            cache, logits = returned_cache(out), out.logits[:, -1]
    finally:
        model.train(was_training)
    return tokens[:, :steps], logprobs[:, :steps]


class RolloutEngine:
    def __init__(self, model, tokenizer, sampling: SamplingArgs):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self._prompt_ids: dict[str, list[int]] = {}

    @torch.no_grad()
    def generate(self, problems: Sequence[Problem], greedy: bool = False, group: int = 1) -> Rollouts:
        """One completion per entry of `problems`. `group`: entries come in consecutive runs of
        that many copies of one problem (GRPO's groups), whose prompt is prefilled once."""
        size = max(group, self.sampling.batch_size // group * group)  # chunks keep groups whole
        chunks = [
            self._generate_chunk(problems[i : i + size], greedy, group) for i in range(0, len(problems), size)
        ]
        return chunks[0] if len(chunks) == 1 else concatenate(chunks, self.tokenizer.pad_token_id)

    def prompt_ids(self, prompt: str) -> list[int]:
        """A prompt's token ids, tokenised once: prompts recur (G copies, the held-out set at
        every evaluation) and a tokenizer call costs more than the table lookup."""
        ids = self._prompt_ids.get(prompt)
        if ids is None:
            ids = self._prompt_ids[prompt] = self.tokenizer(prompt, add_special_tokens=False).input_ids
        return ids

    def _generate_chunk(self, problems: Sequence[Problem], greedy: bool, group: int) -> Rollouts:
        tokenizer, sampling = self.tokenizer, self.sampling
        input_ids, attention_mask = left_padded([self.prompt_ids(p.prompt) for p in problems], tokenizer.pad_token_id, self.model.device)
        completion, logprobs = decode(
            self.model, input_ids, attention_mask,
            stop_ids=[tokenizer.eos_token_id], max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature, top_p=sampling.top_p, greedy=greedy, group=group,
            pad_id=tokenizer.pad_token_id,
        )
        # Eligible: every generated token up to and including the first EOS.
        is_eos = completion == tokenizer.eos_token_id
        after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
        generated = ~after_eos
        prompt_mask = attention_mask.bool()
        zeros = torch.zeros_like(prompt_mask)
        return Rollouts(
            problems=list(problems),
            input_ids=torch.cat([input_ids, completion], 1),
            attention_mask=torch.cat([prompt_mask, generated], 1).long(),
            eligible=torch.cat([zeros, generated], 1),
            sample_logprobs=torch.cat([zeros.float(), logprobs.masked_fill(~generated, 0.0)], 1),
            completions=tokenizer.batch_decode(completion.masked_fill(~generated, tokenizer.pad_token_id), skip_special_tokens=True),
        )


@dataclass
class Turn:
    """What the policy generated after one context: its tokens (up to and including the first
    stop token) and the log-prob each had when sampled (zeros when greedy)."""

    tokens: list[int]
    logprobs: list[float]


class Conversation:
    """Multi-turn generation over a batch of episodes that keeps each episode's KV cache from
    one turn to the next, so a turn feeds the model only what is new (the environment's answer),
    not the whole episode again.

    Episodes are keyed by the caller's ids. Each turn's contexts must extend the previous ones
    (tokens are only ever appended). In the cache, a turn's new tokens are left-padded to a common
    length and the tokens an episode samples after its stop token (the batch decodes on until
    every episode has stopped) are masked out, so the cache holds padding "holes"; positions
    count only real tokens, so every token is computed exactly as in one contiguous row (tested
    against recomputing each turn from scratch)."""

    def __init__(self, engine: "RolloutEngine", stop_ids: Sequence[int], max_new_tokens: int, greedy: bool = False, group: int = 1):
        self.engine, self.stop_ids, self.max_new_tokens, self.greedy = engine, list(stop_ids), max_new_tokens, greedy
        self.group = group  # on the first turn, consecutive groups of identical contexts are prefilled once
        self.keys: list = []
        self.cache = None
        self.mask: Tensor | None = None  # [B, cached columns]: 1 where a real token of the episode is

    @torch.no_grad()
    def turn(self, keys: Sequence, contexts: Sequence[list[int]]) -> list[Turn]:
        model, sampling = self.engine.model, self.engine.sampling
        device, pad = model.device, self.engine.tokenizer.pad_token_id
        was_training = model.training
        model.eval()
        try:
            if self.cache is None:
                self.keys = list(keys)
                input_ids, self.mask = left_padded(contexts, pad, device)
                self.cache, logits = prefill(model, input_ids, self.mask, self.group)
            else:
                if list(keys) != self.keys:  # episodes that ended leave the batch
                    where = {k: i for i, k in enumerate(self.keys)}
                    keep = torch.tensor([where[k] for k in keys], device=device)
                    self.cache.batch_select_indices(keep)
                    self.mask, self.keys = self.mask[keep], list(keys)
                cached = self.mask.sum(-1).tolist()
                new, chunk_mask = left_padded([c[int(n) :] for c, n in zip(contexts, cached)], pad, device)
                logits = self._feed(new, chunk_mask)
            tokens, logprobs, alive = [], [], torch.ones(len(contexts), dtype=torch.bool, device=device)
            stops = torch.tensor(self.stop_ids, device=device)
            for step in range(self.max_new_tokens):
                token, logp = sample_next(logits, sampling.temperature, sampling.top_p, self.greedy)
                tokens.append(token)
                logprobs.append(logp)
                if step == self.max_new_tokens - 1:
                    break
                # a token belongs to its episode if the episode had not stopped before drawing it
                fed_mask = alive.long()[:, None]
                alive = alive & ~torch.isin(token, stops)
                if not alive.any():
                    break  # the stop tokens are fed with the next turn's new tokens
                logits = self._feed(token[:, None], fed_mask)
        finally:
            model.train(was_training)
        generated, sampled = torch.stack(tokens, 1).tolist(), torch.stack(logprobs, 1)
        turns = []
        for i, row in enumerate(generated):
            end = next((t + 1 for t, token in enumerate(row) if token in self.stop_ids), len(row))
            turns.append(Turn(row[:end], [0.0] * end if self.greedy else sampled[i, :end].tolist()))
        return turns

    def _feed(self, input_ids: Tensor, chunk_mask: Tensor) -> Tensor:
        """Append a chunk to every episode's cache; the logits after its last column."""
        self.mask = torch.cat([self.mask, chunk_mask], 1)
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)[:, -input_ids.shape[1] :]
        model = self.engine.model
        out = model(
            input_ids=input_ids, attention_mask=self.mask, position_ids=positions,
            **cache_argument(model, self.cache), use_cache=True, logits_to_keep=1,
        )
        self.cache = returned_cache(out)
        return out.logits[:, -1]


def left_padded(rows: Sequence[list[int]], pad: int, device) -> tuple[Tensor, Tensor]:
    """(token ids [N, W], attention mask [N, W]) of rows left-padded to the longest."""
    ids = stacked_left(rows, pad, torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    mask = (torch.arange(ids.shape[1]) >= ids.shape[1] - lengths[:, None]).long()
    return ids.to(device), mask.to(device)


_TYPECODES = {torch.long: "q", torch.float32: "f", torch.bool: "B"}


def stacked_left(rows: Sequence[Sequence], value, dtype: torch.dtype) -> Tensor:
    """[N, W] CPU tensor of rows (lists of ints, floats or bools) left-padded with `value` to the
    longest. Through one flat array: a tensor from nested lists cost ~6x more (3 ms for a step's
    128 hindsight rows of 100 tokens)."""
    width = max(map(len, rows))
    flat = array(_TYPECODES[dtype])
    for row in rows:
        flat.extend([value] * (width - len(row)))
        flat.extend(row)
    if not flat:
        return torch.empty((len(rows), width), dtype=dtype)
    as_stored = torch.uint8 if dtype == torch.bool else dtype
    return torch.frombuffer(flat, dtype=as_stored).view(len(rows), width).to(dtype, copy=True)


@torch.no_grad()
def extend(
    engine: RolloutEngine, contexts: Sequence[list[int]], stop_ids: Sequence[int], max_new_tokens: int, greedy: bool = False
) -> list[Turn]:
    """One turn for a batch of episodes, each context (token ids so far) continued until a stop
    token or `max_new_tokens`, recomputing every context from scratch (`Conversation` keeps the
    cache between turns instead). Continuing the same token ids, not a re-tokenised text, keeps
    the episode's row exactly what the policy saw and sampled."""
    return Conversation(engine, stop_ids, max_new_tokens, greedy).turn(range(len(contexts)), contexts)


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
    )
