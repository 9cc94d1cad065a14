"""End to end on the tiny model: the CLI, the per-step records, the leaderboard."""

import json

import polars as pl
import pytest
import torch
import yaml

from harness.__main__ import main
from tasks.base import Verdict
from tasks.math import MathTask

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "head_dim": 8}


class ConstantReward(MathTask):
    """Every rollout gets the same reward: every GRPO group is saturated."""

    def verify(self, problem, completion):
        return Verdict(1.0, "always right")


class ParityReward(MathTask):
    """A reward the untrained model earns half the time: gradients are not zero."""

    def verify(self, problem, completion):
        return Verdict(float(len(completion) % 2), "parity")


class NeverReward(MathTask):
    """A reward nothing earns: the start solves nothing, and every group's advantages are 0."""

    def verify(self, problem, completion):
        return Verdict(0.0, "never")


class PromptParityReward(MathTask):
    """Like ParityReward, but the parity also counts the prompt's length, so that a greedy policy
    (whose completions may all have one length) still earns it on some problems and not others."""

    def verify(self, problem, completion):
        return Verdict(float((len(problem.prompt) + len(completion)) % 2), "parity")


class FlakyVerifier(MathTask):
    """A verifier that fails on its own for a third of the completions (a broken sandbox)."""

    def verify(self, problem, completion):
        if len(completion) % 3 == 0:
            return Verdict(0.0, "the sandbox could not judge this run (OSError)", judged=False)
        return Verdict(float(len(completion) % 2), "parity")


class NeedsAnExtra(MathTask):
    @classmethod
    def unavailable(cls):
        return "needs the imaginary extra"


def suite(name, task_class, steps=3, **extra):
    return {
        "name": name,
        "task": {"class_path": task_class, "init_args": {"train_size": 200, "eval_size": 20}},
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 10, "batch_size": 8}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "seeds": [0],
        "schedule": {"steps": steps, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 10},
        "evaluation": {"every": 2},
        **extra,
    }


@pytest.mark.slow
def test_grpo_run_writes_one_row_per_step_and_a_leaderboard(tmp_path):
    config = tmp_path / "bench.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cache_dir": str(tmp_path / "cache"),
                "suites": [suite("math", "tasks.math.MathTask", update={"minibatches": 2})],
            }
        )
    )
    results = tmp_path / "results"
    assert main(["run", str(config), "--results", str(results)]) == 0
    run = results / "math" / "grpo-seed0"
    metrics = pl.read_parquet(run / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2, 3]
    assert metrics["rollouts"].to_list() == [16, 16, 16]
    assert metrics["rollouts_total"].to_list() == [16, 32, 48]
    assert metrics["updates"].to_list() == [2, 2, 2]
    assert (metrics["grad_norm"] == metrics["grad_norms"].list.first()).all()
    assert metrics["wall_clock_s"].is_sorted() and metrics["wall_clock_s"][0] > 0
    assert set(metrics.columns) >= {
        "step",
        "grad_norm",
        "updates",
        "zero_grad_updates",
        "rollouts",
        "wall_clock_s",
        "reward",
        "frac_reward_zero_std",
        "timing_s/sample",
        "timing_s/verify",
        "timing_s/credit",
        "timing_s/update",
    }
    # zero-grad counts are the exact-zero norms among each step's records
    for norms, zeros in zip(metrics["grad_norms"].to_list(), metrics["zero_grad_updates"].to_list()):
        assert zeros == sum(n == 0.0 for n in norms)
    evals = pl.read_parquet(run / "eval.parquet")
    assert evals["step"].to_list() == [0, 2, 3]
    info = json.loads((run / "run.json").read_text())
    assert info["group_size"] == 4 and info["steps"] == 3
    assert info["versions"]["torch"] == torch.__version__  # with its build tag: +cpu and +cu130 are told apart
    from harness.models import load_policy
    from harness.provenance import data_digest
    from harness.start import weights_digest
    from rollout.kernels import has_avx2

    (recipe,) = (tmp_path / "cache" / "policies").glob("*/recipe.json")
    assert info["starting_weights_digest"] == weights_digest(load_policy(recipe.parent)[0])
    assert info["task_data_digest"] == data_digest(MathTask(train_size=200, eval_size=20))
    assert info["environment"]["cpu_kernels"]["mode"] == ("portable" if has_avx2() else "native")
    assert (
        json.loads((run / "provenance.json").read_text())["starting_weights_digest"] == info["starting_weights_digest"]
    )
    assert not (run / "checkpoints").exists()
    board = pl.read_parquet(results / "math" / "leaderboard.parquet")
    assert board.row(0, named=True)["rollouts"] == 48
    assert "| math | MathTask | grpo |" in (results / "leaderboard.md").read_text()
    # a second run of the same command skips the finished run and republishes
    assert main(["run", str(config), "--results", str(results)]) == 0
    assert pl.read_parquet(run / "metrics.parquet").equals(metrics)
    assert main(["leaderboard", str(results)]) == 0


@pytest.mark.slow
def test_saturated_groups_give_exactly_zero_gradient_records(tmp_path):
    config = tmp_path / "bench.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cache_dir": str(tmp_path / "cache"),
                "suites": [suite("flat", "test_e2e.ConstantReward", steps=2, update={"minibatches": 4})],
            }
        )
    )
    assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    metrics = pl.read_parquet(tmp_path / "results" / "flat" / "grpo-seed0" / "metrics.parquet")
    assert metrics["frac_reward_zero_std"].to_list() == [1.0, 1.0]
    assert metrics["zero_grad_updates"].to_list() == [4, 4]
    assert all(n == 0.0 for norms in metrics["grad_norms"].to_list() for n in norms)


@pytest.mark.slow
def test_hp_rlvr_and_grpo_pair_share_weights_and_prompts(tmp_path):
    pair = suite("pair", "tasks.math.MathTask", steps=3)
    pair["model"]["warm_start"]["teach"] = {"algorithms.hp_rlvr.HPRLVR": {"fraction": 0.3}}
    pair["algorithms"] = {
        "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 8}},
        "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 3}},
        "ppo": {"class_path": "algorithms.ppo.PPO", "init_args": {"lam": 0.9, "update": {"minibatches": 2}}},
    }
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [pair]}))
    results = tmp_path / "results"
    assert main(["run", str(config), "--results", str(results)]) == 0
    grpo = pl.read_parquet(results / "pair" / "grpo-seed0" / "metrics.parquet")
    hp = pl.read_parquet(results / "pair" / "hp_rlvr-seed0" / "metrics.parquet")
    assert grpo["prompt_ids"].to_list() == hp["prompt_ids"].to_list()  # same prompts at every step
    assert grpo["rollouts"].to_list() == [32] * 3 and hp["rollouts"].to_list() == [4] * 3  # 8 : 1
    runs = [json.loads((results / "pair" / f"{a}-seed0" / "run.json").read_text()) for a in ("grpo", "hp_rlvr")]
    assert runs[0]["model"] == runs[1]["model"] and runs[0]["accuracy_before"] == runs[1]["accuracy_before"]
    assert {"hindsight/w_mean_success", "hindsight/top1_agree", "credit/baseline_mean"} <= set(hp.columns)
    ppo = pl.read_parquet(results / "pair" / "ppo-seed0" / "metrics.parquet")
    assert ppo["prompt_ids"].to_list() == grpo["prompt_ids"].to_list()
    assert ppo["updates"].to_list() == [2] * 3
    assert {"ppo/value_loss", "ppo/explained_variance", "ppo/value_mean", "credit/advantage_std"} <= set(ppo.columns)
    board = pl.read_parquet(results / "pair" / "leaderboard.parquet")
    assert board.filter(pl.col("algorithm") == "hp_rlvr")["speedup"][0] is not None


def test_checkpoints_wait_for_their_interval_but_never_skip_the_last_step(tmp_path):
    from types import SimpleNamespace

    from harness.records import StepRecorder

    saved = []
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(broadcast=lambda value, src: value),
        save_checkpoint=lambda path, weights_only: saved.append(module.rl_step),
    )
    module = SimpleNamespace(rl_step=0, schedule=SimpleNamespace(steps=4))
    for every_s, expected in ((3600.0, [4]), (0.0, [1, 2, 3, 4])):
        saved.clear()
        recorder = StepRecorder(tmp_path, every_s)
        for step in range(1, 5):
            module.rl_step = step
            recorder.on_train_batch_end(trainer, module, None, None, step - 1)
        assert saved == expected, every_s


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_records_as_an_uninterrupted_one(tmp_path, monkeypatch, capsys):
    from algorithms.base import RLVRModule

    def run(results, crash_after=None):
        config = tmp_path / "bench.yaml"
        every_step = suite(
            "r",
            "test_e2e.ParityReward",
            schedule={"steps": 4, "prompts_per_step": 8},
            trainer={"checkpoint_every_s": 0},
        )
        config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [every_step]}))
        return main(["run", str(config), "--results", str(results)])

    assert run(tmp_path / "straight") == 0
    original = RLVRModule.training_step

    def crashing(self, batch, batch_idx):
        if self.rl_step == 2:  # steps 1 and 2 are checkpointed; the crash takes step 3 in flight
            raise RuntimeError("killed")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(RLVRModule, "training_step", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path / "resumed")
    run_dir = tmp_path / "resumed" / "r" / "grpo-seed0"
    # the checkpoint holds the two finished steps, and the parquet files (written after it) no more
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["rlvr"]
    assert [r["step"] for r in state["records"]] == [1, 2]
    assert pl.read_parquet(run_dir / "metrics.parquet")["step"].to_list() == [1, 2]
    assert not (run_dir / "run.json").exists()
    monkeypatch.setattr(RLVRModule, "training_step", original)
    # a run that started from other weights (another machine's warm start, say) is not continued
    recorded = json.loads((run_dir / "provenance.json").read_text())
    (run_dir / "provenance.json").write_text(json.dumps({**recorded, "starting_weights_digest": "0123456789abcdef"}))
    capsys.readouterr()
    assert run(tmp_path / "resumed") == 2
    error = capsys.readouterr().err
    assert (
        "the run started from weights 0123456789abcdef, its resume from " + recorded["starting_weights_digest"] in error
    )
    (run_dir / "provenance.json").write_text(json.dumps(recorded))
    assert run(tmp_path / "resumed") == 0
    assert f"resuming after step 2 of 4, from {run_dir / 'checkpoints' / 'last.ckpt'}" in capsys.readouterr().out
    straight = pl.read_parquet(tmp_path / "straight" / "r" / "grpo-seed0" / "metrics.parquet")
    for kept in ("completions.parquet", "eval_completions.parquet"):  # carried in the checkpoint
        assert pl.read_parquet(run_dir / kept).equals(
            pl.read_parquet(tmp_path / "straight" / "r" / "grpo-seed0" / kept)
        )
    resumed = pl.read_parquet(run_dir / "metrics.parquet")
    assert resumed["step"].to_list() == [1, 2, 3, 4]
    # identical training: same samples, rewards and gradients (timings differ, of course)
    assert all(n > 0 for norms in straight["grad_norms"].to_list() for n in norms)  # real updates happened
    for column in ("prompt_ids", "reward", "grad_norms", "loss", "tokens/generated", "rollouts_total", "lr"):
        assert resumed[column].to_list() == straight[column].to_list(), column
    # the wall-clock goes on from the checkpoint's, it does not start again at 0
    assert resumed["wall_clock_s"].is_sorted() and resumed["wall_clock_s"][2] > resumed["wall_clock_s"][1]


@pytest.mark.slow
def test_prompt_pool_makes_prompts_recur(tmp_path):
    config = tmp_path / "pool.yaml"
    spec = suite("math", "tasks.math.MathTask", steps=2)
    spec["schedule"]["prompt_pool"] = 6
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    metrics = pl.read_parquet(tmp_path / "results" / "math" / "grpo-seed0" / "metrics.parquet")
    pool = {p.id for p in MathTask(train_size=200, eval_size=20).train_problems()[:6]}
    seen = {pid for ids in metrics["prompt_ids"] for pid in ids}
    assert seen <= pool and len(seen) > 4  # two steps of 4 prompts, drawn from the 6


def test_a_suite_whose_task_is_unavailable_is_skipped(tmp_path, capsys):
    config = tmp_path / "skip.yaml"
    config.write_text(
        yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [suite("extra", "test_e2e.NeedsAnExtra")]})
    )
    assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    assert "[extra] skipped: test_e2e.NeedsAnExtra needs the imaginary extra" in capsys.readouterr().out
    assert not (tmp_path / "results" / "extra").exists()


@pytest.mark.slow
def test_sampled_pass_at_k_is_recorded_and_leaves_training_as_it_was(tmp_path):
    """`evaluation.samples` adds the unbiased pass@k beside greedy pass@1, from an RNG of its own:
    the training records are those of the same run without it."""
    records = {}
    for samples in (0, 4):
        evaluation = {"every": 2, "samples": samples, "pass_at": [1, 4]} if samples else {"every": 2}
        config = tmp_path / f"bench{samples}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "cache_dir": str(tmp_path / "cache"),
                    "suites": [suite("math", "tests.test_e2e.ParityReward", evaluation=evaluation)],
                }
            )
        )
        results = tmp_path / f"results{samples}"
        assert main(["run", str(config), "--results", str(results)]) == 0
        run = results / "math" / "grpo-seed0"
        records[samples] = pl.read_parquet(run / "metrics.parquet")
        evals = pl.read_parquet(run / "eval.parquet")
    for column in ("reward", "grad_norm", "loss"):
        assert records[0][column].to_list() == records[4][column].to_list()
    # parity of a sampled completion's length: some problems pass in 1 of 4, more in 4 of 4
    assert evals["step"].to_list() == [0, 2, 3]
    assert all(0.0 < a < b <= 1.0 for a, b in zip(evals["pass@1"], evals["pass@4"]))
    board = pl.read_parquet(results / "math" / "leaderboard.parquet")
    assert board["pass@4_after"][0] == pytest.approx(evals["pass@4"][-1])


@pytest.mark.slow
def test_two_mini_batches_score_the_second_against_the_snapshot_that_sampled(tmp_path, monkeypatch):
    """With two mini-batches a step, pi_old is the policy that sampled: the first update's ratio
    is 1, the second's is not (the first update moved the weights), and pi_old's log-probs are
    the sampler's own. The warm-up's first rates are lr / warmup_steps, then twice that."""
    from algorithms import base

    calls = []
    policy_loss = base.policy_loss

    def watched(logprobs, old, adv, eligible, *args, **kwargs):
        calls.append((logprobs.detach().clone(), old.clone(), eligible.clone()))
        return policy_loss(logprobs, old, adv, eligible, *args, **kwargs)

    monkeypatch.setattr(base, "policy_loss", watched)
    spec = suite(
        "math",
        "tests.test_e2e.ParityReward",
        steps=2,
        update={"minibatches": 2},
        optim={"lr": 1.0e-2, "warmup_steps": 4},
        evaluation={"every": 100},
    )
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    assert len(calls) == 4  # two steps, two updates each
    for first, second in (calls[0:2], calls[2:4]):
        logprobs, old, eligible = first
        torch.testing.assert_close(logprobs[eligible], old[eligible], atol=1e-5, rtol=0)
        logprobs, old, eligible = second
        assert (logprobs[eligible] - old[eligible]).abs().max() > 1e-3
    metrics = pl.read_parquet(tmp_path / "results" / "math" / "grpo-seed0" / "metrics.parquet")
    assert metrics["lr"].to_list() == pytest.approx([2.5e-3, 5.0e-3])
    assert metrics["updates"].to_list() == [2, 2]
    assert metrics["sampler/logprob_diff_max"].max() < 1e-4  # pi_old: the sampler's log-probs


def test_evaluation_is_greedy_whatever_the_rng(tiny_dir):
    """The held-out evaluation decodes greedily: its completions are the argmax decoding written
    out by hand, and the same under two different seeds (a sampled one would differ)."""
    from algorithms.base import EvalArgs
    from algorithms.grpo import GRPO
    from harness.models import load_policy
    from rollout.decoding import SamplingArgs

    class Seen(MathTask):
        def verify(self, problem, completion):
            self.seen.append(completion)
            return Verdict(0.0, "")

    model, tokenizer = load_policy(tiny_dir)
    task = Seen(train_size=10, eval_size=6)
    task.seen = []
    sampling = SamplingArgs(max_new_tokens=6, temperature=1.0)
    module = GRPO(
        policy=model, tokenizer=tokenizer, task=task, group_size=2, sampling=sampling, evaluation=EvalArgs(batch_size=4)
    )
    runs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        task.seen = []
        module.evaluate()
        runs.append(task.seen)
    expected = []
    with torch.no_grad():
        for problem in task.eval_problems():
            ids = tokenizer(problem.prompt, return_tensors="pt").input_ids
            new = []
            for _ in range(6):
                token = int(model(input_ids=ids).logits[0, -1].argmax())
                if token == tokenizer.eos_token_id:
                    break
                new.append(token)
                ids = torch.cat([ids, torch.tensor([[token]])], 1)
            expected.append(tokenizer.decode(new))
    assert runs[0] == runs[1] == expected


@pytest.mark.slow
def test_unjudged_rollouts_are_counted_in_the_records_and_the_leaderboard(tmp_path):
    config = tmp_path / "bench.yaml"
    config.write_text(
        yaml.safe_dump(
            {"cache_dir": str(tmp_path / "cache"), "suites": [suite("flaky", "test_e2e.FlakyVerifier", steps=2)]}
        )
    )
    assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    run = tmp_path / "results" / "flaky" / "grpo-seed0"
    metrics, evals = pl.read_parquet(run / "metrics.parquet"), pl.read_parquet(run / "eval.parquet")
    assert metrics["verify/unjudged"].sum() > 0
    board = pl.read_parquet(tmp_path / "results" / "flaky" / "leaderboard.parquet").row(0, named=True)
    assert board["unjudged"] == metrics["verify/unjudged"].sum() + evals["unjudged"].sum()


@pytest.mark.slow
def test_a_run_with_nothing_to_measure_says_so(tmp_path, caplog):
    """A start that solves nothing, and a run whose every update carried no gradient: each is one
    warning line, before training and after it."""
    config = tmp_path / "bench.yaml"
    config.write_text(
        yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [suite("never", "test_e2e.NeverReward")]})
    )
    with caplog.at_level("WARNING", logger="harness"):
        assert main(["run", str(config), "--results", str(tmp_path / "results")]) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "harness"]
    assert any(m.startswith("the starting weights solve 0.0% of the held-out problems: nearly none") for m in said)
    assert any(m.startswith("grpo-seed0: 3 of its 3 updates carried no gradient") for m in said)
