import math

import pytest
import torch

import algorithms.hp_rlvr as hp
from algorithms.hp_rlvr import jsd_weights


def direct_jsd(causal, hindsight, temperature=1.0):
    """Float64 reference in probability space: JSD(P, Q) / ln 2 per position."""
    p = torch.softmax(causal.double() / temperature, -1)
    q = torch.softmax(hindsight.double() / temperature, -1)
    m = (p + q) / 2
    kl_pm = (torch.xlogy(p, p) - torch.xlogy(p, m)).sum(-1)
    kl_qm = (torch.xlogy(q, q) - torch.xlogy(q, m)).sum(-1)
    return 0.5 * (kl_pm + kl_qm) / math.log(2)


def close(actual, expected, atol):
    torch.testing.assert_close(actual, expected.float(), atol=atol, rtol=0)


@pytest.fixture
def logits():
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 7, 50, generator=g) * 2, torch.randn(3, 7, 50, generator=g) * 2


def test_random_matches_reference(logits):
    c, h = logits
    w = jsd_weights(c, h)
    assert w.shape == (3, 7) and w.dtype == torch.float32
    assert (w >= 0).all() and (w <= 1).all()
    close(w, direct_jsd(c, h), 1e-5)


def test_identical_views_give_zero(logits):
    c, _ = logits
    assert jsd_weights(c, c.clone()).abs().max() < 1e-6


def test_disjoint_supports_give_one():
    c = torch.full((4, 10), -math.inf)
    h = torch.full((4, 10), -math.inf)
    c[:, 0] = 0.0
    h[:, 1] = 3.0
    w = jsd_weights(c, h)
    assert torch.isfinite(w).all()
    assert (w - 1).abs().max() < 1e-6


def test_peaked_and_flat(logits):
    c, h = logits
    close(jsd_weights(100 * c, 100 * h), direct_jsd(100 * c, 100 * h), 1e-5)
    zeros = torch.zeros(3, 7, 50)
    near = 1e-3 * torch.randn(3, 7, 50, generator=torch.Generator().manual_seed(1))
    w = jsd_weights(zeros, near)
    assert (w >= 0).all()
    close(w, direct_jsd(zeros, near), 1e-6)


def test_masked_vocab_entries_drop_out(logits):
    c, h = logits
    masked = torch.zeros(50, dtype=torch.bool)
    masked[[3, 17, 18, 49]] = True
    w = jsd_weights(c.masked_fill(masked, -math.inf), h.masked_fill(masked, -math.inf))
    assert torch.isfinite(w).all()
    close(w, direct_jsd(c[..., ~masked], h[..., ~masked]), 1e-5)
    # -inf in one view only (P = 0 where Q > 0) is fine too.
    w1 = jsd_weights(c.masked_fill(masked, -math.inf), h)
    assert torch.isfinite(w1).all()
    close(w1, direct_jsd(c.masked_fill(masked, -math.inf), h), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(logits, dtype):
    c, h = logits
    w = jsd_weights(c.to(dtype), h.to(dtype))
    assert w.dtype == torch.float32
    # Computation is float32: the direct float64 JSD of the rounded logits ...
    close(w, direct_jsd(c.to(dtype).double(), h.to(dtype).double()), 1e-5)
    # ... and close to the float32 result on the original logits.
    close(w, jsd_weights(c, h), 2e-3)


def test_temperature(logits):
    c, h = logits
    close(jsd_weights(c, h, temperature=0.7), direct_jsd(c, h, temperature=0.7), 1e-5)
    close(jsd_weights(c, h, temperature=1.5), direct_jsd(c / 1.5, h / 1.5), 1e-5)


def test_one_dimensional_input(logits):
    c, h = logits
    w = jsd_weights(c[0, 0], h[0, 0])
    assert w.dim() == 0
    close(w, direct_jsd(c[0, 0], h[0, 0]), 1e-5)


def test_large_vocab_chunking(monkeypatch):
    g = torch.Generator().manual_seed(2)
    T, V = 64, 151_936
    c, h = torch.randn(T, V, generator=g) * 3, torch.randn(T, V, generator=g) * 3

    seen = []

    class RecordingF:
        @staticmethod
        def log_softmax(x, *args, **kwargs):
            seen.append(x.reshape(-1, x.shape[-1]).shape[0])
            return torch.nn.functional.log_softmax(x, *args, **kwargs)

    monkeypatch.setattr(hp, "F", RecordingF)
    w8 = jsd_weights(c, h, chunk_size=8)
    assert seen and max(seen) <= 8
    monkeypatch.undo()

    reference = torch.stack([direct_jsd(c[t], h[t]) for t in range(T)])
    # Looser than 1e-5: CPU float32 log_softmax accumulates the normalizer over 152k entries with an error of
    # ~5e-6 in log Z (a constant shift of log P), which moves w by up to ~1.2e-5 here.
    close(w8, reference, 3e-5)
    # Chunking does not change the math; only float32 reduction order may differ (with 2 CPU threads a single-row
    # chunk has its vocabulary sum split across threads: a 1-2 ulp difference; bit-identical with 1 thread).
    for chunk_size in (1, 1000):
        torch.testing.assert_close(jsd_weights(c, h, chunk_size=chunk_size), w8, atol=1e-6, rtol=0)
