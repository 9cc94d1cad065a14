"""The KV cache that decoding appends to, and how to hand it to a transformers model."""

from __future__ import annotations

import functools
import inspect

import torch
from torch import Tensor
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


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
concatenating cache, which short rows that leave the batch most steps read faster
(docs/performance.md has the crossover as measured)."""


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


def cache_argument(model, cache) -> dict:
    """The KV cache as a forward() keyword: `cache` since transformers 5 (which deprecates
    `past_key_values`), `past_key_values` before."""
    return {_cache_keyword(type(model)): cache}


@functools.cache
def _cache_keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def returned_cache(output):
    return output.cache if hasattr(output, "cache") else output.past_key_values
