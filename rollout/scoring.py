"""Scoring tokens under a policy: the log-prob of each token given the ones before it, with a
group's shared prompt run through the trunk once (`sequence_logprobs(..., group_size=G)`: its keys
and values, with their graph, are repeated for the completions), only the scored positions
projected to the vocabulary; and the masked mean every loss and statistic uses."""

from __future__ import annotations

import torch
from torch import Tensor

from rollout.batch import position_ids, repeats_in_groups
from rollout.cache import cache_argument, returned_cache
from rollout.sharding import trunk


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The mean of `values` where `mask` is set, over `dim` (all of it when None); 0 where the
    mask holds nothing."""
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim, keepdim=keepdim) / mask.sum(dim, keepdim=keepdim).clamp(min=1)


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
    model,
    input_ids: Tensor,
    attention_mask: Tensor,
    temperature: float,
    positions: Tensor | None = None,
    group_size: int = 1,
    slots: int | None = None,
) -> Tensor:
    """[N, L] log-prob of each token given the ones before it (column 0, which has no
    context, is 0). Gradients flow when called outside no_grad.

    `group_size` > 1: rows come in consecutive groups of that size that share their prompt (the
    columns before the first position of `positions`); the prompt then runs through the trunk
    once per group (`shared_prefix_hidden`). Rows that do not share it are scored unshared.

    With `positions` ([N, L] bool, e.g. the eligible tokens) only those columns are computed
    (0 elsewhere): the trunk runs once and only the hidden states that predict them are projected
    to the vocabulary, so no [N, L, V] logits exist (a prompt of 500 tokens and a vocabulary of
    151,936 would otherwise cost 300 MB a row in float32). The projection is the model's output
    head as is: a model that post-processes its logits (soft-capping) needs `positions=None`.

    `slots`: at most that many token slots a pass (`by_length`), with `positions` given. A group
    with no position to score is left out of the passes (its log-probs are 0 by definition)."""
    if positions is not None:
        scored = positions.reshape(-1, group_size * positions.shape[1]).any(1)
        if scored.any() and not scored.all():
            rows = scored.repeat_interleave(group_size).nonzero().squeeze(1)
            part = sequence_logprobs(
                model, input_ids[rows], attention_mask[rows], temperature, positions[rows], group_size, slots
            )
            return part.new_zeros(positions.shape).index_put((rows,), part)
    if slots is not None and positions is not None:
        return by_length(
            lambda ids, mask, scored: (sequence_logprobs(model, ids, mask, temperature, scored, group_size),),
            input_ids,
            attention_mask,
            positions,
            group_size,
            slots,
        )[0]
    if positions is None:
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
        ).logits
        logp = token_logprobs(logits[:, :-1], input_ids[:, 1:], temperature)
        return torch.nn.functional.pad(logp, (1, 0))
    prefix = shared_prefix_length(model, input_ids, attention_mask, positions, group_size)
    if prefix:
        hidden = shared_prefix_hidden(model, input_ids, attention_mask, group_size, prefix)
    else:
        hidden = trunk(model)(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids(attention_mask),
            use_cache=False,
        ).last_hidden_state
    return logprobs_at(model.get_output_embeddings(), hidden, input_ids, positions, temperature)


def by_length(
    score, input_ids: Tensor, attention_mask: Tensor, positions: Tensor, group_size: int, slots: int
) -> tuple[Tensor, ...]:
    """`score(input_ids, attention_mask, positions)` -> a tuple of [n, l] tensors, over groups of
    `group_size` rows taken shortest first, in passes of at most `slots` token slots (one group at
    least), each trimmed of the columns that are padding in all its rows; the results put back in
    place (0 on the trimmed columns). Rows that stop early are then not computed at the longest
    row's length. A batch of at most `slots` slots is scored as it is, in one pass."""
    if input_ids.numel() <= slots:
        return tuple(score(input_ids, attention_mask, positions))
    rows, width = input_ids.shape
    used = attention_mask.bool().view(rows // group_size, group_size, width).any(1)  # [groups, L]
    first = used.int().argmax(-1).tolist()
    last = (width - 1 - used.flip(-1).int().argmax(-1)).tolist()
    order = sorted(range(len(last)), key=last.__getitem__)  # stable: ties keep their order
    parts, placed, start = [], [], 0
    while start < len(order):
        end = start + 1
        lo = first[order[start]]
        while end < len(order):
            lo_next = min(lo, first[order[end]])
            if (end + 1 - start) * group_size * (last[order[end]] + 1 - lo_next) > slots:
                break
            lo, end = lo_next, end + 1
        hi = last[order[end - 1]] + 1
        index = torch.tensor(
            [g * group_size + k for g in order[start:end] for k in range(group_size)], device=input_ids.device
        )
        outputs = score(input_ids[index, lo:hi], attention_mask[index, lo:hi], positions[index, lo:hi])
        parts.append([torch.nn.functional.pad(output, (lo, width - hi)) for output in outputs])
        placed.append(index)
        start = end
    back = torch.argsort(torch.cat(placed))
    return tuple(torch.cat(outputs)[back] for outputs in zip(*parts))


def shared_prefix_length(model, input_ids: Tensor, attention_mask: Tensor, positions: Tensor, group_size: int) -> int:
    """The number of leading columns that every consecutive group of `group_size` rows has in common
    (tokens and mask), cut before the first scored position; 0 when there is nothing to share."""
    if not positions.any():
        return 0
    if activation_checkpointing(model) and torch.is_grad_enabled():
        return 0  # checkpointed layers keep no cache to share
    prefix = int(positions.any(0).nonzero().min())
    if prefix and repeats_in_groups(input_ids[:, :prefix], attention_mask[:, :prefix], group_size):
        return prefix
    return 0


def shared_prefix_hidden(model, input_ids: Tensor, attention_mask: Tensor, group_size: int, prefix: int) -> Tensor:
    """The trunk's last hidden states [N, L, H] with the first `prefix` columns computed once per
    group: the prefix's keys and values (with their graph) are repeated for the group's rows, and
    the rest of each row attends to them as a cache."""
    head_ids, head_mask = input_ids[::group_size, :prefix], attention_mask[::group_size, :prefix]
    head = trunk(model)(
        input_ids=head_ids, attention_mask=head_mask, position_ids=position_ids(head_mask), use_cache=True
    )
    cache = returned_cache(head)
    cache.batch_repeat_interleave(group_size)
    tail = trunk(model)(
        input_ids=input_ids[:, prefix:],
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask)[:, prefix:],
        **cache_argument(model.base_model, cache),
        use_cache=False,
    )
    return torch.cat([head.last_hidden_state.repeat_interleave(group_size, 0), tail.last_hidden_state], 1)


def logprobs_at(head, hidden: Tensor, input_ids: Tensor, positions: Tensor, temperature: float) -> Tensor:
    """[N, L] log-probs of the tokens at `positions` from the trunk's hidden states (the state at
    column t - 1 predicts token t), projecting only those states; 0 elsewhere."""
    rows, cols = positions[:, 1:].nonzero(as_tuple=True)
    cols = cols + 1
    logits = head(hidden[rows, cols - 1])  # [M, V]
    picked = token_logprobs(logits[None], input_ids[rows, cols][None], temperature)[0]
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    return out.index_put((rows, cols), picked)


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
