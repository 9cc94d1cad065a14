"""What the alfworld package ships, as the generator and the environment read it (its PDDL
domain, text grammar, scene layouts and ALFRED's placement rules, imported lazily), and the
record types of a game and of its transitions."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from rollout.ranges import NonNegativeInt, Range, check_fields

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
# Bump when the planner's walkthroughs change: it names each game's cache folder (not the game),
# so a cache planned by an older planner is never read. 2: the planner's string hashing is fixed.
PLANNER_VERSION = 2

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

    receptacles: Annotated[int, Range(3)] = 5
    distractors: NonNegativeInt = 2
    closed_receptacles: bool = True

    def __post_init__(self) -> None:
        check_fields(self)


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


class FailedStep(StepResult):
    """A step the environment itself failed (the game raised; its worker died): the episode ends
    there, unjudged. The observation says why."""


def failed_step(why: str) -> FailedStep:
    return FailedStep(f"the environment failed ({why})", True, False, [])


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
    return tuple(sorted(names, key=lambda n: int(n[len("FloorPlan") :])))


@functools.cache
def _scene(name: str) -> _Scene:
    import numpy as np

    layouts = _alfworld()["layouts"]
    rules = _rules()
    number = int(name[len("FloorPlan") :])
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


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
