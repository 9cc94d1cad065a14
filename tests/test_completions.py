"""A run keeps what it generated: a sample of each step's rollouts (text, verdict, each token's
credit; HP-RLVR's token weights) and every held-out completion, and `harness show` prints them.
Published files are as readable as the umask says."""

import os
import stat

import polars as pl
import pytest
import yaml
from test_e2e import suite

from harness.__main__ import main
from harness.records import FILE_MODE


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("completions")
    spec = suite("pair", "test_e2e.ParityReward", steps=3, trainer={"completions": 5})
    spec["algorithms"]["hp_rlvr"] = {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}}
    config = root / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(root / "runs")]) == 0
    return root


@pytest.mark.slow
def test_a_run_ends_with_its_table_and_its_page(tmp_path, capsys):
    """As lm-eval ends with its results table: the compact leaderboard, and where the page is."""
    spec = suite("pair", "test_e2e.ParityReward", steps=1)
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[-1] == f"wrote {tmp_path / 'runs' / 'leaderboard.md'} and {tmp_path / 'runs' / 'index.html'}"
    assert any(line.startswith("| pair |") for line in said)
    assert (tmp_path / "runs" / "index.html").is_file()


@pytest.mark.slow
def test_each_step_keeps_its_first_rollouts_with_the_verdict_of_their_own_text(run):
    for algorithm, kept in (("grpo", 5), ("hp_rlvr", 4)):  # 5 of GRPO's 16 rollouts a step; HP-RLVR has 4
        rows = pl.read_parquet(run / "runs" / "pair" / f"{algorithm}-seed0" / "completions.parquet")
        assert rows["step"].to_list() == [s for s in (1, 2, 3) for _ in range(kept)]
        assert rows["rollout"].to_list() == list(range(kept)) * 3
        # ParityReward: the reward is the completion's length, mod 2
        assert rows["reward"].to_list() == [float(len(c) % 2) for c in rows["completion"]]
        assert set(rows["feedback"]) == {"parity"} and all(rows["judged"])
        for tokens, credit in zip(rows["tokens"], rows["token_advantages"]):
            assert len(tokens) == len(credit) > 0


@pytest.mark.slow
def test_grpos_kept_credit_is_its_groups_advantage_and_hp_rlvrs_its_weights_times_the_reward_gap(run):
    grpo = pl.read_parquet(run / "runs" / "pair" / "grpo-seed0" / "completions.parquet")
    for step in (1, 2, 3):
        group = grpo.filter(pl.col("step") == step).head(4)  # the first group (group_size 4)
        rewards = group["reward"].to_list()
        mean = sum(rewards) / 4
        std = (sum((r - mean) ** 2 for r in rewards) / 3) ** 0.5
        for reward, credit in zip(rewards, group["token_advantages"].to_list()):
            assert credit == pytest.approx([(reward - mean) / (std + 1e-4)] * len(credit), abs=1e-5)
        assert group["token_weights"].null_count() == 4
    hp = pl.read_parquet(run / "runs" / "pair" / "hp_rlvr-seed0" / "completions.parquet")
    for weights, credit in zip(hp["token_weights"].to_list(), hp["token_advantages"].to_list()):
        assert all(0 <= w <= 1 for w in weights)
        gaps = {round(a / w, 5) for a, w in zip(credit, weights) if w > 1e-3}
        assert len(gaps) <= 1  # A_t = w_t (r - b): one gap a rollout


@pytest.mark.slow
def test_every_held_out_completion_is_kept_beside_its_reward(run):
    folder = run / "runs" / "pair" / "grpo-seed0"
    kept = pl.read_parquet(folder / "eval_completions.parquet")
    evaluations = pl.read_parquet(folder / "eval.parquet")
    for step, rewards in zip(evaluations["step"], evaluations["rewards"]):
        at = kept.filter(pl.col("step") == step)
        if at.height == 0:  # the step-0 evaluation another run of the suite measured first
            assert step == 0
            continue
        assert at["reward"].to_list() == rewards.to_list()
        assert at["reward"].to_list() == [float(len(c) % 2) for c in at["completion"]]
    assert kept["step"].unique().sort().to_list()[-1] == 3


@pytest.mark.slow
def test_show_prints_a_steps_rollouts_and_an_evaluations_completions(run, capsys):
    folder = run / "runs" / "pair" / "hp_rlvr-seed0"
    first = pl.read_parquet(folder / "completions.parquet").row(4, named=True)  # step 2, rollout 0
    assert main(["show", str(folder), "--step", "2", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "rollouts at step 2 (1 of 4)" in out and f"completion: {first['completion'].splitlines()[0]}" in out
    assert "token weights: " in out and f"reward {first['reward']:g}" in out
    assert main(["show", str(folder), "--held-out"]) == 0
    assert "held-out completions of the evaluation at step 3" in capsys.readouterr().out
    assert main(["show", str(folder), "--step", "7"]) == 2
    assert "--step: 7 has no completions here (steps: 1, 2, 3)" in capsys.readouterr().err


@pytest.mark.slow
def test_a_published_folder_is_as_readable_as_the_umask_says(run):
    published = run / "published"
    assert main(["leaderboard", str(run / "runs"), "--publish", str(published)]) == 0
    files = [p for p in published.rglob("*") if p.is_file()]
    assert files and FILE_MODE == 0o666 & ~_umask()
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {FILE_MODE}
    run_files = [p for p in (run / "runs" / "pair" / "grpo-seed0").iterdir() if p.suffix in (".json", ".parquet")]
    assert {stat.S_IMODE(p.stat().st_mode) for p in run_files} == {FILE_MODE}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_show_marks_the_tokens_of_the_step_the_task_found_wrong(tmp_path):
    from harness.show import show

    row = {
        "step": 1, "rollout": 0, "problem": "p", "prompt": "Q: 28-29-6\nA:", "completion": " 28-29=0 0-6=-6 #### -6",
        "reward": 0.0, "feedback": "wrong: expected -7; step 1 should give -1", "judged": True,
        "tokens": [" 28", "-", "29", "=", "0", " 0"], "token_advantages": [-0.1, -0.1, -0.2, -0.2, -0.9, -0.1],
        "token_weights": None, "error_step": "28-29=0", "error_tokens": [True, True, True, True, True, False],
    }  # fmt: skip
    pl.DataFrame([row]).write_parquet(tmp_path / "completions.parquet")
    out = show(tmp_path)
    assert "error:      the first wrong step is '28-29=0', its tokens marked !" in out
    assert "advantages: !' 28':-0.10 !'-':-0.10 !'29':-0.20 !'=':-0.20 !'0':-0.90 ' 0':-0.10" in out
    # completions kept before #51 have no such columns: nothing is marked
    pl.DataFrame([{k: v for k, v in row.items() if not k.startswith("error")}]).write_parquet(
        tmp_path / "completions.parquet"
    )
    assert "!" not in show(tmp_path).split("advantages:")[1]
