"""What one sandbox run can still tell the next through the shared page cache (docs/sandbox.md,
"Channels between runs"). The sender, one run, reads one byte of each page that stands for a 1;
the receiver, a later run, times a one-byte read of every page: a page another run read is in
the cache (microseconds), one nobody read comes from the disk (much longer). Pages are picked at
random in large files of the view (/usr), a megabyte apart so that read-ahead links none, so
they start cold. preadv2(RWF_NOWAIT), which answered without timing, is refused by the filter
(the receiver tries it first and prints what happened).

    python scripts/sandbox_channels.py [--bits 256] [--rounds 3] [--seed 0]

Prints, per round, the bits sent, the bits the receiver got wrong, the latencies of the ones and
the zeros, and the bandwidth over both runs' wall-clock.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.sandbox import execute  # noqa: E402

SENDER = """
import os
for path, offset in PAGES:
    fd = os.open(path, os.O_RDONLY)
    os.pread(fd, 1, offset)
    os.close(fd)
"""
RECEIVER = """
import os, time
try:
    fd = os.open(PAGES[0][0], os.O_RDONLY)
    os.preadv(fd, [bytearray(1)], PAGES[0][1], os.RWF_NOWAIT)
    print("nowait: answered")
except OSError as exc:
    print("nowait:", type(exc).__name__, exc.errno)
for path, offset in PAGES:
    fd = os.open(path, os.O_RDONLY)
    start = time.perf_counter_ns()
    os.pread(fd, 1, offset)
    print((time.perf_counter_ns() - start) / 1000)
    os.close(fd)
"""
THRESHOLD_US = 20.0  # a cached one-byte pread from Python takes a few microseconds


def large_files(root: str = "/usr", least: int = 32 << 20) -> list[tuple[str, int]]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                if not os.path.islink(path) and os.path.getsize(path) >= least:
                    found.append((path, os.path.getsize(path)))
            except OSError:
                continue
    return sorted(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    files = large_files()
    slots = [(path, mb << 20) for path, size in files for mb in range(size >> 20)]
    print(f"{len(files)} files of >= 32 MB under /usr, {len(slots)} one-megabyte slots")
    rng = random.Random(args.seed)
    for round_ in range(args.rounds):
        pages = [(path, base + 4096 * rng.randrange(256)) for path, base in rng.sample(slots, args.bits)]
        bits = [rng.randrange(2) for _ in pages]
        sent = [page for page, bit in zip(pages, bits) if bit]
        start = time.perf_counter()
        sender = execute(f"PAGES = {sent!r}\n" + SENDER, "assert True\n", 60.0)
        receiver = execute(f"PAGES = {pages!r}\n" + RECEIVER, "assert True\n", 120.0)
        seconds = time.perf_counter() - start
        assert sender.verdict.reward == 1.0 and receiver.verdict.reward == 1.0, (sender, receiver)
        lines = receiver.stdout.split("\n")
        latencies = [float(x) for x in lines[1 : 1 + len(pages)]]
        got = [int(t < THRESHOLD_US) for t in latencies]
        wrong = sum(a != b for a, b in zip(got, bits))
        ones = [t for t, b in zip(latencies, bits) if b]
        zeros = [t for t, b in zip(latencies, bits) if not b]
        print(
            f"round {round_}: {lines[0]}; {len(pages)} bits, {wrong} wrong; "
            f"median latency of ones {statistics.median(ones):.1f} us, of zeros {statistics.median(zeros):.1f} us; "
            f"{(len(pages) - 2 * wrong) / seconds:.0f} bits/s over both runs ({seconds:.2f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
