"""FSDP2 over two CPU processes (gloo), run as a user would: `trainer: {strategy: fsdp}`."""

import os
from pathlib import Path

import polars as pl
import pytest
import torch
import yaml
from harness_cli import run_harness
from test_e2e import PromptParityReward
from transformers import AutoModelForCausalLM

ALGORITHMS = {
    "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}},
    "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
    "ppo": {"class_path": "algorithms.ppo.PPO", "init_args": {"value_trunk_gradient": False}},
}
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed support")


def shard_on_two_processes(rank: int, store: str, directory: str) -> None:
    """One of two gloo processes: the tiny model sharded as `FSDP2.shard` shards it, at each
    precision, against an unsharded copy of the same weights."""
    import types

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    from harness.models import load_policy
    from rollout.sharding import FSDP2, full_weights, trunk

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("data_parallel",))
        ids = torch.tensor([[5, 9, 3, 7, 2, 11]])
        for precision, dtype in (("32-true", torch.float32), ("bf16-mixed", torch.bfloat16)):
            model, _ = load_policy(directory)
            whole = {name: tensor.clone() for name, tensor in model.state_dict().items()}
            plain, _ = load_policy(directory)
            for p in plain.parameters():  # the weights as bf16-mixed gathers them; buffers as they are
                p.data = p.data.to(dtype)
            strategy = types.SimpleNamespace(
                device_mesh={"data_parallel": mesh},
                precision_plugin=types.SimpleNamespace(precision=precision),
                cpu_offload=False,
            )
            FSDP2.shard(strategy, model)
            # each decoder layer a unit of its own, gathered only for its own forward and backward
            assert isinstance(model, FSDPModule)
            assert all(isinstance(layer, FSDPModule) for layer in model.base_model.layers)
            assert all(p.to_local().numel() < p.numel() for p in model.base_model.layers.parameters())
            # the trunk gathers the root unit and computes at the run's precision, as the whole model does
            with torch.no_grad():
                hidden = trunk(model)(input_ids=ids).last_hidden_state
                expected = plain.base_model(input_ids=ids).last_hidden_state
            assert hidden.dtype == dtype, (precision, hidden.dtype)
            torch.testing.assert_close(hidden, expected, rtol=0, atol=0)
            # what the vLLM engine is pushed: every tensor whole, as the unsharded model holds it
            pushed = dict(full_weights(model))
            assert list(pushed) == list(whole)
            for name, tensor in whole.items():
                assert torch.equal(pushed[name], tensor), (precision, name)
    finally:
        torch.distributed.destroy_process_group()


def test_fsdp2_shards_each_layer_computes_at_its_precision_and_gathers_whole_weights(tmp_path, tiny_dir):
    """Two processes (gloo) without Lightning: `FSDP2.shard` makes each decoder layer a unit and
    the root the rest; the trunk computes exactly what the unsharded model computes, in bf16 under
    bf16-mixed; `full_weights` gives each tensor whole (what vLLM is pushed), not this process's shard."""
    torch.multiprocessing.spawn(shard_on_two_processes, args=(str(tmp_path / "store"), str(tiny_dir)), nprocs=2)


def passes_on_two_processes(rank: int, store: str, directory: str) -> None:
    """One of two gloo processes, each running its own number of forward passes (none on one)
    inside `gathered`, as the credit stage's passes by length do; a collective in a pass would
    leave the other process waiting (the store's timeout turns that into an error)."""
    import datetime
    import types

    from torch.distributed.device_mesh import init_device_mesh

    from harness.models import load_policy
    from rollout.sharding import FSDP2, gathered, trunk

    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60)
    )
    try:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("data_parallel",))
        model, _ = load_policy(directory)
        plain, _ = load_policy(directory)
        strategy = types.SimpleNamespace(
            device_mesh={"data_parallel": mesh},
            precision_plugin=types.SimpleNamespace(precision="32-true"),
            cpu_offload=False,
        )
        FSDP2.shard(strategy, model)
        with torch.no_grad(), gathered(model):
            for length in range(3, 3 + 3 * rank):  # rank 0: no pass, rank 1: three of different lengths
                ids = torch.arange(5, 5 + length)[None]
                hidden = trunk(model)(input_ids=ids).last_hidden_state
                torch.testing.assert_close(hidden, plain.base_model(input_ids=ids).last_hidden_state, rtol=0, atol=0)
        torch.distributed.barrier()  # both came through, and the shards are usable after the block
        with torch.no_grad():
            trunk(model)(input_ids=torch.tensor([[5, 6, 7]]))
    finally:
        torch.distributed.destroy_process_group()


def test_passes_inside_gathered_need_no_collective(tmp_path, tiny_dir):
    """What lets each process score its rows in a number of passes of its own under FSDP."""
    torch.multiprocessing.spawn(passes_on_two_processes, args=(str(tmp_path / "store"), str(tiny_dir)), nprocs=2)


class CrashingParity(PromptParityReward):
    """Kills its process (no clean-up, as a lost node would) when training samples for the
    step that RLVR_TEST_CRASH_AT names (1-based)."""

    def rollout(self, engine, problems, group_size=1, greedy=False):
        if not greedy:
            self.samples = getattr(self, "samples", 0) + 1
            if str(self.samples) == os.environ.get("RLVR_TEST_CRASH_AT"):
                os._exit(17)
        return super().rollout(engine, problems, group_size, greedy)


def run(
    tmp_path: Path,
    name: str,
    trainer: dict,
    algorithms=ALGORITHMS,
    steps=3,
    crash_at=None,
    gradient_checkpointing=False,
) -> Path:
    spec = {
        "name": name,
        "task": {"class_path": "test_fsdp.CrashingParity", "init_args": {"train_size": 200, "eval_size": 20}},
        "model": {
            "preset": "tiny",
            "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "head_dim": 8},
            "warm_start": {"steps": 10, "batch_size": 8},
            "gradient_checkpointing": gradient_checkpointing,
        },
        "algorithms": algorithms,
        "seeds": [0],
        "schedule": {"steps": steps, "prompts_per_step": 8, "prompt_pool": 12},
        "sampling": {"max_new_tokens": 10, "temperature": 0.7},
        "update": {"minibatches": 2},
        "evaluation": {"every": 2},
        "trainer": {"devices": 2, "accelerator": "cpu", "keep_policy": True, "checkpoint_every_s": 0, **trainer},
    }
    config = tmp_path / f"{name}.yaml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    crash = {} if crash_at is None else {"RLVR_TEST_CRASH_AT": str(crash_at)}
    done = run_harness(config, tmp_path / "runs", **crash)
    if crash_at is None:
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        assert done.returncode != 0
    return tmp_path / "runs" / name


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(run_dir / "policy").state_dict()


@pytest.mark.slow
def test_fsdp_trains_as_ddp_does_for_every_algorithm(tmp_path):
    """Both split a step's prompts between the two processes and give each the same sampler seed,
    so they sample the same rollouts while their weights agree; FSDP must then take the same
    updates. GRPO and HP-RLVR come out bit for bit equal here; PPO's replicated value head is
    averaged by an all-reduce of its own, which rounds differently: 1e-7 is 0.2% of the 6e-5
    that three steps move a weight."""
    sharded = run(tmp_path, "fsdp", {"strategy": "fsdp"})
    replicated = run(tmp_path, "ddp", {"strategy": "ddp"})
    (start,) = (tmp_path / "cache" / "policies").glob("*/recipe.json")
    start = AutoModelForCausalLM.from_pretrained(start.parent).state_dict()
    for algorithm in ALGORITHMS:
        a, b = (pl.read_parquet(d / f"{algorithm}-seed0" / "metrics.parquet") for d in (sharded, replicated))
        for column in ("prompt_ids", "reward", "tokens/generated"):
            assert a[column].to_list() == b[column].to_list(), (algorithm, column)
        norms = [n for step in a["grad_norms"].to_list() for n in step]
        assert len(norms) == 3 * 2 and all(n > 0 for n in norms)
        torch.testing.assert_close(torch.tensor(a["grad_norm"]), torch.tensor(b["grad_norm"]), rtol=1e-5, atol=1e-7)
        trained, reference = weights(sharded / f"{algorithm}-seed0"), weights(replicated / f"{algorithm}-seed0")
        moved = max(float((reference[k] - start[k]).abs().max()) for k in start)
        assert moved > 1e-5, algorithm
        for name in start:
            torch.testing.assert_close(trained[name], reference[name], rtol=0, atol=1e-7, msg=f"{algorithm} {name}")
        assert not (sharded / f"{algorithm}-seed0" / "checkpoints").exists()  # finished: only records stay


@pytest.mark.slow
def test_a_killed_fsdp_run_resumes_to_the_same_records(tmp_path):
    """bf16-mixed, sharded checkpoints (a folder of per-process shards) after every step; both
    processes killed while sampling step 3."""
    trainer = {"strategy": "fsdp", "precision": "bf16-mixed"}
    algorithms = {k: ALGORITHMS[k] for k in ("grpo", "ppo")}
    straight = run(tmp_path / "straight", "s", trainer, algorithms, steps=4)
    run(tmp_path / "resumed", "s", trainer, {"grpo": ALGORITHMS["grpo"]}, steps=4, crash_at=3)
    run_dir = tmp_path / "resumed" / "runs" / "s" / "grpo-seed0"
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert checkpoint.is_dir() and len(list(checkpoint.glob("*.distcp"))) == 2  # one shard file a process
    assert pl.read_parquet(run_dir / "metrics.parquet")["step"].to_list() == [1, 2]
    resumed = run(tmp_path / "resumed", "s", trainer, algorithms, steps=4)
    for algorithm in algorithms:
        a = pl.read_parquet(straight / f"{algorithm}-seed0" / "metrics.parquet")
        b = pl.read_parquet(resumed / f"{algorithm}-seed0" / "metrics.parquet")
        assert b["step"].to_list() == [1, 2, 3, 4]
        for column in ("prompt_ids", "reward", "grad_norms", "loss", "tokens/generated", "lr"):
            assert a[column].to_list() == b[column].to_list(), (algorithm, column)
        trained, reference = weights(resumed / f"{algorithm}-seed0"), weights(straight / f"{algorithm}-seed0")
        for name in reference:
            assert torch.equal(trained[name], reference[name]), (algorithm, name)


@pytest.mark.slow
def test_fsdp_with_activation_checkpointing_takes_the_same_updates(tmp_path):
    """Each layer recomputed in the backward pass inside its FSDP unit: the same gradients. (CPU
    offload, the other memory saver, needs an accelerator to offload from: refused here.)"""
    algorithms = {"hp_rlvr": ALGORITHMS["hp_rlvr"]}
    plain = run(tmp_path, "plain", {"strategy": "fsdp"}, algorithms, steps=2)
    saver = run(tmp_path, "saver", {"strategy": "fsdp"}, algorithms, steps=2, gradient_checkpointing=True)
    a, b = (pl.read_parquet(d / "hp_rlvr-seed0" / "metrics.parquet") for d in (plain, saver))
    assert a["reward"].to_list() == b["reward"].to_list()
    torch.testing.assert_close(torch.tensor(a["grad_norm"]), torch.tensor(b["grad_norm"]), rtol=1e-5, atol=1e-7)
    trained, reference = weights(saver / "hp_rlvr-seed0"), weights(plain / "hp_rlvr-seed0")
    for name in reference:
        torch.testing.assert_close(trained[name], reference[name], rtol=0, atol=1e-7, msg=name)


@pytest.mark.slow
def test_credit_scored_in_a_different_number_of_passes_on_each_process(tmp_path):
    """HP-RLVR's two views and SDPO's teacher views are scored in passes of at most
    `scoring_tokens` slots, as many as each process's own rows need (at 90 slots the processes'
    hindsight rows took 6 and 7 passes in step 2 when this was written, and the run hung before
    their scoring was gathered): under FSDP the updates are DDP's."""
    algorithms = {
        "hp_rlvr": {**ALGORITHMS["hp_rlvr"], "init_args": {"segments": 2, "scoring_tokens": 90}},
        "sdpo": {"class_path": "algorithms.sdpo.SDPO", "init_args": {"group_size": 4, "scoring_tokens": 90}},
    }
    sharded = run(tmp_path, "fsdp", {"strategy": "fsdp"}, algorithms, steps=2)
    replicated = run(tmp_path, "ddp", {"strategy": "ddp"}, algorithms, steps=2)
    for algorithm in algorithms:
        a, b = (pl.read_parquet(d / f"{algorithm}-seed0" / "metrics.parquet") for d in (sharded, replicated))
        assert a["reward"].to_list() == b["reward"].to_list(), algorithm
        torch.testing.assert_close(torch.tensor(a["grad_norm"]), torch.tensor(b["grad_norm"]), rtol=1e-5, atol=1e-7)
