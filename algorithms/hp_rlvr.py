"""HP-RLVR (Hindsight-Privileged RLVR)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

# Module-level alias so tests can monkeypatch `algorithms.hp_rlvr.F` to watch the chunking.
F = torch.nn.functional

_LN2 = math.log(2.0)


# ---- Token weight: normalized Jensen-Shannon divergence between the causal and hindsight views


@torch.no_grad()
def jsd_weights(causal_logits: Tensor, hindsight_logits: Tensor, temperature: float = 1.0, chunk_size: int = 128) -> Tensor:
    """logits [..., V] (same shape) -> normalized JSD per position [...], float32 in [0, 1].

        P = softmax(causal / T),  Q = softmax(hindsight / T),  M = (P + Q) / 2
        w = JSD(P, Q) / ln 2,     JSD = 1/2 KL(P || M) + 1/2 KL(Q || M)      over the full vocabulary

    Everything is in log space and float32 (whatever the input dtype): log M = logaddexp(log P, log Q) - ln 2,
    never log((P + Q) / 2), which underflows for the tail of a large vocabulary. Entries with P = 0 (-inf logits,
    masked vocabulary) contribute 0 to KL(P || M) (0 * log 0 = 0), so they give no NaN. Rows are processed
    `chunk_size` at a time, so the float32 intermediates are O(chunk_size x V), not O(T x V).
    """
    if causal_logits.shape != hindsight_logits.shape:
        raise ValueError(f"shape mismatch: {tuple(causal_logits.shape)} vs {tuple(hindsight_logits.shape)}")
    vocab = causal_logits.shape[-1]
    out = torch.empty(causal_logits.shape[:-1], dtype=torch.float32, device=causal_logits.device)
    causal, hindsight, flat_out = causal_logits.reshape(-1, vocab), hindsight_logits.reshape(-1, vocab), out.view(-1)
    for start in range(0, causal.shape[0], chunk_size):
        rows = slice(start, start + chunk_size)
        log_p = F.log_softmax(causal[rows].float() / temperature, dim=-1)
        log_q = F.log_softmax(hindsight[rows].float() / temperature, dim=-1)
        log_m = torch.logaddexp(log_p, log_q) - _LN2
        # where(log_p > -inf, ...) implements 0 * anything = 0; where log P is finite, log M is too (log M >= log P - ln 2).
        kl_p = torch.where(log_p > -math.inf, log_p.exp() * (log_p - log_m), 0.0).sum(-1)
        kl_q = torch.where(log_q > -math.inf, log_q.exp() * (log_q - log_m), 0.0).sum(-1)
        flat_out[rows] = (0.5 * (kl_p + kl_q) / _LN2).clamp_(0.0, 1.0)
    return out
