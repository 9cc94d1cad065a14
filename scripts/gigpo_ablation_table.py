"""The GiGPO ablation's table (docs/studies/gigpo-ablation.md) from its published folder: each
variant's held-out gain and verdict against `neither`, and the share of malformed turns
(`credit/frac_turns_invalid`) over the first and the last ten steps.

    python scripts/gigpo_ablation_table.py results/studies/gigpo-ablation
"""

import sys

import polars as pl

VARIANTS = ("neither", "kl_only", "penalty_only", "both")


def p_text(p: float | None) -> str:
    return "-" if p is None else (f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}")


def rows(folder: str) -> list[str]:
    board = pl.read_parquet(f"{folder}/leaderboard.parquet")
    steps = pl.read_parquet(f"{folder}/steps.parquet")
    lines = [
        "| variant | seeds | held out, before -> after | gain, 95% CI | own gain p | vs neither | p "
        "| malformed turns, first -> last 10 steps | wall-clock s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        r = board.filter(pl.col("algorithm") == name).row(0, named=True)
        runs = steps.filter(pl.col("run").str.starts_with(name + "-seed"))
        first = runs.filter(pl.col("step") <= 10)["credit/frac_turns_invalid"].mean()
        last = runs.filter(pl.col("step") > 90)["credit/frac_turns_invalid"].mean()
        low, high = r["acc_gain_ci95"]
        lines.append(
            f"| {name} | {r['seeds']} | {100 * r['acc_before']:.2f} -> {100 * r['acc_after']:.2f}% "
            f"| {100 * r['acc_gain']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] | {p_text(r['acc_gain_p'])} "
            f"| {r['vs_reference'] or '-'} | {p_text(r['vs_reference_p'])} | {100 * first:.1f}% -> {100 * last:.1f}% "
            f"| {r['wall_clock_s']:.0f} |"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(rows(sys.argv[1])))
