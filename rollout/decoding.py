"""Sampling rollouts: our batched, KV-cached decoding loop at temperature / top-p, stopping at
EOS. The second sampling backend, `rollout.vllm_engine.VLLMEngine`, stands beside `RolloutEngine` and
returns the same `Rollouts`.

Our own loop on the model's forward pass and KV cache (`decode`), not transformers' `generate`,
for two savings that `generate` cannot make and that a group of G rollouts of one prompt
(GRPO's) invites:
- the prompt is prefilled once per group and its cache repeated G times, not prefilled G times;
- a row that has stopped leaves the batch (its cache rows are dropped), so the cost of a step is
  the rows still generating, not the longest completion times the batch.
Both are exact: the tokens and log-probs equal those of the unshared computation up to
floating-point summation order (tested). The policy's attention (`rollout.attention`) saves a
third: it reads grouped key/value heads in place rather than copying the cache each step.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import torch
from torch import Tensor

from rollout.batch import Problem, Rollouts, completed, concatenate, left_padded, position_ids, repeats_in_groups
from rollout.cache import cache_argument, decoding_cache, returned_cache
from rollout.prompting import render
from rollout.settings import SamplingArgs


@contextmanager
def eval_mode(model):
    """`model` in eval mode for the block, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def prefill(model, input_ids: Tensor, attention_mask: Tensor, group_size: int = 1, length: int | None = None):
    """(KV cache, logits after the last column [N, V]) of left-padded contexts, each consecutive
    group of `group_size` identical rows computed once and its cache repeated for the group. `length`:
    about how long the rows will grow (`decoding_cache`)."""
    shared = group_size if repeats_in_groups(input_ids, attention_mask, group_size) else 1
    ids, mask = input_ids[::shared], attention_mask[::shared]
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=position_ids(mask),
        use_cache=True,
        logits_to_keep=1,
        **cache_argument(model, decoding_cache(model, length)),
    )
    cache, logits = returned_cache(out), out.logits[:, -1]
    if shared > 1:
        cache.batch_repeat_interleave(shared)
        logits = logits.repeat_interleave(shared, 0)
    return cache, logits


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
    group_size: int = 1,
    pad_id: int = 0,
) -> tuple[Tensor, Tensor]:
    """Continue each left-padded row until it emits a stop token or `max_new_tokens`.

    Returns (tokens, logprobs), both [N, M] with M the longest continuation: each row's tokens up
    to and including its stop token, then `pad_id` (log-prob 0). `group_size` > 1: consecutive groups
    of that many rows with identical context are prefilled once. Rows leave the batch as they
    stop. The model is in eval mode for the call, then back in its mode."""
    rows, device = input_ids.shape[0], input_ids.device
    with eval_mode(model):
        cache, logits = prefill(
            model, input_ids, attention_mask, group_size, length=input_ids.shape[1] + max_new_tokens
        )
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
    return tokens[:, :steps], logprobs[:, :steps]


class RolloutEngine:
    def __init__(self, model, tokenizer, sampling: SamplingArgs):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self._prompt_ids: dict[str, list[int]] = {}

    @torch.no_grad()
    def generate(self, problems: Sequence[Problem], greedy: bool = False, group_size: int = 1) -> Rollouts:
        """One completion per entry of `problems`. `group_size`: entries come in consecutive runs of
        that many copies of one problem (GRPO's groups), whose prompt is prefilled once."""
        size = max(group_size, self.sampling.batch_size // group_size * group_size)  # chunks keep groups whole
        chunks = [
            self._generate_chunk(problems[i : i + size], greedy, group_size) for i in range(0, len(problems), size)
        ]
        return chunks[0] if len(chunks) == 1 else concatenate(chunks, self.tokenizer.pad_token_id)

    def push_weights(self) -> None:
        """Nothing to push: this loop samples from the policy's own weights."""

    def prompt_ids(self, prompt: str) -> list[int]:
        """A prompt's token ids, tokenised once: prompts recur (G copies, the held-out set at
        every evaluation) and a tokenizer call costs more than the table lookup."""
        ids = self._prompt_ids.get(prompt)
        if ids is None:
            text = render(self.tokenizer, prompt, self.sampling.chat)
            ids = self._prompt_ids[prompt] = self.tokenizer(text, add_special_tokens=False).input_ids
        return ids

    def _generate_chunk(self, problems: Sequence[Problem], greedy: bool, group_size: int) -> Rollouts:
        tokenizer, sampling = self.tokenizer, self.sampling
        input_ids, attention_mask = left_padded(
            [self.prompt_ids(p.prompt) for p in problems], tokenizer.pad_token_id, self.model.device
        )
        completion, logprobs = decode(
            self.model,
            input_ids,
            attention_mask,
            stop_ids=[tokenizer.eos_token_id],
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            greedy=greedy,
            group_size=group_size,
            pad_id=tokenizer.pad_token_id,
        )
        # Eligible: every generated token up to and including the first EOS.
        is_eos = completion == tokenizer.eos_token_id
        after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
        generated = ~after_eos
        return completed(problems, input_ids, attention_mask, completion, generated, logprobs, tokenizer)
