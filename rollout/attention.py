"""The policy's attention: transformers' SDPA, except that on the CPU, where no gradient is taken
and a padding mask is given (decoding, scoring, evaluation), the grouped key/value heads are read
in place (`enable_gqa`) instead of copied out to one per query head.

transformers copies them (`repeat_kv`) whenever a mask is given, because on CUDA a masked
grouped call falls back to the slow math kernel; on the CPU the grouped call runs the same kernel
on the same numbers, so its output is bit for bit the copied call's (tested), and each decoding
step no longer copies the whole cache. The copy stays where a gradient is taken: the grouped
kernel's backward sums the key/value gradients in another order.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

IMPLEMENTATION = "sdpa_grouped_in_place"
"""The `attn_implementation` name the policy is loaded with."""


def sdpa_grouped_in_place(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    plain = attention_mask is None or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
    if not grouped or needs_grad or plain or query.device.type != "cpu":
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(IMPLEMENTATION, sdpa_grouped_in_place)
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)  # the masks SDPA takes
