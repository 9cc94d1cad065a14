"""The policy's attention (rollout/attention.py) against transformers' SDPA: the same output bit for
bit where it reads grouped heads in place, and transformers' own call wherever a gradient is taken."""

from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from harness.models import load_policy
from rollout.attention import IMPLEMENTATION, sdpa_grouped_in_place
from rollout.decoding import decode

GROUPED = SimpleNamespace(num_key_value_groups=2, is_causal=True)


def inputs(rows, queries, keys, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(rows, 4, queries, 8, generator=generator).to(dtype)
    key, value = (torch.randn(rows, 2, keys, 8, generator=generator).to(dtype) for _ in range(2))
    # left padding of a different length per row, causal over the last `queries` positions
    mask = torch.ones(rows, 1, queries, keys, dtype=torch.bool).tril(keys - queries)
    for row in range(rows):
        mask[row, ..., : row % 4] = False
    return query, key, value, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("queries, keys", [(1, 1), (1, 37), (5, 37), (37, 37)])
def test_without_gradient_the_output_is_transformers_bit_for_bit(queries, keys, dtype):
    query, key, value, mask = inputs(6, queries, keys, dtype)
    with torch.no_grad():
        ours, _ = sdpa_grouped_in_place(GROUPED, query, key, value, mask, scaling=8**-0.5)
        theirs, _ = sdpa_attention_forward(GROUPED, query, key, value, mask, scaling=8**-0.5)
    assert torch.equal(ours, theirs)


def test_where_a_gradient_is_taken_it_is_transformers_call_with_its_gradients():
    query, key, value, mask = inputs(6, 5, 37, torch.bfloat16)
    grads = []
    for attention in (sdpa_grouped_in_place, sdpa_attention_forward):
        leaves = [t.clone().requires_grad_() for t in (query, key, value)]
        out, _ = attention(GROUPED, *leaves, mask, scaling=8**-0.5)
        out.float().square().sum().backward()
        grads.append([t.grad for t in leaves])
    assert all(torch.equal(ours, theirs) for ours, theirs in zip(*grads))


def test_decoding_samples_the_same_tokens_and_log_probs_as_with_transformers_sdpa(tiny_dir):
    prompts = torch.randint(3, 100, (4, 9), generator=torch.Generator().manual_seed(1)).repeat_interleave(3, 0)
    mask = torch.ones_like(prompts)
    mask[:3, :4] = 0  # the first group left-padded
    results = []
    for attention in (IMPLEMENTATION, "sdpa"):
        model, _ = load_policy(tiny_dir, attention=attention)
        assert model.config.num_attention_heads > model.config.num_key_value_heads  # grouped heads
        torch.manual_seed(0)
        results.append(decode(model, prompts, mask, stop_ids=[1], max_new_tokens=12, group_size=3))
    assert all(torch.equal(ours, theirs) for ours, theirs in zip(*results))


def test_the_policy_is_loaded_with_it(tiny_dir):
    assert load_policy(tiny_dir)[0].config._attn_implementation == IMPLEMENTATION
