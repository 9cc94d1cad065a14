"""The zoo's table for docs/studies/zoo-rerun.md from leaderboards: each algorithm's row of the rerun beside
its row as published before it (the issue #50 asked for both).

    python scripts/zoo_table.py results/studies/zoo/zoo-math runs/studies/zoo-math

Either folder holds a `leaderboard.parquet` (a run folder or a published one); the second is the
rerun. Rows are ordered by the rerun's held-out accuracy after training.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

NAMES = {
    "grpo": "GRPO",
    "rloo": "RLOO",
    "dr_grpo": "Dr. GRPO",
    "dapo": "DAPO",
    "gspo": "GSPO",
    "reinforce_pp": "REINFORCE++",
    "sdpo": "SDPO",
    "hp_rlvr": "HP-RLVR",
    "ppo": "PPO",
    "gigpo": "GiGPO",
}
COLUMNS = (
    "algorithm",
    "held out, before -> after",
    "gain, 95% CI over seeds",
    "own gain p",
    "vs GRPO (seeds and problems)",
    "wall-clock s",
    "speedup over GRPO",
    "load a core",
    "rollouts",
    "zero-gradient updates",
)


def p_value(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def cells(row: dict, label: str) -> list[str]:
    low, high = row["acc_gain_ci95"] or (None, None)
    half = (high - low) / 2 if low is not None else None
    versus = (
        "-" if row["vs_reference"] in (None, "–") else f"{row['vs_reference']} (p = {p_value(row['vs_reference_p'])})"
    )
    load = row.get("load")
    return [
        f"{NAMES.get(row['algorithm'], row['algorithm'])} ({label})",
        f"{100 * row['acc_before']:.1f} -> {100 * row['acc_after']:.1f}%",
        f"{100 * row['acc_gain']:+.1f} +- {100 * half:.1f}" if half is not None else f"{100 * row['acc_gain']:+.1f}",
        p_value(row["acc_gain_p"]),
        versus,
        f"{row['wall_clock_s']:.1f}",
        f"{row['speedup']:.2f}" if row["speedup"] is not None else "-",
        f"{load:.2f}" if load is not None else "-",
        str(row["rollouts"]),
        f"{100 * row['zero_grad_fraction']:.0f}%",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("published", type=Path, help="the leaderboard as published before the rerun")
    parser.add_argument("rerun", type=Path, help="the rerun's leaderboard")
    args = parser.parse_args(argv)
    old = {r["algorithm"]: r for r in pl.read_parquet(args.published / "leaderboard.parquet").iter_rows(named=True)}
    new = pl.read_parquet(args.rerun / "leaderboard.parquet").sort("acc_after", descending=True)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in new.iter_rows(named=True):
        print("| " + " | ".join(cells(row, "rerun")) + " |")
        if row["algorithm"] in old:
            print("| " + " | ".join(cells(old[row["algorithm"]], "published")) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
