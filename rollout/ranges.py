"""What a setting may be, declared beside it: `lr: PositiveFloat = 5e-5`.

A settings dataclass checks its fields in `__post_init__` (`check_fields(self)`), and the config
checks an algorithm's or a task's constructor arguments against the constructor's annotations
(`violation`), so a value out of range is refused before anything runs, in one line naming the
field, what it must be and what it got. The names follow pydantic's, which many readers know.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints


@dataclass(frozen=True)
class Range:
    """The numbers from `low` to `high` (None: unbounded on that side), each end open or closed."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"

    def outside(self, integer: bool) -> list[float]:
        """Values just beyond each end (what a test of the declaration tries)."""
        step = 1 if integer else 0.5
        values = []
        if self.low is not None:
            values.append(self.low if self.low_open else self.low - step)
        if self.high is not None:
            values.append(self.high if self.high_open else self.high + step)
        return [int(v) if integer else float(v) for v in values]


@dataclass(frozen=True)
class Distinct:
    """A list in which no entry appears twice."""

    def __str__(self) -> str:
        return "without an entry given twice"


@dataclass(frozen=True)
class FromConfig:
    """A file or folder named in a config: a relative one is read from the config file's folder
    (every relative path in a config is; docs/config.md)."""

    def __str__(self) -> str:
        return "a path, relative to the config file's folder"


PositiveInt = Annotated[int, Range(1)]
NonNegativeInt = Annotated[int, Range(0)]
PositiveFloat = Annotated[float, Range(0, low_open=True)]
NonNegativeFloat = Annotated[float, Range(0)]
Probability = Annotated[float, Range(0, 1, low_open=True)]
"""In (0, 1]: a share that cannot be nothing (top-p, a memory share)."""
UnitInterval = Annotated[float, Range(0, 1)]
"""In [0, 1]: a fraction, a discount, a momentum."""
ConfigPath = Annotated[str, FromConfig()]
"""A file or folder; relative to the config file's folder."""


def violation(hint: Any, value: Any) -> str | None:
    """What is wrong with `value` under the ranges `hint` declares ("must be > 0 (got -1)"), or
    None. Types are the config's concern; a non-number under a Range is reported here too, as
    a constructor called from Python has had no config to check it."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *marks = get_args(hint)
        inner = violation(base, value)
        if inner:
            return inner
        for mark in marks:
            if isinstance(mark, Range):
                if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
                    return f"must be a number {mark} (got {value!r})"
                if value not in mark:
                    return f"must be {mark} (got {value!r})"
            if isinstance(mark, Distinct) and len(set(value)) != len(value):
                return f"must be {mark} (got {value!r})"
        return None
    if origin in (Union, UnionType):
        if value is None:
            return None
        arms = [a for a in get_args(hint) if a is not type(None)]
        return violation(arms[0], value) if len(arms) == 1 else None
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        (item,) = get_args(hint)[:1] or (Any,)
        for entry in value:
            wrong = violation(item, entry)
            if wrong:
                return f"every entry {wrong.removesuffix(f' (got {entry!r})')} (got {value!r})"
    return None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


def check_fields(settings: Any) -> None:
    """Raise ValueError("field: must be ... (got ...)") for the first field of a dataclass
    instance outside its declared range."""
    hints = _hints(type(settings))
    for f in dataclasses.fields(settings):
        wrong = violation(hints[f.name], getattr(settings, f.name))
        if wrong:
            raise ValueError(f"{f.name}: {wrong}")


def declared(hint: Any) -> list[Range | Distinct]:
    """Every Range and Distinct in `hint`, at any depth (a list's entries, an optional value)."""
    if get_origin(hint) is Annotated:
        base, *marks = get_args(hint)
        return declared(base) + [m for m in marks if isinstance(m, (Range, Distinct))]
    return [mark for arg in get_args(hint) for mark in declared(arg)]


def is_config_path(hint: Any) -> bool:
    """Whether `hint` declares a path read from the config file's folder (optional or not)."""
    if get_origin(hint) is Annotated:
        return any(isinstance(m, FromConfig) for m in get_args(hint)[1:])
    return get_origin(hint) in (Union, UnionType) and any(is_config_path(a) for a in get_args(hint))


def describe(hint: Any) -> str:
    """What `hint` declares, in words: "> 0", "each >= 1, without an entry given twice", or ""."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        marks = [str(m) for m in args[1:] if isinstance(m, (Range, Distinct, FromConfig))]
        return ", ".join(filter(None, [describe(args[0]), *marks]))
    if origin in (list, tuple) and args:
        inner = describe(args[0])
        return f"each {inner}" if inner else ""
    return ", ".join(filter(None, (describe(a) for a in args if a is not type(None))))
