"""Multi-turn sampling: a batch of episodes whose KV caches are kept from one turn to the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from torch import Tensor

from rollout.batch import left_padded
from rollout.cache import cache_argument, returned_cache
from rollout.decoding import eval_mode, prefill, sample_next

if TYPE_CHECKING:
    from rollout.decoding import RolloutEngine


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

    def __init__(
        self,
        engine: RolloutEngine,
        stop_ids: Sequence[int],
        max_new_tokens: int,
        greedy: bool = False,
        group_size: int = 1,
    ):
        self.engine, self.stop_ids, self.max_new_tokens, self.greedy = engine, list(stop_ids), max_new_tokens, greedy
        self.group_size = group_size  # on the first turn, consecutive groups of identical contexts are prefilled once
        self.keys: list = []
        self.cache = None
        self.mask: Tensor | None = None  # [B, cached columns]: 1 where a real token of the episode is

    @torch.no_grad()
    def turn(
        self,
        keys: Sequence,
        contexts: Sequence[list[int]],
        on_stop: Callable[[list[int], list[list[int]]], None] | None = None,
    ) -> list[Turn]:
        """Each episode's next turn. `on_stop(positions, tokens)`, if given, hears of the episodes
        (by their place in `keys`) whose turn has ended, with its tokens, while the batch still
        decodes the others' (their environments can step meanwhile); the episodes the token limit
        ends are heard of only in the turns returned."""
        model, sampling = self.engine.model, self.engine.sampling
        device, pad = model.device, self.engine.tokenizer.pad_token_id
        with eval_mode(model):
            if self.cache is None:
                self.keys = list(keys)
                input_ids, self.mask = left_padded(contexts, pad, device)
                self.cache, logits = prefill(model, input_ids, self.mask, self.group_size)
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
                if on_stop is not None:
                    ended = (fed_mask[:, 0].bool() & ~alive).nonzero().squeeze(-1)
                    if len(ended):
                        on_stop(ended.tolist(), torch.stack(tokens, 1)[ended].tolist())
                if not alive.any():
                    break  # the stop tokens are fed with the next turn's new tokens
                logits = self._feed(token[:, None], fed_mask)
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
            input_ids=input_ids,
            attention_mask=self.mask,
            position_ids=positions,
            **cache_argument(model, self.cache),
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = returned_cache(out)
        return out.logits[:, -1]


def conversation(engine, stop_ids: Sequence[int], max_new_tokens: int, greedy: bool = False, group_size: int = 1):
    """Multi-turn sampling through `engine`: a sampler that plays turns its own way (vLLM's, on its
    prefix cache) says so with a `conversation` method; ours keeps each episode's KV cache here."""
    own = getattr(engine, "conversation", None)
    if own is not None:
        return own(stop_ids, max_new_tokens, greedy, group_size)
    return Conversation(engine, stop_ids, max_new_tokens, greedy, group_size=group_size)
