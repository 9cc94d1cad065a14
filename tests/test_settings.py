"""Every setting's declared range, refused beyond each end; YAML numbers, repeated keys and seeds,
model folders and the machine's accelerator, checked before anything runs."""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

import pytest
import yaml

from algorithms.base import RLVRModule
from harness.__main__ import main
from harness.config import ConfigError, TrainerArgs, _Loader, check_machine, load_benchmark
from harness.reference import BEGIN, END, class_path, classes, file_settings, suite_settings, table
from rollout.ranges import Distinct, Range, describe, violation
from tasks.base import Task

ROOT = Path(__file__).parents[1]
SETTINGS = suite_settings()
UNBOUNDED = {
    ("model", "tiny", "init_seed"),
    ("model", "warm_start", "seed"),
    ("algorithms", "algorithms.hp_rlvr.HPRLVR", "init_args", "baseline", "initial_mean"),
}
"""Numbers with no bound by meaning: seeds, and a reward's running mean (rewards have no fixed scale)."""


def top_level_marks(hint) -> tuple[list[Range], bool, list[Range]]:
    """(ranges on the value itself, whether a Distinct applies, ranges on each entry of a list)."""
    from typing import Annotated, get_args, get_origin

    own, distinct, entries = [], False, []
    stack = [hint]
    while stack:
        h = stack.pop()
        origin, args = get_origin(h), get_args(h)
        if origin is Annotated:
            own += [m for m in args[1:] if isinstance(m, Range)]
            distinct |= any(isinstance(m, Distinct) for m in args[1:])
            stack.append(args[0])
        elif origin is list:
            entries += [m for m in _annotated_marks(args[0]) if isinstance(m, Range)]
        elif args:
            stack += [a for a in args if a is not type(None)]
    return own, distinct, entries


def _annotated_marks(hint) -> list:
    from typing import Annotated, get_args, get_origin

    return list(get_args(hint)[1:]) if get_origin(hint) is Annotated else []


def is_int(hint) -> bool:
    from typing import get_args

    return hint is int or any(is_int(a) for a in get_args(hint))


def cases():
    """(id, setting, value beyond one declared end)."""
    for s in SETTINGS:
        own, distinct, entries = top_level_marks(s.hint)
        for mark in own:
            for value in mark.outside(is_int(s.hint)):
                yield f"{'.'.join(s.path)}={value}", s, value
        for mark in entries:
            for value in mark.outside(True):
                yield f"{'.'.join(s.path)}=[{value}]", s, [value]
        if distinct:
            entry = 1 if is_int(s.hint) else "csv"
            yield f"{'.'.join(s.path)} twice", s, [entry, entry]


CASES = list(cases())
REQUIRED_TASK_ARGS = {
    "tasks.reward.RewardTask": {
        "train_file": str(ROOT / "tests" / "data" / "say.jsonl"),
        "reward": "say_reward.reward",
        "eval_size": 4,
    },
    "tasks.reasoning_gym.task.ReasoningGymTask": {"generators": ["spell_backward"], "train_size": 20, "eval_size": 4},
    "tasks.openenv.task.OpenEnvTask": {
        "environment": "openenv_envs.SayGo",
        "expert": "openenv_envs.say_go",
        "train_episodes": {"seeds": [0, 20]},
        "eval_episodes": {"seeds": [100, 104]},
    },
}
"""What a task needs given besides the setting under test."""


def suite_with(setting, value) -> tuple[dict, str]:
    """A valid suite but for `value` at `setting`, and the field's path in the error."""
    suite = {
        "name": "s",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"train_size": 20, "eval_size": 4}},
        "model": {"preset": "tiny", "warm_start": {"steps": 1}},
        "algorithms": {"a": {"class_path": "algorithms.grpo.GRPO"}},
        "schedule": {"steps": 2, "prompts_per_step": 2},
    }
    path = setting.path
    if path[0] == "algorithms":
        cls = setting.owner
        suite["algorithms"] = {"a": {"class_path": path[1], "init_args": {}}}
        target, rest, where = suite["algorithms"]["a"]["init_args"], path[3:], "algorithms.a.init_args"
        if issubclass(cls, RLVRModule) and path[1] == "algorithms.gigpo.GiGPO":
            suite["task"] = {"class_path": "tasks.alfworld.task.AlfworldTask", "init_args": {}}
    elif path[0] == "task":
        suite["task"] = {"class_path": path[1], "init_args": copy.deepcopy(REQUIRED_TASK_ARGS.get(path[1], {}))}
        target, rest, where = suite["task"]["init_args"], path[3:], "task.init_args"
    else:
        target, rest, where = suite, path, ""
    for key in rest[:-1]:
        if target.get(key) is None:  # e.g. model.lora: null by default
            target[key] = {}
        target = target[key]
    target[rest[-1]] = value
    if setting.name == "pass_at":  # pass@k needs samples to be drawn
        suite["evaluation"]["samples"] = 4
    if path[:2] == ("sampling", "chat"):  # a chat template: the warm start is not for it
        suite["model"]["warm_start"] = None
    return suite, ".".join(filter(None, [where, *rest]))


def test_the_walk_finds_every_algorithm_and_task():
    algorithms = {class_path(c) for c in classes("algorithms", RLVRModule)}
    tasks = {class_path(c) for c in classes("tasks", Task)}
    assert {
        "algorithms.grpo.GRPO",
        "algorithms.hp_rlvr.HPRLVR",
        "algorithms.gigpo.GiGPO",
        "algorithms.sdpo.SDPO",
    } <= algorithms
    assert tasks == {
        "tasks.math.MathTask",
        "tasks.code.CodeTask",
        "tasks.alfworld.task.AlfworldTask",
        "tasks.reward.RewardTask",
        "tasks.reasoning_gym.task.ReasoningGymTask",
        "tasks.openenv.task.OpenEnvTask",
    }
    assert len(CASES) > 100  # every declared end of every setting


def test_every_number_declares_its_range():
    """A new numeric setting without a declared range fails here, by name."""
    missing = [".".join(s.path) for s in SETTINGS if s.numeric and not s.ranges and s.path not in UNBOUNDED]
    assert missing == []
    assert all(any(s.path == u for s in SETTINGS) for u in UNBOUNDED)  # the exemptions still exist


def test_every_default_is_in_its_range():
    wrong = [(".".join(s.path), s.default) for s in SETTINGS if s.default is not None and violation(s.hint, s.default)]
    assert wrong == []


@pytest.mark.parametrize("name, setting, value", CASES, ids=[c[0] for c in CASES])
def test_a_value_beyond_its_declared_range_is_refused(tmp_path, name, setting, value):
    suite, field = suite_with(setting, value)
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"suites": [suite]}))
    with pytest.raises(ConfigError) as error:
        load_benchmark(path)
    message = str(error.value)
    assert f"suites[0].{field}" in message and "must be" in message and "\n" not in message, message
    shown = [value] + ([value[0]] if isinstance(value, list) else [float(value)])  # a list's entry is named alone
    assert any(f"(got {v!r})" in message for v in shown), message


FILE_CASES = [
    (s, value) for s in file_settings() for mark in top_level_marks(s.hint)[0] for value in mark.outside(is_int(s.hint))
]


@pytest.mark.parametrize("setting, value", FILE_CASES, ids=[f"{'.'.join(s.path)}={v}" for s, v in FILE_CASES])
def test_a_file_setting_beyond_its_declared_range_is_refused(tmp_path, setting, value):
    """The file's own settings (`estimate:`) are in docs/config.md's table and checked alike."""
    suite, _ = suite_with(SETTINGS[0], SETTINGS[0].default)
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"suites": [suite], setting.path[0]: {setting.name: value}}))
    with pytest.raises(ConfigError) as error:
        load_benchmark(path)
    message = str(error.value)
    assert ".".join(setting.path) in message and "must be" in message and "\n" not in message, message
    assert len(FILE_CASES) >= 3 and f"`{setting.name}`" in table()


def test_the_same_suite_at_its_defaults_is_accepted(tmp_path):
    """The refusals above are the values', not the suites' built around them."""
    for setting in {s.path[:2]: s for s in SETTINGS}.values():
        suite, _ = suite_with(setting, setting.default)
        if setting.name == "pass_at":
            suite["evaluation"]["samples"] = 4
        path = tmp_path / "bench.yaml"
        path.write_text(yaml.safe_dump({"suites": [suite]}))
        load_benchmark(path)


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("negative lr", {"optim": {"lr": -1e-5}}, "suites[0].optim.lr: must be > 0 (got -1e-05)"),
        ("top_p above one", {"sampling": {"top_p": 1.5}}, "suites[0].sampling.top_p: must be in (0, 1] (got 1.5)"),
        ("seed twice", {"seeds": [0, 1, 0]}, "suites[0].seeds: seed 0 given twice"),
        ("tis_cap 0", {"update": {"tis_cap": 0}}, "suites[0].update.tis_cap: must be > 0 (got 0.0)"),
    ],
)
def test_through_the_cli_one_line_exit_2_nothing_written(tmp_path, capsys, name, change, message):
    suite, _ = suite_with(SETTINGS[0], SETTINGS[0].default)
    path, results = tmp_path / "bench.yaml", tmp_path / "results"
    path.write_text(yaml.safe_dump({"suites": [suite | change]}))
    assert main(["run", str(path), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not results.exists()


BASE = """
suites:
  - name: s
    task: {class_path: tasks.math.MathTask, init_args: {train_size: 20, eval_size: 4}}
    model: {preset: tiny, warm_start: {steps: 1}}
    algorithms:
      grpo: {class_path: algorithms.grpo.GRPO}
    schedule: {steps: 2, prompts_per_step: 2}
"""


@pytest.mark.parametrize(
    "text, value", [("3e-5", 3e-5), ("1e-6", 1e-6), ("2E+3", 2000.0), ("1.5e3", 1500.0), ("7", 7.0)]
)
def test_numbers_written_as_ml_configs_write_them(tmp_path, text, value):
    path = tmp_path / "bench.yaml"
    path.write_text(BASE + f"    optim: {{lr: {text}}}\n")
    assert load_benchmark(path).suites[0].settings["optim"].lr == value


def test_yaml_numbers_and_nothing_else_change():
    read = yaml.load("a: -2E+3\nb: 1e5x\nc: 12\nd: 0x1F\ne: 1_000\nf: v1e3", Loader=_Loader)
    assert read == {"a": -2000.0, "b": "1e5x", "c": 12, "d": 31, "e": 1000, "f": "v1e3"}


def test_a_quoted_number_is_a_string_and_refused(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text(BASE + '    optim: {lr: "3e-5"}\n')
    with pytest.raises(
        ConfigError, match=r"suites\[0\]\.optim\.lr: expected a number, got '3e-5' \(a string: drop the quotes\)"
    ):
        load_benchmark(path)


def test_a_key_given_twice_is_refused_with_its_line(tmp_path):
    path = tmp_path / "bench.yaml"
    first = "      grpo: {class_path: algorithms.grpo.GRPO}\n"
    path.write_text(BASE.replace(first, first + "      grpo: {class_path: algorithms.rloo.RLOO}\n"))
    with pytest.raises(ConfigError, match=r"grpo: given twice in one mapping \(line 8\)"):
        load_benchmark(path)


def test_a_merged_anchor_may_be_overridden(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text("x-optim: &optim {lr: 1.0e-4, warmup_steps: 3}\n" + BASE + "    optim: {<<: *optim, lr: 2.0e-4}\n")
    optim = load_benchmark(path).suites[0].settings["optim"]
    assert (optim.lr, optim.warmup_steps) == (2e-4, 3)


@pytest.mark.parametrize(
    "files, missing",
    [
        (("model.safetensors", "tokenizer.json"), "config.json"),
        (("config.json", "tokenizer.json"), "weights"),
        (("config.json", "model.safetensors", "tokenizer_config.json"), "tokenizer files"),
    ],
)
def test_a_model_folder_needs_its_weights_and_tokenizer(tmp_path, files, missing):
    folder = tmp_path / "model"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("")
    path = tmp_path / "bench.yaml"
    path.write_text(BASE.replace("model: {preset: tiny, warm_start: {steps: 1}}", f"model: {{path: {folder}}}"))
    with pytest.raises(ConfigError, match=rf"suites\[0\]\.model\.path: {folder} has no {missing}"):
        load_benchmark(path)


def test_a_gpu_this_machine_lacks_is_refused_where_the_runs_execute(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path, results = tmp_path / "bench.yaml", tmp_path / "results"
    path.write_text(BASE + "    trainer: {accelerator: gpu}\n")
    assert main(["run", str(path), "--list"]) == 0  # listing (or submitting) runs nothing here
    assert main(["run", str(path), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "suites[0].trainer.accelerator: gpu, but this machine has none" in err and err.count("\n") == 1
    assert not results.exists()


def test_more_processes_than_cores_is_a_warning_naming_both(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    path = tmp_path / "bench.yaml"
    path.write_text(BASE.replace("prompts_per_step: 2", "prompts_per_step: 4") + "    trainer: {devices: 4}\n")
    (suite,) = load_benchmark(path).suites
    (warning,) = check_machine(suite, "suites[0]")
    assert "suites[0].trainer.devices: 4 processes a node on a machine with 2 CPU cores" in warning
    assert check_machine(dataclasses.replace(suite, trainer=TrainerArgs(devices=2)), "suites[0]") == []


def test_range_words_and_membership_on_literals():
    assert str(Range(0, low_open=True)) == "> 0" and str(Range(1)) == ">= 1"
    assert str(Range(0, 1, low_open=True)) == "in (0, 1]" and str(Range(0, 1, high_open=True)) == "in [0, 1)"
    assert (
        0.5 in Range(0, 1)
        and 0 in Range(0, 1)
        and 0 not in Range(0, 1, low_open=True)
        and 1 not in Range(0, 1, high_open=True)
    )
    assert Range(0, low_open=True).outside(False) == [0.0] and Range(1).outside(True) == [0]
    assert Range(0, 1, low_open=True).outside(False) == [0.0, 1.5]
    from rollout.ranges import PositiveFloat, PositiveInt

    assert violation(PositiveFloat, -1.0) == "must be > 0 (got -1.0)"
    assert violation(PositiveFloat, "3e-5") == "must be a number > 0 (got '3e-5')"
    assert violation(PositiveFloat, float("nan")) is not None
    assert violation(PositiveInt | None, None) is None and violation(PositiveInt | None, 0) == "must be >= 1 (got 0)"
    assert violation(list[PositiveInt], [1, 0]) == "every entry must be >= 1 (got [1, 0])"
    assert describe(list[PositiveInt]) == "each >= 1" and describe(PositiveInt | None) == ">= 1"


def test_distinct_refuses_any_repeat_and_a_number_is_not_a_bool():
    """A repeat anywhere in the list, not only next to itself; True is not the number 1."""
    from typing import Annotated

    from rollout.ranges import PositiveFloat, PositiveInt

    distinct = Annotated[list[int], Distinct()]
    assert violation(distinct, [1, 2, 1]) == "must be without an entry given twice (got [1, 2, 1])"
    assert violation(distinct, [1, 2, 3]) is None
    assert violation(PositiveInt, True) == "must be a number >= 1 (got True)"
    assert violation(PositiveFloat, False) == "must be a number > 0 (got False)"


def test_a_key_given_twice_is_refused_wherever_the_second_is():
    with pytest.raises(ConfigError, match=r"a: given twice in one mapping \(line 3\)"):
        yaml.load("a: 1\nb: 2\na: 3\n", Loader=_Loader)


def test_a_bool_is_not_a_seed(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text(BASE + "    seeds: [true]\n")
    with pytest.raises(ConfigError, match=r"suites\[0\]\.seeds: expected a non-empty list of integers"):
        load_benchmark(path)


@pytest.mark.parametrize(
    "files",
    [
        ("config.json", "model.safetensors", "tokenizer.model"),  # sentencepiece (Llama, Mistral)
        ("config.json", "pytorch_model.bin", "vocab.json"),  # GPT-2's BPE, weights as torch's pickle
        ("config.json", "model-00001-of-00002.safetensors", "vocab.txt"),  # sharded weights, WordPiece
    ],
)
def test_a_model_folder_with_any_known_weights_and_tokenizer_is_accepted(tmp_path, files):
    from harness.config import missing_model_files

    for name in files:
        (tmp_path / name).write_text("")
    assert missing_model_files(tmp_path) is None


@pytest.mark.parametrize("accelerator, refused", [("auto", True), ("gpu", True), ("cpu", False)])
def test_more_processes_a_node_than_its_gpus_is_refused_unless_on_the_cpu(tmp_path, monkeypatch, accelerator, refused):
    import torch

    path = tmp_path / "bench.yaml"
    path.write_text(BASE.replace("prompts_per_step: 2", "prompts_per_step: 4"))
    (suite,) = load_benchmark(path).suites
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    suite = dataclasses.replace(suite, trainer=TrainerArgs(devices=4, accelerator=accelerator))
    if refused:
        with pytest.raises(
            ConfigError, match=r"suites\[0\]\.trainer\.devices: 4 processes a node, but this machine has 2 GPUs"
        ):
            check_machine(suite, "suites[0]")
    else:
        assert check_machine(suite, "suites[0]") == []
    assert (
        check_machine(dataclasses.replace(suite, trainer=TrainerArgs(devices=2, accelerator=accelerator)), "suites[0]")
        == []
    )


def test_the_settings_reference_is_current():
    """docs/config.md's table is the declarations' (regenerate: python -m harness settings --out docs/config.md)."""
    text = (ROOT / "docs" / "config.md").read_text()
    assert text.split(BEGIN, 1)[1].split(END, 1)[0].strip() == table().strip()
