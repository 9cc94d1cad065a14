"""The leaderboard's arithmetic on runs made up here, against figures worked out by hand."""

import json
from pathlib import Path

import polars as pl
import pytest

from harness.leaderboard import aggregate, ci95, row_notes
from harness.verdicts import ONE_SEED, SEEDS, compare

# each held-out problem's reward at the end, by (algorithm, seed): on seed 0 HP-RLVR alone solves
# problems 5-8; on seed 1 it alone solves 5-9 and GRPO alone solves 4
FINAL = {
    ("grpo", 0): [1.0] * 5 + [0.0] * 5,
    ("hp_rlvr", 0): [1.0] * 9 + [0.0],
    ("grpo", 1): [1.0] * 5 + [0.0] * 5,
    ("hp_rlvr", 1): [1.0] * 4 + [0.0] + [1.0] * 5,
}


def runs(reference: str) -> pl.DataFrame:
    rows = []
    for seed, (slow, fast) in enumerate([(100.0, 50.0), (120.0, 40.0)]):
        for algorithm, seconds in (("grpo", slow), ("hp_rlvr", fast)):
            rows.append(
                {
                    "suite": "s",
                    "task": "T",
                    "model": "tiny",
                    "algorithm": algorithm,
                    "reference": reference,
                    "seed": seed,
                    "steps": 10,
                    "prompts_per_step": 4,
                    "group_size": 8 if algorithm == "grpo" else 1,
                    "rollouts": 40,
                    "wall_clock_s": seconds,
                    "accuracy_before": 0.5,
                    "accuracy_after": 0.5 + 0.01 * (seed + 1),
                    "zero_grad_fraction": 0.0,
                    "grad_norm_records": 10,
                    "tokens_generated": 100,
                    "final_rewards": FINAL[algorithm, seed],
                    "first_rewards": FINAL["grpo", seed],
                    "updates_per_step": 1,
                    "prompts_per_update": 4,
                    "lr": 3e-5 if algorithm == "grpo" else 5e-6,
                    "protocol": {
                        "optim.lr": "3e-05" if algorithm == "grpo" else "5e-06",
                        "sampling.temperature": "0.5",
                        "optim.warmup_steps": "10" if algorithm == "grpo" else "0",
                    },
                    "peak_memory_mb": None,
                    "reward_mean": 0.5,
                    **{f"{stage}_s": 1.0 for stage in ("sample", "verify", "credit", "update")},
                }
            )
    return pl.DataFrame(rows)


def test_speedup_is_the_named_references_wall_clock_over_the_algorithms_per_seed():
    board = aggregate(runs("grpo"))
    hp = board.filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    assert hp["reference"] == "grpo"
    assert hp["speedup"] == pytest.approx((100 / 50 + 120 / 40) / 2)  # the mean of each pair's ratio
    assert board.filter(pl.col("algorithm") == "grpo")["speedup"][0] == 1.0
    named = aggregate(runs("hp_rlvr"))  # the suite says which algorithm the others are paired against
    assert named.filter(pl.col("algorithm") == "grpo")["speedup"][0] == pytest.approx((50 / 100 + 40 / 120) / 2)
    assert named.filter(pl.col("algorithm") == "hp_rlvr")["speedup"][0] == 1.0


def test_t_intervals_use_the_t_quantile_at_every_number_of_seeds():
    # mean 2.5, sample std 1.2910, t(0.975, 3) = 3.1824: half-width 2.0543
    half = 3.18244630 * 1.29099445 / 2
    assert ci95(pl.Series([1.0, 2.0, 3.0, 4.0])) == pytest.approx([2.5 - half, 2.5 + half])
    # 12 seeds: t(0.975, 11) = 2.2010, not the normal 1.96
    values = pl.Series([float(v) for v in range(12)])
    half = 2.20098516 * float(values.std()) / 12**0.5
    assert ci95(values) == pytest.approx([5.5 - half, 5.5 + half])
    assert ci95(pl.Series([3.0])) is None


def test_the_speedup_carries_the_interval_of_its_pairs():
    hp = aggregate(runs("grpo")).filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    ratios = pl.Series([100 / 50, 120 / 40])
    half = 12.70620474 * float(ratios.std()) / 2**0.5
    assert hp["speedup_ci95"] == pytest.approx([2.5 - half, 2.5 + half])


def test_pasting_into_a_readme_keeps_the_key_columns_and_the_plots_and_leaves_the_rest(tmp_path):
    from harness.leaderboard import END, KEY_COLUMNS, START, paste_into

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nold table\n{END}\noutro\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "curves.png").write_bytes(b"")
    board = aggregate(runs("grpo"))
    paste_into(readme, board, tmp_path / "results")
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{END}\noutro\n")
    assert "### Leaderboard: results" in text and "](results/curves.png)" in text
    assert "](results/leaderboard.md)" in text and "old table" not in text
    header = next(line for line in text.splitlines() if line.startswith("| suite"))
    assert header == "| " + " | ".join(KEY_COLUMNS) + " |"  # the key columns; the file holds the rest


def run_info(**changes) -> dict:
    """One GRPO run's run.json, as run_table reads it."""
    return {
        "suite": "s", "task": "T", "model": "tiny", "model_name": "tiny", "algorithm": "grpo", "reference": "grpo",
        "seed": 0, "schedule": {"prompts_per_step": 4}, "update": {"minibatches": 1, "epochs": 1},
        "optim": {"lr": 1e-5}, "group_size": 8, **changes,
    }  # fmt: skip


def two_steps(**changes) -> pl.DataFrame:
    """Two steps' records of that run."""
    return pl.DataFrame(
        {
            "updates": [1, 1], "zero_grad_updates": [0, 0], "rollouts": [32, 32], "wall_clock_s": [1.0, 2.0],
            "tokens/generated": [10, 10], "reward": [1.0, 0.5],
            **{f"timing_s/{stage}": [0.1, 0.1] for stage in ("sample", "verify", "credit", "update")}, **changes,
        }
    )  # fmt: skip


def test_the_zero_gradient_fraction_counts_updates_not_steps():
    from harness.leaderboard import run_table

    info = run_info(accuracy_before=0.5, accuracy_after=0.5)
    metrics = two_steps(updates=[4, 1], zero_grad_updates=[4, 0])
    row = run_table([(info, metrics, pl.DataFrame())]).row(0, named=True)
    assert row["zero_grad_fraction"] == pytest.approx(4 / 5)  # 4 of 5 records; per step it would be 1/2
    assert row["grad_norm_records"] == 5 and row["rollouts"] == 64 and row["wall_clock_s"] == 2.0


def test_a_runs_load_is_its_steps_mean_and_a_seed_without_one_is_left_out():
    """Steps recorded at 0.5 and 1.5 a core: the run's load is their mean, 1.0 (its worst minute
    would be 1.5). Over seeds, a seed recorded before the load was kept has none: the row's load
    is the other seed's, 0.6, and is none only where no seed has one."""
    from harness.leaderboard import run_table

    info = run_info(accuracy_before=0.5, accuracy_after=0.5)
    row = run_table([(info, two_steps(**{"machine/load_per_core": [0.5, 1.5]}), pl.DataFrame())]).row(0, named=True)
    assert row["load"] == pytest.approx(1.0)
    assert run_table([(info, two_steps(), pl.DataFrame())])["load"][0] is None
    table = runs("grpo").with_columns(pl.Series("load", [0.4, 0.6, None, None], dtype=pl.Float64))
    board = aggregate(table)
    assert board.filter(pl.col("algorithm") == "hp_rlvr")["load"][0] == pytest.approx(0.6)
    assert aggregate(table.with_columns(pl.lit(None, pl.Float64).alias("load")))["load"].to_list() == [None, None]


def test_step_s_holds_every_steps_own_time_the_first_included():
    """Wall-clock at the end of each step 2.5 s and 6 s: the steps took 2.5 s (the first, from the
    run's start) and 3.5 s, which sum to the run's wall-clock."""
    from harness.leaderboard import run_table

    info = run_info(accuracy_before=0.5, accuracy_after=0.5)
    row = run_table([(info, two_steps(wall_clock_s=[2.5, 6.0]), pl.DataFrame())]).row(0, named=True)
    assert row["step_s"] == [2.5, 3.5] and sum(row["step_s"]) == row["wall_clock_s"]


def test_credit_fidelity_is_the_mean_over_the_steps_that_had_it_and_absent_where_none_did():
    from harness.leaderboard import run_table

    info = run_info(accuracy_before=0.5, accuracy_after=0.5)
    metrics = two_steps(**{"credit/blame_lift": [2.0, float("nan")], "credit/blame_on_error": [0.5, 0.3]})
    row = run_table([(info, metrics, pl.DataFrame())]).row(0, named=True)
    assert row["blame_lift"] == 2.0 and row["blame_on_error"] == pytest.approx(0.4)
    assert "reinforced_lift" not in row  # not recorded: no column (the published tables before #51)
    assert "blame_lift" not in run_table([(info, two_steps(), pl.DataFrame())]).columns


def test_clip_fractions_and_short_steps_show_what_acted():
    """A clip that bound on 10% and 30% of two steps' tokens: 0.2; one that never bound: 0, not
    absent; DAPO's steps short of groups on one step of two: a share of 0.5."""
    from harness.leaderboard import run_table

    info = run_info(accuracy_before=0.5, accuracy_after=0.5)
    clipped = {
        "clip_ratio/low_mean": [0.0, 0.0],
        "clip_ratio/high_mean": [0.1, 0.3],
        "clip_ratio/region_mean": [0.1, 0.3],
    }
    row = run_table([(info, two_steps(**clipped, **{"dynamic_sampling/short": [0, 3]}), pl.DataFrame())]).row(
        0, named=True
    )
    assert (row["clip_ratio_low"], row["clip_ratio_high"], row["short_step_share"]) == (0.0, pytest.approx(0.2), 0.5)
    plain = run_table([(info, two_steps(), pl.DataFrame())]).row(0, named=True)
    assert plain["short_step_share"] is None and "clip_ratio_high" not in plain


def test_final_accuracy_has_an_exact_binomial_interval_and_a_paired_test_against_the_reference():
    from scipy import stats

    board = aggregate(runs("grpo"))
    hp = board.filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    # 18 of 20 problems over the two seeds: the Clopper-Pearson bounds from the beta distribution
    low, high = stats.beta.ppf(0.025, 18, 3), stats.beta.ppf(0.975, 19, 2)
    assert hp["acc_after_ci95"] == pytest.approx([low, high])  # [low, high]: not symmetric about 0.9
    # two seeds: the two-way test of seeds and problems (tests/test_verdicts.py works it out)
    versus = compare([FINAL["hp_rlvr", s] for s in (0, 1)], [FINAL["grpo", s] for s in (0, 1)])
    assert hp["vs_reference_p"] == pytest.approx(versus.p) and hp["vs_reference_ci95"] == pytest.approx(versus.ci95)
    assert hp["vs_reference"] == versus.verdict() and hp["noise_counted"] == SEEDS
    assert hp["detectable_diff"] == pytest.approx(versus.detectable) and hp["vs_reference_seeds_needed"] is None
    grpo = board.filter(pl.col("algorithm") == "grpo").row(0, named=True)
    assert grpo["vs_reference_p"] is None and grpo["vs_reference"] is None  # the reference itself


def one_seed(reference: str) -> pl.DataFrame:
    """Seed 0 alone, holding both seeds' problems: 9 only HP-RLVR solved, 1 only GRPO."""
    rows = [r for r in runs(reference).iter_rows(named=True) if r["seed"] == 0]
    for row in rows:
        row["final_rewards"] = FINAL[row["algorithm"], 0] + FINAL[row["algorithm"], 1]
        row["first_rewards"] = FINAL["grpo", 0] + FINAL["grpo", 1]
    return pl.DataFrame(rows)


def test_a_verdict_of_one_seed_is_mcnemar_on_the_problems_and_says_so():
    hp = aggregate(one_seed("grpo")).filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    # 9 problems only HP-RLVR solved, 1 only GRPO: exact McNemar p = 2 (1 + 10) / 2**10
    assert hp["vs_reference_p"] == pytest.approx(22 / 1024) and hp["noise_counted"] == ONE_SEED
    assert hp["vs_reference"] == "higher (this seed)"  # not a bare "higher": a claim about this seed only
    reverse = aggregate(one_seed("hp_rlvr")).filter(pl.col("algorithm") == "grpo").row(0, named=True)
    assert reverse["vs_reference"] == "lower (this seed)" and reverse["vs_reference_p"] == pytest.approx(22 / 1024)
    assert "verdict marked (this seed) counts which held-out problems were drawn" in row_notes(
        aggregate(one_seed("grpo"))
    )
    assert "(this seed)" not in row_notes(aggregate(runs("grpo")))


def test_settings_that_differ_between_a_suites_algorithms_stand_beside_their_rows():
    board = aggregate(runs("grpo"))
    assert board["lr"].to_list() == [3e-5, 5e-6]  # its own column, so not repeated in own_settings
    assert board["own_settings"].to_list() == ["optim.warmup_steps=10", "optim.warmup_steps=0"]
    assert board["prompts/update"].to_list() == [4, 4] and board["updates/step"].to_list() == [1, 1]


def test_the_curves_band_is_the_binomial_interval_of_the_problems_pooled_over_seeds():
    from scipy import stats

    from harness.plots import accuracy_band

    seeds = [pl.DataFrame({"step": [0, 5], "rewards": [[1.0, 0.0], [1.0, 1.0]]}) for _ in range(2)]
    low, high = accuracy_band(seeds)
    # step 0: 2 of 4 problems; step 5: 4 of 4 (Clopper-Pearson bounds from the beta distribution)
    assert low[0] == pytest.approx(100 * stats.beta.ppf(0.025, 2, 3)) and high[0] == pytest.approx(
        100 * stats.beta.ppf(0.975, 3, 2)
    )
    assert low[1] == pytest.approx(100 * stats.beta.ppf(0.025, 4, 1)) and high[1] == pytest.approx(100.0)
    assert accuracy_band([pl.DataFrame({"step": [0], "accuracy": [0.5]})]) is None  # no per-problem rewards


def test_detectable_difference_is_the_least_gain_mcnemar_calls_beyond_noise():
    from harness.verdicts import detectable_difference, paired_p

    # 100 problems, 10 solved by only one of the two (the noise): split 5-5, a gain of m more
    # problems is beyond noise once 5 + m of 10 + m gives p < 0.05: m = 10 (15 of 20, p = 0.041;
    # 14 of 19 gives 0.064)
    mine, theirs = [[1.0] * 10 + [1.0] * 40 + [0.0] * 50], [[0.0] * 10 + [1.0] * 40 + [0.0] * 50]
    assert detectable_difference(mine, theirs) == pytest.approx(0.10)

    def solved(a, b):  # a problems solved by the first only, b by the second only, of 100
        return [[1.0] * a + [0.0] * b + [0.0] * (100 - a - b)], [[0.0] * a + [1.0] * b + [0.0] * (100 - a - b)]

    assert paired_p(*solved(15, 5)) < 0.05 < paired_p(*solved(14, 5))
    # no noise at all: 6 problems one way is the least (p = 2 / 2^6 = 0.031; 5 gives 0.0625)
    assert detectable_difference([[1.0] * 50 + [0.0] * 50], [[1.0] * 50 + [0.0] * 50]) == pytest.approx(0.06)


def test_the_gain_is_after_minus_before_with_its_interval_from_the_same_test():
    # accuracy 0.5 -> 0.51 on seed 0 and 0.5 -> 0.52 on seed 1: gains +0.01 and +0.02
    row = aggregate(runs("grpo")).filter(pl.col("algorithm") == "grpo").row(0, named=True)
    assert row["acc_gain"] == pytest.approx(0.015)
    gained = compare([FINAL["grpo", s] for s in (0, 1)], [FINAL["grpo", s] for s in (0, 1)])
    assert row["acc_gain_ci95"] == pytest.approx(gained.ci95)
    # runs recorded before per-problem rewards were kept: a t-interval over the seeds' gains
    before = aggregate(runs("grpo").with_columns(first_rewards=None)).filter(pl.col("algorithm") == "grpo")
    half = 12.70620474 * 0.00707106781 / 2**0.5  # t(0.975, 1)
    assert before["acc_gain_ci95"][0].to_list() == pytest.approx([0.015 - half, 0.015 + half])


def test_the_gain_is_tested_end_against_start_on_the_same_problems():
    # both seeds start where GRPO ends: HP-RLVR's end against its start is its end against GRPO's
    board = aggregate(runs("grpo"))
    hp = board.filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    assert hp["acc_gain_p"] == pytest.approx(hp["vs_reference_p"])
    grpo = board.filter(pl.col("algorithm") == "grpo").row(0, named=True)
    assert grpo["acc_gain_p"] == 1.0  # no problem changed
    before = runs("grpo").with_columns(first_rewards=None)  # recorded before rewards were kept
    assert aggregate(before)["acc_gain_p"].to_list() == [None, None]
    one = aggregate(one_seed("grpo")).filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    assert one["acc_gain_p"] == pytest.approx(22 / 1024)  # one seed: McNemar, as 9 against 1


def test_detectable_difference_splits_an_odd_noise_with_the_extra_problem_to_the_better():
    from harness.verdicts import detectable_difference

    def solved(a, b):  # a problems solved by the first only, b by the second only, of 100
        return [[1.0] * a + [0.0] * b + [0.0] * (100 - a - b)], [[0.0] * a + [1.0] * b + [0.0] * (100 - a - b)]

    # D = 5 discordant problems split 3-2 (the odd one to the better), then m more one way: the
    # worse side keeps 2, so p = 2 (1 + n + n(n-1)/2) / 2^n with n = 5 + m: n = 11 gives
    # 134 / 2048 = 0.065, n = 12 gives 158 / 4096 = 0.039, so m = 7 (split 2-3, m = 10)
    assert detectable_difference(*solved(3, 2)) == pytest.approx(0.07)
    # D = 1 split 1-0: all n one way, p = 2 / 2^n < 0.05 from n = 6, so m = 5 (split 0-1, m = 8)
    assert detectable_difference(*solved(1, 0)) == pytest.approx(0.05)


def test_the_final_numbers_are_the_last_evaluations_not_the_best():
    from harness.leaderboard import run_table

    info = run_info(accuracy_before=0.25, accuracy_after=0.5)
    metrics = two_steps(updates=[1, 1], zero_grad_updates=[0, 0])
    # accuracy 0.25 at step 0, 1.0 at step 5 (the best), 0.5 at step 10 (the last)
    evals = pl.DataFrame(
        {
            "step": [0, 5, 10],
            "accuracy": [0.25, 1.0, 0.5],
            "rewards": [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]],
            "pass@2": [0.5, 1.0, 0.75],
        }
    )
    row = run_table([(info, metrics, evals)]).row(0, named=True)
    assert row["final_rewards"] == [1.0, 1.0, 0.0, 0.0] and row["first_rewards"] == [1.0, 0.0, 0.0, 0.0]
    assert row["pass@2_after"] == 0.75


def test_a_seed_without_the_references_run_is_left_out_of_the_speedup_not_counted_as_zero():
    # GRPO's seed-1 run did not finish: HP-RLVR's speedup is seed 0's pair alone, 100 / 50
    unpaired = runs("grpo").filter(~((pl.col("algorithm") == "grpo") & (pl.col("seed") == 1)))
    hp = aggregate(unpaired).filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    assert hp["seeds"] == 2 and hp["speedup"] == pytest.approx(2.0)
    assert hp["speedup_ci95"] is None  # one pair: no interval


def test_the_terminal_table_holds_the_key_columns_in_order():
    from harness.leaderboard import KEY_COLUMNS, compact

    board = pl.DataFrame({c: [1] for c in ("lr", *reversed(KEY_COLUMNS), "tokens_generated")})
    header = compact(board).splitlines()[0]
    assert header == "| " + " | ".join(KEY_COLUMNS) + " |"


def test_an_interval_reads_low_high_in_the_tables():
    from harness.leaderboard import markdown

    table = markdown(pl.DataFrame({"acc_after_ci95": [[0.0, 0.0542], None]}))
    assert table.splitlines()[2:] == ["| [0.000, 0.054] |", "| – |"]


def test_runs_recorded_when_the_reference_was_called_baseline_are_read_under_the_new_name():
    from harness.records import current, with_added_settings

    old = run_info(accuracy_before=0.5, accuracy_after=0.5)
    old["baseline"] = old.pop("reference")
    assert current(old)["reference"] == "grpo" and "baseline" not in current(old)
    today = with_added_settings(run_info())  # a record holding every setting reads back unchanged
    assert today["update"]["skip_zero_advantage"] is False and current(today) == today


def test_runs_added_to_a_published_suite_keep_its_others_and_replace_their_namesakes(tmp_path):
    from harness.records import added, load_runs, publish_records

    def run(seed, reward, **changes):
        return run_info(seed=seed, accuracy_before=0.5, **changes), two_steps(reward=[reward, reward]), pl.DataFrame()

    publish_records([run(0, 0.1), run(1, 0.2)], tmp_path)
    publish_records(added([run(1, 0.7), run(2, 0.3)], load_runs(tmp_path)), tmp_path)
    runs = load_runs(tmp_path)
    assert [(info["seed"], steps["reward"][0]) for info, steps, _ in runs] == [(0, 0.1), (1, 0.7), (2, 0.3)]
    with pytest.raises(ValueError, match="grpo-seed0: its model differs"):
        added([run(3, 0.3, model="other")], runs)
    assert len(added([run(0, 0.3, model="other")], [run(0, 0.1)])) == 1  # a replaced run is not compared


ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize(
    "config, published",
    [
        ("benchmarks.yaml", "results"),
        ("configs/zoo.yaml", "results/studies/zoo"),
        ("configs/lora.yaml", "results/studies/lora"),
    ],
)
def test_published_suites_name_the_starting_weights_their_config_builds_today(config, published):
    """A rerun of any published run can be added to its suite (`leaderboard --add` refuses a run
    whose model differs): a version bump that re-keys every task's warm start fails here."""
    from harness.config import load_benchmark
    from harness.start import StartingWeights

    for suite in load_benchmark(ROOT / config).suites:
        records = json.loads((ROOT / published / suite.name / "runs.json").read_text())
        key = StartingWeights.of(suite).key
        assert {run["spec"]["starting_weights"] for run in records.values()} == {key}, suite.name


def test_a_speedup_at_one_seed_has_an_interval_from_its_steps_and_says_when_its_runs_ran_apart():
    """One pair: the reference's steps take 2 s each but for one of 4 s, the algorithm's 1 s each.
    Its speedup's interval is the steps resampled (the ratio of the summed times each time): with
    the slow step drawn k times of 10 (binomial, p = 0.1) the ratio is 2 + 0.2 k, whose 2.5% and
    97.5% quantiles are k = 0 and k = 3. A pair whose runs come from two invocations gets a note
    with the machine's load."""

    one = runs("grpo").filter(pl.col("seed") == 0)
    steps = {"grpo": [2.0] * 9 + [4.0], "hp_rlvr": [1.0] * 10}
    one = one.with_columns(
        pl.Series("step_s", [steps[a] for a in one["algorithm"]]),
        pl.Series("load", [0.5, 1.5]),
        pl.Series("session", ["a", "b"]),
    )
    hp = aggregate(one).filter(pl.col("algorithm") == "hp_rlvr").row(0, named=True)
    assert hp["speedup_ci95"] == pytest.approx([2.0, 2.6])
    assert hp["sessions"] == "several" and hp["load"] == 1.5
    assert "s / hp_rlvr: its speedup pairs runs of different invocations" in row_notes(aggregate(one))
    same = aggregate(one.with_columns(pl.lit("a").alias("session")))
    assert same.filter(pl.col("algorithm") == "hp_rlvr")["sessions"][0] == "one" and "speedup pairs" not in row_notes(
        same
    )
    unknown = aggregate(runs("grpo"))  # runs recorded before sessions were
    assert unknown["sessions"].to_list() == [None, None] and unknown["speedup_ci95"][1] is not None


def test_a_start_at_nothing_solved_is_noted():

    board = aggregate(runs("grpo").with_columns(pl.lit(0.0).alias("accuracy_before")))
    assert "s / grpo: held-out accuracy 0% at the start: nothing solved" in row_notes(board)


def test_the_paired_difference_over_steps_is_item_by_item_pooled_over_seeds():
    """Two seeds of 10 problems at one step: HP-RLVR alone solves 4 on seed 0 and 5 on seed 1,
    GRPO alone 1 on seed 1: differences +1 x 9, -1 x 1, 0 x 10, mean 0.4 and a normal half-width
    of 1.96 sd / sqrt(20)."""
    import numpy as np

    from harness.plots import paired_differences

    made = []
    for seed in (0, 1):
        for algorithm in ("grpo", "hp_rlvr"):
            info = {"algorithm": algorithm, "seed": seed, "reference": "grpo"}
            evals = pl.DataFrame({"step": [5], "rewards": [FINAL[algorithm, seed]]})
            made.append((info, pl.DataFrame(), evals))
    ((step, mean, half),) = paired_differences(made, "hp_rlvr", "grpo")
    d = np.array([1.0] * 9 + [-1.0] + [0.0] * 10)
    assert step == 5 and mean == pytest.approx(0.4) and half == pytest.approx(1.96 * d.std(ddof=1) / 20**0.5)


def test_the_notes_say_why_the_fidelity_columns_are_empty():
    from harness.leaderboard import row_notes

    board = aggregate(runs("grpo"))
    assert "No credit-fidelity columns" in row_notes(board)
    assert "No credit-fidelity columns" not in row_notes(board.with_columns(pl.lit(1.0).alias("blame_lift")))
