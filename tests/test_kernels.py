"""The portable CPU kernels (rollout/kernels.py): the same training arithmetic, bit for bit, at any
thread count and under any instruction set a smaller CPU would offer (simulated through the
kernels' own caps). scripts/cpu_matrix.py runs the same check on whole suites."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout import kernels

ROOT = Path(__file__).parents[1]
needs_avx2 = pytest.mark.skipif(not kernels.has_avx2(), reason="the portable kernels need an x86-64 CPU with AVX2")

# A few AdamW steps of the default tiny model, gradient clipping included; prints the mode and digest.
STEPS = """
import sys
from rollout import kernels
kernels.pin()
import torch
torch.set_num_threads(int(sys.argv[1]))
from harness.start import weights_digest
from harness.settings import TinyConfig
from harness.tiny import build_model, build_tokenizer
tokenizer = build_tokenizer()
model = build_model(TinyConfig(), tokenizer)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
draw = torch.Generator().manual_seed(0)
for _ in range(3):
    ids = torch.randint(2, len(tokenizer), (16, 96), generator=draw)
    model(input_ids=ids, labels=ids).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
print(kernels.level()["mode"], weights_digest(model))
"""
SMALLER_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
CAPS = (*SMALLER_CPU, "MKL_CBWR", kernels.SWITCH)


def trained(threads: int, **env) -> tuple[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in CAPS} | env
    out = subprocess.run(
        [sys.executable, "-c", STEPS, str(threads)], env=environ, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[-2], out[-1]


def test_pin_sets_the_portable_environment_unless_told_native(monkeypatch):
    for name in CAPS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(kernels.SWITCH, "native")
    assert kernels.pin() == "native" and "MKL_CBWR" not in os.environ
    monkeypatch.delenv(kernels.SWITCH)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")  # what a user's shell asked for is overridden
    if kernels.has_avx2():
        assert kernels.pin() == "portable"
        assert {k: os.environ[k] for k in kernels.PORTABLE} == kernels.PORTABLE


def test_pin_asks_mkl_for_its_strict_avx2_branch(monkeypatch):
    """Intel's conditional numerical reproducibility: `AVX2` alone keeps results equal run to run
    on one machine; only `AVX2,STRICT` promises the same results across processors of that path
    and thread counts (oneMKL's developer guide, "Reproducibility Conditions")."""
    for name in CAPS:
        monkeypatch.delenv(name, raising=False)
    if not kernels.has_avx2():
        pytest.skip("the portable kernels need an x86-64 CPU with AVX2")
    assert kernels.pin() == "portable"
    assert os.environ["MKL_CBWR"] == "AVX2,STRICT" and os.environ["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"


@pytest.mark.parametrize(
    "aten, cbwr, mode",
    [("AVX2", "AVX2,STRICT", "portable"), ("AVX512", "AVX2,STRICT", "native"), ("DEFAULT", "AVX2,STRICT", "native"),
     ("AVX2", "AVX2", "native"), ("AVX2", None, "native")],
)  # fmt: skip
def test_the_level_is_portable_only_where_aten_runs_avx2_and_mkl_its_strict_branch(monkeypatch, aten, cbwr, mode):
    """`level()` reads what ran, not what was asked: ATen's capability as torch reports it (a
    process whose torch ran a kernel before `pin()` keeps the machine's own) and MKL's settings."""
    import torch

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: aten)
    for name, value in kernels.PORTABLE.items():
        monkeypatch.setenv(name, value)
    if cbwr is None:
        monkeypatch.delenv("MKL_CBWR")
    else:
        monkeypatch.setenv("MKL_CBWR", cbwr)
    level = kernels.level()
    assert level["mode"] == mode and level["aten"] == aten


@needs_avx2
def test_the_tests_run_on_the_portable_kernels():
    assert kernels.level()["mode"] == "portable"  # tests/conftest.py pins them, as the CLI does


@pytest.mark.slow
@needs_avx2
def test_training_is_the_same_at_any_thread_count_and_instruction_set():
    runs = {
        "1 thread": trained(1),
        "3 threads, an AVX2-only CPU": trained(3, **SMALLER_CPU),
        "2 threads, AVX-512 asked for": trained(2, ATEN_CPU_CAPABILITY="avx512", MKL_ENABLE_INSTRUCTIONS="AVX512"),
    }
    assert {mode for mode, _ in runs.values()} == {"portable"}
    assert len({digest for _, digest in runs.values()}) == 1, runs


@pytest.mark.slow
@pytest.mark.skipif("avx512f" not in kernels.cpu_flags(), reason="the machine's own kernels differ only beside AVX-512")
def test_without_the_pin_the_instruction_set_changes_the_weights():
    """Why the pin exists (and that the digest above can tell): the machine's own kernels round otherwise."""
    own = trained(1, **{kernels.SWITCH: "native"})
    smaller = trained(1, **{kernels.SWITCH: "native"}, **SMALLER_CPU)
    assert own[0] == smaller[0] == "native" and own[1] != smaller[1]
