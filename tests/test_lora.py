"""LoRA through PEFT (`model.lora`): only the adapters train, are checkpointed and resumed; what
reads the weights sees them merged; the starting policy is the base with its adapters off; a kept
adapter loads with PEFT and evaluates as the run's final evaluation did."""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_e2e import TINY
from transformers import AutoModelForCausalLM

from harness.__main__ import main
from rollout.lora import LoraArgs, adapter_layers, adapters_disabled, add_adapters, merged_weights
from rollout.memory import estimate_mb

pytest.importorskip("peft")

IDS = torch.tensor([[3, 17, 12, 8, 19, 5]])


def logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=ids).logits


def adapted(tiny_dir, **args):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    start = logits(model)
    add_adapters(model, LoraArgs(r=4, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], **args))
    return model, start


def test_adapters_start_as_the_identity_and_only_they_train(tiny_dir):
    model, start = adapted(tiny_dir)
    assert torch.equal(logits(model), start)  # B starts at zero
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(".lora_A." in n or ".lora_B." in n for n in trained)
    assert set(adapter_layers(model)) == {
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.v_proj",
        "model.layers.0.mlp.down_proj",
    }


def test_merged_weights_compute_what_the_adapted_model_does_and_disabling_gives_the_base(tiny_dir):
    model, start = adapted(tiny_dir)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.5)
    moved = logits(model)
    assert not torch.allclose(moved, start)
    merged = dict(merged_weights(model))
    fresh = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert merged.keys() == fresh.state_dict().keys()  # the base model's names
    fresh.load_state_dict(merged)
    torch.testing.assert_close(logits(fresh), moved, rtol=1e-5, atol=1e-5)
    # the direct computation of one merged weight: W + (alpha / r) B A
    layer = model.model.layers[0].self_attn.q_proj
    expected = layer.base_layer.weight + 2.0 * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"], expected)
    with adapters_disabled(model):
        torch.testing.assert_close(logits(model), start)
    torch.testing.assert_close(logits(model), moved)  # back on


def test_unknown_target_layers_are_named(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    with pytest.raises(ValueError, match="^target_modules: the model has no layer named qkv"):
        add_adapters(model, LoraArgs(target_modules=["qkv"]))
    for bad, match in (({"r": 0}, "^r:"), ({"alpha": 0}, "^alpha:"), ({"dropout": 1.0}, "^dropout:")):
        with pytest.raises(ValueError, match=match):
            LoraArgs(**bad)


def test_the_memory_estimate_keeps_gradients_and_optimizer_state_for_the_adapters_only(tiny_dir):
    config = AutoModelForCausalLM.from_pretrained(tiny_dir).config
    full = estimate_mb(1_000_000, config, 4, 4, 32, 8)
    lora = estimate_mb(1_000_000, config, 4, 4, 32, 8, trainable=10_000)
    assert lora["weights"] == full["weights"] and lora["gradients"] == full["gradients"] / 100
    assert lora["optimizer"] == full["optimizer"] / 100


LORA = {"r": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"]}


def suite(name, lora=LORA, **changes):
    return {
        "name": name,
        "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 200, "eval_size": 16}},
        "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 20, "batch_size": 16}, "lora": lora},
        "algorithms": {
            "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4, "update": {"kl_coef": 0.1}}},
            "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
            "ppo": {"class_path": "algorithms.ppo.PPO", "init_args": {}},
        },
        "seeds": [0],
        "schedule": {"steps": 3, "prompts_per_step": 4},
        "sampling": {"max_new_tokens": 10, "temperature": 1.0},
        "optim": {"lr": 1.0e-2, "warmup_steps": 1},
        "evaluation": {"every": 3},
        "trainer": {"keep_policy": True, "checkpoint_every_s": 0},
    } | changes


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    config = root / "lora.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [suite("lora")]}))
    assert main(["run", str(config), "--results", str(root / "runs")]) == 0
    return root, root / "runs" / "lora"


@pytest.mark.slow
def test_only_the_adapters_move_and_the_kept_adapter_loads_with_peft(lora_runs):
    from peft import PeftModel

    root, suite_dir = lora_runs
    for algorithm in ("grpo", "hp_rlvr", "ppo"):
        run = suite_dir / f"{algorithm}-seed0"
        info = json.loads((run / "run.json").read_text())
        base = AutoModelForCausalLM.from_pretrained(info["model"])  # the starting weights
        start = base.state_dict()
        kept = AutoModelForCausalLM.from_pretrained(run / "policy").state_dict()
        adapter = load_file(run / "policy" / "adapter" / "adapter_model.safetensors")
        assert any(float(t.abs().max()) > 0 for k, t in adapter.items() if "lora_B" in k), algorithm  # it trained
        targeted = {
            f"model.layers.0.{m}.weight"
            for m in ("self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj", "mlp.down_proj")
        }
        for name, tensor in kept.items():  # every weight without an adapter is the start's, exactly
            if name not in targeted:
                assert torch.equal(tensor, start[name]), (algorithm, name)
        assert info["trainable_parameters"] < sum(t.numel() for t in start.values()) / 5
        # PEFT reads the adapter onto the starting weights and computes the kept policy's logits
        peft_model = PeftModel.from_pretrained(base, run / "policy" / "adapter")
        merged = AutoModelForCausalLM.from_pretrained(run / "policy")
        torch.testing.assert_close(logits(peft_model), logits(merged), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_peft_loaded_adapter_evaluates_as_the_runs_final_evaluation(lora_runs, tmp_path):
    from peft import PeftModel

    root, suite_dir = lora_runs
    run = suite_dir / "grpo-seed0"
    info = json.loads((run / "run.json").read_text())
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(info["model"]), run / "policy" / "adapter")
    folder = tmp_path / "from-peft"
    loaded.merge_and_unload().save_pretrained(folder)
    AutoModelForCausalLM.from_pretrained(run / "policy")  # its tokenizer beside it
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(run / "policy").save_pretrained(folder)
    config = root / "lora.yaml"
    assert main(["evaluate", str(config), "--suite", "lora", "--results", str(tmp_path), "--model", str(folder)]) == 0
    (items,) = (tmp_path / "lora" / "evaluation").glob("*/items.parquet")
    final = pl.read_parquet(run / "eval.parquet")["rewards"][-1].to_list()
    assert pl.read_parquet(items)["reward"].to_list() == final


@pytest.mark.slow
def test_a_killed_lora_run_resumes_to_the_same_records(lora_runs, tmp_path, monkeypatch):
    from algorithms.base import RLVRModule

    root, suite_dir = lora_runs
    only_grpo = suite("lora")
    only_grpo["algorithms"] = {"grpo": only_grpo["algorithms"]["grpo"]}
    config = tmp_path / "resume.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [only_grpo]}))
    original = RLVRModule.training_step

    def crashing(self, batch, batch_idx):
        if self.rl_step == 2:
            raise RuntimeError("killed")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(RLVRModule, "training_step", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        main(["run", str(config), "--results", str(tmp_path / "runs")])
    run_dir = tmp_path / "runs" / "lora" / "grpo-seed0"
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert saved and all(".lora_" in k for k in saved)  # only the adapters are checkpointed
    monkeypatch.setattr(RLVRModule, "training_step", original)
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    straight = pl.read_parquet(suite_dir / "grpo-seed0" / "metrics.parquet")
    resumed = pl.read_parquet(run_dir / "metrics.parquet")
    for column in ("prompt_ids", "reward", "grad_norms", "loss", "rollouts_total"):
        assert resumed[column].to_list() == straight[column].to_list(), column


def test_lora_is_refused_under_fsdp_in_one_line(tmp_path, capsys):
    spec = suite("f", trainer={"strategy": "fsdp", "devices": 2, "accelerator": "cpu"})
    spec["algorithms"] = {"grpo": spec["algorithms"]["grpo"]}
    config = tmp_path / "f.yaml"
    config.write_text(yaml.safe_dump({"suites": [spec]}))
    assert main(["run", str(config), "--list"]) == 2
    assert "suites[0].model.lora: not with trainer.strategy: fsdp" in capsys.readouterr().err
