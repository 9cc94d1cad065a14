"""Every setting a benchmark file can hold, found from the declarations themselves: the suite's
settings dataclasses, and each algorithm's and task's constructor (the modules of `algorithms/`
and `tasks/`), down through the dataclasses they take. docs/config.md is its table
(`python -m harness settings --out docs/config.md`), and the range test walks the same list, so
a new field is in both without anyone adding it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import pkgutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from algorithms.base import RLVRModule
from harness.config import SETTINGS, TrainerArgs
from harness.settings import EstimateArgs, ModelArgs
from rollout.ranges import Distinct, Range, declared, describe
from tasks.base import Task

NOT_SETTINGS = {"self", "policy", "tokenizer", "task", "seed", "base", "schedule", *SETTINGS}
"""Constructor parameters the config does not take from an algorithm's or task's init_args
(`seed` is the suite's `seeds`; the settings sections are the suite's, overridable by name)."""


@dataclass(frozen=True)
class Setting:
    path: tuple[str, ...]
    """Where it sits in a suite: ("optim", "lr"), ("algorithms", "<name>", "init_args", ...)."""
    owner: type
    """The dataclass or the algorithm or task class it belongs to."""
    hint: Any
    default: Any
    doc: str

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def ranges(self) -> list[Range | Distinct]:
        return declared(self.hint)

    @property
    def numeric(self) -> bool:
        """Whether it holds a number (or a list of them, or an optional one)."""
        return _numeric(self.hint)


def _numeric(hint: Any) -> bool:
    if hint in (int, float):
        return True
    return get_origin(hint) is not Literal and any(_numeric(a) for a in get_args(hint) if a is not type(None))


def _dataclass_arm(hint: Any) -> type | None:
    """The dataclass a hint takes (`X`, `X | None`, `X | dict | None`), or None."""
    if dataclasses.is_dataclass(hint):
        return hint
    if get_origin(hint) in (Union, UnionType):
        return next((a for a in get_args(hint) if dataclasses.is_dataclass(a)), None)
    return None


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a dataclass's fields (the string after `name: type = x`)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body, docs = tree.body[0].body, {}
    for item, after in zip(body, body[1:]):
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[item.target.id] = " ".join(after.value.value.split())
    return docs


def dataclass_settings(cls: type, path: tuple[str, ...]) -> list[Setting]:
    hints, docs, found = get_type_hints(cls, include_extras=True), {}, []
    for owner in reversed(cls.__mro__):  # a field inherited keeps its docstring
        docs |= field_docs(owner)
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        nested = _dataclass_arm(hints[f.name])
        if nested is not None:
            found += dataclass_settings(nested, (*path, f.name))
        else:
            found.append(Setting((*path, f.name), cls, hints[f.name], default, docs.get(f.name, "")))
    return found


def constructor_settings(cls: type, path: tuple[str, ...]) -> list[Setting]:
    try:
        hints = get_type_hints(cls.__init__, include_extras=True)
    except NameError:  # a type-checking-only annotation: nothing to check by type
        hints = {}
    found = []
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name in NOT_SETTINGS or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        hint = hints.get(name, Any)
        nested = _dataclass_arm(hint)
        if nested is not None:
            found += dataclass_settings(nested, (*path, name))
        else:
            found.append(Setting((*path, name), cls, hint, param.default, ""))
    return found


def classes(package: str, base: type) -> list[type]:
    """The concrete subclasses of `base` defined in the modules of `package` (and its packages)."""
    root = importlib.import_module(package)
    found = {}
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        if info.name.startswith("tasks.sandbox."):  # run by the sandbox's own interpreter, not importable here
            continue
        if info.name == "tasks.openenv.guess":  # an environment, not a task: it needs the openenv extra
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, base)
                and value is not base
                and value.__module__ == info.name
            ):
                if not inspect.isabstract(value):
                    found[value.__qualname__] = value
    return sorted(found.values(), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def suite_settings() -> list[Setting]:
    """The settings of a suite itself (its sections), each algorithm's teaching, each algorithm's
    and each task's."""
    found = []
    for section, cls in {**SETTINGS, "trainer": TrainerArgs, "model": ModelArgs}.items():
        found += dataclass_settings(cls, (section,))
    for algorithm in classes("algorithms", RLVRModule):  # what a warm start's `teach` may name
        if vars(algorithm).get("teaching") is not None:
            found += dataclass_settings(algorithm.teaching, ("model", "warm_start", "teach", class_path(algorithm)))
    for algorithm in classes("algorithms", RLVRModule):
        found += constructor_settings(algorithm, ("algorithms", class_path(algorithm), "init_args"))
    for task in classes("tasks", Task):
        found += constructor_settings(task, ("task", class_path(task), "init_args"))
    return found


def file_settings() -> list[Setting]:
    """The benchmark file's own settings, beside its `suites:` (`estimate:`)."""
    return dataclass_settings(EstimateArgs, ("estimate",))


def describe_type(hint: Any) -> str:
    if get_origin(hint) is Annotated:
        return describe_type(get_args(hint)[0])
    if get_origin(hint) in (Union, UnionType):
        return " or ".join(describe_type(a) for a in get_args(hint))
    if get_origin(hint) is Literal:
        return " / ".join(map(str, get_args(hint)))
    if get_origin(hint) is not None:
        return f"{get_origin(hint).__name__}[{', '.join(describe_type(a) for a in get_args(hint))}]"
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def yaml_text(value: Any) -> str:
    """A default as the YAML that gives it."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        return json.dumps(value)
    except TypeError:
        return repr(value)


def table() -> str:
    """docs/config.md's table: every setting, its type, default, declared range and meaning."""
    rows, owner, file_level = [], None, {s.path[0] for s in file_settings()}
    for s in file_settings() + suite_settings():
        where = s.path[:2] if s.path[0] in ("algorithms", "task") else s.path[:1]
        if where != owner:
            owner = where
            title = f"`{where[1]}` (init_args)" if len(where) == 2 else f"`{where[0]}:`"
            if where[0] in file_level:
                title += " (the file's, beside `suites:`)"
            rows += [
                "",
                f"### {title}",
                "",
                "| setting | type | default | must be | meaning |",
                "|---|---|---|---|---|",
            ]
        name = ".".join(s.path[3:] if s.path[0] == "algorithms" else s.path[3:] if s.path[0] == "task" else s.path[1:])
        ranges = describe(s.hint) or ("any" if s.numeric else "")
        default = "required" if s.default is inspect.Parameter.empty else f"`{yaml_text(s.default)}`"
        meaning = s.doc.replace("|", "\\|")
        rows.append(f"| `{name}` | {describe_type(s.hint)} | {default} | {ranges} | {meaning} |")
    return "\n".join(rows).strip() + "\n"


BEGIN, END = "<!-- settings: python -m harness settings --out docs/config.md -->", "<!-- end of settings -->"


def write_reference(out: Path | None) -> str:
    """The table; with `out`, pasted between the markers of that file (written whole if it has none)."""
    text = table()
    if out is not None:
        old = out.read_text() if out.is_file() else ""
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            text = f"{head}{BEGIN}\n{text}{END}{rest.split(END, 1)[1]}"
        else:
            text = f"{BEGIN}\n{text}{END}\n"
        out.write_text(text)
    return text
