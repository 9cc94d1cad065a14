"""Peak memory of a run: the accelerator's allocator peak on a GPU, else the process's peak
resident set. Several runs share one process, so the peak is reset at each run's start
(Linux lets a process reset its own high-water mark through /proc/self/clear_refs)."""

from __future__ import annotations

import resource
from pathlib import Path

import torch


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # not Linux, or not allowed: the peak then covers the whole process


def peak_mb() -> float:
    """MiB: CUDA's max allocated when a GPU is in use, else VmHWM (ru_maxrss where /proc is absent)."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
