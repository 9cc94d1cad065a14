"""CPU kernels that round alike on every x86-64 CPU, so a suite's records are the same bit for bit
whatever the machine's instruction set or thread count.

A float sum's rounding depends on its order, and the CPU kernels choose the order by the machine:
ATen's vector width (AVX2's 8 lanes, AVX-512's 16), MKL's GEMM blocking (by instruction set,
vendor and cache size, and how it splits the work between threads). `pin()` fixes both before
torch runs its first kernel: ATen at its AVX2 kernels, and MKL in its strict conditional
numerical reproducibility mode on the AVX2 code path (its instruction set capped at AVX2 too),
which Intel documents as the same results on every processor that has that path and at any
thread count. oneDNN is capped at AVX2 for the paths that use it (bf16).
docs/results.md#reproducible-anywhere has the measured matrix and its cost.

`HARNESS_CPU_KERNELS=native` leaves the machine's own kernels (faster, and records that differ
between machines); a CPU without AVX2 (or not x86-64) has no portable level and runs native.
"""

from __future__ import annotations

import os
import platform
from functools import cache

SWITCH = "HARNESS_CPU_KERNELS"
PORTABLE = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # MKL_ENABLE_INSTRUCTIONS=AVX512 moves MKL off the strict path (measured)
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
"""The environment every portable process runs under (its child processes inherit it)."""


def pin() -> str:
    """Put this process (and the processes it starts) on the portable kernels unless
    `HARNESS_CPU_KERNELS=native` or the CPU cannot run them; returns the mode asked for. Effective
    only before torch's first kernel runs (importing torch runs none): `level()` says what ran."""
    if os.environ.get(SWITCH, "portable") == "native" or not has_avx2():
        return "native"
    os.environ.update(PORTABLE)
    return "portable"


@cache
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as info:
            line = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def has_avx2() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and {"avx2", "fma"} <= cpu_flags()


@cache
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            line = next((line for line in info if line.startswith("model name")), "")
    except OSError:
        line = ""
    return line.partition(":")[2].strip() or platform.processor() or platform.machine()


def level() -> dict[str, str | int | None]:
    """What this process's CPU numbers depend on: `mode` is "portable" only when ATen really runs
    its AVX2 kernels and MKL its strict AVX2 path (a process whose torch ran a kernel before
    `pin()` keeps the machine's own), the rest names them and the machine."""
    import torch

    aten = torch.backends.cpu.get_cpu_capability()
    portable = aten == "AVX2" and all(os.environ.get(k) == PORTABLE[k] for k in PORTABLE if k.startswith("MKL"))
    return {
        "mode": "portable" if portable else "native",
        "aten": aten,
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
        "mkl_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
        "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "threads": torch.get_num_threads(),
        "cpu": cpu_name(),
        "machine": platform.machine(),
        "avx512": "avx512f" in cpu_flags(),
    }
