"""ALFWorld, text only and offline: a seeded game generator, a loader for official games, and a
fast environment wrapper (torch-free; the multi-turn rollout loop lives elsewhere).

Games are genuine ALFWorld games: `game.tw-pddl` files (JSON with the alfworld package's PDDL
domain, its text grammar with the task sentence filled in, a PDDL problem, `solvable` and a
`walkthrough`) played by TextWorld's PDDL engine under alfworld's name demangler, so observations,
admissible commands and `won` are exactly ALFWorld's. What the generator adds is the problems:
a room drawn from one of the alfworld package's scene layouts (its receptacles and object types),
kept small so that a tiny model can read it, objects placed where ALFRED's own rules allow
(`alfworld.gen.constants.VAL_RECEPTACLE_OBJECTS`), and a goal from ALFRED's goal library.

    games = generate_games(TASK_TYPES, count=60, seed=0, cache_dir=".cache/alfworld")
    held_out = generate_games(TASK_TYPES, count=30, seed=0, cache_dir=".cache/alfworld", split="eval")
    env = AlfworldEnv(max_steps=30)
    observation, task, admissible = env.reset(games[0])
    observation, done, won, admissible = env.step(admissible[0])

The prompt ALFWorld agents usually see is `f"{observation}\\n\\nYour task is to: {task}."`.

alfworld and textworld are dependencies of the harness: `pip install -e .` compiles
fast-downward's planner (C++, a minute or two) and pulls jericho/spacy, which TextWorld imports
but the PDDL path never uses; no torch.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "look_at_obj_in_light",
    "pick_two_obj_and_place",
)

# Bump when the generator's output changes: it is part of every game's hash, so old cache
# entries are simply never looked up again.
GENERATOR_VERSION = 1

SPLITS = ("train", "eval")
# A game belongs to "eval" iff its world hash falls in one of these buckets: membership is a
# function of the game's content alone, so the two splits are disjoint whatever seeds and counts
# are asked for.
_SPLIT_BUCKETS = 5

# The appliance a task type needs, as (receptacle type, command verb).
_APPLIANCE = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "clean"),
    "pick_heat_then_place_in_recep": ("Microwave", "heat"),
    "pick_cool_then_place_in_recep": ("Fridge", "cool"),
}
# Which objects a task type may target (ALFRED's action rules), by VAL_ACTION_OBJECTS key.
_ACTION_CLASS = {
    "pick_clean_then_place_in_recep": "Cleanable",
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
}
_LAMPS = ("DeskLamp", "FloorLamp")
# ALFRED's tables list no receptacle for lamps; ALFWorld shows desk lamps on furniture like these.
_LAMP_HOLDERS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "Cart", "TVStand"})
_GRID = 0.25  # metres per navigation grid step, as in ALFRED's location names


# --------------------------------------------------------------------------------------------
# Records and knobs


@dataclass(frozen=True)
class GameSize:
    """How big a generated room is. Small rooms keep observations and admissible-command lists
    short (at the default, typically under 15 commands) for a model that reads characters.

    receptacles: receptacles in the room (drawn from the scene's layout, the ones the task needs
        included); at least 3, the most any task type needs.
    distractors: objects besides the task's own (and the lamp, for look_at_obj_in_light).
    closed_receptacles: openable receptacles (fridge, cabinet, drawer, microwave, safe) start
        closed, hiding their contents until opened; False starts them open (an easier game).
    """

    receptacles: int = 5
    distractors: int = 2
    closed_receptacles: bool = True

    def __post_init__(self) -> None:
        if self.receptacles < 3:
            raise ValueError(f"GameSize.receptacles must be >= 3, got {self.receptacles}")
        if self.distractors < 0:
            raise ValueError(f"GameSize.distractors must be >= 0, got {self.distractors}")


@dataclass(frozen=True)
class GameRecord:
    """One playable game. `path` is its game.tw-pddl; `goal` the task sentence (as the game says it
    after "Your task is to: ", without the final period); `walkthrough` an expert command sequence
    that wins (empty where an official game ships none); `split` is "train"/"eval" for generated
    games and the data split's folder name (train, valid_seen, ...) for official ones."""

    game_id: str
    path: str
    task_type: str
    goal: str
    walkthrough: tuple[str, ...]
    scene: str
    split: str


class ResetResult(NamedTuple):
    observation: str
    task: str
    admissible: list[str]


class StepResult(NamedTuple):
    observation: str
    done: bool
    won: bool
    admissible: list[str]


# --------------------------------------------------------------------------------------------
# The alfworld package's data (imported lazily: this module imports without alfworld)


_INSTALL = "the ALFWorld task needs alfworld and textworld, which the harness installs: pip install -e ."


@functools.cache
def _alfworld() -> dict[str, Any]:
    try:
        import alfworld
        import fast_downward  # noqa: F401  (textworld[pddl]'s planner; checked here to fail early)
        import textworld  # noqa: F401
        from alfworld.gen import constants, goal_library
    except ImportError as e:
        raise ImportError(f"{e}: {_INSTALL}") from e

    root = Path(alfworld.__file__).parent
    return {
        "domain": (root / "data" / "alfred.pddl").read_text(),
        "grammar": (root / "data" / "alfred.twl2").read_text(),
        "layouts": root / "gen" / "layouts",
        "constants": constants,
        "goals": goal_library.gdict,
    }


@functools.cache
def _rules() -> dict[str, Any]:
    """ALFRED's placement and action rules. The sets here only answer membership: generation
    sorts whatever it iterates, since a set of strings changes order with the hash seed."""
    c = _alfworld()["constants"]
    holds = {r: frozenset(o for o in objs if not o.endswith("Sliced")) for r, objs in c.VAL_RECEPTACLE_OBJECTS.items()}
    pickupable = frozenset(o for objs in holds.values() for o in objs)
    return {
        "holds": holds,  # receptacle type -> object types it may contain
        "pickupable": pickupable,
        "action": {k: frozenset(v) for k, v in c.VAL_ACTION_OBJECTS.items()},
        "openable": frozenset(c.OPENABLE_CLASS_LIST),
        "movable": frozenset(c.MOVABLE_RECEPTACLES),
        "rooms": dict(c.SCENE_TYPE),
        "valid_rooms": {k: frozenset(v) for k, v in c.GOALS_VALID.items()},
    }


@dataclass(frozen=True)
class _Receptacle:
    id: str  # ALFRED id, e.g. "Cabinet|+00.65|+00.48|+00.24" or "Sink|...|SinkBasin"
    type: str
    location: str  # ALFRED location name, e.g. "loc|0|3|1|30"


@dataclass(frozen=True)
class _Scene:
    name: str
    room: str
    receptacles: tuple[_Receptacle, ...]
    object_types: tuple[str, ...]  # pickupable object types ALFRED puts in this scene
    lamps: tuple[str, ...]
    free_locations: tuple[str, ...]  # reachable points where no receptacle is: agent starts


def _receptacle_type(alfred_id: str) -> str:
    parts = alfred_id.split("|")
    # "Sink|x|y|z|SinkBasin": the basin is the receptacle
    return parts[-1] if len(parts) > 4 and parts[-1].isalpha() else parts[0]


@functools.cache
def _scene_names() -> tuple[str, ...]:
    names = [p.name[: -len("-openable.json")] for p in _alfworld()["layouts"].glob("FloorPlan*-openable.json")]
    return tuple(sorted(names, key=lambda n: int(n[len("FloorPlan"):])))


@functools.cache
def _scene(name: str) -> _Scene:
    import numpy as np

    layouts = _alfworld()["layouts"]
    rules = _rules()
    number = int(name[len("FloorPlan"):])
    room = next(r for r, numbers in rules["rooms"].items() if number in numbers)
    points = json.loads((layouts / f"{name}-openable.json").read_text())
    receptacles = []
    for rid in sorted(points):
        rtype = _receptacle_type(rid)
        if rtype not in rules["holds"]:
            continue
        x, z, rotation, horizon = points[rid]
        location = f"loc|{round(x / _GRID)}|{round(z / _GRID)}|{int(rotation) // 90}|{int(horizon)}"
        receptacles.append(_Receptacle(rid, rtype, location))
    scene_objects = set(json.loads((layouts / f"{name}-objects.json").read_text()))
    object_types = tuple(sorted(t for t in scene_objects if t in rules["pickupable"] or t in rules["movable"]))
    lamps = tuple(sorted(t for t in scene_objects if t in _LAMPS))
    taken = {r.location for r in receptacles}
    grid = np.load(layouts / f"{name}-layout.npy")
    free = []
    for x, z in grid.tolist():
        location = f"loc|{round(x / _GRID)}|{round(z / _GRID)}|0|30"
        if location not in taken:
            free.append(location)
    return _Scene(name, room, tuple(receptacles), object_types, lamps, tuple(sorted(set(free))))


# --------------------------------------------------------------------------------------------
# Goals: what the domain can satisfy


def goal_error(task_type: str, obj: str, recep: str = "", toggle: str = "") -> str | None:
    """Why ALFRED's rules make this goal impossible (None when it is fine). A goal the domain
    cannot satisfy makes TextWorld fail at load time with a bare KeyError, so refuse it up front."""
    rules = _rules()
    if task_type not in TASK_TYPES:
        return f"unknown task type {task_type!r} (expected one of {', '.join(TASK_TYPES)})"
    if obj not in rules["pickupable"]:
        return f"{obj} cannot be picked up"
    if task_type == "look_at_obj_in_light":
        return None if toggle in _LAMPS else f"{toggle!r} is not a lamp"
    if recep not in rules["holds"]:
        return f"{recep!r} is not a receptacle"
    if obj not in rules["holds"][recep]:
        return f"a {obj} cannot go in a {recep}"
    if task_type in _ACTION_CLASS and obj not in rules["action"][_ACTION_CLASS[task_type]]:
        return f"a {obj} is not {_ACTION_CLASS[task_type].lower()}"
    if task_type in _APPLIANCE and recep == _APPLIANCE[task_type][0]:
        return f"the target receptacle is the task's own appliance ({recep})"
    return None


# --------------------------------------------------------------------------------------------
# Sampling a game (pure Python, deterministic in its seed)


@dataclass(frozen=True)
class _Spec:
    """A sampled game before it is written as PDDL."""

    task_type: str
    scene: str
    obj: str
    recep: str  # target receptacle type ("" for look_at_obj_in_light)
    toggle: str  # lamp type (look_at_obj_in_light only)
    sentence: str
    receptacles: tuple[_Receptacle, ...]
    objects: tuple[tuple[str, str, str], ...]  # (alfred id, type, receptacle id)
    targets: tuple[str, ...]  # ids of the task's object(s), in the order the expert moves them
    target_recep: str  # id of the receptacle the expert uses (target, or the lamp's)
    appliance: str  # id of the sink/microwave/fridge the expert uses ("")
    start: str
    opened: tuple[str, ...]


def _candidate_scenes(task_type: str) -> list[_Scene]:
    rules = _rules()
    scenes = []
    for name in _scene_names():
        scene = _scene(name)
        if scene.room not in rules["valid_rooms"][task_type]:
            continue
        types = {r.type for r in scene.receptacles}
        if task_type in _APPLIANCE and _APPLIANCE[task_type][0] not in types:
            continue
        if task_type == "look_at_obj_in_light" and not (scene.lamps and types & _LAMP_HOLDERS):
            continue
        scenes.append(scene)
    return scenes


def _object_id(otype: str, near: str, rng: random.Random, taken: set[str]) -> str:
    """An ALFRED-style id for an object placed in receptacle `near` (ids only need to be unique;
    ALFWorld shows them as "apple 1")."""
    x, y, z = (float(v) for v in near.split("|")[1:4])
    while True:
        coords = (x + rng.uniform(-0.4, 0.4), y + rng.uniform(0.0, 0.3), z + rng.uniform(-0.4, 0.4))
        oid = "|".join([otype] + [f"{c:+06.2f}" for c in coords])
        if oid not in taken:
            taken.add(oid)
            return oid


def _sample_spec(task_type: str, size: GameSize, rng: random.Random) -> _Spec | None:
    """One candidate game, or None when this draw hit a dead end (the caller draws again)."""
    rules = _rules()
    holds = rules["holds"]
    scene = rng.choice(_candidate_scenes(task_type))
    by_type: dict[str, list[_Receptacle]] = {}
    for r in scene.receptacles:
        by_type.setdefault(r.type, []).append(r)

    toggle = recep = ""
    appliance: _Receptacle | None = None
    lamp_holder: _Receptacle | None = None
    if task_type in _APPLIANCE:
        appliance = rng.choice(by_type[_APPLIANCE[task_type][0]])
    if task_type == "look_at_obj_in_light":
        toggle = rng.choice(scene.lamps)
        lamp_holder = rng.choice([r for r in scene.receptacles if r.type in _LAMP_HOLDERS])

    # The object: one ALFRED puts in this scene, with a receptacle here to take it from and
    # (except for look_at_obj_in_light) a receptacle type here to bring it to.
    options = []
    for obj in scene.object_types:
        if obj in rules["movable"] and obj not in rules["pickupable"]:
            continue
        targets = sorted(t for t in by_type if goal_error(task_type, obj, t, toggle) is None)
        if task_type == "look_at_obj_in_light":
            targets = [""] if goal_error(task_type, obj, "", toggle) is None else []
        for target in targets:
            sources = [
                r
                for r in scene.receptacles
                if obj in holds[r.type]
                and r.type != target
                # a fridge makes what it holds cool: the goal would already be half done
                and not (task_type == "pick_cool_then_place_in_recep" and r.type == "Fridge")
            ]
            if sources:
                options.append((obj, target, sources))
    if not options:
        return None
    obj, recep, sources = rng.choice(options)
    copies = 2 if task_type == "pick_two_obj_and_place" else 1
    source_receps = [rng.choice(sources) for _ in range(copies)]
    target_recep = lamp_holder if lamp_holder is not None else rng.choice(by_type[recep])

    # The room: what the task needs, then other receptacles of the layout.
    needed = [*source_receps, target_recep] + ([appliance] if appliance else [])
    room: list[_Receptacle] = []
    for r in needed:
        if r not in room:
            room.append(r)
    if len(room) > size.receptacles:
        return None
    others = [r for r in scene.receptacles if r not in room]
    rng.shuffle(others)
    room += others[: size.receptacles - len(room)]
    room.sort(key=lambda r: r.id)

    taken: set[str] = set()
    objects: list[tuple[str, str, str]] = []
    targets = []
    for src in source_receps:
        oid = _object_id(obj, src.id, rng, taken)
        objects.append((oid, obj, src.id))
        targets.append(oid)
    if toggle:
        objects.append((_object_id(toggle, lamp_holder.id, rng, taken), toggle, lamp_holder.id))

    # Distractors: other object types of the scene, where some receptacle of the room holds them.
    kinds = [t for t in scene.object_types if t != obj and t in rules["pickupable"]]
    rng.shuffle(kinds)
    placed = 0
    for kind in kinds:
        if placed == size.distractors:
            break
        spots = [r for r in room if kind in holds[r.type]]
        if not spots:
            continue
        spot = rng.choice(spots)
        objects.append((_object_id(kind, spot.id, rng, taken), kind, spot.id))
        placed += 1

    goal = _alfworld()["goals"][task_type]
    sentence = rng.choice(goal["templates"]).format(obj=obj.lower(), recep=recep.lower(), toggle=toggle.lower(), mrecep="")
    opened = () if size.closed_receptacles else tuple(r.id for r in room if r.type in rules["openable"])
    return _Spec(
        task_type=task_type,
        scene=scene.name,
        obj=obj,
        recep=recep,
        toggle=toggle,
        sentence=sentence,
        receptacles=tuple(room),
        objects=tuple(sorted(objects)),
        targets=tuple(targets),
        target_recep=target_recep.id,
        appliance=appliance.id if appliance else "",
        start=rng.choice(scene.free_locations),
        opened=opened,
    )


# --------------------------------------------------------------------------------------------
# Writing a game


_MANGLE = {"-": "_minus_", "#": "-", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
_MANGLE_RE = re.compile("|".join(re.escape(k) for k in _MANGLE))


def _mangle(text: str) -> str:
    """ALFRED's PDDL-safe names (all replacements at once, as its `fix_pddl_str_chars`)."""
    return _MANGLE_RE.sub(lambda m: _MANGLE[m.group(0)], text)


def _problem(spec: _Spec) -> str:
    """The PDDL problem, in the shape of ALFWorld's own (types as constants, canContain from
    ALFRED's rules, ALFRED's goal library), without the distance table the domain never reads."""
    rules = _rules()
    holds = rules["holds"]
    action = rules["action"]
    receptacle_types = {r.type for r in spec.receptacles}
    object_types = {t for _, t, _ in spec.objects}
    # The domain names these in its actions: they must exist, each declared exactly once.
    rtypes = sorted(receptacle_types | {"SinkBasin", "Microwave", "Fridge"} | ({spec.recep} if spec.recep else set()))
    otypes = sorted(object_types | {"Knife", "ButterKnife"})
    locations = sorted({r.location for r in spec.receptacles} | {spec.start})
    where = {r.id: r for r in spec.receptacles}

    m = _mangle
    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in otypes]
    objects += [f"{t}Type - rtype" for t in rtypes]
    objects += [f"{m(oid)} - object" for oid, _, _ in spec.objects]
    objects += [f"{m(r.id)} - receptacle" for r in spec.receptacles]
    objects += [f"{m(loc)} - location" for loc in locations]

    init = ["(= (total-cost) 0)"]
    init += [f"(receptacleType {m(r.id)} {r.type}Type)" for r in spec.receptacles]
    init += [f"(objectType {m(oid)} {t}Type)" for oid, t, _ in spec.objects]
    init += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if o in holds.get(r, ())]
    for oid, t, _ in spec.objects:
        if t in rules["pickupable"]:
            init.append(f"(pickupable {m(oid)})")
        if t in rules["movable"]:
            init.append(f"(isReceptacleObject {m(oid)})")
        for cls, pred in (
            ("Cleanable", "cleanable"),
            ("Heatable", "heatable"),
            ("Coolable", "coolable"),
            ("Sliceable", "sliceable"),
            ("Toggleable", "toggleable"),
        ):
            if t in action[cls]:
                init.append(f"({pred} {m(oid)})")
    init += [f"(openable {m(r.id)})" for r in spec.receptacles if r.type in rules["openable"]]
    init += [f"(opened {m(rid)})" for rid in spec.opened]
    init.append(f"(atLocation agent1 {m(spec.start)})")
    init += [f"(receptacleAtLocation {m(r.id)} {m(r.location)})" for r in spec.receptacles]
    for oid, _, rid in spec.objects:
        init.append(f"(inReceptacle {m(oid)} {m(rid)})")
        init.append(f"(objectAtLocation {m(oid)} {m(where[rid].location)})")
        if where[rid].type == "Fridge":  # as ALFRED does: what sat in the fridge is cool
            init.append(f"(isCool {m(oid)})")

    goal = _alfworld()["goals"][spec.task_type]["pddl"]
    goal = goal.format(obj=spec.obj, recep=spec.recep, toggle=spec.toggle, mrecep="").replace("#", "-")
    # The goal library's text closes the `define`; fast-downward wants the metric after the goal.
    goal = goal.rstrip().removesuffix(")").rstrip()
    pad = "\n        "
    return (
        f"\n(define (problem plan_{spec.scene.lower()})\n    (:domain alfred)\n"
        f"    (:objects{pad}{pad.join(objects)}\n    )\n"
        f"    (:init{pad}{pad.join(init)}\n    )\n"
        f"{goal}\n    (:metric minimize (total-cost))\n)\n"
    )


def _game_data(spec: _Spec, problem: str) -> dict[str, Any]:
    data = _alfworld()
    return {
        "pddl_domain": data["domain"],
        "grammar": data["grammar"].replace("UNKNOWN GOAL", spec.sentence),
        "pddl_problem": problem,
    }


def _traj_data(spec: _Spec, seed_label: str) -> dict[str, Any]:
    """ALFWorld's per-game metadata file, in the fields AlfredTWEnv reads (task_type, pddl_params)
    plus the scene and where the game came from."""
    return {
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.obj,
            "parent_target": spec.recep,
            "toggle_target": spec.toggle,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": spec.scene},
        "turk_annotations": {"anns": [{"task_desc": spec.sentence}]},
        "generator": {"name": "tasks.alfworld_games", "version": GENERATOR_VERSION, "seed": seed_label},
    }


def _scripted_walkthrough(spec: _Spec, names: Mapping[str, str]) -> list[str]:
    """The obvious expert: fetch each target object (opening what is closed), use the appliance
    or lamp, bring it to the target receptacle. `names` maps ALFRED ids to the game's display
    names ("apple 1"). The generator replays it to `won` before keeping a game."""
    rules = _rules()
    types = {r.id: r.type for r in spec.receptacles}
    where = {oid: rid for oid, _, rid in spec.objects}
    opened = set(spec.opened)
    at = ""
    plan: list[str] = []

    def go(rid: str) -> None:
        nonlocal at
        if at != rid:
            plan.append(f"go to {names[rid]}")
            at = rid
        if types[rid] in rules["openable"] and rid not in opened:
            plan.append(f"open {names[rid]}")
            opened.add(rid)

    for oid in spec.targets:
        go(where[oid])
        plan.append(f"take {names[oid]} from {names[where[oid]]}")
        if spec.task_type in _APPLIANCE:
            verb = _APPLIANCE[spec.task_type][1]
            if at != spec.appliance:
                plan.append(f"go to {names[spec.appliance]}")
                at = spec.appliance
            plan.append(f"{verb} {names[oid]} with {names[spec.appliance]}")
        if spec.task_type == "look_at_obj_in_light":
            if at != spec.target_recep:
                plan.append(f"go to {names[spec.target_recep]}")
                at = spec.target_recep
            lamp = next(o for o, t, _ in spec.objects if t == spec.toggle)
            plan.append(f"use {names[lamp]}")
        else:
            go(spec.target_recep)
            plan.append(f"move {names[oid]} to {names[spec.target_recep]}")
    return plan


# --------------------------------------------------------------------------------------------
# Generation with a cache


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _split_of(world_hash: str) -> str:
    return "eval" if int(world_hash[:8], 16) % _SPLIT_BUCKETS == 0 else "train"


def generate_games(
    task_types: Sequence[str] = TASK_TYPES,
    count: int = 60,
    seed: int = 0,
    size: GameSize = GameSize(),
    cache_dir: str | Path = ".cache/alfworld_games",
    split: str = "train",
    expert: str = "scripted",
    planner_timeout_s: float = 20.0,
) -> list[GameRecord]:
    """`count` distinct solvable games, round-robin over `task_types` (game i has type
    task_types[i % len]), deterministic in (task_types, count, seed, size, split); a longer list
    with the same arguments starts with the shorter one.

    Each game is written once as cache_dir/<game_id>/game.tw-pddl with a traj_data.json beside
    it (the official ALFWorld layout, so `load_official_games(cache_dir)` and alfworld's own
    AlfredTWEnv read it too); later calls find it there and play nothing. A game is kept only if
    its walkthrough, replayed, wins. `expert`: "scripted" (instant; falls back to the planner if
    its plan ever fails) or "planner" (fast-downward's optimal plan, in a subprocess killed after
    `planner_timeout_s`: its search has no time limit of its own).

    `split` ("train" or "eval") picks games by a hash of their content, so the two splits never
    share a game whatever their seeds and counts."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if expert not in ("scripted", "planner"):
        raise ValueError(f"expert must be 'scripted' or 'planner', got {expert!r}")
    if not task_types:
        raise ValueError("task_types is empty")
    for t in task_types:
        if t not in TASK_TYPES:
            raise ValueError(f"unknown task type {t!r} (expected one of {', '.join(TASK_TYPES)})")
    cache = Path(cache_dir).resolve()
    cache.mkdir(parents=True, exist_ok=True)

    order = [task_types[i % len(task_types)] for i in range(count)]
    streams = {t: _games_of_type(t, seed, size, cache, split, expert, planner_timeout_s) for t in dict.fromkeys(order)}
    return [next(streams[t]) for t in order]


_MAX_ATTEMPTS = 100_000  # draws per type and split before giving up (a draw takes ~1 ms)


def _games_of_type(
    task_type: str, seed: int, size: GameSize, cache: Path, split: str, expert: str, planner_timeout_s: float
) -> Iterator[GameRecord]:
    """The endless, deterministic stream of distinct solvable games of one type and split."""
    seen: set[str] = set()
    env: AlfworldEnv | None = None
    failures = 0
    for attempt in range(_MAX_ATTEMPTS):
        label = f"{GENERATOR_VERSION}:{seed}:{task_type}:{size.receptacles}:{size.distractors}:{size.closed_receptacles}:{attempt}"
        spec = _sample_spec(task_type, size, random.Random(label))
        if spec is None:
            continue
        problem = _problem(spec)
        world = _digest(str(GENERATOR_VERSION), task_type, problem)
        if world in seen or _split_of(world) != split:
            continue
        seen.add(world)
        game_id = _digest(world, spec.sentence, expert)[:16]
        folder = cache / game_id
        record = _read_game_dir(folder, split=split, game_id=game_id)
        if record is None and not (folder / "game.tw-pddl").exists():
            if env is None:
                env = AlfworldEnv(max_steps=200)
            record = _build_game(spec, problem, folder, game_id, split, label, env, expert, planner_timeout_s)
        if record is None:
            failures += 1
            continue
        yield record
    raise RuntimeError(f"no more {task_type} games after {_MAX_ATTEMPTS} draws ({failures} unsolvable)")


def _build_game(
    spec: _Spec,
    problem: str,
    folder: Path,
    game_id: str,
    split: str,
    label: str,
    env: AlfworldEnv,
    expert: str,
    planner_timeout_s: float,
) -> GameRecord | None:
    data = _game_data(spec, problem)
    env.reset(data)
    walkthrough: list[str] | None = None
    if expert == "scripted":
        names = env.display_names()
        walkthrough = _scripted_walkthrough(spec, {rid: names[_mangle(rid).lower()] for rid in _all_ids(spec)})
        if not _wins(env, data, walkthrough):
            walkthrough = None
    if walkthrough is None:
        walkthrough = plan_walkthrough(data, timeout_s=planner_timeout_s)
        if walkthrough is not None and not _wins(env, data, walkthrough):
            walkthrough = None
    data["solvable"] = walkthrough is not None
    data["walkthrough"] = walkthrough or []
    staging = folder.with_name(folder.name + f".tmp{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "game.tw-pddl").write_text(json.dumps(data))
    (staging / "traj_data.json").write_text(json.dumps(_traj_data(spec, label), indent=1))
    try:
        staging.rename(folder)  # atomic: a cache entry is complete or absent
    except OSError:  # another process wrote it first
        for f in staging.iterdir():
            f.unlink()
        staging.rmdir()
    return _read_game_dir(folder, split=split, game_id=game_id)


def _all_ids(spec: _Spec) -> list[str]:
    return [r.id for r in spec.receptacles] + [oid for oid, _, _ in spec.objects]


def _wins(env: AlfworldEnv, game: Mapping[str, Any], walkthrough: Sequence[str]) -> bool:
    """Replaying `walkthrough` wins exactly at its last command, every command admissible."""
    _, _, admissible = env.reset(game)
    for i, command in enumerate(walkthrough):
        if command not in admissible:
            return False
        _, _, won, admissible = env.step(command)
        if won != (i == len(walkthrough) - 1):
            return False
    return bool(walkthrough)


def plan_walkthrough(game: Mapping[str, Any] | str | Path, timeout_s: float = 20.0) -> list[str] | None:
    """fast-downward's optimal plan for a game, as commands, or None if it finds none within
    `timeout_s`. Runs in a subprocess because the search has no time limit and cannot be
    interrupted from Python (a pick-two game in a big kitchen can take a minute)."""
    if isinstance(game, (str, Path)):
        payload = Path(game).read_text()
    else:
        payload = json.dumps({k: v for k, v in game.items() if k != "walkthrough"})
    try:
        out = subprocess.run(
            # As a module, not a script: a script's folder (tasks/) comes first on sys.path, where
            # tasks/alfworld.py would shadow the alfworld package.
            [sys.executable, "-m", "tasks.alfworld_games", "plan", "-"],
            cwd=Path(__file__).resolve().parents[1],
            input=payload,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return None
    try:
        plan = json.loads(lines[-1])  # the planner's own chatter, if any, comes before
    except json.JSONDecodeError:
        return None
    return list(plan) or None


def _plan_main(game_json: str) -> list[str]:
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs.pddl import PddlEnv

    data = json.loads(game_json)
    data.pop("walkthrough", None)  # else the env would return the stored one
    env = AlfredDemangler(PddlEnv(textworld.EnvInfos(extras=["walkthrough"])))
    env.load(data)
    return list(env.reset()["extra.walkthrough"])


# --------------------------------------------------------------------------------------------
# Reading games (generated or official)


_TASK_RE = re.compile(r"Your task is to: (.*?)\.?\"")


def _goal_of(grammar: str) -> str:
    match = _TASK_RE.search(grammar)
    return match.group(1) if match else ""


def _read_game_dir(folder: Path, split: str, game_id: str) -> GameRecord | None:
    """The record of a game folder (game.tw-pddl + traj_data.json), or None when it is absent,
    incomplete or known unsolvable."""
    game_file, traj_file = folder / "game.tw-pddl", folder / "traj_data.json"
    if not (game_file.is_file() and traj_file.is_file()):
        return None
    data = json.loads(game_file.read_text())
    if not data.get("solvable", False):
        return None
    traj = json.loads(traj_file.read_text())
    return GameRecord(
        game_id=game_id,
        path=str(game_file),
        task_type=traj["task_type"],
        goal=_goal_of(data["grammar"]),
        walkthrough=tuple(data.get("walkthrough") or ()),
        scene=str(traj.get("scene", {}).get("floor_plan", "")),
        split=split,
    )


def load_official_games(
    root: str | Path | None = None,
    task_types: Sequence[str] = TASK_TYPES,
    splits: Sequence[str] | None = None,
) -> list[GameRecord]:
    """Games of an official ALFWorld data tree (root, or $ALFWORLD_DATA, holding json_2.1.1/ or
    being it): every folder with traj_data.json and game.tw-pddl whose task type is asked for and
    whose game is marked solvable, skipping movable-receptacle and sliced trials as alfworld's
    AlfredTWEnv does. `split` is the first folder under the tree (train, valid_seen,
    valid_unseen); `splits` keeps only those. Sorted by path; game_id is the path in the tree."""
    if root is None:
        root = os.environ.get("ALFWORLD_DATA")
        if not root:
            raise FileNotFoundError("no ALFWorld data: pass root or set ALFWORLD_DATA")
    base = Path(os.path.expandvars(str(root))).expanduser()
    if (base / "json_2.1.1").is_dir():
        base = base / "json_2.1.1"
    if not base.is_dir():
        raise FileNotFoundError(f"ALFWorld data folder not found: {base}")
    wanted = set(task_types)
    games = []
    for dirpath, _, files in sorted(os.walk(base)):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        folder = Path(dirpath)
        relative = folder.relative_to(base)
        if "movable" in relative.as_posix() or "Sliced" in relative.as_posix():
            continue
        split = relative.parts[0] if len(relative.parts) > 1 else ""
        if splits is not None and split not in splits:
            continue
        traj = json.loads((folder / "traj_data.json").read_text())
        if traj.get("task_type") not in wanted:
            continue
        record = _read_game_dir(folder, split=split, game_id=relative.as_posix())
        if record is not None:
            games.append(record)
    return games


# --------------------------------------------------------------------------------------------
# Speed-ups for TextWorld's PDDL engine
#
# Stock TextWorld re-parses, on every reset and step, text that never changes: the grammar's
# symbol strings (a TatSu parse per admissible command), the conditions of its rules, and the
# whole PDDL translation of the game (twice per reset). The patches below memoise those parses;
# every transition stays identical to stock (tests/test_alfworld_games.py replays walkthroughs
# both ways). They are process-wide and reversible: `set_speedups(False)` restores stock.


class _LRU(OrderedDict):
    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def get_or(self, key: Any, make: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = self[key] = make()
        if len(self) > self.maxsize:
            self.popitem(last=False)
        return value


# Games whose PDDL translation stays in memory (~0.4 MB each at the default GameSize): a pool
# cycling through more games than this pays the translation (~0.05 s) again on their resets.
TRANSLATION_CACHE_SIZE = 512

_SYMBOLS = _LRU(4096)
_QUERIES = _LRU(4096)
_TRANSLATIONS = _LRU(2 * TRANSLATION_CACHE_SIZE)
_LOGICS = _LRU(64)
_ORIGINALS: dict[str, Any] = {}


def _textworld_modules() -> tuple[Any, Any]:
    import textworld.envs.pddl.logic as pddl_logic
    from textworld.envs.pddl import textgen

    return textgen, pddl_logic


def speedups_enabled() -> bool:
    return bool(_ORIGINALS)


def set_speedups(enabled: bool) -> None:
    """Memoise TextWorld's repeated parsing (True) or restore stock TextWorld (False)."""
    textgen, pddl_logic = _textworld_modules()
    if enabled and not _ORIGINALS:
        _ORIGINALS.update(
            parse=textgen._parse_and_convert, rule=textgen.Rule, fd=pddl_logic.fast_downward, copy=textgen.copy_context
        )
        textgen._parse_and_convert = _cached_symbols
        textgen.Rule = _CachedRule
        pddl_logic.fast_downward = _CachedDownward(_ORIGINALS["fd"])
        textgen.copy_context = _copy_context
    elif not enabled and _ORIGINALS:
        textgen._parse_and_convert = _ORIGINALS["parse"]
        textgen.Rule = _ORIGINALS["rule"]
        pddl_logic.fast_downward = _ORIGINALS["fd"]
        textgen.copy_context = _ORIGINALS["copy"]
        _ORIGINALS.clear()


def _copy_context(context: dict) -> dict:
    """textgen's copy_context deep-copies the context's variables and mapping (entity infos and
    PDDL variables, each holding much of the game) for every symbol of every admissible command's
    derivation: most of a step's cost. Derivation adds entries to those dicts but never changes
    the objects in them, so new dicts over the same objects are copy enough."""
    return {**context, "variables": dict(context["variables"]), "mapping": dict(context["mapping"])}


def _cached_symbols(text: str, **kwargs: Any) -> Any:
    # derive() assigns contexts to the parsed symbols and pops them: hand out copies.
    key = (text, tuple(sorted(kwargs.items())))
    return copy.deepcopy(_SYMBOLS.get_or(key, lambda: _ORIGINALS["parse"](text, **kwargs)))


class _CachedRule:
    """Stands in for textworld.logic.Rule inside textgen, whose only use is parsing queries
    (read-only afterwards)."""

    @staticmethod
    def parse_conjunctive_query(expr: str) -> Any:
        return _QUERIES.get_or(expr, lambda: _ORIGINALS["rule"].parse_conjunctive_query(expr))


class _CachedDownward:
    """The fast_downward module as textworld's PDDL logic sees it, with a memoised translation.
    PddlState only reads the translated task. Also puts back sys.argv, which the translator
    overwrites."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def pddl2sas(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        def translate() -> Any:
            argv = sys.argv
            try:
                return self._module.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
            finally:
                sys.argv = argv

        key = (hashlib.sha1(domain.encode()).hexdigest(), hashlib.sha1(problem.encode()).hexdigest(), optimize)
        return _TRANSLATIONS.get_or(key, translate)


_TEMPLATE_TASK = "Your task is to: UNKNOWN GOAL."


def _fast_logic(domain: str, grammar: str) -> Any:
    """GameLogic for a game. Parsing the grammar file is the bulk of loading a game, and games
    differ only in their task sentence: parse the template once, swap in the task rule."""
    from textworld.envs.pddl.logic import GameLogic
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar

    goal = _goal_of(grammar)
    sentence = f"Your task is to: {goal}."
    template = grammar.replace(sentence, _TEMPLATE_TASK, 1) if goal else grammar
    digest = (hashlib.sha1(domain.encode()).hexdigest(), hashlib.sha1(template.encode()).hexdigest())
    # Anything unusual (no task line, a JSON escape in it, a grammar that differs elsewhere from
    # the template): parse the whole grammar, as stock does.
    if not goal or "\\" in goal or grammar.count(sentence) != 1 or _TEMPLATE_TASK not in template:
        return _LOGICS.get_or(digest + (hashlib.sha1(grammar.encode()).hexdigest(),), lambda: GameLogic(domain, grammar))
    base = _LOGICS.get_or(digest, lambda: GameLogic(domain, template))
    logic = copy.copy(base)
    logic.grammar = ContextSensitiveGrammar()
    logic.grammar._rules = dict(base.grammar._rules)
    task = ContextSensitiveGrammar.parse(json.dumps({"task": [{"rhs": sentence}]}))
    logic.grammar._rules["task"] = task._rules["task"]
    return logic


# --------------------------------------------------------------------------------------------
# The environment


_BANNER = "-= Welcome to TextWorld, ALFRED! =-"


class AlfworldEnv:
    """One ALFWorld game at a time: TextWorld's PddlEnv under alfworld's AlfredDemangler, the
    engine ALFWorld itself plays. Any command is a turn: one that is not admissible gets the
    engine's answer ("Nothing happens.") and changes nothing. An episode ends when the game is
    won or after `max_steps` commands; stepping a finished episode raises.

    fast=True turns on the process-wide parse caches (`set_speedups`): a reset costs ~0.01 s
    (~0.05 s the first time the process sees the game) instead of ~0.2 s, a step ~0.005 s instead
    of ~0.02 s (default GameSize, 2 busy cores), with identical transitions. fast=False turns
    them off (for comparisons; it slows every env in the process).

    list_help=False leaves "help" out of the admissible commands (ALFWorld lists it everywhere;
    its answer is a 800-character manual). The engine still answers it if it is sent."""

    def __init__(self, max_steps: int = 50, fast: bool = True, list_help: bool = True) -> None:
        _alfworld()  # a clear error if the extra is missing
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        self.max_steps = max_steps
        self.fast = fast
        self.list_help = list_help
        set_speedups(fast)
        pddl_env = _fast_pddl_env() if fast else PddlEnv
        self._env = AlfredDemangler(pddl_env(textworld.EnvInfos(admissible_commands=True, won=True)))
        self._loaded: str | None = None
        self._games = _LRU(256)  # game file contents, by path
        self.task = ""
        self.steps = 0
        self.won = False
        self.done = True
        self.admissible: list[str] = []

    def reset(self, game: GameRecord | str | Path | Mapping[str, Any]) -> ResetResult:
        """Start `game` (a record, a game.tw-pddl path, or its parsed JSON) from its beginning.
        Returns the room description, the task sentence and the admissible commands."""
        if isinstance(game, GameRecord):
            game = game.path
        if isinstance(game, Mapping):
            data, key = game, _digest(json.dumps(game, sort_keys=True))
        else:
            path = str(game)
            stamp = os.stat(path).st_mtime_ns
            data, key = self._games.get_or((path, stamp), lambda: json.loads(Path(path).read_text())), f"{path}@{stamp}"
        argv = sys.argv
        try:
            # Stock TextWorld loads on every episode; the fast env reloads only another game.
            if not self.fast or key != self._loaded:
                self._env.load(dict(data))
                self._loaded = key
            state = self._env.reset()
        finally:
            sys.argv = argv  # the PDDL translator overwrites it
        text = state.feedback
        observation, _, task = text.partition("\n\nYour task is to: ")
        observation = observation.replace(_BANNER, "", 1).strip()
        self.task = task.strip().removesuffix(".")
        self.steps, self.won, self.done = 0, bool(state["won"]), False
        self.admissible = self._admissible(state)
        return ResetResult(observation, self.task, list(self.admissible))

    def step(self, command: str) -> StepResult:
        """Play one command (whitespace and case normalised, as admissible commands are written)."""
        if self.done:
            raise RuntimeError("episode is over: call reset() first")
        state, _, _ = self._env.step(" ".join(command.lower().split()))
        self.steps += 1
        self.won = bool(state["won"])
        self.done = self.won or self.steps >= self.max_steps
        self.admissible = self._admissible(state)
        return StepResult(state.feedback.strip(), self.done, self.won, list(self.admissible))

    def _admissible(self, state: Any) -> list[str]:
        commands = list(state["admissible_commands"])
        return commands if self.list_help else [c for c in commands if c != "help"]

    def display_names(self) -> dict[str, str]:
        """The loaded game's entities: PDDL name (lower-case, mangled ALFRED id) -> display name."""
        return {key: info.name.strip() for key, info in self._env._entity_infos.items()}


@functools.cache
def _fast_pddl_env() -> type:
    from textworld.envs.pddl import PddlEnv
    from textworld.envs.pddl import logic as pddl_logic

    class FastPddlEnv(PddlEnv):
        """PddlEnv that loads from parsed JSON with the cached grammar (see `_fast_logic`)."""

        def load(self, data: Mapping[str, Any]) -> None:
            self._game_file = None
            self._game_data = data
            self.walkthrough = data.get("walkthrough", None)
            self._logic = _fast_logic(data["pddl_domain"], data["grammar"])
            self._pddl_state = pddl_logic.PddlState(self.downward_lib, data["pddl_problem"], self._logic)
            self._entity_infos = self._get_entity_infos()

    return FastPddlEnv


class EnvPool:
    """Games stepped in lockstep: in this process one after another (`processes=0`), or dealt
    round-robin to `processes` worker processes that step their shares at the same time. A
    step is CPU-bound Python (~2 ms, most of it TextWorld deriving the text of every admissible
    command), so on a rollout of 32 episodes the environment took about as long as the policy's
    decoding; two workers halve it. Workers are forked from this process on first use, so they
    start with the games it has already parsed, and they keep their own caches from call to
    call. A finished game is skipped: give it None as its command and get None back.

    `reset` takes any number of games; the pool then has that many. Transitions are those of an
    `AlfworldEnv` in this process (the engine is deterministic; tested)."""

    def __init__(self, size: int = 0, max_steps: int = 50, fast: bool = True, list_help: bool = True, processes: int = 0) -> None:
        self.max_steps, self.fast, self.list_help, self.processes = max_steps, fast, list_help, processes
        self.envs = [AlfworldEnv(max_steps=max_steps, fast=fast, list_help=list_help) for _ in range(size if not processes else 0)]
        self.workers: list[tuple[Any, Any]] = []  # (process, connection)
        self.done: list[bool] = [True] * size

    def __len__(self) -> int:
        return len(self.done)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self, games: Sequence[GameRecord | str | Path]) -> list[ResetResult]:
        games = [str(g.path) if isinstance(g, GameRecord) else g for g in games]
        if self.processes:
            results = self._scatter("reset", games)
        else:
            results = _reset(self.envs, games, self.max_steps, self.fast, self.list_help)
        self.done = [False] * len(games)
        return results

    def step(self, commands: Sequence[str | None]) -> list[StepResult | None]:
        if len(commands) != len(self.done):
            raise ValueError(f"{len(commands)} commands for a pool of {len(self.done)}")
        commands = [None if done else command for command, done in zip(commands, self.done)]
        results = self._scatter("step", commands) if self.processes else _step(self.envs, commands)
        self.done = [done if result is None else result.done for done, result in zip(self.done, results)]
        return results

    @property
    def active(self) -> list[bool]:
        return [not done for done in self.done]

    def _scatter(self, kind: str, items: list) -> list:
        """Deal `items` round-robin to the workers, run `kind` on each share, gather in order."""
        import multiprocessing

        while len(self.workers) < self.processes:
            ours, theirs = multiprocessing.Pipe()
            # fork: the worker starts with this process's parsed games and translations, and
            # never touches the accelerator or torch this process may hold
            process = multiprocessing.get_context("fork").Process(
                target=_serve, args=(theirs, self.fast, self.list_help), daemon=True
            )
            process.start()
            theirs.close()
            self.workers.append((process, ours))
        shares = [items[w :: self.processes] for w in range(self.processes)]
        for (_, connection), share in zip(self.workers, shares):
            if share:
                connection.send((kind, share, self.max_steps))
        results: list = [None] * len(items)
        for w, ((process, connection), share) in enumerate(zip(self.workers, shares)):
            if not share:
                continue
            try:
                status, value = connection.recv()
            except EOFError:
                status, value = "error", f"the ALFWorld worker {process.pid} died"
            if status == "error":
                self.close()
                raise RuntimeError(value)
            results[w :: self.processes] = value
        return results

    def close(self) -> None:
        for process, connection in self.workers:
            try:
                connection.send(None)
            except OSError:
                pass
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
            connection.close()
        self.workers = []


def _reset(envs: list[AlfworldEnv], games: Sequence, max_steps: int, fast: bool, list_help: bool) -> list[ResetResult]:
    """Reset the first len(games) of `envs` to `games`, adding engines as needed."""
    while len(envs) < len(games):
        envs.append(AlfworldEnv(max_steps=max_steps, fast=fast, list_help=list_help))
    for env in envs:
        env.max_steps = max_steps
    return [env.reset(game) for env, game in zip(envs, games)]


def _step(envs: list[AlfworldEnv], commands: Sequence[str | None]) -> list[StepResult | None]:
    return [None if command is None or env.done else env.step(command) for env, command in zip(envs, commands)]


def _serve(connection: Any, fast: bool, list_help: bool) -> None:
    """A worker of `EnvPool`: its share of the games, until told None."""
    envs: list[AlfworldEnv] = []
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        kind, items, max_steps = message
        try:
            if kind == "reset":
                reply = ("ok", _reset(envs, items, max_steps, fast, list_help))
            else:
                reply = ("ok", _step(envs, items))
        except Exception as error:  # noqa: BLE001 - the harness process raises it
            reply = ("error", f"ALFWorld worker {os.getpid()}: {error!r}")
        connection.send(reply)


# --------------------------------------------------------------------------------------------
# Command line: `python -m tasks.alfworld_games plan GAME|-` (used by plan_walkthrough) and
# `python -m tasks.alfworld_games generate --count N --cache-dir DIR ...`.


def main(argv: Sequence[str] | None = None) -> int:
    # Parse first: the PDDL translator overwrites sys.argv once a game loads.
    parser = argparse.ArgumentParser(prog="alfworld_games")
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="print fast-downward's walkthrough of a game as JSON")
    plan.add_argument("game", help="game.tw-pddl path, or - for its JSON on stdin")
    gen = sub.add_parser("generate", help="generate games into a cache folder")
    gen.add_argument("--cache-dir", required=True)
    gen.add_argument("--count", type=int, default=12)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--split", default="train", choices=SPLITS)
    gen.add_argument("--task-types", nargs="+", default=list(TASK_TYPES))
    args = parser.parse_args(argv)
    if args.command == "plan":
        text = sys.stdin.read() if args.game == "-" else Path(args.game).read_text()
        print(json.dumps(_plan_main(text)))
        return 0
    start = time.perf_counter()
    games = generate_games(args.task_types, args.count, args.seed, cache_dir=args.cache_dir, split=args.split)
    for g in games:
        print(f"{g.game_id}  {g.task_type:32s} {g.scene:13s} {g.goal}")
    print(f"{len(games)} games in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
