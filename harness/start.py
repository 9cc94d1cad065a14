"""The weights a suite's runs start from, as one thing: what determines them (the recipe), its hash
(the cache key), the folder they are cached in, how they are built (the tiny preset or a local
directory, optionally warm-started on the task's demonstrations: harness/models.py), their digest
and what building them will cost. Every run of a pair starts from the same weights, and only the
first pays for them.

    start = StartingWeights.of(suite)
    start.key                               # None: `model.path` as it is, nothing built
    start.folder(cache_dir)                 # where they are, or will be
    start.build(task, cache_dir)            # that folder, built and cached first if needed
    weights_digest(policy)                  # the weights as loaded, recorded with every run
    start.estimate(cache_dir)               # "700 steps of 64 examples, about 3 min ..." or None
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import statistics
import time
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from harness.locks import exclusive
from harness.models import demonstrated, load_policy, task_corpus, warm_start
from harness.progress import fmt_duration
from harness.provenance import lock
from harness.settings import ModelArgs, TinyConfig, WarmStartArgs
from harness.shipped import copy_into, shipped
from harness.tiny import save_tiny
from rollout import kernels
from tasks.base import Task

if TYPE_CHECKING:
    from algorithms.teaching import Teaching

# Bump when the warm-start recipe or its arithmetic changes, to invalidate caches. What changes
# one task's problems or demonstrations is that task's `version`, in its key.
WARM_START_VERSION = 4

UNTAUGHT = {"hindsight_fraction": 0.0, "hindsight_segments": 4, "hindsight_feedback": ["full"]}
"""What the key of every warm start held before algorithms declared their teachings (HP-RLVR's
settings, untaught): kept in every key, a teaching's own entries over it, so cached weights keep
their keys."""


@dataclass
class StartingWeights:
    """A suite's starting weights: `recipe` and `key` say what they are, `build` makes them."""

    model: ModelArgs
    task_key: dict
    """What identifies the task (`Suite.task_key`)."""

    @classmethod
    def of(cls, suite) -> StartingWeights:
        """A suite's (harness.config.Suite: its model and its task's key)."""
        return cls(suite.model, suite.task_key())

    @cached_property
    def recipe(self) -> dict | None:
        """What determines the weights, or None when they are `model.path` as it is."""
        model = self.model
        if model.preset is None and model.warm_start is None:
            return None
        recipe = {
            "version": WARM_START_VERSION,
            "base": model.path if model.preset is None else {"tiny": tiny_key(model.tiny)},
            "task": self.task_key,
            "warm_start": warm_start_key(model.warm_start) if model.warm_start else None,
        }
        for teaching in teachings(model.warm_start) if model.warm_start else []:
            recipe |= teaching.templates()
        return recipe

    @property
    def key(self) -> str | None:
        """The recipe's hash: the cache entry's name."""
        if self.recipe is None:
            return None
        return hashlib.sha256(json.dumps(self.recipe, sort_keys=True).encode()).hexdigest()[:16]

    def folder(self, cache_dir: Path) -> Path:
        return Path(self.model.path) if self.key is None else cache_dir / "policies" / self.key

    def built(self, cache_dir: Path) -> bool:
        """Whether nothing is left to build: they are `model.path`, or complete in the cache."""
        return self.key is None or (self.folder(cache_dir) / "recipe.json").exists()

    def build(self, task: Task, cache_dir: Path) -> Path:
        """The folder of the weights, built and cached first if needed (or copied from those the
        project ships, harness/shipped.py). Processes that need the same weights at once build them
        once: the first holds the entry's file lock while it builds, the others wait for it and load
        what it wrote."""
        target = self.folder(cache_dir)
        if self.built(cache_dir):
            return target if self.key is None else built_elsewhere_warning(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(target.with_name(self.key + ".lock")):
            if (target / "recipe.json").exists():  # built by another process while this one waited
                return target
            staging = target.with_name(self.key + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            try:
                self.write(task, staging)
            except BaseException:  # SIGTERM, Ctrl-C, a failure: nothing half-built stays
                shutil.rmtree(staging, ignore_errors=True)
                raise
            staging.rename(target)  # atomic: a cache entry is complete or absent
        return built_elsewhere_warning(target)

    def write(self, task: Task, staging: Path) -> None:
        """The weights into `staging`, copied from the project's or built, with their recipe.json
        written last: the recipe, and the digest of the weights as they load (checked whenever
        they are loaded, harness/driver.py)."""
        model, recipe, key = self.model, dict(self.recipe), self.key
        if folder := shipped(key):
            copy_into(folder, staging)
            print(
                f"starting weights {key}: shipped with the project ({folder}, files checked); "
                "HARNESS_BUILD_WEIGHTS=1 builds them here instead"
            )
            recipe = json.loads((staging / "recipe.json").read_text())
            recipe["weights_digest"] = weights_digest(load_policy(staging, model.dtype)[0])
            (staging / "recipe.json").write_text(json.dumps(recipe, indent=2))
            return
        print(f"building the starting weights {staging.with_name(key)} (cached for every run that needs them)")
        rl_only = model.warm_start.rl_only if model.warm_start else 0
        started = time.perf_counter()
        demonstrated(task, rl_only)  # the task's problems and demonstrations, timed on their own
        report = {"problems_s": time.perf_counter() - started}
        if model.preset == "tiny":
            started = time.perf_counter()
            save_tiny(model.tiny, staging, corpus=task_corpus(task, rl_only) if model.tiny.vocabulary else None)
            report["vocabulary_s"] = time.perf_counter() - started
            base = staging
        else:
            base = Path(model.path)
        if model.warm_start is not None:
            policy, tokenizer = load_policy(base, model.dtype)
            report |= warm_start(policy, tokenizer, task, model.warm_start, teachings(model.warm_start))
            policy.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            recipe["report"] = report
            print(
                f"starting weights built: problems {report['problems_s']:.1f} s, "
                + (f"vocabulary {report['vocabulary_s']:.1f} s, " if "vocabulary_s" in report else "")
                + f"training {report['seconds']:.1f} s ({report['batches_s']:.1f} s of it making batches)"
            )
        recipe["built_with"] = built_with()
        recipe["weights_digest"] = weights_digest(load_policy(staging, model.dtype)[0])
        (staging / "recipe.json").write_text(json.dumps(recipe, indent=2))

    def estimate(self, cache_dir: Path) -> str | None:
        """What building the weights will cost, estimated from the warm starts the cache holds; None
        when there is no warm start to build (none asked for, or its folder is there)."""
        ws = self.model.warm_start
        if self.key is None or ws is None or self.folder(cache_dir).is_dir() or shipped(self.key):
            return None  # nothing to build: a local path, no warm start, cached, or shipped (copied)
        pace = seconds_per_example(cache_dir, self.task_key["class_path"])
        guess = (
            f"about {fmt_duration(pace[0] * ws.steps * ws.batch_size)} at the pace of the warm starts {pace[1]} "
            "in this cache" + (" (whose examples may be shorter or longer)" if pace[1] != "of this task" else "")
            if pace
            else "no earlier warm start in this cache to estimate its time from"
        )
        return f"{ws.steps} steps of {ws.batch_size} examples, {guess}"


def tiny_key(config: TinyConfig) -> dict:
    # A default that did not exist when earlier caches were written stays out of their key.
    return {
        k: v
        for k, v in asdict(config).items()
        if not ((k == "vocabulary" and v == 0) or (k == "split_digits" and not v))
    }


def warm_start_key(args: WarmStartArgs) -> dict:
    """The warm start's settings as the key holds them: its own (rl_only left out at 0, as before
    it existed), and where `teach` stands, each teaching's entries over UNTAUGHT (in the order the
    fields they replace had, so that a recipe.json reads as before)."""
    taught = dict(UNTAUGHT)
    for teaching in teachings(args):
        entries = teaching.key()
        if twice := (taught.keys() - UNTAUGHT.keys()) & entries.keys():
            raise ValueError(f"teach: two teachings write {', '.join(sorted(twice))} into the key")
        taught |= entries
    key = {}
    for name, value in asdict(args).items():
        if name == "teach":
            key |= taught
        elif not (name == "rl_only" and value == 0):
            key[name] = value
    return key


def teachings(args: WarmStartArgs) -> list[Teaching]:
    """The teachings `args.teach` names, each its algorithm's `teaching` class built from its
    settings, in the order of their class paths: the order the layout draws them in, so that the
    key (whose entries are sorted) decides it."""
    out = []
    for path, settings in sorted(args.teach.items()):
        module, _, name = path.rpartition(".")
        teaching = getattr(getattr(importlib.import_module(module), name), "teaching", None)
        if teaching is None:
            raise ValueError(f"teach: {path} declares no teaching (its class's `teaching` is None)")
        out.append(teaching(**settings))
    return out


def weights_digest(module: torch.nn.Module) -> str:
    """sha256 (16 hex digits) of a model's parameters and buffers: names, dtypes, shapes and bytes
    in name order. The same weights give the same digest whatever file format or release wrote them."""
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        h.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return h.hexdigest()[:16]


def built_with() -> dict:
    """What a warm start's weights depend on besides their recipe (the cache key): the CPU kernels'
    mode and the lock (rollout/kernels.py, harness/provenance.py)."""
    return {"cpu_kernels": kernels.level()["mode"], "lock": lock()["digest"]}


def built_elsewhere_warning(target: Path) -> Path:
    """`target`, saying so once when its weights were built on other kernels or another lock than
    this process runs (or before either was recorded): the same recipe then gives other weights,
    so runs from these will not reproduce records made with the weights built here."""
    recorded = json.loads((target / "recipe.json").read_text()).get("built_with")
    now = built_with()
    if recorded != now and target not in _warned:
        _warned.add(target)
        print(
            f"warning: the starting weights {target} were built with {recorded or 'kernels and a lock not recorded'}, "
            f"this process runs {now}: records from them differ from those of weights built here "
            f"(delete the folder to build them again)"
        )
    return target


_warned: set[Path] = set()


def seconds_per_example(cache_dir: Path, task_class: str) -> tuple[float, str] | None:
    """The median seconds a warm-start example took in the warm starts this cache holds, those
    of the same task class if any (examples differ in length from task to task), and which."""
    rates: dict[bool, list[float]] = {True: [], False: []}
    for recipe in (cache_dir / "policies").glob("*/recipe.json"):
        info = json.loads(recipe.read_text())
        ws, report = info.get("warm_start") or {}, info.get("report") or {}
        if ws.get("steps") and ws.get("batch_size") and report.get("seconds"):
            same = (info.get("task") or {}).get("class_path") == task_class
            rates[same].append(report["seconds"] / (ws["steps"] * ws["batch_size"]))
    for same, kind in ((True, "of this task"), (False, "of other tasks")):
        if rates[same]:
            return statistics.median(rates[same]), kind
    return None
